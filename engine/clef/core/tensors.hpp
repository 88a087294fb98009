// ATen helpers shared by the thinker and the joint head (engine-internal: only engine/clef/core
// .cpp files include this, so the rest of baton never parses ATen).
#pragma once

#include <ATen/ATen.h>

#include <chrono>

#include "engine/clef/core/model.hpp"
#include "engine/clef/core/safetensors.hpp"

namespace baton::clef::detail {

at::ScalarType scalar_type(dtype t);
at::ScalarType scalar_type(compute_dtype t);

// A tensor over the mapped bytes (no copy); copied only when misaligned for its element type.
at::Tensor view_tensor(const tensor_view& v);

// The weight in `type` on `device`: the mapping itself when nothing needs converting.
at::Tensor weight_tensor(const tensor_view& v, at::ScalarType type, at::Device device);

// Rows of x @ w.T for w [out, in] (nn.Linear without bias).
inline at::Tensor dense(const at::Tensor& x, const at::Tensor& w) { return at::matmul(x, w.t()); }
inline at::Tensor dense(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  return at::addmm(b, x, w.t());
}

// Milliseconds added to a counter when the scope ends (nullptr: not profiling).
class scoped_timer {
 public:
  explicit scoped_timer(double* sink) : sink_(sink) {
    if (sink_) start_ = std::chrono::steady_clock::now();
  }
  ~scoped_timer() {
    if (sink_) {
      *sink_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
                    .count();
    }
  }
  scoped_timer(const scoped_timer&) = delete;
  scoped_timer& operator=(const scoped_timer&) = delete;

 private:
  double* sink_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace baton::clef::detail
