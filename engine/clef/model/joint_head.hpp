// The joint schema head of Cloudflare's reference joint_schema_model.py, one record at a time, as
// the reference runs it.
#pragma once

#include <vector>

#include "engine/clef/model/release.hpp"
#include "engine/clef/model/tensors.hpp"

namespace baton::clef::detail {

class thinker;

class joint_head {
 public:
  // `score_budget_bytes` bounds the fp32 score block of one chunk of cross-attention queries.
  joint_head(const release& files, at::ScalarType type, at::Device device, std::int64_t score_budget_bytes);

  // hidden [T, H] (the thinker's final hidden states of one record), ids [T] int64.
  record_logits forward(const at::Tensor& hidden, const at::Tensor& ids,
                        std::span<const question_layout> questions, const thinker& backbone) const;

 private:
  struct norm {
    at::Tensor weight, bias;
  };
  struct attention {
    at::Tensor in_weight, in_bias, out_weight, out_bias;
  };
  struct routing_layer {
    norm query_norm, memory_norm, feedforward_norm;
    attention attn;
    at::Tensor ff1_weight, ff1_bias, ff2_weight, ff2_bias;
  };
  struct decoder_layer {
    attention self_attn, cross_attn;
    at::Tensor linear1_weight, linear1_bias, linear2_weight, linear2_bias;
    norm norm1, norm2, norm3;
  };

  at::Tensor layer_norm(const at::Tensor& x, const norm& n) const;
  at::Tensor mha(const at::Tensor& queries, const at::Tensor& memory, const attention& a) const;

  head_config config_;
  at::ScalarType type_;
  at::Device device_;
  std::int64_t score_budget_bytes_;
  norm hidden_norm_, option_summary_norm_, field_norm_, option_norm_;
  at::Tensor memory_projection_, question_projection_, option_question_projection_,
      global_projection_, option_context_projection_, option_lexical_projection_, type_embedding_;
  std::vector<routing_layer> routing_;
  std::vector<decoder_layer> decoder_;
  at::Tensor scorer1_weight_, scorer1_bias_, scorer2_weight_, scorer2_bias_;
  at::Tensor prior_scale_, joint_scale_, gate_;  // 0-dim, already clamped/exp'd/sigmoid'ed
};

}  // namespace baton::clef::detail
