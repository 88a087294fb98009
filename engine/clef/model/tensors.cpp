#include "engine/clef/model/tensors.hpp"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <utility>

namespace baton::clef::detail {

namespace {

// int8 expert weights widened for their matmul. A small integer is exact in fp32, and the top 16
// bits of that fp32 are its bf16 (|q| <= 128 needs 8 significant bits), so both are exact. Plain
// loops the compiler vectorises, cloned per instruction set: ATen's to() into a fresh tensor per
// matmul made int8 experts 4-34 % slower than bf16 ones at the real shape.
__attribute__((target_clones("avx512f", "avx2", "default"))) void widen_to_bf16(
    const std::int8_t* in, std::uint16_t* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    out[i] = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(static_cast<float>(in[i])) >> 16);
  }
}

std::atomic<std::int64_t> ops_started{0};
thread_local int op_depth = 0;  // an operation's inner calls are not counted
std::mutex counting_mutex;
int counting_users = 0;
at::CallbackHandle counting_handle = 0;

std::unique_ptr<at::ObserverContext> on_op_start(const at::RecordFunction&) {
  if (op_depth++ == 0) ops_started.fetch_add(1, std::memory_order_relaxed);
  return nullptr;
}

void on_op_end(const at::RecordFunction&, at::ObserverContext*) {
  if (op_depth > 0) --op_depth;  // not below 0 when the callback came in mid-operation
}

}  // namespace

void count_ops(bool on) {
  const std::lock_guard lock(counting_mutex);
  if (on && counting_users++ == 0) {
    counting_handle =
        at::addGlobalCallback(at::RecordFunctionCallback(on_op_start, on_op_end).scopes({at::RecordScope::FUNCTION}));
  } else if (!on && counting_users > 0 && --counting_users == 0) {
    at::removeCallback(counting_handle);
  }
}

std::int64_t ops_counted() noexcept { return ops_started.load(std::memory_order_relaxed); }

at::ScalarType scalar_type(dtype t) {
  switch (t) {
    case dtype::f32: return at::kFloat;
    case dtype::f16: return at::kHalf;
    case dtype::bf16: return at::kBFloat16;
    case dtype::f64: return at::kDouble;
    case dtype::i64: return at::kLong;
    case dtype::i32: return at::kInt;
    case dtype::i16: return at::kShort;
    case dtype::i8: return at::kChar;
    case dtype::u8: return at::kByte;
    case dtype::boolean: return at::kBool;
    case dtype::f8_e4m3: return at::kByte;  // libtorch 1.13 has no fp8 type: the bytes, decoded by quantized_weights
  }
  return at::kFloat;
}

at::ScalarType scalar_type(compute_dtype t) {
  return t == compute_dtype::bf16 ? at::kBFloat16 : at::kFloat;
}

at::Tensor view_tensor(const tensor_view& v) {
  const auto options = at::TensorOptions().dtype(scalar_type(v.type));
  // The mapping is read-only; nothing in baton writes to weights.
  void* data = const_cast<std::byte*>(v.data);
  if (reinterpret_cast<std::uintptr_t>(data) % dtype_size(v.type) != 0) {
    const auto n = static_cast<std::int64_t>(v.bytes);
    return at::from_blob(data, {n}, at::TensorOptions().dtype(at::kByte))
        .clone()
        .view(scalar_type(v.type))
        .view(v.shape);
  }
  return at::from_blob(data, v.shape, options);
}

at::Tensor long_tensor(const std::vector<std::int64_t>& v, at::Device device) {
  return at::from_blob(const_cast<std::int64_t*>(v.data()), {static_cast<std::int64_t>(v.size())},
                       at::TensorOptions().dtype(at::kLong))
      .to(device, /*non_blocking=*/false, /*copy=*/true);
}

at::Tensor weight_tensor(const tensor_view& v, at::ScalarType type, at::Device device) {
  at::Tensor t = view_tensor(v);
  if (t.scalar_type() == type && device.is_cpu()) return t;
  return t.to(device, type);
}

at::Tensor mapped_tensor(const tensor_view& v, at::Device device) {
  at::Tensor t = view_tensor(v);
  return device.is_cpu() ? t : t.to(device);
}

void release_pages(const tensor_view& v) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = (reinterpret_cast<std::uintptr_t>(v.data) + page - 1) / page * page;
  const auto end = (reinterpret_cast<std::uintptr_t>(v.data) + v.bytes) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void widen_int8_to_f32(
    const std::int8_t* in, float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]);
}

at::Tensor widen_int8(const at::Tensor& q, at::ScalarType type) {
  if (q.scalar_type() != at::kChar || !q.device().is_cpu() || !q.is_contiguous() ||
      (type != at::kBFloat16 && type != at::kFloat)) {
    return q.to(type);
  }
  thread_local at::Tensor buffer;
  const std::int64_t n = q.numel();
  if (!buffer.defined() || buffer.scalar_type() != type || buffer.numel() < n) {
    buffer = at::empty({n}, at::TensorOptions().dtype(type));
  }
  const auto* in = q.data_ptr<std::int8_t>();
  if (type == at::kBFloat16) {
    widen_to_bf16(in, reinterpret_cast<std::uint16_t*>(buffer.data_ptr()), n);
  } else {
    widen_int8_to_f32(in, buffer.data_ptr<float>(), n);
  }
  return buffer.narrow(0, 0, n).view(q.sizes());
}

}  // namespace baton::clef::detail
