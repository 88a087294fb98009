// What clef_forward and prefix_session both measure on a model: the matmul ceiling their figures
// are quoted against, and a record's closest router call.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/clef/model/release.hpp"

namespace baton::clef::bench {

// GFLOP/s of x [m, k] @ w.T for w [n, k] in `type`, as the model's dense() lays its weights out,
// the output preallocated: the median call over ~0.5 s (at least 5 calls) after 3 untimed ones.
inline double matmul_gflops(std::int64_t m, std::int64_t k, std::int64_t n, at::ScalarType type) {
  using clock = std::chrono::steady_clock;
  const at::Tensor x = at::randn({m, k}).to(type);
  const at::Tensor w = at::randn({n, k}).to(type);
  at::Tensor y = at::empty({m, n}, x.options());
  for (int i = 0; i < 3; ++i) at::mm_out(y, x, w.t());
  std::vector<double> seconds;
  const auto start = clock::now();
  auto since = [](clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); };
  while (seconds.size() < 5 || (since(start) < 0.5 && seconds.size() < 1000)) {
    const auto t = clock::now();
    at::mm_out(y, x, w.t());
    seconds.push_back(since(t));
  }
  std::sort(seconds.begin(), seconds.end());
  const std::size_t c = seconds.size();
  const double median = c % 2 ? seconds[c / 2] : (seconds[c / 2 - 1] + seconds[c / 2]) / 2;
  return 2.0 * static_cast<double>(m * k) * static_cast<double>(n) / median / 1e9;
}

// The smallest gap between a token's k-th and (k+1)-th largest router logits over every layer:
// any change of summation order that moves that token's router logits by more can swap one of its
// experts, and the swap then spreads through attention to the logits. A logit comparison between
// two builds, or between a cached and an uncached forward, is read against it.
struct router_call {
  double margin = -1;  // none seen yet
  std::int64_t layer = 0, token = 0;
};

// Folds one traced stage (a model::trace observer's arguments) into `closest`:
// "router_logits.<layer>", logits [rows, c.num_experts]; other stages, and a router that picks
// every expert, leave it as it is.
inline void fold_router_call(std::string_view stage, std::span<const float> values, std::int64_t rows,
                             const text_config& c, router_call& closest) {
  const std::int64_t top_k = c.experts_per_token;
  if (!stage.starts_with("router_logits.") || top_k >= c.num_experts) return;
  const at::Tensor logits = at::from_blob(const_cast<float*>(values.data()), {rows, c.num_experts});
  const at::Tensor top = std::get<0>(at::topk(logits, top_k + 1, -1));
  const auto [gaps, token] = (top.select(1, top_k - 1) - top.select(1, top_k)).min(0);
  if (const double gap = gaps.item<double>(); closest.margin < 0 || gap < closest.margin) {
    closest = {gap, std::stoll(std::string(stage.substr(stage.find('.') + 1))), token.item<std::int64_t>()};
  }
}

}  // namespace baton::clef::bench
