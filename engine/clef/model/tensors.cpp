#include "engine/clef/model/tensors.hpp"

#include <cstdint>

namespace baton::clef::detail {

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

}  // namespace baton::clef::detail
