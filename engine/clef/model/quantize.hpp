// `baton quantize --int8`: a copy of a release whose expert projections are int8 with one fp32
// scale per output channel (symmetric: w ≈ q * scale[row], q in [-127, 127], scale = max |w_row| /
// 127), everything else as it was. Torch-free; written tensor by tensor, so memory stays bounded
// by one expert weight whatever the release's size.
//
// On disk: each expert weight "…mlp.experts.E.{gate,up,down}_proj.weight" becomes I8 of the same
// shape, followed in its shard by "…_proj.weight_scale" (F32, [out_features]); shards holding
// experts are rewritten (their safetensors __metadata__ gains "quantization": "baton-int8"), the
// index maps the scales to their shards, config.json gains `quantization_config`
// (int8_quantization_config()), and every other file is copied as is. The loader recognises the
// release from config.json alone.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string_view>

#include <nlohmann/json.hpp>

namespace baton::clef {

// Called after each tensor or file written: the source bytes done so far of `total`.
using quantize_progress =
    std::function<void(std::string_view what, std::uint64_t done, std::uint64_t total)>;

// Writes the int8 copy of the release `src` to `dst`, through `dst` + ".partial" renamed at the
// end (the copy is loaded and checked first): a present `dst` is always complete. Throws
// load_error when `src` is not a release this loader reads (or is already int8), and
// std::runtime_error when `dst` exists and is not an empty directory, or on a write failure
// (the partial copy is removed).
void quantize_int8(const std::filesystem::path& src, const std::filesystem::path& dst,
                   const quantize_progress& progress = {});

// `baton quantize --int4`: the same copy with each expert weight P.weight [out, in] in GPTQ's
// int4 layout, which other engines read too (release.hpp's quantization::scheme::int4): P.qweight,
// P.qzeros (zero points stored less one, GPTQ's v1 checkpoints), P.scales (F16) and P.g_idx (in
// order), groups of `group_size` inputs (32, 64 or 128; std::invalid_argument otherwise), config.json's
// quantization_config int4_quantization_config(group_size). Round to nearest, asymmetric, each
// group's range clipped to the ratio (1 down to 0.8) that reproduces its weights best. A release
// quantized already is refused (load_error).
void quantize_int4(const std::filesystem::path& src, const std::filesystem::path& dst, std::int64_t group_size,
                   const quantize_progress& progress = {});
// quant_method gptq, bits 4, the group size, asymmetric, no act-order, checkpoint_format gptq.
nlohmann::json int4_quantization_config(std::int64_t group_size);

}  // namespace baton::clef
