// The weights of quantized releases (release.hpp's quantization) as the thinker computes them:
// int4 and FP8 ones dequantized where a path needs the float weight (the attention projections,
// the routers, experts off the CPU), and int4, FP8 and int8 experts as baton's own kernels read
// them, in place.
// Engine-internal (ATen): only engine/clef/model .cpp files include it.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "engine/clef/model/byte_gemm.hpp"
#include "engine/clef/model/packed_linear.hpp"
#include "engine/clef/model/release.hpp"

namespace baton::clef::detail {

// The linear weight `name` ("….weight", [out, in]) of `files` in `type` on `device`: a float one
// as weight_tensor gives it (the mapping itself where nothing converts); an int4 or FP8 one
// dequantized into a new tensor, exactly as release.hpp's formulas say, in fp32 then rounded once
// to `type`. Not for baton's int8 experts, which have paths of their own.
at::Tensor linear_weight(const release& files, const std::string& name, at::ScalarType type, at::Device device);

// Hands back the mapped pages of every tensor that stores the weight `name` (release_pages).
void release_weight_pages(const release& files, const std::string& name);

// The int4 weight `name` as int4_matmul reads it: the mapping itself, or, where g_idx orders the
// groups otherwise than k / group (GPTQ's act-order), its rows reordered group by group into a
// copy that stays 4-bit, with the input permutation the kernel then applies. Throws load_error on
// a g_idx out of range or with groups of unequal size.
int4_part int4_weight(const release& files, const std::string& name);

// The FP8 weight `name` as fp8_matmul reads it: its bytes and block scales where they lie.
fp8_matrix fp8_weight(const release& files, const std::string& name);

// baton's int8 weight `name` (an expert's, `baton quantize --int8`) as int8_matmul reads it: its
// integers and per-output scales where they lie.
int8_matrix int8_weight(const release& files, const std::string& name);

// The FP8 E4M3 value of each of the 256 bytes (NaN for 0x7f and 0xff).
float fp8_e4m3_value(std::uint8_t byte) noexcept;

}  // namespace baton::clef::detail
