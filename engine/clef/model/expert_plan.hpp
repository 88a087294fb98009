// How the thinker's routed experts run, decided once at load, in one place: the path (two grouped
// matmuls, the CPU's fused kernel over packed weights, or ATen's matmuls per expert), the library
// that multiplies packed ones (oneDNN, libxsmm or the BLAS) and whether they are packed at all,
// whether the fp32 attention projections are packed for oneDNN, and the work items the fused
// kernel shares among threads: each with why, and the timings measured for it. The thinker
// follows the plan and chooses nothing itself; a new kind of expert weights or kernel is a case
// here (its condition, its load, its candidate in the timing), not in the thinker's forward.
// Engine-internal (ATen): only engine/clef/model .cpp files include it.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/clef/model/experts.hpp"
#include "engine/clef/model/model_types.hpp"
#include "engine/clef/model/release.hpp"

namespace baton::clef::detail {

class expert_plan {
 public:
  // The plan for `files`' thinker computed in `type` on `device`, with libtorch's thread count
  // already set. The grouped path where at::_grouped_mm runs (libtorch >= 2.8, CUDA, bf16: probed)
  // or `grouped_experts` asks for it (model_options::grouped_experts); otherwise packed experts on
  // the CPU with oneDNN (int8 ones computed in fp32, where libxsmm and the BLAS are here), ATen's
  // path elsewhere. `asked`: the packed experts' library (model_options::experts), or measured;
  // std::invalid_argument where the one named cannot run them. `packing_budget_bytes`: the most
  // their packed copy may take (above it they stay mapped, unless a library is asked for); 0: not
  // limited. In fp32 on the CPU with oneDNN and the BLAS, layer 0 is timed now (choose_matmuls).
  expert_plan(const release& files, at::ScalarType type, at::Device device, bool grouped_experts,
              expert_library asked, std::int64_t packing_budget_bytes);

  // Every layer's experts in the plan's form, in layer order; where they are packed, their work
  // items are then timed on layer 0 (calibrate_experts). Called once: layer 0's experts may be the
  // ones choose_matmuls timed, handed over.
  std::vector<expert_weights> load_experts(const release& files);

  // The CPU, with oneDNN's kernels for the dtype (cpu_kernels' onednn_runs): where the experts and
  // the fp32 projections may be packed, and where the thinker's attention is attention_cpu.
  bool onednn() const noexcept { return onednn_; }
  // The MoE through moe_grouped's two grouped matmuls, and whether those are at::_grouped_mm.
  bool grouped() const noexcept { return grouped_; }
  bool native_grouped() const noexcept { return native_grouped_; }
  // fp32 on the CPU with oneDNN: q, k, v and o packed for oneDNN's matmul, unless the BLAS was
  // timed faster (OpenBLAS may run fp32 on older kernels than the CPU has: OPENBLAS_CORETYPE).
  bool packed_projections() const noexcept;
  // Layer 0's q_proj as choose_matmuls packed it for oneDNN to time it, handed over once where the
  // projections are packed; empty where it was not timed (a later load of the same shape), or the
  // BLAS won.
  packed_linear take_layer0_q_proj() noexcept { return std::move(layer0_q_); }
  // experts_cpu's work items, as calibrate_experts timed them: 0 whole experts, else rows.
  std::int64_t chunk_rows() const noexcept { return chunk_rows_; }
  // Which library runs the CPU's fp32 expert and projection matmuls, as timed at load, with the
  // timings, or why the experts were left unpacked for want of memory; empty where there was no
  // choice (bf16, no BLAS found, not the CPU).
  const std::string& matmul_choice() const noexcept { return matmul_choice_; }
  // How the packed experts are shared among threads, as timed at load, with the timings; empty
  // when the experts are not packed.
  const std::string& expert_schedule() const noexcept { return expert_schedule_; }

