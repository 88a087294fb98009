#include "engine/clef/model/experts.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/version.h>  // the version macros only

#include <algorithm>
#include <atomic>

#include "engine/clef/model/cpu_kernels.hpp"
#include "engine/clef/model/tensors.hpp"

// at::_grouped_mm (bf16 on CUDA) is libtorch 2.8's; Debian's 1.13 lacks it: the per-expert loop.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 8)
#define BATON_GROUPED_MM 1
#else
#define BATON_GROUPED_MM 0
#endif

namespace baton::clef::detail {

namespace {

// The routed experts through ATen, an expert's matmuls at a time over the weight lists (int8 ones
// widened per matmul): where they are not packed (int8 ones in bf16, a GPU, no oneDNN).
at::Tensor experts_aten(const expert_weights& w, const at::Tensor& b, const at::Tensor& experts,
                        const at::Tensor& weights) {
  const std::int64_t n_tokens = b.size(0), top_k = experts.size(1);
  const std::size_t n_experts = w.gate.size();
  // Group the (token, slot) pairs by expert: one matmul per active expert over all its tokens.
  const at::Tensor flat = experts.reshape({-1});
  const at::Tensor order = std::get<1>(at::sort(flat, c10::optional<bool>(true), 0, false));
  const at::Tensor token_of = at::floor_divide(order, top_k);
  const at::Tensor counts = at::bincount(flat, {}, static_cast<std::int64_t>(n_experts)).to(at::kCPU);
  const at::Tensor sorted_weights = weights.reshape({-1}).index_select(0, order).unsqueeze(1);
  const auto* count = counts.data_ptr<std::int64_t>();
  std::vector<std::int64_t> start(n_experts + 1, 0);
  std::vector<std::size_t> busy;  // active experts, most tokens first
  for (std::size_t e = 0; e < n_experts; ++e) {
    start[e + 1] = start[e] + count[e];
    if (count[e] > 0) busy.push_back(e);
  }
  std::stable_sort(busy.begin(), busy.end(),
                   [&](std::size_t x, std::size_t y) { return count[x] > count[y]; });

  // Each expert gathers its own rows and keeps its weighted output: no [N * top_k, hidden]
  // staging buffers (64 MB each at 2048 tokens, mapped afresh and page-faulted every layer).
  std::vector<at::Tensor> results(n_experts);
  const bool int8 = !w.gate_scale.empty();
  // An int8 weight is converted to the activations' dtype for its one matmul (exact: |q| <= 127
  // fits bf16's mantissa) and its fp32 per-channel scale applied to the output columns.
  auto expert_dense = [&](const at::Tensor& x, const std::vector<at::Tensor>& weights,
                          const std::vector<at::Tensor>& scales, std::size_t e) {
    return int8 ? dense(x, widen_int8(weights[e], x.scalar_type())).mul_(scales[e]) : dense(x, weights[e]);
  };
  auto run_expert = [&](std::size_t e) {
    const at::Tensor x = b.index_select(0, token_of.narrow(0, start[e], count[e]));
    at::Tensor h = expert_dense(x, w.gate, w.gate_scale, e);
    at::silu_(h).mul_(expert_dense(x, w.up, w.up_scale, e));
    results[e] = expert_dense(h, w.down, w.down_scale, e).mul_(sorted_weights.narrow(0, start[e], count[e]));
  };
  if (b.is_cpu()) {
    // Whole experts per thread, largest first: inside a parallel region each matmul runs on one
    // thread, which beats splitting these few-row matmuls (weight packing and thread hand-offs
    // are paid per call). Threads take the next expert as they finish, so one held up by the
    // machine does not hold up the layer. Each row's arithmetic is the same either way.
    std::atomic<std::size_t> next{0};
    at::parallel_for(0, at::get_num_threads(), 1, [&](std::int64_t, std::int64_t) {
      for (std::size_t i = next++; i < busy.size(); i = next++) run_expert(busy[i]);
    });
  } else {
    for (const auto e : busy) run_expert(e);
  }

  // Summed in expert order, as transformers' per-expert index_add_ loop does.
  if (b.is_cpu() && n_tokens > 0) return sum_in_expert_order(results, flat, order, start, n_tokens, top_k);
  at::Tensor out = at::zeros({n_tokens, b.size(1)}, b.options());
  for (std::size_t e = 0; e < n_experts; ++e) {
    if (count[e] > 0) out.index_add_(0, token_of.narrow(0, start[e], count[e]), results[e]);
  }
  return out;
}

}  // namespace

at::Tensor run_experts(const expert_weights& w, const at::Tensor& b, const at::Tensor& experts,
                       const at::Tensor& weights, std::int64_t chunk_rows) {
  if (!w.gate_up_packed.empty()) return experts_cpu(b, experts, weights, w.gate_up_packed, w.down_packed, chunk_rows);
  return experts_aten(w, b, experts, weights);
}

bool grouped_mm_runs([[maybe_unused]] at::Device device) {
#if BATON_GROUPED_MM
  try {
    const auto options = at::TensorOptions().dtype(at::kBFloat16).device(device);
    const at::Tensor a = at::zeros({8, 8}, options), b = at::zeros({1, 8, 8}, options);
    const at::Tensor offs = at::full({1}, 8, options.dtype(at::kInt));
    (void)at::_grouped_mm(a, b.transpose(1, 2), offs);
    return true;
  } catch (const c10::Error&) {
    return false;
  }
#else
  return false;
#endif
}

at::Tensor grouped_mm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& offs, bool native) {
#if BATON_GROUPED_MM
  if (native) return at::_grouped_mm(x, w, offs);
#else
  (void)native;
#endif
  at::RecordFunction guard(at::RecordScope::FUNCTION);
  if (guard.isActive()) guard.before("baton::grouped_mm");
  const at::Tensor ends = offs.to(at::kCPU, at::kLong);
  const auto* end = ends.data_ptr<std::int64_t>();
  at::Tensor y = at::empty({x.size(0), w.size(2)}, x.options());
  std::int64_t begin = 0;
  for (std::int64_t g = 0; g < w.size(0); ++g) {
    if (end[g] > begin) {
      at::Tensor rows = y.narrow(0, begin, end[g] - begin);
      at::mm_out(rows, x.narrow(0, begin, end[g] - begin), w[g]);
    }
    begin = end[g];
  }
  return y;
}

}  // namespace baton::clef::detail
