// The Qwen3-Omni thinker's text backbone (transformers' Qwen3OmniMoeThinkerTextModel): embeddings,
// decoder layers with GQA attention, q/k RMSNorm and interleaved MRoPE, sparse MoE, final RMSNorm.
// Hidden states out; the lm_head matmul is never run. How the experts and the fp32 projections are
// multiplied is the expert plan's choice (expert_plan.hpp), which the thinker follows.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/clef/model/expert_plan.hpp"
#include "engine/clef/model/packed_linear.hpp"
#include "engine/clef/model/release.hpp"
#include "engine/clef/model/tensors.hpp"

namespace baton::clef::detail {

// The backbone's input for records packed end to end.
struct thinker_input {
  at::Tensor embeds;                  // [N, hidden] in the compute dtype, media rows already placed
  at::Tensor positions;               // [3, N] fp32 MRoPE ids; undefined: 0..len-1 per record
  at::Tensor visual_rows;             // int64 [V]: the image and video rows, in sequence order
  std::vector<at::Tensor> deepstack;  // added to visual_rows after layers 0, 1, …: [V, hidden] each
};

// A record's keys and values in every layer (the keys after their norm and rotary) [len, kv_heads,
// head_dim] and its final hidden states [len, hidden], in the compute dtype on the device: what a
// later record that starts with the same tokens reuses instead of recomputing (prefix_cache).
struct prefix_state {
  std::vector<at::Tensor> keys, values;
  at::Tensor hidden;

  std::int64_t length() const noexcept { return hidden.defined() ? hidden.size(0) : 0; }
  std::int64_t bytes() const noexcept;
};

// Per record of a forward, the cached prefix its tokens continue (null: none).
using prefix_list = std::vector<const prefix_state*>;

class thinker {
 public:
  // `score_budget_bytes` bounds the fp32 attention score block of one chunk of query rows. The
  // last three are the expert plan's (expert_plan's constructor, expert_plan.hpp); it throws
  // std::invalid_argument where the library named cannot run the experts.
  thinker(const release& files, at::ScalarType type, at::Device device, std::int64_t score_budget_bytes,
          bool grouped_experts = false, expert_library experts = expert_library::measured,
          std::int64_t packing_budget_bytes = 0);

  // Token embeddings [N, hidden] in the compute dtype for `ids` [N] int64 on the device.
  at::Tensor embed(const at::Tensor& ids) const;

  // Final hidden states [N, hidden] for records packed end to end (`lengths` sum to N). Attention
  // never crosses records. Reports "position_ids" (when given), "inputs_embeds", "router_logits.<l>"
  // (fp32 [N, experts]), "layer_out.<l>" (before the deepstack add, as transformers' layer
  // outputs) and "final_hidden".
  //
  // `past` (empty, or one per record): the prefix a record's tokens continue; its tokens then sit
  // at positions past->length() + t and attend to the prefix's keys as well. `kept` (null: not
  // asked): per record, its keys and values in every layer, prefix included (hidden left empty:
  // the caller joins the prefix's hidden states to the returned ones).
  at::Tensor forward(const thinker_input& input, const std::vector<std::int64_t>& lengths,
                     const stage_observer* observe, forward_profile* profile, const prefix_list& past = {},
                     std::vector<prefix_state>* kept = nullptr) const;

  // Rows of the output embedding (lm_head) for `ids` [n] int64, in `type`.
  at::Tensor output_rows(const at::Tensor& ids, at::ScalarType type) const;

  // Bytes of the weights packed at load (packed_linear); 0 when nothing is packed.
  std::int64_t packed_bytes() const noexcept { return packed_bytes_; }
  // How the CPU's packed experts are shared among threads, as measured at load, with the
  // timings; empty when the experts are not packed (expert_plan::expert_schedule).
  const std::string& expert_schedule() const noexcept { return plan_.expert_schedule(); }
  // Which library runs the CPU's fp32 expert and projection matmuls, as timed at load, with the
  // timings, or why the experts were left unpacked for want of memory; empty where there was no
  // choice: bf16, no BLAS found, not the CPU (expert_plan::matmul_choice).
  const std::string& matmul_choice() const noexcept { return plan_.matmul_choice(); }

  at::ScalarType type() const noexcept { return type_; }
  at::Device device() const noexcept { return device_; }