 private:
  // The experts of the layer at `prefix` for the CPU's fused kernel: packed for oneDNN or libxsmm
  // into one arena, or over the BLAS as they are in the release (fp32).
  expert_weights pack_experts(const release& files, const std::string& prefix, expert_library library) const;
  // The layer's int4, FP8 or (bf16) int8 experts for baton's kernels, read where they lie (experts a mixed
  // release left float: as the float path packs them).
  expert_weights in_place_experts(const release& files, const std::string& prefix) const;
  // Bytes of the copy of every layer's int8 experts (int8_copy_), laid out as in_place_experts lays them.
  std::int64_t int8_copy_bytes() const;
  // The same as weight lists for ATen's path: in the compute dtype, or int8 views of the mapping
  // with their scales.
  expert_weights aten_experts(const release& files, const std::string& prefix) const;
  // The grouped path's host buffer, reused by every layer: a few hundred copies for the model,
  // not one per weight.
  struct staging {
    at::Tensor gate_up, down, gate_up_scale, down_scale;
  };
  // The same stacked on the device for the grouped path, through `buffer`.
  expert_weights stack_experts(const release& files, const std::string& prefix, staging& buffer) const;
  // Bytes of one expert's packed gate and up, and down, for `library` (int8 ones: libxsmm's).
  std::pair<std::int64_t, std::int64_t> packed_expert_bytes(expert_library library) const;
  // Bytes of the smallest packed copy of every layer's experts (libxsmm's layout in fp32 and
  // int8, oneDNN's in bf16), laid out as pack_experts lays them.
  std::int64_t packed_copy_bytes() const;
  // fp32 on the CPU: times layer 0's experts (1,024 tokens; where they are packed, so not grouped
  // ones, and no library was asked for) packed for oneDNN, packed for libxsmm and as they are on
  // the BLAS (int8 ones: widened per block on libxsmm, and per matmul by ATen, which then keeps
  // them unpacked), and its q projection packed for oneDNN and on the BLAS, and keeps the fastest
  // of each (library_, packed_, blas_projections_). Done before the other layers are packed, so a
  // copy is made only where it pays (layer 0's experts are kept in layer0_ as the winner made
  // them, packed or not); kept for the process's later loads of the same shape and thread count.
  void choose_matmuls(const release& files);
  // 1,024 tokens of random activations for timing layer 0 (choose_matmuls, calibrate_experts): made
  // when first asked, once, and let go once the experts are loaded.
  struct calibration_batch {
    at::Tensor b, experts, weights;  // b [tokens, hidden] in the compute dtype, each token's experts and weights
    std::int64_t busiest = 0;        // rows of the busiest expert
  };
  const calibration_batch& calibration();
  // Times layer 0's packed experts on random activations with whole experts per thread and with
  // chunks of 256 and 512 rows, and keeps the fastest (chunk_rows_): the same results, and which
  // wins depends on the cores (a 16-core machine waits on its busiest expert). Kept for the
  // process's later loads of the same shape, dtype and thread count.
  void calibrate_experts(const expert_weights& layer0);

  text_config config_;
  at::ScalarType type_;
  at::Device device_;
  bool native_grouped_;  // at::_grouped_mm runs here (libtorch >= 2.8, CUDA, bf16, probed)
  bool grouped_;         // the MoE runs through moe_grouped (native_grouped_, or asked for)
  bool onednn_;          // the CPU, with oneDNN kernels for the dtype (cpu_kernels' onednn_runs)
  bool int8_;            // the release's experts are int8 (with scales)
  weight_form in_place_;  // … int4, fp8, or int8 in bf16, on the CPU: baton's own kernels read them in place (plain: none)
  bool int8_copy_ = false;  // … int8 in bf16: copied into huge pages at load (where it fits), not read from the mapping
  bool packed_;          // the experts through experts_cpu (packed_linear)
  expert_library asked_;                          // … their library as model_options asks
  expert_library library_ = expert_library::onednn;  // … and the one they run on (choose_matmuls)
  bool blas_projections_ = false;  // fp32: q, k, v and o through at::mm, not packed (choose_matmuls)
  std::string matmul_choice_;
  std::string no_room_;  // why the experts were left unpacked for want of memory (empty: they were not)
  std::int64_t chunk_rows_ = 0;
  std::string expert_schedule_;
  std::optional<calibration_batch> calibration_;
  std::optional<expert_weights> layer0_;  // layer 0's experts as choose_matmuls timed the winner (none: not timed)
  packed_linear layer0_q_;                // its q_proj packed, where oneDNN won (take_layer0_q_proj)
};

}  // namespace baton::clef::detail
