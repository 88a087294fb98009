// ATen helpers shared by the thinker and the joint head (engine-internal: only engine/clef/model
// .cpp files include this, so the rest of baton never parses ATen).
#pragma once

#include <ATen/ATen.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "engine/clef/model/model_types.hpp"
#include "engine/clef/model/safetensors.hpp"

namespace baton::clef::detail {

at::ScalarType scalar_type(dtype t);
at::ScalarType scalar_type(compute_dtype t);

// A tensor over the mapped bytes (no copy); copied only when misaligned for its element type.
at::Tensor view_tensor(const tensor_view& v);

// The weight in `type` on `device`: the mapping itself when nothing needs converting.
at::Tensor weight_tensor(const tensor_view& v, at::ScalarType type, at::Device device);
// The tensor in the file's dtype on `device`: the mapping itself on the CPU, a copy elsewhere.
at::Tensor mapped_tensor(const tensor_view& v, at::Device device);

// Hands the whole pages inside a mapped tensor back to the kernel: for a weight packed at load,
// whose mapping is read once to pack it and would otherwise count as resident.
void release_pages(const tensor_view& v);

// The int8 tensor `q` as `type` (exact for bf16 and fp32), for one matmul: on the CPU it lives in
// a buffer of the calling thread that the thread's next call overwrites (experts run side by side,
// and a fresh 3 MiB tensor per matmul costs more than the conversion); elsewhere a new tensor.
at::Tensor widen_int8(const at::Tensor& q, at::ScalarType type);
// The same conversion on n values into `out`.
void widen_int8_to_f32(const std::int8_t* in, float* out, std::int64_t n);

// A copy of `v` as an int64 tensor on `device` (indices, spans).
at::Tensor long_tensor(const std::vector<std::int64_t>& v, at::Device device);

// Query rows per attention chunk, so that the fp32 score block [heads, rows, keys] stays within
// `budget_bytes`; at least 32 rows, at most `rows`. Fewer rows starve the matmuls and multiply the
// operations: at 8,192 tokens (mid-size, bf16, 2 threads) 16-row chunks took 2.3x the time of
// 32-row ones, while 128 and more rows fell out of cache (docs/performance.md).
inline std::int64_t chunk_rows(std::int64_t budget_bytes, std::int64_t heads, std::int64_t keys,
                               std::int64_t rows) {
  return std::min(std::max<std::int64_t>(rows, 1),
                  std::max<std::int64_t>(32, budget_bytes / (4 * heads * std::max<std::int64_t>(keys, 1))));
}

// Hands `x` to `observe` (when given) as fp32 on the CPU, row-major, with its first dimension as
// the row count.
inline void report(const stage_observer* observe, std::string_view stage, const at::Tensor& x) {
  if (observe == nullptr) return;
  const at::Tensor f = x.to(at::kCPU, at::kFloat).contiguous();
  (*observe)(stage, {f.data_ptr<float>(), static_cast<std::size_t>(f.numel())}, f.size(0));
}

// [-x2, x1] for x = [x1, x2] halved on the last dimension: rotary embeddings' partner values.
inline at::Tensor rotate_half(const at::Tensor& x) {
  const auto half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// Rows of x @ w.T for w [out, in] (nn.Linear without bias).
inline at::Tensor dense(const at::Tensor& x, const at::Tensor& w) { return at::matmul(x, w.t()); }
inline at::Tensor dense(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  return at::addmm(b, x, w.t());
}

// Milliseconds added to a counter when the scope ends (nullptr: not profiling).
// Counting ATen operations on every thread (a RecordFunction callback), while at least one
// caller asked for it: count_ops(true) / count_ops(false) in pairs.
void count_ops(bool on);
std::int64_t ops_counted() noexcept;

// On a GPU, where kernels run after their launch returns, the device is synchronised at both
// ends, so the time is the part's own (only while profiling). `ops`, when given, gets the
// operations started meanwhile (count_ops must be on).
class scoped_timer {
 public:
  explicit scoped_timer(double* sink, at::Device device = at::kCPU, std::int64_t* ops = nullptr)
      : sink_(sink), ops_(ops), device_(device) {
    if (!sink_) return;
    synchronize();
    if (ops_) ops_start_ = ops_counted();
    start_ = std::chrono::steady_clock::now();
  }
  ~scoped_timer() {
    if (!sink_) return;
    synchronize();
    *sink_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
    if (ops_) *ops_ += ops_counted() - ops_start_;
  }
  scoped_timer(const scoped_timer&) = delete;
  scoped_timer& operator=(const scoped_timer&) = delete;

 private:
  void synchronize() const {
    if (!device_.is_cpu()) c10::impl::getDeviceGuardImpl(device_.type())->getStream(device_).synchronize();
  }

  double* sink_;
  std::int64_t* ops_;
  std::int64_t ops_start_ = 0;
  at::Device device_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace baton::clef::detail
