#include "engine/clef/model/quantized_weights.hpp"

#include <ATen/ATen.h>

#include <array>
#include <cmath>
#include <limits>

#include "engine/clef/model/tensors.hpp"

namespace baton::clef::detail {

namespace {

// P of the weight "P.weight".
std::string base_of(const std::string& name) {
  return name.ends_with(".weight") ? name.substr(0, name.size() - 7) : name;
}

struct int4_tensors {
  const tensor_view* qweight;
  const tensor_view* scales;
  const tensor_view* qzeros;  // null: every zero is 8
  const tensor_view* g_idx;   // null: k / group
};

int4_tensors int4_of(const release& files, const std::string& name) {
  const std::string p = base_of(name);
  return {&files.thinker_tensor(p + ".qweight"), &files.thinker_tensor(p + ".scales"),
          files.find_thinker_tensor(p + ".qzeros"), files.find_thinker_tensor(p + ".g_idx")};
}

// The 4-bit values packed eight to an int32 along `dim` (the lowest nibble first), as int32.
at::Tensor unpack_nibbles(const at::Tensor& packed, std::int64_t dim) {
  const at::Tensor shifts = at::arange(0, 32, 4, packed.options());
  std::vector<std::int64_t> shape(static_cast<std::size_t>(packed.dim()) + 1, 1);
  shape[static_cast<std::size_t>(dim) + 1] = 8;
  const at::Tensor q = at::bitwise_and(at::bitwise_right_shift(packed.unsqueeze(dim + 1), shifts.view(shape)), 15);
  std::vector<std::int64_t> out(packed.sizes().begin(), packed.sizes().end());
  out[static_cast<std::size_t>(dim)] *= 8;
  return q.reshape(out);
}

// qzeros as zero points stored as they are: v1 words (GPTQ's "zero - 1") get 0x11111111 added
// to the whole word, as GPTQModel converts them, so a zero of 0 written with a borrow from the
// next nibble reads back exactly (a per-nibble + 1 would not).
at::Tensor zeros_as_stored(const tensor_view& qzeros, int zero_offset) {
  const at::Tensor words = view_tensor(qzeros);
  if (zero_offset == 0) return words;
  return words.to(at::kLong).add(static_cast<std::int64_t>(0x11111111)).bitwise_and(static_cast<std::int64_t>(0xFFFFFFFF)).to(at::kInt);  // wraps to int32's bits
}

// Each input row of the weight `name` (for messages) in group: g_idx as read, or k / group.
at::Tensor groups_of(const release& files, const std::string& name, const int4_tensors& t, std::int64_t in,
                     std::int64_t groups) {
  if (t.g_idx == nullptr) return at::arange(in, at::kLong).div(in / groups, "floor");
  const at::Tensor g = view_tensor(*t.g_idx).to(at::kLong);
  if (g.numel() > 0 && (g.min().item<std::int64_t>() < 0 || g.max().item<std::int64_t>() >= groups)) {
    throw load_error(files.dir().string() + ": " + base_of(name) + ".g_idx: g_idx names a group outside [0, " +
                     std::to_string(groups) + ")");
  }
  return g;
}

at::Tensor dequantized_int4(const release& files, const std::string& name) {
  const int4_tensors t = int4_of(files, name);
  const at::Tensor q = unpack_nibbles(view_tensor(*t.qweight), 0);  // [in, out]
  const at::Tensor scales = view_tensor(*t.scales).to(at::kFloat);   // [groups, out]
  const std::int64_t in = q.size(0), groups = scales.size(0);
  at::Tensor zeros = t.qzeros != nullptr ? unpack_nibbles(zeros_as_stored(*t.qzeros, files.quant().zero_offset), 1)
                                         : at::full_like(scales, 8, at::kInt);
  const at::Tensor g = groups_of(files, name, t, in, groups);
  const at::Tensor w = (q.to(at::kFloat) - zeros.index_select(0, g).to(at::kFloat)) * scales.index_select(0, g);
  return w.t().contiguous();
}

at::Tensor dequantized_fp8(const release& files, const std::string& name) {
  static const at::Tensor table = [] {
    std::array<float, 256> values{};
    for (int b = 0; b < 256; ++b) values[static_cast<std::size_t>(b)] = fp8_e4m3_value(static_cast<std::uint8_t>(b));
    return at::tensor(at::ArrayRef<float>(values.data(), values.size()));
  }();
  const at::Tensor bytes = view_tensor(files.thinker_tensor(name));  // uint8 [out, in]
  const at::Tensor scale = view_tensor(files.thinker_tensor(name + "_scale_inv"));
  const std::int64_t out = bytes.size(0), in = bytes.size(1);
  const auto& q = files.quant();
  const at::Tensor per_weight = scale.repeat_interleave(q.block_rows, 0)
                                    .narrow(0, 0, out)
                                    .repeat_interleave(q.block_cols, 1)
                                    .narrow(1, 0, in);
  return table.index_select(0, bytes.reshape({-1}).to(at::kLong)).view({out, in}) * per_weight;
}

}  // namespace

float fp8_e4m3_value(std::uint8_t byte) noexcept {
  const int exponent = (byte >> 3) & 15, mantissa = byte & 7;
  const float sign = (byte & 0x80) != 0 ? -1.F : 1.F;
  if (exponent == 15 && mantissa == 7) return std::numeric_limits<float>::quiet_NaN();
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -9);  // subnormal: m · 2^-9
  return sign * std::ldexp(1.F + static_cast<float>(mantissa) / 8.F, exponent - 7);
}

