// The Qwen3-Omni thinker's text backbone (qwen3-omni-thinker.md §3): embeddings, decoder layers
// with GQA attention, q/k RMSNorm and interleaved MRoPE, sparse MoE, final RMSNorm. Hidden states
// out; the lm_head matmul is never run.
#pragma once

#include <vector>

#include "engine/clef/core/tensors.hpp"

namespace baton::clef::detail {

class thinker {
 public:
  // `score_budget_bytes` bounds the fp32 attention score block of one chunk of query rows.
  thinker(const release& files, at::ScalarType type, at::Device device, std::int64_t score_budget_bytes);

  // Final hidden states [N, hidden] for records packed end to end (`ids` [N] int64 on the
  // device; `lengths` sum to N). Positions restart at 0 for each record and attention never
  // crosses records.
  at::Tensor forward(const at::Tensor& ids, const std::vector<std::int64_t>& lengths,
                     const stage_observer* observe, forward_profile* profile) const;

  // Rows of the output embedding (lm_head) for `ids` [n] int64, in `type`.
  at::Tensor output_rows(const at::Tensor& ids, at::ScalarType type) const;

  at::ScalarType type() const noexcept { return type_; }
  at::Device device() const noexcept { return device_; }

 private:
  struct layer {
    at::Tensor input_norm, q, k, v, o, q_norm, k_norm, post_norm, router;
    std::vector<at::Tensor> gate, up, down;
  };

  at::Tensor attention(const layer& w, const at::Tensor& a, const at::Tensor& cos,
                       const at::Tensor& sin, const std::vector<std::int64_t>& lengths) const;
  at::Tensor moe(const layer& w, const at::Tensor& b) const;
  at::Tensor moe_block(const layer& w, const at::Tensor& b) const;

  text_config config_;
  at::ScalarType type_;
  at::Device device_;
  std::int64_t score_budget_bytes_;
  at::Tensor embed_;    // kept in the file's dtype: only the rows in use are converted
  at::Tensor lm_head_;  // idem, for the head's lexical rows
  at::Tensor final_norm_;
  at::Tensor inv_freq_;  // [head_dim / 2] fp32
  std::vector<layer> layers_;
};

}  // namespace baton::clef::detail
