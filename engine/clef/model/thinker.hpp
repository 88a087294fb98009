// The Qwen3-Omni thinker's text backbone (qwen3-omni-thinker.md §3): embeddings, decoder layers
// with GQA attention, q/k RMSNorm and interleaved MRoPE, sparse MoE, final RMSNorm. Hidden states
// out; the lm_head matmul is never run.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/clef/model/cpu_kernels.hpp"
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
  // `score_budget_bytes` bounds the fp32 attention score block of one chunk of query rows.
  // grouped_experts: the grouped expert path (moe_grouped) even where at::_grouped_mm is missing,
  // a matmul per expert standing in for it (model_options::grouped_experts). experts: the CPU's
  // packed experts' library, or measured (model_options::experts); std::invalid_argument where
  // the one named cannot run them.
  // `packing_budget_bytes`: the most the CPU experts' packed copy may take (above it they stay
  // mapped, unless a library is asked for); 0: not limited.
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
  // timings; empty when the experts are not packed.
  const std::string& expert_schedule() const noexcept { return expert_schedule_; }
  // Which library runs the CPU's fp32 expert and projection matmuls, as timed at load (choose_matmuls),
  // with the timings, or why the experts were left unpacked for want of memory; empty where there
  // was no choice (bf16, no BLAS found, not the CPU).
  const std::string& matmul_choice() const noexcept { return matmul_choice_; }

  at::ScalarType type() const noexcept { return type_; }
  at::Device device() const noexcept { return device_; }

 private:
  struct layer {
    at::Tensor input_norm, q, k, v, o, q_norm, k_norm, post_norm, router;
    std::vector<at::Tensor> gate, up, down;
    // int8 experts: fp32 scale per output channel of each weight above (empty otherwise).
    std::vector<at::Tensor> gate_scale, up_scale, down_scale;
    // The grouped path instead of the lists above: every expert's gate and up rows stacked
    // [experts, 2 * moe_inter, hidden] and down [experts, hidden, moe_inter], int8 or in the
    // compute dtype, kept as their transposed views (the [experts, in, out] grouped_mm takes);
    // with int8, the scales [experts, 2 * moe_inter] and [experts, hidden].
    at::Tensor gate_up_all, down_all, gate_up_scale_all, down_scale_all;
    // The CPU with oneDNN, fp32 or bf16 experts (int8 ones in fp32, on libxsmm): each expert's gate
    // and up rows as one packed weight [2 * moe_inter, hidden], and down packed, instead of the
    // lists above.
    std::vector<packed_linear> gate_up_packed, down_packed;
    // fp32 on the CPU with oneDNN: q, k, v and o packed (the tensors above then undefined), since
    // OpenBLAS may run fp32 on older kernels than the CPU has (OPENBLAS_CORETYPE).
    packed_linear q_packed, k_packed, v_packed, o_packed;
  };

  // The experts of a layer stacked on the device for the grouped path, through a host buffer
  // reused by every layer: a few hundred copies for the model, not one per weight.
  struct expert_staging {
    at::Tensor gate_up, down, gate_up_scale, down_scale;
  };
  void stack_experts(const release& files, const std::string& prefix, layer& y, expert_staging& staging) const;
  // The experts of a layer packed for the CPU (packed_experts_) for oneDNN or libxsmm, into one
  // arena per layer; returns the arena's bytes.
  std::int64_t pack_experts(const release& files, const std::string& prefix, layer& y, expert_library library) const;
  // The same experts over the BLAS, as they are in the release (experts_on_ blas, fp32).
  void blas_experts(const release& files, const std::string& prefix, layer& y) const;
  // The experts of a layer as weight lists for experts_aten: in the compute dtype, or int8 views
  // of the mapping with their scales.
  void aten_experts(const release& files, const std::string& prefix, layer& y) const;
  // Bytes of one expert's packed gate and up, and down, for `library` (int8 ones: libxsmm's).
  std::pair<std::int64_t, std::int64_t> packed_expert_bytes(expert_library library) const;
  // Bytes of the smallest packed copy of every layer's experts (libxsmm's layout in fp32 and
  // int8, oneDNN's in bf16), laid out as pack_experts lays them.
  std::int64_t packed_copy_bytes() const;
  // fp32 on the CPU: times layer 0's experts (1,024 tokens; where they are packed, so not grouped
  // ones, and no library was asked for) packed for oneDNN, packed for libxsmm and as they are on
  // the BLAS (int8 ones: widened per block on libxsmm, and per matmul by ATen, which then keeps
  // them unpacked), and its q projection packed for oneDNN and on the BLAS, and keeps the fastest
  // of each (experts_on_, packed_experts_, blas_projections_).
  // Done before the other layers are packed, so a copy is made only where it pays (layer 0's packed
  // experts stay in layers_ when a packed library wins); kept for the process's later loads of the
  // same shape and thread count.
  void choose_matmuls(const release& files);

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
  at::Tensor moe_block(const layer& w, const at::Tensor& b) const;
  // The routed experts through ATen, an expert's matmuls at a time over the weight lists (int8
  // ones widened per matmul): b [N, hidden], experts [N, top_k] int64, weights [N, top_k] in b's
  // dtype. Where they are not packed (int8 ones in bf16, a GPU, no oneDNN).
  at::Tensor experts_aten(const layer& w, const at::Tensor& b, const at::Tensor& experts,
                          const at::Tensor& weights) const;
  // Times layer 0's packed experts on random activations with whole experts per thread and with
  // chunks of 256 and 512 rows, and keeps the fastest (expert_chunk_rows_): the same results,
  // and which wins depends on the cores (a 16-core machine waits on its busiest expert). Kept
  // for the process's later loads of the same shape, dtype and thread count.
  void calibrate_experts();
  // Every expert in two grouped matmuls, the group offsets computed on the device: no host sync
  // and 19 operations per layer (libtorch >= 2.8, CUDA, bf16; see grouped_; elsewhere when asked,
  // with a loop in place of at::_grouped_mm).
  at::Tensor moe_grouped(const layer& w, const at::Tensor& b) const;

  text_config config_;
  at::ScalarType type_;
  at::Device device_;
  std::int64_t score_budget_bytes_;
  bool native_grouped_ = false;  // at::_grouped_mm runs here (libtorch >= 2.8, CUDA, bf16, probed)
  bool grouped_ = false;  // the MoE runs through moe_grouped (native_grouped_, or asked for)
  bool fused_attention_ = false;  // attention through at::scaled_dot_product_attention
  // On the CPU the norms, q/k norm and rotary go through cpu_kernels.hpp; with oneDNN also:
  bool cpu_attention_ = false;    // attention (attention_cpu)
  bool int8_experts_ = false;     // the release's experts are int8 (with scales)
  bool packed_experts_ = false;   // the experts through experts_cpu (packed_linear)
  expert_library experts_asked_ = expert_library::measured;  // … their library as model_options asks
  expert_library experts_on_ = expert_library::onednn;       // … and the one they run on (choose_matmuls)
  bool blas_projections_ = false; // fp32: q, k, v and o through at::mm, not packed (choose_matmuls)
  std::string matmul_choice_;
  std::string no_room_;  // why the experts were left unpacked for want of memory (empty: they were not)
  std::int64_t packed_bytes_ = 0;
  std::int64_t expert_chunk_rows_ = 0;  // experts_cpu's work items: 0 whole experts, else rows
  std::string expert_schedule_;
  at::Tensor embed_;    // kept in the file's dtype: only the rows in use are converted
  at::Tensor lm_head_;  // idem, for the head's lexical rows
  at::Tensor final_norm_;
  at::Tensor inv_freq_;  // [head_dim / 2] fp32
  at::Tensor expert_ids_;  // int64 [experts] 0, 1, …: the grouped path's group ends are found for them
  at::Tensor mrope_axis_;  // int64 [1, 1, head_dim / 2]: the axis (0 T, 1 H, 2 W) of each frequency slot
  std::vector<layer> layers_;
};

}  // namespace baton::clef::detail