at::Tensor linear_weight(const release& files, const std::string& name, at::ScalarType type, at::Device device) {
  switch (files.form(name)) {
    case weight_form::int4: return dequantized_int4(files, name).to(device, type);
    case weight_form::fp8: return dequantized_fp8(files, name).to(device, type);
    case weight_form::plain:
    case weight_form::int8: break;
  }
  return weight_tensor(files.thinker_tensor(name), type, device);
}

void release_weight_pages(const release& files, const std::string& name) {
  switch (files.form(name)) {
    case weight_form::int4: {
      const int4_tensors t = int4_of(files, name);
      for (const tensor_view* v : {t.qweight, t.scales, t.qzeros, t.g_idx}) {
        if (v != nullptr) release_pages(*v);
      }
      return;
    }
    case weight_form::fp8: release_pages(files.thinker_tensor(name + "_scale_inv")); break;
    case weight_form::plain:
    case weight_form::int8: break;
  }
  release_pages(files.thinker_tensor(name));
}

fp8_matrix fp8_weight(const release& files, const std::string& name) {
  const tensor_view& bytes = files.thinker_tensor(name);
  const tensor_view& scales = files.thinker_tensor(name + "_scale_inv");  // F32, checked at open
  fp8_matrix m;
  m.weight = reinterpret_cast<const std::uint8_t*>(bytes.data);
  m.scales = scales.data;
  m.scales_bf16 = scales.type == dtype::bf16;
  m.out = bytes.shape[0];
  m.in = bytes.shape[1];
  m.block_rows = files.quant().block_rows;
  m.block_cols = files.quant().block_cols;
  return m;
}

int8_matrix int8_weight(const release& files, const std::string& name) {
  const tensor_view& q = files.thinker_tensor(name);
  const tensor_view& scales = files.thinker_tensor(name + "_scale");  // F32 [out], checked at open
  int8_matrix m;
  m.weight = reinterpret_cast<const std::int8_t*>(q.data);
  m.scales = reinterpret_cast<const float*>(scales.data);
  m.out = q.shape[0];
  m.in = q.shape[1];
  return m;
}

int4_part int4_weight(const release& files, const std::string& name) {
  const int4_tensors t = int4_of(files, name);
  int4_part y;
  int4_matrix& m = y.matrix;
  m.out = t.qweight->shape[1];
  m.in = t.qweight->shape[0] * 8;
  const std::int64_t groups = t.scales->shape[0];
  m.group = m.in / groups;
  m.scales = reinterpret_cast<const std::uint16_t*>(t.scales->data);
  m.scales_bf16 = t.scales->type == dtype::bf16;
  if (t.qzeros != nullptr) {
    // v1 zeros converted once (a 64th of the weight's bytes); v2 ones read in place.
    if (files.quant().zero_offset != 0) y.keep_zeros = zeros_as_stored(*t.qzeros, files.quant().zero_offset);
    m.qzeros = y.keep_zeros.defined() ? y.keep_zeros.data_ptr<std::int32_t>()
                                      : reinterpret_cast<const std::int32_t*>(t.qzeros->data);
  }
  m.zero_offset = 0;
  m.qweight = reinterpret_cast<const std::int32_t*>(t.qweight->data);
  if (t.g_idx == nullptr) return y;
  const at::Tensor g = groups_of(files, name, t, m.in, groups);
  if (at::equal(g, at::arange(m.in, at::kLong).div(m.group, "floor"))) return y;  // the order the kernel reads
  if (!at::equal(at::bincount(g, {}, groups), at::full({groups}, m.group, at::kLong))) {
    throw load_error(files.dir().string() + ": " + base_of(name) + ".g_idx: its groups are not all " + std::to_string(m.group) + " rows long");
  }
  // Rows sorted by group (stable: act-order keeps each group's rows in their order), repacked.
  const at::Tensor order = std::get<1>(at::sort(g, /*stable=*/true, /*dim=*/0, /*descending=*/false));
  const at::Tensor q = unpack_nibbles(view_tensor(*t.qweight), 0).index_select(0, order);  // [in, out]
  const at::Tensor shifts = at::arange(0, 32, 4, at::kInt).view({1, 8, 1});
  // Summed in int64 (the nibbles do not overlap, so the sum is their bits), then wrapped to int32.
  y.keep = at::bitwise_left_shift(q.to(at::kLong).view({m.in / 8, 8, m.out}), shifts.to(at::kLong)).sum(1).to(at::kInt).contiguous();
  m.qweight = y.keep.data_ptr<std::int32_t>();
  const at::Tensor order_host = order.contiguous();
  y.perm.assign(order_host.data_ptr<std::int64_t>(), order_host.data_ptr<std::int64_t>() + m.in);
  return y;
}

}  // namespace baton::clef::detail
