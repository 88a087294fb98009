#include "engine/clef/model/quantize.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/clef/model/json_file.hpp"
#include "engine/clef/model/release.hpp"
#include "engine/clef/model/release_files.hpp"

namespace baton::clef {

namespace {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

[[noreturn]] void write_failed(const fs::path& p) {
  throw std::runtime_error(p.string() + ": write failed: " + std::strerror(errno));
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  if (!out.write(text.data(), static_cast<std::streamsize>(text.size())) || !out.flush()) write_failed(p);
}

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = (h & 0x8000u) << 16, exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu;
  if (exponent == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  if (exponent != 0) return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
  const float subnormal = std::ldexp(static_cast<float>(mantissa), -24);  // 2^-14 * m / 2^10
  return sign ? -subnormal : subnormal;
}

// Row r of a float tensor [rows, row.size()] as fp32: the dtype is looked at once per row, not
// once per value (the experts are most of a release's bytes).
void read_row(const tensor_view& v, std::int64_t r, std::span<float> row) {
  const std::size_t cols = row.size(), first = static_cast<std::size_t>(r) * cols;
  if (v.type == dtype::f32) {
    std::memcpy(row.data(), v.data + 4 * first, 4 * cols);
    return;
  }
  const auto bits = [&](std::size_t c) {
    std::uint16_t b;
    std::memcpy(&b, v.data + 2 * (first + c), 2);
    return b;
  };
  if (v.type == dtype::bf16) {
    for (std::size_t c = 0; c < cols; ++c) row[c] = std::bit_cast<float>(std::uint32_t{bits(c)} << 16);
  } else {  // f16
    for (std::size_t c = 0; c < cols; ++c) row[c] = half_to_float(bits(c));
  }
}

// One tensor of an output shard: `source` copied, or its int8 values, or the per-row scales of
// the weight it follows; or one of the four tensors GPTQ's int4 layout stores it in.
struct output_tensor {
  std::string name;
  const tensor_view* source = nullptr;
  enum { copy, quantized, scale, qweight, qzeros, scales, g_idx } kind = copy;
};

// The shape and safetensors dtype of `t` for a weight [out, in] quantized in groups of `group`.
std::pair<std::vector<std::int64_t>, const char*> output_shape(const output_tensor& t, std::int64_t group) {
  const std::vector<std::int64_t>& shape = t.source->shape;
  const std::int64_t out = shape[0], in = shape.size() > 1 ? shape[1] : 0;
  switch (t.kind) {
    case output_tensor::quantized: return {shape, "I8"};
    case output_tensor::scale: return {{out}, "F32"};
    case output_tensor::qweight: return {{in / 8, out}, "I32"};
    case output_tensor::qzeros: return {{in / group, out / 8}, "I32"};
    case output_tensor::scales: return {{in / group, out}, "F16"};
    case output_tensor::g_idx: return {{in}, "I32"};
    case output_tensor::copy: break;
  }
  return {shape, dtype_name(t.source->type)};
}

std::uint64_t output_bytes(const output_tensor& t, std::int64_t group) {
  if (t.kind == output_tensor::copy) return t.source->bytes;
  const auto [shape, type] = output_shape(t, group);
  std::uint64_t n = std::strcmp(type, "I8") == 0 ? 1 : std::strcmp(type, "F16") == 0 ? 2 : 4;
  for (const std::int64_t d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

// q and scale of an expert weight [out, in], row by row.
void quantize_rows(const tensor_view& w, const std::string& name, std::vector<std::int8_t>& q,
                   std::vector<float>& scales) {
  const std::int64_t rows = w.shape[0], cols = w.shape[1];
  q.resize(static_cast<std::size_t>(rows * cols));
  scales.resize(static_cast<std::size_t>(rows));
  std::vector<float> row(static_cast<std::size_t>(cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    float amax = 0;
    read_row(w, r, row);
    for (std::int64_t c = 0; c < cols; ++c) {
      // NaN never wins std::max: taken as infinite, so the row is refused below.
      amax = std::isnan(row[c]) ? INFINITY : std::max(amax, std::abs(row[c]));
    }
    // The source's fault (exit 66), not the destination's.
    if (!std::isfinite(amax)) throw load_error("tensor " + name + ": non-finite weights in row " + std::to_string(r));
    const float scale = amax / 127.0f;
    scales[r] = scale;
    for (std::int64_t c = 0; c < cols; ++c) {
      const float v = scale > 0 ? std::nearbyint(row[c] / scale) : 0.0f;
      q[r * cols + c] = static_cast<std::int8_t>(std::clamp(v, -127.0f, 127.0f));
    }
  }
}

std::uint16_t float_to_half(float f) {
  return std::bit_cast<std::uint16_t>(static_cast<_Float16>(f));  // rounded to nearest even
}

// A weight [out, in] in GPTQ's int4 layout (release.hpp), asymmetric, v1 zeros (stored less one).
struct gptq_tensors {
  std::vector<std::int32_t> qweight, qzeros, g_idx;
  std::vector<std::uint16_t> scales;  // fp16
};

// Round to nearest in groups of `group` inputs per output, each group's range [min, max] (with 0
// inside it) clipped to the ratio of 1, 0.975, …, 0.8 whose fp16 scale and zero reproduce the
// group's weights with the least squared error.
gptq_tensors quantize_int4(const tensor_view& w, const std::string& name, std::int64_t group) {
  const std::int64_t out = w.shape[0], in = w.shape[1], groups = in / group;
  std::vector<float> weights(static_cast<std::size_t>(out * in));
  for (std::int64_t r = 0; r < out; ++r) read_row(w, r, std::span<float>(weights.data() + r * in, static_cast<std::size_t>(in)));
  gptq_tensors y;
  y.qweight.assign(static_cast<std::size_t>(in / 8 * out), 0);
  y.qzeros.assign(static_cast<std::size_t>(groups * out / 8), 0);
  y.scales.resize(static_cast<std::size_t>(groups * out));
  y.g_idx.resize(static_cast<std::size_t>(in));
  for (std::int64_t k = 0; k < in; ++k) y.g_idx[static_cast<std::size_t>(k)] = static_cast<std::int32_t>(k / group);
  std::vector<std::uint8_t> q(static_cast<std::size_t>(group)), best_q(static_cast<std::size_t>(group));
  for (std::int64_t n = 0; n < out; ++n) {
    const float* row = weights.data() + n * in;
    for (std::int64_t g = 0; g < groups; ++g) {
      const float* v = row + g * group;
      float lo = 0, hi = 0;
      for (std::int64_t k = 0; k < group; ++k) {
        if (!std::isfinite(v[k])) throw load_error("tensor " + name + ": non-finite weights in row " + std::to_string(n));
        lo = std::min(lo, v[k]);
        hi = std::max(hi, v[k]);
      }
      double best = INFINITY;
      std::uint16_t best_scale = 0;
      int best_zero = 1;
      for (int step = 0; step <= 8; ++step) {
        const float ratio = 1.0F - 0.025F * static_cast<float>(step);
        const float range = (hi - lo) * ratio;
        const std::uint16_t scale_bits = float_to_half(range > 0 ? range / 15.0F : 1.0F);
        const float scale = half_to_float(scale_bits);
        if (!(scale > 0)) continue;  // a range below fp16's smallest step
        // v1 stores zero - 1 in a nibble: zeros from 1 to 15.
        const int zero = std::clamp(static_cast<int>(std::nearbyint(-lo * ratio / scale)), 1, 15);
        double error = 0;
        for (std::int64_t k = 0; k < group; ++k) {
          const int level = std::clamp(static_cast<int>(std::nearbyint(v[k] / scale)) + zero, 0, 15);
          q[static_cast<std::size_t>(k)] = static_cast<std::uint8_t>(level);
          const double d = static_cast<double>(level - zero) * scale - v[k];
          error += d * d;
        }
        if (error < best) {
          best = error;
          best_scale = scale_bits;
          best_zero = zero;
          best_q.swap(q);
        }
      }
      y.scales[static_cast<std::size_t>(g * out + n)] = best_scale;
      y.qzeros[static_cast<std::size_t>(g * out / 8 + n / 8)] |= static_cast<std::int32_t>(
          static_cast<std::uint32_t>(best_zero - 1) << (4 * (n % 8)));
      for (std::int64_t k = 0; k < group; ++k) {
        const std::int64_t row_in = g * group + k;
        y.qweight[static_cast<std::size_t>(row_in / 8 * out + n)] |= static_cast<std::int32_t>(
            static_cast<std::uint32_t>(best_q[static_cast<std::size_t>(k)]) << (4 * (row_in % 8)));
      }
    }
  }
  return y;
}

// The shard's own __metadata__ (the loader skips it), or {"format": "pt"}.
ordered_json shard_metadata(const fs::path& shard) {
  std::ifstream in(shard, std::ios::binary);
  std::uint64_t length = 0;
  in.read(reinterpret_cast<char*>(&length), 8);
  std::string header(length, '\0');
  in.read(header.data(), static_cast<std::streamsize>(length));
  const ordered_json h = ordered_json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (h.is_object() && h.contains("__metadata__") && h["__metadata__"].is_object()) return h["__metadata__"];
  return {{"format", "pt"}};
}

// Rewrites `src_shard` into `dst_shard` with its expert weights quantized; returns the names of
// the expert weights it holds (for the index).
// The scheme a copy is written in: int8 (baton's) or int4 in groups of `group` (GPTQ's layout).
struct scheme {
  bool int4 = false;
  std::int64_t group = 0;
};

// The names GPTQ's layout stores the weight "P.weight" under.
std::vector<std::string> int4_names(const std::string& weight) {
  const std::string p = weight.substr(0, weight.size() - 7);
  return {p + ".qweight", p + ".qzeros", p + ".scales", p + ".g_idx"};
}

std::vector<std::string> rewrite_shard(const fs::path& src_shard, const fs::path& dst_shard,
                                       std::uint64_t& done, std::uint64_t total,
                                       const quantize_progress& progress, const scheme& how) {
  const safetensors_file in(src_shard);
  const std::uint64_t start = done;
  std::vector<const std::pair<const std::string, tensor_view>*> by_offset;
  for (const auto& entry : in.tensors()) by_offset.push_back(&entry);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->second.data < b->second.data; });

  std::vector<output_tensor> tensors;
  std::vector<std::string> experts;
  for (const auto* entry : by_offset) {
    const auto& [name, view] = *entry;
    if (!is_expert_weight(name)) {
      tensors.push_back({name, &view, output_tensor::copy});
      continue;
    }
    if (view.shape.size() != 2 || !(view.type == dtype::f32 || view.type == dtype::bf16 || view.type == dtype::f16)) {
      throw load_error(src_shard.string() + ": tensor " + name + " is not a 2-D F32, F16 or BF16 weight");
    }
    if (how.int4) {
      const std::int64_t out = view.shape[0], in = view.shape[1];
      if (in % how.group != 0 || in % 8 != 0 || out % 8 != 0) {
        throw load_error(src_shard.string() + ": tensor " + name + " [" + std::to_string(out) + ", " +
                         std::to_string(in) + "] cannot be stored in int4 with group size " + std::to_string(how.group) +
                         " (inputs a multiple of the group and of 8, outputs of 8)");
      }
      const auto names = int4_names(name);
      for (const auto& [i, kind] : {std::pair{0, output_tensor::qweight}, std::pair{1, output_tensor::qzeros},
                                   std::pair{2, output_tensor::scales}, std::pair{3, output_tensor::g_idx}}) {
        tensors.push_back({names[static_cast<std::size_t>(i)], &view, kind});
      }
    } else {
      tensors.push_back({name, &view, output_tensor::quantized});
      tensors.push_back({name + "_scale", &view, output_tensor::scale});
    }
    experts.push_back(name);
  }

  ordered_json header;
  header["__metadata__"] = shard_metadata(src_shard);
  header["__metadata__"]["quantization"] = how.int4 ? "gptq" : int8_quant_method;
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    const std::uint64_t bytes = output_bytes(t, how.group);
    const auto [shape, type] = output_shape(t, how.group);
    header[t.name] = {{"dtype", type}, {"shape", shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');  // data 8-byte aligned, as the writers pad it

  std::ofstream out(dst_shard, std::ios::binary);
  const std::uint64_t length = text.size();
  if (!out.write(reinterpret_cast<const char*>(&length), 8) ||
      !out.write(text.data(), static_cast<std::streamsize>(text.size()))) {
    write_failed(dst_shard);
  }
  std::vector<std::int8_t> q;
  std::vector<float> scales;
  gptq_tensors packed;  // the int4 tensors of the weight whose qweight came last
  auto put = [&](const auto& values) {
    out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(values[0])));
  };
  for (const auto& t : tensors) {
    const tensor_view& v = *t.source;
    if (t.kind == output_tensor::qweight) {
      packed = quantize_int4(v, t.name, how.group);
      put(packed.qweight);
    } else if (t.kind == output_tensor::qzeros) {
      put(packed.qzeros);
    } else if (t.kind == output_tensor::scales) {
      put(packed.scales);
    } else if (t.kind == output_tensor::g_idx) {
      put(packed.g_idx);
    } else if (t.kind == output_tensor::quantized) {
      quantize_rows(v, t.name, q, scales);
      out.write(reinterpret_cast<const char*>(q.data()), static_cast<std::streamsize>(q.size()));
    } else if (t.kind == output_tensor::scale) {
      out.write(reinterpret_cast<const char*>(scales.data()), static_cast<std::streamsize>(scales.size() * 4));
    } else {
      out.write(reinterpret_cast<const char*>(v.data), static_cast<std::streamsize>(v.bytes));
    }
    if (!out) write_failed(dst_shard);
    if (t.kind == output_tensor::copy || t.kind == output_tensor::quantized || t.kind == output_tensor::qweight) {
      done += v.bytes;
      if (progress) progress(t.name, done, total);
    }
  }
  if (!out.flush()) write_failed(dst_shard);
  done = start + fs::file_size(src_shard);  // the header too
  if (progress) progress(src_shard.filename().string(), done, total);
  return experts;
}

std::uint64_t tree_bytes(const fs::path& p) {
  if (!fs::is_directory(p)) return fs::file_size(p);
  std::uint64_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(p)) {
    if (e.is_regular_file()) n += e.file_size();
  }
  return n;
}

// Everything but the removal of a failed partial copy.
void write_copy(const fs::path& src, const fs::path& tmp, const quantize_progress& progress, const scheme& how) {
  fs::create_directories(tmp);
  // Key order is kept so that the copy's config and index read like the source's.
  ordered_json config = read_json_file<ordered_json>(src / release_files::config_json);
  config["quantization_config"] = how.int4 ? int4_quantization_config(how.group) : int8_quantization_config();
  write_text(tmp / release_files::config_json, config.dump(2) + "\n");

  // Which shards hold experts: those are rewritten, every other file is copied.
  const fs::path index_path = src / release_files::index_json;
  const bool indexed = fs::exists(index_path);
  ordered_json index;
  std::set<std::string> rewritten;
  if (indexed) {
    index = read_json_file<ordered_json>(index_path);
    for (const auto& [name, shard] : index["weight_map"].items()) {
      if (is_expert_weight(name)) rewritten.insert(shard.get<std::string>());
    }
  } else {
    rewritten.insert(std::string(release_files::single_shard));
  }

  std::uint64_t total = 0, done = 0;
  std::vector<std::pair<fs::path, std::uint64_t>> copies;  // with their sizes
  for (const auto& e : fs::directory_iterator(src)) {
    const std::string name = e.path().filename().string();
    if (rewritten.contains(name)) {
      total += fs::file_size(e.path());
    } else if (name != release_files::config_json && name != release_files::index_json) {
      copies.emplace_back(e.path(), tree_bytes(e.path()));
      total += copies.back().second;
    }
  }
  for (const auto& [p, bytes] : copies) {
    // Files are copied with their contents (a hub snapshot's symbolic links are followed).
    fs::copy(p, tmp / p.filename(), fs::copy_options::recursive);
    done += bytes;
    if (progress) progress(p.filename().string(), done, total);
  }

  std::set<std::string> experts;
  for (const auto& shard : rewritten) {
    for (auto& name : rewrite_shard(src / shard, tmp / shard, done, total, progress, how)) {
      experts.insert(std::move(name));
    }
  }
  if (!indexed) return;
  // The scales follow their weights in the weight map (int4: the four tensors replace the
  // weight); total_size counts the new bytes.
  ordered_json weight_map = ordered_json::object();
  std::int64_t delta = 0;
  for (const auto& [name, shard] : index["weight_map"].items()) {
    if (how.int4 && experts.contains(name)) {
      for (const auto& part : int4_names(name)) weight_map[part] = shard;
      continue;
    }
    weight_map[name] = shard;
    if (experts.contains(name)) weight_map[name + "_scale"] = shard;
  }
  for (const auto& shard : rewritten) {
    delta += static_cast<std::int64_t>(fs::file_size(tmp / shard)) - static_cast<std::int64_t>(fs::file_size(src / shard));
  }
  index["weight_map"] = std::move(weight_map);
  if (index.contains("metadata") && index["metadata"].is_object() && index["metadata"].contains("total_size") &&
      index["metadata"]["total_size"].is_number_integer()) {
    index["metadata"]["total_size"] = index["metadata"]["total_size"].get<std::int64_t>() + delta;
  }
  write_text(tmp / release_files::index_json, index.dump(2) + "\n");
}

// Checks, then writes through `dst` + ".partial", renamed once the copy loads as `how` says.
void write_quantized(const fs::path& src, const fs::path& dst, const quantize_progress& progress, const scheme& how) {
  const release source(src);  // refuses what is not a release, with the loader's message
  if (source.int8_experts()) throw load_error(src.string() + ": the release's experts are already int8");
  if (source.quant().kind != quantization::scheme::none) {
    throw load_error(src.string() + ": the release is quantized already (" + source.quant().method + ")");
  }
  std::error_code ec;
  if (fs::exists(dst, ec) && !(fs::is_directory(dst, ec) && fs::is_empty(dst, ec))) {
    throw std::runtime_error(dst.string() + ": exists and is not an empty directory");
  }
  // DST inside SRC would be copied into itself while SRC is listed.
  const fs::path src_abs = fs::weakly_canonical(src, ec), dst_abs = fs::weakly_canonical(dst, ec);
  if (const auto [s_end, d_it] = std::mismatch(src_abs.begin(), src_abs.end(), dst_abs.begin(), dst_abs.end());
      s_end == src_abs.end()) {
    throw std::runtime_error(dst.string() + ": is inside the source release " + src.string());
  }
  const fs::path tmp = dst.string() + ".partial";
  fs::remove_all(tmp);
  try {
    write_copy(src, tmp, progress, how);
    const release check(tmp);  // the copy loads, with every quantized tensor in place
    if (how.int4 ? !check.int4_experts() : !check.int8_experts()) {
      throw std::runtime_error(tmp.string() + ": the copy's experts are not " + (how.int4 ? "int4" : "int8"));
    }
    fs::remove(dst, ec);  // an empty directory
    fs::rename(tmp, dst);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace

nlohmann::json int4_quantization_config(std::int64_t group_size) {
  return {{"quant_method", "gptq"},  {"bits", 4},           {"group_size", group_size},
          {"sym", false},            {"desc_act", false},   {"static_groups", false},
          {"checkpoint_format", "gptq"}, {"true_sequential", true},
          {"quantizer", "baton quantize --int4 (round to nearest, per-group clipping search; experts only)"}};
}

void quantize_int8(const fs::path& src, const fs::path& dst, const quantize_progress& progress) {
  write_quantized(src, dst, progress, {});
}

void quantize_int4(const fs::path& src, const fs::path& dst, std::int64_t group_size, const quantize_progress& progress) {
  if (group_size != 32 && group_size != 64 && group_size != 128) {
    throw std::invalid_argument("group size " + std::to_string(group_size) + ": 32, 64 or 128");
  }
  write_quantized(src, dst, progress, {true, group_size});
}

}  // namespace baton::clef
