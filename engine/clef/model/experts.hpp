// A layer's routed experts, held in the form the expert plan chose (expert_plan.hpp), and the MoE
// paths outside cpu_kernels: ATen's, an expert's matmuls at a time over weight lists, and the
// grouped matmul. Engine-internal (ATen): only engine/clef/model .cpp files include it.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "engine/clef/model/packed_linear.hpp"

namespace baton::clef::detail {

// One layer's experts; only the fields of the plan's path are filled.
struct expert_weights {
  // ATen's path (experts_aten): each expert's gate, up and down [out, in] in the compute dtype, or
  // int8 views of the mapping with an fp32 scale per output channel (the scale lists empty otherwise).
  std::vector<at::Tensor> gate, up, down, gate_scale, up_scale, down_scale;
  // The grouped path (thinker::moe_grouped): every expert's gate and up rows stacked [experts,
  // 2 * moe_inter, hidden] and down [experts, hidden, moe_inter], int8 or in the compute dtype,
  // kept as their transposed views (the [experts, in, out] grouped_mm takes); with int8, the
  // scales [experts, 2 * moe_inter] and [experts, hidden].
  at::Tensor gate_up_all, down_all, gate_up_scale_all, down_scale_all;
  // The CPU's fused kernel (experts_cpu): each expert's gate and up rows as one weight [2 *
  // moe_inter, hidden], and down, packed for oneDNN or libxsmm (int8 ones for libxsmm) or over the
  // BLAS as they are.
  std::vector<packed_linear> gate_up_packed, down_packed;
  std::int64_t packed_bytes = 0;  // the packed copy's arena; 0 over the BLAS and on the other paths
};

// The routed experts of b [N, hidden] (fp32 or bf16): experts [N, top_k] int64 (distinct per
// token), weights [N, top_k] in b's dtype. experts_cpu where `w` is packed, with work items of
// `chunk_rows` (cpu_kernels.hpp); otherwise ATen's path, an expert's matmuls at a time over the
// weight lists (int8 ones widened per matmul), summed per token in ascending expert order.
at::Tensor run_experts(const expert_weights& w, const at::Tensor& b, const at::Tensor& experts,
                       const at::Tensor& weights, std::int64_t chunk_rows);

// Whether at::_grouped_mm runs on `device`: libtorch 2.8 has it for compute capability 9.x only,
// and says so by throwing; elsewhere the per-expert loop serves. Asked once, at load.
bool grouped_mm_runs(at::Device device);

// x [rows, in] times w [groups, in, out] group by group, rows [offs[g - 1], offs[g]) belonging to
// group g (offs: int32 group ends): at::_grouped_mm where it runs (`native`), else a matmul per
// group (the offsets read back to the host), recorded as one operation as the grouped kernel is.
at::Tensor grouped_mm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& offs, bool native);

}  // namespace baton::clef::detail
