// The thinker's CPU kernels where ATen's separate operations cost more than the arithmetic: each
// writes and re-reads whole activations, and fresh ones are page-faulted in.
//
// Grouped-query attention, fused: per block of query rows, an online softmax over blocks of keys
// (flash attention's recurrence), so the scores live only in a block-sized buffer of the thread
// and, when causal, key blocks past the diagonal are never computed. The two matmuls of a
// block go to oneDNN's GEMMs (fp32, or bf16 with fp32 accumulation); the softmax stays in fp32.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace baton::clef::detail {

class packed_linear;

// Block sizes; 0 chooses (attention_cpu.cpp, docs/performance.md).
struct attention_blocks {
  std::int64_t query_rows = 0;  // query tokens per block (times the group's heads: the GEMM's rows)
  std::int64_t keys = 0;        // keys per block
};

// The block sizes `blocks` asks for, with its zeros replaced by the chosen ones for `group`
// query heads per KV head.
attention_blocks resolve_attention_blocks(attention_blocks blocks, std::int64_t group);

// Whether this build has oneDNN, so attention_cpu and packed_linear; the norm kernels are always
// there.
bool onednn_built() noexcept;

// Whether attention_cpu and packed_linear run in `type` here: a oneDNN build, and for bf16 a CPU
// oneDNN has bf16 kernels for (2.6: avx512_core and up; it refuses bf16 on an AVX2-only CPU, where
// the ATen paths serve). Asked of oneDNN once, with a 1 × 1 bf16 GEMM.
bool onednn_runs(at::ScalarType type) noexcept;

// softmax(q kᵀ · scale) v within each of the records laid end to end (`lengths` sum to N), each
// query seeing the keys up to its own position when `causal`, all of its record's otherwise: q
// [N, heads, dim], k and v [N, kv_heads, dim], fp32 or bf16, on the CPU; writes [N, heads * dim]
// into `out` (same dtype, contiguous). Query head h reads KV head h / (heads / kv_heads).
// `past` (empty: none): per record, how many earlier keys (a cached prefix's) come before its own
// in k and v, each record's keys laid out as its earlier ones then its own, so k and v have
// Σ (past + length) rows; a record's query t then sits at position past + t.
void attention_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                   const std::vector<std::int64_t>& lengths, double scale, bool causal, at::Tensor& out,
                   attention_blocks blocks, const std::vector<std::int64_t>& past = {});

// RMSNorm of the rows of x [..., dim] (fp32 or bf16) with `weight` [dim], in one pass, the same
// values as rms_norm in thinker.cpp.
at::Tensor rms_norm_cpu(const at::Tensor& x, const at::Tensor& weight, double eps);

// In place on x [N, heads, dim] (contiguous, fp32 or bf16): the heads' RMSNorm with `weight`
// [dim], then the rotary embedding with cos and sin [N, 1, dim] (x·cos + rotate_half(x)·sin), in
// one pass, rounding to x's dtype wherever the separate ATen operations do.
void rms_norm_rope_cpu(at::Tensor& x, const at::Tensor& weight, double eps, const at::Tensor& cos,
                       const at::Tensor& sin);

// The MoE's routed experts on the CPU over packed weights, in one pass per expert: its tokens'
// rows gathered, gate and up as one matmul, silu(gate)·up, down, each in buffers of the thread
// (an expert of a few rows spent as long in its ~13 ATen operations' allocations and dispatch
// as in arithmetic). Threads take work items of whole experts, or of at most `chunk_rows` rows
// (a multiple of 256) of one, the biggest first; the results are the same bit for bit either
// way, so the choice is the machine's (expert_plan::calibrate_experts). Then per token, in ascending
// expert order, out += down · weight, rounded to the dtype wherever the reference's separate
// operations round (as sum_in_expert_order). b [N, hidden] fp32 or bf16; experts [N, top_k]
// int64 (distinct per token); weights [N, top_k] of b's dtype; gate_up[e] packs [2·inter, hidden]
// (gate's rows first), down[e] [hidden, inter].
at::Tensor experts_cpu(const at::Tensor& b, const at::Tensor& experts, const at::Tensor& weights,
                       const std::vector<packed_linear>& gate_up, const std::vector<packed_linear>& down,
                       std::int64_t chunk_rows = 0);
// The experts' outputs summed per token, on the CPU, exactly as a loop of
// out.index_add_(0, rows of e, results[e]) over e = 0, 1, … computes them (each token's rows added
// in ascending expert order, every addition rounded to the dtype), but a token per thread at a
// time. flat [tokens * top_k] int64: each (token, slot)'s expert; order: flat's stable sort;
// start[e]: where expert e's rows begin in it; results[e] [its rows, hidden] (undefined if none).
at::Tensor sum_in_expert_order(const std::vector<at::Tensor>& results, const at::Tensor& flat, const at::Tensor& order,
                               const std::vector<std::int64_t>& start, std::int64_t tokens, std::int64_t top_k);

// Asks the linked libtorch how it rounds bf16 silu, which experts_cpu otherwise does on its first
// call: at load, so that no forward pays for it or counts its operations.
void prepare_experts_cpu();

}  // namespace baton::clef::detail