 private:
  struct layer {
    at::Tensor input_norm, q, k, v, o, q_norm, k_norm, post_norm, router;
    // Where the plan packs the projections: q, k, v and o packed (the tensors above then undefined).
    packed_linear q_packed, k_packed, v_packed, o_packed;
    expert_weights experts;  // in the plan's form
  };

  // RMSNorm of hidden states [N, hidden] with the weight w.
  at::Tensor norm(const at::Tensor& x, const at::Tensor& w) const;
  // cos and sin [N, 1, head_dim] in the compute dtype.
  // Text-only positions start at each record's `first` (its cached prefix's length).
  std::pair<at::Tensor, at::Tensor> rotary(const at::Tensor& positions, const std::vector<std::int64_t>& lengths,
                                           const std::vector<std::int64_t>& first) const;
  // Attention's per-chunk buffers and causal mask, made once per forward for its widest chunk:
  // tensors made afresh per chunk (each wider by its keys) were never reused by malloc, which kept
  // ~128 bytes per token² resident (2 GB at 4,096 tokens), and fresh pages cost faults.
  struct attention_scratch {
    at::Tensor causal;                 // [rows, rows] bool, strictly upper triangle
    at::Tensor scores, probs_f32, probs, ctx;  // flat; probs is probs_f32 when computing in fp32
  };
  attention_scratch make_attention_scratch(const std::vector<std::int64_t>& lengths,
                                           const std::vector<std::int64_t>& past_lengths) const;
  // Layer l's attention. With cached prefixes (past_lengths not all 0) or `kept`, each record's
  // keys are its prefix's then its own (past[r]->keys[l]), and kept[r] takes them.
  at::Tensor attention(std::size_t l, const at::Tensor& a, const at::Tensor& cos, const at::Tensor& sin,
                       const std::vector<std::int64_t>& lengths, const attention_scratch& scratch,
                       const prefix_list& past, const std::vector<std::int64_t>& past_lengths,
                       std::vector<prefix_state>* kept) const;
  // Attention in chunks of query rows through ATen (scores written out per chunk): where neither
  // fused kernel runs (fp32 on a GPU, a CPU build without oneDNN). q [N, heads, dim] after norm
  // and rotary, k and v [N, kv_heads, dim]; returns the layer's attention output (o_proj applied).
  // With `past` (per record, earlier keys before its own in k and v, as attention_cpu takes them).
  at::Tensor chunked_attention(const layer& w, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const std::vector<std::int64_t>& lengths, const attention_scratch& scratch,
                               const std::vector<std::int64_t>& past) const;
  at::Tensor moe(const layer& w, const at::Tensor& b) const;
  // The router, then the experts through run_experts (experts.hpp), in the form the plan loaded.
  at::Tensor moe_block(const layer& w, const at::Tensor& b) const;
  // Every expert in two grouped matmuls, the group offsets computed on the device: no host sync
  // and 19 operations per layer (libtorch >= 2.8, CUDA, bf16; see expert_plan::grouped; elsewhere
  // when asked, with a loop in place of at::_grouped_mm).
  at::Tensor moe_grouped(const layer& w, const at::Tensor& b) const;

  text_config config_;
  at::ScalarType type_;
  at::Device device_;
  std::int64_t score_budget_bytes_;
  // How the experts and the fp32 projections run, chosen at load. Where it found oneDNN on the CPU
  // (plan_.onednn()), attention runs in attention_cpu; the norms, q/k norm and rotary go through
  // cpu_kernels.hpp on any CPU.
  expert_plan plan_;
  bool fused_attention_ = false;  // attention through at::scaled_dot_product_attention
  std::int64_t packed_bytes_ = 0;
  at::Tensor embed_;    // kept in the file's dtype: only the rows in use are converted
  at::Tensor lm_head_;  // idem, for the head's lexical rows
  at::Tensor final_norm_;
  at::Tensor inv_freq_;  // [head_dim / 2] fp32
  at::Tensor expert_ids_;  // int64 [experts] 0, 1, …: the grouped path's group ends are found for them
  at::Tensor mrope_axis_;  // int64 [1, 1, head_dim / 2]: the axis (0 T, 1 H, 2 W) of each frequency slot
  std::vector<layer> layers_;
};

}  // namespace baton::clef::detail
