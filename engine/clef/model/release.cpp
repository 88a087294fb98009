#include "engine/clef/model/release.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <tuple>

#include "engine/clef/model/json_file.hpp"
#include "engine/clef/model/release_files.hpp"

namespace baton::clef {

namespace {

using shape_t = std::vector<std::int64_t>;

std::string shape_text(const shape_t& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

// Sizes far beyond any real model (2^24 = 16.7M) are refused, so that a corrupt config fails
// with a message instead of an allocation failure or an hour-long loop.
constexpr std::int64_t max_config_value = std::int64_t{1} << 24;

std::int64_t positive_int(const nlohmann::json& obj, const char* key, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer() || it->get<std::int64_t>() <= 0 ||
      it->get<std::int64_t>() > max_config_value) {
    throw load_error(where + ": `" + key + "` must be a positive integer up to " + std::to_string(max_config_value));
  }
  return it->get<std::int64_t>();
}

double positive_number(const nlohmann::json& obj, const char* key, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end() || !it->is_number() || !(it->get<double>() > 0)) {
    throw load_error(where + ": `" + key + "` must be a positive number");
  }
  return it->get<double>();
}

}  // namespace

text_config parse_text_config(const std::filesystem::path& config_json) {
  return parse_text_config(read_json_file(config_json), config_json);
}

text_config parse_text_config(const nlohmann::json& root, const std::filesystem::path& config_json) {
  // A full Qwen3-Omni config nests the text model twice; a thinker config once; accept the bare
  // text config too.
  const nlohmann::json* tc = &root;
  std::string where = config_json.string();
  if (auto th = root.find("thinker_config"); th != root.end() && th->is_object()) {
    tc = &*th;
    where += ": thinker_config";
  }
  if (auto t = tc->find("text_config"); t != tc->end()) {
    if (!t->is_object()) throw load_error(where + ".text_config: not an object");
    tc = &*t;
    where += ".text_config";
  }
  text_config c;
  c.vocab_size = positive_int(*tc, "vocab_size", where);
  c.hidden_size = positive_int(*tc, "hidden_size", where);
  c.num_layers = positive_int(*tc, "num_hidden_layers", where);
  c.num_heads = positive_int(*tc, "num_attention_heads", where);
  c.num_kv_heads = positive_int(*tc, "num_key_value_heads", where);
  c.head_dim = tc->contains("head_dim") ? positive_int(*tc, "head_dim", where)
                                        : c.hidden_size / c.num_heads;
  c.moe_intermediate_size = positive_int(*tc, "moe_intermediate_size", where);
  c.num_experts = positive_int(*tc, "num_experts", where);
  c.experts_per_token = positive_int(*tc, "num_experts_per_tok", where);
  if (auto it = tc->find("norm_topk_prob"); it != tc->end()) {
    if (!it->is_boolean()) throw load_error(where + ": `norm_topk_prob` must be a boolean");
    c.norm_topk_prob = it->get<bool>();
  }
  c.rms_norm_eps = positive_number(*tc, "rms_norm_eps", where);
  c.max_position_embeddings = positive_int(*tc, "max_position_embeddings", where);

  // transformers 4.57 writes rope_scaling + rope_theta; transformers 5 writes rope_parameters
  // (holding rope_theta too).
  const nlohmann::json* rope = nullptr;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (auto it = tc->find(key); it != tc->end() && it->is_object()) {
      rope = &*it;
      break;
    }
  }
  if (rope == nullptr) throw load_error(where + ": needs `rope_scaling` or `rope_parameters`");
  if (auto type = rope->find("rope_type"); type != rope->end() && *type != "default") {
    throw load_error(where + ": unsupported rope_type " + type->dump());
  }
  if (rope->contains("rope_theta")) {
    c.rope_theta = positive_number(*rope, "rope_theta", where + " rope");
  } else {
    c.rope_theta = positive_number(*tc, "rope_theta", where);
  }
  const auto sec = rope->find("mrope_section");
  if (sec == rope->end() || !sec->is_array() || sec->size() != 3) {
    throw load_error(where + ": rope `mrope_section` must be a list of 3 integers");
  }
  std::int64_t slots = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    if (!(*sec)[i].is_number_integer() || (*sec)[i].get<std::int64_t>() < 0) {
      throw load_error(where + ": rope `mrope_section` must be a list of 3 integers");
    }
    c.mrope_section[i] = (*sec)[i].get<std::int64_t>();
    slots += c.mrope_section[i];
  }
  if (c.head_dim % 2 != 0 || slots != c.head_dim / 2) {
    throw load_error(where + ": mrope_section sums to " + std::to_string(slots) +
                     " but head_dim / 2 is " + std::to_string(c.head_dim / 2));
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    throw load_error(where + ": num_attention_heads must be a multiple of num_key_value_heads");
  }
  // Each layer is ~3 x experts + 10 tensors to look up; a real thinker has 48 layers of 128 experts.
  if (c.num_layers > 1024) throw load_error(where + ": implausibly many layers (num_hidden_layers)");
  if (c.num_layers * c.num_experts > (1 << 20)) {
    throw load_error(where + ": num_hidden_layers x num_experts is implausibly large");
  }
  if (c.experts_per_token > c.num_experts) {
    throw load_error(where + ": num_experts_per_tok exceeds num_experts");
  }
  for (const char* key : {"shared_expert_intermediate_size"}) {
    if (auto it = tc->find(key); it != tc->end() && it->is_number() && it->get<double>() != 0) {
      throw load_error(where + ": shared experts are not supported");
    }
  }
  if (auto it = tc->find("mlp_only_layers"); it != tc->end() && it->is_array() && !it->empty()) {
    throw load_error(where + ": dense (mlp_only_layers) layers are not supported");
  }
  if (auto it = tc->find("decoder_sparse_step"); it != tc->end() && *it != 1) {
    throw load_error(where + ": decoder_sparse_step other than 1 is not supported");
  }
  if (auto it = tc->find("attention_bias"); it != tc->end() && *it == true) {
    throw load_error(where + ": attention_bias is not supported");
  }
  return c;
}

namespace {

// thinker_config.<key> (or <key> at the top of a thinker-only config), if present.
const nlohmann::json* media_section(const nlohmann::json& root, const char* key) {
  const nlohmann::json* tc = &root;
  if (auto th = root.find("thinker_config"); th != root.end() && th->is_object()) tc = &*th;
  const auto it = tc->find(key);
  return it != tc->end() && it->is_object() ? &*it : nullptr;
}

}  // namespace

std::optional<vision_config> parse_vision_config(const std::filesystem::path& config_json) {
  return parse_vision_config(read_json_file(config_json), config_json);
}

std::optional<vision_config> parse_vision_config(const nlohmann::json& root,
                                                 const std::filesystem::path& config_json) {
  const nlohmann::json* v = media_section(root, "vision_config");
  if (v == nullptr) return std::nullopt;
  const std::string where = config_json.string() + ": vision_config";
  vision_config c;
  c.depth = positive_int(*v, "depth", where);
  c.hidden_size = positive_int(*v, "hidden_size", where);
  c.num_heads = positive_int(*v, "num_heads", where);
  if (c.hidden_size % c.num_heads != 0 || (c.hidden_size / c.num_heads) % 4 != 0) {
    throw load_error(where + ": hidden_size / num_heads must be a multiple of 4 (2-D rotary)");
  }
  c.intermediate_size = positive_int(*v, "intermediate_size", where);
  c.in_channels = positive_int(*v, "in_channels", where);
  c.patch_size = positive_int(*v, "patch_size", where);
  c.temporal_patch_size = positive_int(*v, "temporal_patch_size", where);
  c.spatial_merge_size = positive_int(*v, "spatial_merge_size", where);
  c.out_hidden_size = positive_int(*v, "out_hidden_size", where);
  c.num_position_embeddings = positive_int(*v, "num_position_embeddings", where);
  const auto deepstack = v->find("deepstack_visual_indexes");
  if (deepstack != v->end()) {
    if (!deepstack->is_array() || deepstack->size() > 1024) {
      throw load_error(where + ": `deepstack_visual_indexes` must be a list of layer numbers");
    }
    for (const auto& l : *deepstack) {
      if (!l.is_number_integer() || l.get<std::int64_t>() < 0) {
        throw load_error(where + ": `deepstack_visual_indexes` must be a list of layer numbers");
      }
      c.deepstack_layers.push_back(l.get<std::int64_t>());
    }
  }
  if (c.depth > 1024) throw load_error(where + ": implausibly many layers");
  for (const auto l : c.deepstack_layers) {
    if (l >= c.depth) throw load_error(where + ": deepstack layer " + std::to_string(l) + " is past the last block");
  }
  return c;
}

std::optional<audio_config> parse_audio_config(const std::filesystem::path& config_json) {
  return parse_audio_config(read_json_file(config_json), config_json);
}

std::optional<audio_config> parse_audio_config(const nlohmann::json& root,
                                               const std::filesystem::path& config_json) {
  const nlohmann::json* a = media_section(root, "audio_config");
  if (a == nullptr) return std::nullopt;
  const std::string where = config_json.string() + ": audio_config";
  audio_config c;
  c.num_mel_bins = positive_int(*a, "num_mel_bins", where);
  c.d_model = positive_int(*a, "d_model", where);
  c.encoder_layers = positive_int(*a, "encoder_layers", where);
  c.encoder_attention_heads = positive_int(*a, "encoder_attention_heads", where);
  if (c.d_model % c.encoder_attention_heads != 0 || c.d_model % 2 != 0) {
    throw load_error(where + ": d_model must be even and a multiple of encoder_attention_heads");
  }
  c.encoder_ffn_dim = positive_int(*a, "encoder_ffn_dim", where);
  c.downsample_hidden_size = positive_int(*a, "downsample_hidden_size", where);
  c.output_dim = positive_int(*a, "output_dim", where);
  if (a->contains("n_window")) c.n_window = positive_int(*a, "n_window", where);
  if (a->contains("n_window_infer")) c.n_window_infer = positive_int(*a, "n_window_infer", where);
  if (a->contains("max_source_positions")) {
    c.max_source_positions = positive_int(*a, "max_source_positions", where);
  }
  if (c.n_window_infer % (2 * c.n_window) != 0) {
    throw load_error(where + ": n_window_infer must be a multiple of 2 * n_window");
  }
  if (c.encoder_layers > 1024) throw load_error(where + ": implausibly many layers");
  return c;
}

media_tokens parse_media_tokens(const nlohmann::json& root, const std::filesystem::path& config_json) {
  const nlohmann::json* tc = &root;
  std::string where = config_json.string();
  if (auto th = root.find("thinker_config"); th != root.end() && th->is_object()) {
    tc = &*th;
    where += ": thinker_config";
  }
  media_tokens t;
  auto id = [&](const char* key, std::optional<std::int64_t>& out) {
    const auto it = tc->find(key);
    if (it == tc->end()) return;
    if (!it->is_number_integer() || it->get<std::int64_t>() < 0) {
      throw load_error(where + ": `" + key + "` must be a token id");
    }
    out = it->get<std::int64_t>();
  };
  id("image_token_id", t.image);
  id("video_token_id", t.video);
  id("audio_token_id", t.audio);
  id("vision_start_token_id", t.vision_start);
  id("vision_end_token_id", t.vision_end);
  id("audio_start_token_id", t.audio_start);
  id("audio_end_token_id", t.audio_end);
  if (tc->contains("position_id_per_seconds")) {
    t.position_id_per_seconds = positive_number(*tc, "position_id_per_seconds", where);
  }
  if (tc->contains("seconds_per_chunk")) t.seconds_per_chunk = positive_number(*tc, "seconds_per_chunk", where);
  return t;
}

head_config parse_head_config(const std::filesystem::path& head_config_json) {
  const nlohmann::json j = read_json_file(head_config_json);
  const std::string where = head_config_json.string();
  static const std::set<std::string> known = {"hidden_size", "width",  "routing_layers", "layers",
                                              "heads",       "feedforward", "dropout"};
  for (const auto& [key, value] : j.items()) {
    if (!known.contains(key)) throw load_error(where + ": unknown key `" + key + "`");
  }
  head_config c;
  c.hidden_size = positive_int(j, "hidden_size", where);
  c.width = positive_int(j, "width", where);
  c.routing_layers = positive_int(j, "routing_layers", where);
  c.layers = positive_int(j, "layers", where);
  c.heads = positive_int(j, "heads", where);
  c.feedforward = positive_int(j, "feedforward", where);
  if (c.width % c.heads != 0) throw load_error(where + ": width must be a multiple of heads");
  if (c.routing_layers + c.layers > 1024) throw load_error(where + ": implausibly many layers");
  return c;
}

nlohmann::json int8_quantization_config() {
  return {{"quant_method", int8_quant_method},
          {"bits", 8},
          {"scheme", "symmetric-per-channel"},
          {"modules", "experts"}};
}

namespace {

// baton's int8: the exact config `baton quantize --int8` writes.
quantization parse_int8(const nlohmann::json& q, const std::string& where) {
  const nlohmann::json want = int8_quantization_config();
  for (const auto& [key, value] : want.items()) {
    const auto got = q.find(key);
    if (got == q.end() || *got != value) {
      throw load_error(where + ": `" + key + "` must be " + value.dump() + " for " + int8_quant_method);
    }
  }
  return {quantization::scheme::int8, int8_quant_method};
}

// The value of `key`, or `fallback` when absent or null.
template <class T>
T setting(const nlohmann::json& q, const char* key, T fallback, const std::string& where) {
  const auto it = q.find(key);
  if (it == q.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    throw load_error(where + ": `" + key + "` is " + it->dump() + ", of the wrong type");
  }
}

// GPTQ's and AutoRound's 4-bit integers: bits 4, a group size of 32, 64 or 128 (or -1: one group
// per row), symmetric or with zero points, in GPTQ's packing.
quantization parse_int4(const nlohmann::json& q, const std::string& method, const std::string& where) {
  quantization y{quantization::scheme::int4, method};
  const auto bits = setting<std::int64_t>(q, "bits", 0, where);
  if (bits != 4) {
    throw load_error(where + ": " + method + " with bits " + std::to_string(bits) +
                     " is not supported (4-bit integers only; baton-int8 for 8 bits)");
  }
  y.group_size = setting<std::int64_t>(q, "group_size", 128, where);
  if (y.group_size != -1 && y.group_size != 32 && y.group_size != 64 && y.group_size != 128) {
    throw load_error(where + ": group_size " + std::to_string(y.group_size) +
                     " is not supported (32, 64, 128, or -1 for one group per row)");
  }
  if (method == "gptq") {
    // AutoGPTQ's and GPTQModel's v1 checkpoints store each zero point less one; v2 ones as it is.
    const auto format = setting<std::string>(q, "checkpoint_format", "gptq", where);
    if (format == "gptq") {
      y.zero_offset = 1;
    } else if (format != "gptq_v2") {
      throw load_error(where + ": checkpoint_format \"" + format +
                       "\" is not supported (gptq, gptq_v2: GPTQ's packing; marlin and others are repacked for one kernel)");
    }
    // GPTQModel's per-module overrides: "-:" leaves modules float (read from the tensors); others
    // may change the width or the group.
    if (const auto dynamic = q.find("dynamic"); dynamic != q.end() && dynamic->is_object()) {
      for (const auto& [pattern, settings] : dynamic->items()) {
        if (pattern.starts_with("-:") || !settings.is_object()) continue;
        if (setting<std::int64_t>(settings, "bits", 4, where) != 4 ||
            setting<std::int64_t>(settings, "group_size", y.group_size, where) != y.group_size) {
          throw load_error(where + ": dynamic quantizes " + pattern + " with " + settings.dump() +
                           " (one width and group for the whole release is supported: 4 bits, group " +
                           std::to_string(y.group_size) + ")");
        }
      }
    }
    return y;
  }
  // AutoRound: integers only (its MX/NV float formats are other computations), and GPTQ's packing.
  const auto data_type = setting<std::string>(q, "data_type", "int", where);
  if (data_type != "int") {
    throw load_error(where + ": auto-round data_type \"" + data_type + "\" is not supported (int)");
  }
  const auto packing = setting<std::string>(q, "packing_format", "auto_round:auto_gptq", where);
  if (packing == "auto_round:auto_gptq" || packing == "auto_round:gptq") {
    y.zero_offset = 1;
  } else if (packing != "auto_round:gptqmodel" && packing != "auto_round") {
    throw load_error(where + ": auto-round packing_format \"" + packing +
                     "\" is not supported (auto_round, auto_round:auto_gptq, auto_round:gptqmodel: GPTQ's packing)");
  }
  // Layers AutoRound quantized otherwise than the whole: kept float (bits 16 and up) is read from
  // the tensors; other widths or groups are not computed.
  if (const auto extra = q.find("extra_config"); extra != q.end() && extra->is_object()) {
    for (const auto& [layer, settings] : extra->items()) {
      if (!settings.is_object()) continue;
      const auto layer_bits = setting<std::int64_t>(settings, "bits", 4, where);
      const auto layer_group = setting<std::int64_t>(settings, "group_size", y.group_size, where);
      if (layer_bits >= 16) continue;
      if (layer_bits != 4 || layer_group != y.group_size) {
        throw load_error(where + ": extra_config quantizes " + layer + " with bits " + std::to_string(layer_bits) +
                         " and group_size " + std::to_string(layer_group) +
                         " (one width and group for the whole release is supported: 4 bits, group " +
                         std::to_string(y.group_size) + ")");
      }
    }
  }
  return y;
}

// FP8 E4M3 with one scale per block of weights (DeepSeek-V3's and Qwen3's FP8 releases).
quantization parse_fp8(const nlohmann::json& q, const std::string& where) {
  quantization y{quantization::scheme::fp8, "fp8"};
  const auto fmt = setting<std::string>(q, "fmt", "e4m3", where);
  if (fmt != "e4m3" && fmt != "float8_e4m3fn") {
    throw load_error(where + ": fp8 fmt \"" + fmt + "\" is not supported (e4m3)");
  }
  const auto activations = setting<std::string>(q, "activation_scheme", "dynamic", where);
  if (activations != "dynamic") {
    throw load_error(where + ": fp8 activation_scheme \"" + activations +
                     "\" is not supported (dynamic: baton computes activations in bf16 or f32)");
  }
  const auto block = q.find("weight_block_size");
  if (block == q.end() || !block->is_array() || block->size() != 2 || !(*block)[0].is_number_integer() ||
      !(*block)[1].is_number_integer() || (*block)[0].get<std::int64_t>() <= 0 || (*block)[1].get<std::int64_t>() <= 0) {
    throw load_error(where + ": fp8 needs `weight_block_size` [rows, columns] (one scale per block; per-tensor "
                     "and per-channel scales are not supported)");
  }
  y.block_rows = (*block)[0].get<std::int64_t>();
  y.block_cols = (*block)[1].get<std::int64_t>();
  return y;
}

}  // namespace

quantization parse_quantization(const nlohmann::json& config, const std::filesystem::path& config_json) {
  const auto it = config.find("quantization_config");
  if (it == config.end() || it->is_null()) return {};
  const std::string where = config_json.string() + ": quantization_config";
  if (!it->is_object()) throw load_error(where + ": not an object");
  const auto method = it->find("quant_method");
  const std::string name = method != it->end() && method->is_string() ? method->get<std::string>() : "";
  if (name == int8_quant_method) return parse_int8(*it, where);
  if (name == "gptq" || name == "auto-round" || name == "intel/auto-round") return parse_int4(*it, name, where);
  if (name == "fp8") return parse_fp8(*it, where);
  throw load_error(where + ": unsupported quant_method " +
                   (method == it->end() ? std::string("(none)") : method->dump()) +
                   " (supported: gptq and auto-round 4-bit integers in GPTQ's packing, fp8 E4M3 with block "
                   "scales, and " + int8_quant_method + ", written by `baton quantize --int8`)");
}

bool is_expert_weight(std::string_view name) {
  if (!name.starts_with("thinker.model.layers.") || !name.ends_with("_proj.weight")) return false;
  if (name.find(".mlp.experts.") == std::string_view::npos) return false;
  const std::string_view proj = name.substr(name.rfind('.', name.size() - 8) + 1);
  return proj == "gate_proj.weight" || proj == "up_proj.weight" || proj == "down_proj.weight";
}

bool is_quantizable_weight(std::string_view name) {
  if (!name.starts_with("thinker.model.layers.") || !name.ends_with(".weight")) return false;
  if (is_expert_weight(name)) return true;
  const std::size_t dot = name.find('.', std::string_view("thinker.model.layers.").size());
  if (dot == std::string_view::npos) return false;
  const std::string_view rest = name.substr(dot + 1);
  return rest == "mlp.gate.weight" || rest == "self_attn.q_proj.weight" || rest == "self_attn.k_proj.weight" ||
         rest == "self_attn.v_proj.weight" || rest == "self_attn.o_proj.weight";
}

std::vector<std::pair<std::string, shape_t>> expected_text_tensors(const text_config& c, bool int8_experts) {
  const std::int64_t h = c.hidden_size, q = c.num_heads * c.head_dim,
                     kv = c.num_kv_heads * c.head_dim, i = c.moe_intermediate_size;
  std::vector<std::pair<std::string, shape_t>> out;
  out.reserve(static_cast<std::size_t>(3 + c.num_layers * (9 + (int8_experts ? 6 : 3) * c.num_experts)));
  out.emplace_back("thinker.model.embed_tokens.weight", shape_t{c.vocab_size, h});
  for (std::int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "thinker.model.layers." + std::to_string(l) + ".";
    out.emplace_back(p + "input_layernorm.weight", shape_t{h});
    out.emplace_back(p + "self_attn.q_proj.weight", shape_t{q, h});
    out.emplace_back(p + "self_attn.k_proj.weight", shape_t{kv, h});
    out.emplace_back(p + "self_attn.v_proj.weight", shape_t{kv, h});
    out.emplace_back(p + "self_attn.o_proj.weight", shape_t{h, q});
    out.emplace_back(p + "self_attn.q_norm.weight", shape_t{c.head_dim});
    out.emplace_back(p + "self_attn.k_norm.weight", shape_t{c.head_dim});
    out.emplace_back(p + "post_attention_layernorm.weight", shape_t{h});
    out.emplace_back(p + "mlp.gate.weight", shape_t{c.num_experts, h});
    for (std::int64_t e = 0; e < c.num_experts; ++e) {
      const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
      for (const auto& [proj, rows, cols] : {std::tuple{"gate_proj", i, h}, std::tuple{"up_proj", i, h},
                                             std::tuple{"down_proj", h, i}}) {
        out.emplace_back(x + proj + ".weight", shape_t{rows, cols});
        if (int8_experts) out.emplace_back(x + proj + ".weight_scale", shape_t{rows});
      }
    }
  }
  out.emplace_back("thinker.model.norm.weight", shape_t{h});
  out.emplace_back("thinker.lm_head.weight", shape_t{c.vocab_size, h});
  return out;
}

std::vector<std::pair<std::string, shape_t>> expected_media_tensors(
    const std::optional<vision_config>& vision, const std::optional<audio_config>& audio) {
  std::vector<std::pair<std::string, shape_t>> out;
  auto linear = [&](const std::string& n, std::int64_t o, std::int64_t in) {
    out.emplace_back(n + ".weight", shape_t{o, in});
    out.emplace_back(n + ".bias", shape_t{o});
  };
  auto norm = [&](const std::string& n, std::int64_t width) {
    out.emplace_back(n + ".weight", shape_t{width});
    out.emplace_back(n + ".bias", shape_t{width});
  };
  if (vision) {
    const auto& v = *vision;
    const std::int64_t h = v.hidden_size, merged = h * v.spatial_merge_size * v.spatial_merge_size;
    const std::string p = "thinker.visual.";
    out.emplace_back(p + "patch_embed.proj.weight",
                     shape_t{h, v.in_channels, v.temporal_patch_size, v.patch_size, v.patch_size});
    out.emplace_back(p + "patch_embed.proj.bias", shape_t{h});
    out.emplace_back(p + "pos_embed.weight", shape_t{v.num_position_embeddings, h});
    for (std::int64_t b = 0; b < v.depth; ++b) {
      const std::string x = p + "blocks." + std::to_string(b) + ".";
      norm(x + "norm1", h);
      norm(x + "norm2", h);
      linear(x + "attn.qkv", 3 * h, h);
      linear(x + "attn.proj", h, h);
      linear(x + "mlp.linear_fc1", v.intermediate_size, h);
      linear(x + "mlp.linear_fc2", h, v.intermediate_size);
    }
    norm(p + "merger.ln_q", h);  // before the 2x2 merge
    linear(p + "merger.mlp.0", merged, merged);
    linear(p + "merger.mlp.2", v.out_hidden_size, merged);
    for (std::size_t m = 0; m < v.deepstack_layers.size(); ++m) {
      const std::string x = p + "merger_list." + std::to_string(m) + ".";
      norm(x + "ln_q", merged);  // after the merge
      linear(x + "mlp.0", merged, merged);
      linear(x + "mlp.2", v.out_hidden_size, merged);
    }
  }
  if (audio) {
    const auto& a = *audio;
    const std::int64_t d = a.d_model, dh = a.downsample_hidden_size;
    const std::string p = "thinker.audio_tower.";
    out.emplace_back(p + "conv2d1.weight", shape_t{dh, 1, 3, 3});
    out.emplace_back(p + "conv2d1.bias", shape_t{dh});
    for (const char* conv : {"conv2d2", "conv2d3"}) {
      out.emplace_back(p + conv + ".weight", shape_t{dh, dh, 3, 3});
      out.emplace_back(p + conv + ".bias", shape_t{dh});
    }
    // Three stride-2 convolutions (kernel 3, padding 1) halve the mel bins, rounding up.
    std::int64_t bins = a.num_mel_bins;
    for (int i = 0; i < 3; ++i) bins = (bins - 1) / 2 + 1;
    out.emplace_back(p + "conv_out.weight", shape_t{d, dh * bins});
    for (std::int64_t l = 0; l < a.encoder_layers; ++l) {
      const std::string x = p + "layers." + std::to_string(l) + ".";
      for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
        linear(x + "self_attn." + proj, d, d);
      }
      norm(x + "self_attn_layer_norm", d);
      linear(x + "fc1", a.encoder_ffn_dim, d);
      linear(x + "fc2", d, a.encoder_ffn_dim);
      norm(x + "final_layer_norm", d);
    }
    norm(p + "ln_post", d);
    linear(p + "proj1", d, d);
    linear(p + "proj2", a.output_dim, d);
  }
  return out;
}

std::vector<std::pair<std::string, shape_t>> expected_head_tensors(const head_config& c) {
  const std::int64_t h = c.hidden_size, w = c.width, f = c.feedforward;
  std::vector<std::pair<std::string, shape_t>> out;
  auto norm = [&](const std::string& n) {
    out.emplace_back(n + ".weight", shape_t{w});
    out.emplace_back(n + ".bias", shape_t{w});
  };
  auto mha = [&](const std::string& n) {
    out.emplace_back(n + ".in_proj_weight", shape_t{3 * w, w});
    out.emplace_back(n + ".in_proj_bias", shape_t{3 * w});
    out.emplace_back(n + ".out_proj.weight", shape_t{w, w});
    out.emplace_back(n + ".out_proj.bias", shape_t{w});
  };
  auto linear = [&](const std::string& n, std::int64_t o, std::int64_t in) {
    out.emplace_back(n + ".weight", shape_t{o, in});
    out.emplace_back(n + ".bias", shape_t{o});
  };
  out.emplace_back("hidden_norm.weight", shape_t{h});
  out.emplace_back("hidden_norm.bias", shape_t{h});
  for (const char* p : {"memory_projection", "question_projection", "option_question_projection",
                        "global_projection", "option_context_projection",
                        "option_lexical_projection"}) {
    out.emplace_back(std::string(p) + ".weight", shape_t{w, h});
  }
  out.emplace_back("type_embedding.weight", shape_t{3, w});
  for (std::int64_t r = 0; r < c.routing_layers; ++r) {
    const std::string p = "evidence_layers." + std::to_string(r) + ".";
    norm(p + "query_norm");
    norm(p + "memory_norm");
    mha(p + "attention");
    norm(p + "feedforward_norm");
    linear(p + "feedforward.0", f, w);
    linear(p + "feedforward.3", w, f);
  }
  norm("option_summary_norm");
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    mha(p + "self_attn");
    mha(p + "multihead_attn");
    linear(p + "linear1", f, w);
    linear(p + "linear2", w, f);
    norm(p + "norm1");
    norm(p + "norm2");
    norm(p + "norm3");
  }
  norm("field_norm");
  norm("option_norm");
  linear("residual_scorer.0", w, 4 * w);
  linear("residual_scorer.3", 1, w);
  for (const char* s : {"prior_logit_scale", "joint_logit_scale", "residual_gate"}) {
    out.emplace_back(s, shape_t{});
  }
  return out;
}

namespace {

bool is_float(dtype t) { return t == dtype::f32 || t == dtype::f16 || t == dtype::bf16; }

// `int8_experts`: the release's config declares int8 experts, whose weights must then be I8 and
// their scales F32 (a half-quantized release is refused here). `fp8`: the weight may also be
// F8_E4M3 (an FP8 release's quantizable weight).
void check_tensor(const tensor_view& v, const shape_t& shape, const std::string& name,
                  const std::filesystem::path& file, bool int8_experts = false, bool fp8 = false) {
  if (v.shape != shape) {
    throw load_error(file.string() + ": tensor " + name + " has shape " + shape_text(v.shape) +
                     ", expected " + shape_text(shape));
  }
  const auto wrong = [&](const std::string& expected) {
    return load_error(file.string() + ": tensor " + name + " has dtype " + dtype_name(v.type) + "; " +
                      expected + " expected");
  };
  if (int8_experts && is_expert_weight(name)) {
    if (v.type != dtype::i8) throw wrong("I8 (config.json declares int8 experts)");
  } else if (int8_experts && name.ends_with(".weight_scale")) {
    if (v.type != dtype::f32) throw wrong("F32");
  } else if (!is_float(v.type) && !(fp8 && v.type == dtype::f8_e4m3)) {
    throw wrong(fp8 ? "F32, F16, BF16 or F8_E4M3" : "F32, F16 or BF16");
  }
}

}  // namespace

void check_model_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  const auto status = std::filesystem::status(dir, ec);
  const std::string what = "model directory " + dir.string() + ": ";
  if (status.type() == std::filesystem::file_type::not_found) throw load_error(what + "does not exist");
  if (ec) throw load_error(what + ec.message());  // e.g. a parent without search permission
  if (!std::filesystem::is_directory(status)) throw load_error(what + "is not a directory");
}

release::release(const std::filesystem::path& dir, bool head) : dir_(dir) {
  check_model_dir(dir);
  const auto config_path = dir / release_files::config_json;
  config_ = read_json_file(config_path);
  const nlohmann::json& config = config_;
  text_ = parse_text_config(config, config_path);
  quant_ = parse_quantization(config, config_path);

  // Resolve every tensor to its shard through the index; a single-file checkpoint has none.
  std::vector<std::pair<std::string, std::string>> placement;  // tensor -> shard file name
  const auto index_path = dir / release_files::index_json;
  if (std::filesystem::exists(index_path)) {
    const nlohmann::json index = read_json_file(index_path);
    const auto map = index.find("weight_map");
    if (map == index.end() || !map->is_object()) {
      throw load_error(index_path.string() + ": needs a `weight_map` object");
    }
    for (const auto& [name, file] : map->items()) {
      if (!file.is_string()) throw load_error(index_path.string() + ": " + name + " maps to a non-string");
      const std::string shard = file.get<std::string>();
      if (shard.empty() || shard.find('/') != std::string::npos || shard.starts_with(".")) {
        throw load_error(index_path.string() + ": " + name + " maps to an invalid file name " + shard);
      }
      placement.emplace_back(name, shard);
    }
  } else if (std::filesystem::exists(dir / release_files::single_shard)) {
    shards_.push_back(std::make_unique<safetensors_file>(dir / release_files::single_shard));
    for (const auto& [name, view] : shards_.back()->tensors()) {
      placement.emplace_back(name, std::string(release_files::single_shard));
    }
  } else {
    throw load_error(dir.string() + ": neither model.safetensors.index.json nor model.safetensors");
  }

  vision_ = parse_vision_config(config, config_path);
  audio_ = parse_audio_config(config, config_path);
  tokens_ = parse_media_tokens(config, config_path);
  auto expected = expected_text_tensors(text_, int8_experts());
  for (auto& t : expected_media_tensors(vision_, audio_)) {
    expected.push_back(std::move(t));
  }
  std::unordered_map<std::string, const shape_t*> wanted;
  wanted.reserve(expected.size());
  for (const auto& [name, shape] : expected) wanted.emplace(name, &shape);

  std::unordered_map<std::string, safetensors_file*> opened;
  for (const auto& s : shards_) opened.emplace(s->path().filename().string(), s.get());
  auto open_view = [&](const std::string& name, const std::string& shard) -> const tensor_view& {
    auto& file = opened[shard];
    if (file == nullptr) {
      if (!std::filesystem::exists(dir / shard)) {
        throw load_error(dir.string() + ": tensor " + name + " is in " + shard + ", which is missing");
      }
      shards_.push_back(std::make_unique<safetensors_file>(dir / shard));
      file = shards_.back().get();
    }
    const tensor_view* view = file->find(name);
    if (view == nullptr) {
      throw load_error(file->path().string() + ": tensor " + name + " is listed in the index but not in the shard");
    }
    return *view;
  };
  const bool int4 = quant_.kind == quantization::scheme::int4, fp8 = quant_.kind == quantization::scheme::fp8;
  // The quantized formats' other tensors, by name, until their weight claims them.
  std::unordered_map<std::string, std::pair<const tensor_view*, std::string>> parts;  // -> view, shard
  thinker_.reserve(placement.size());
  for (const auto& [name, shard] : placement) {
    if (release_files::skipped_tensor(name)) continue;  // never opened, never read
    const auto want = wanted.find(name);
    if (want == wanted.end()) {
      const std::size_t dot = name.rfind('.');
      const std::string suffix = dot == std::string::npos ? "" : name.substr(dot + 1);
      const bool int4_part = suffix == "qweight" || suffix == "qzeros" || suffix == "scales" || suffix == "g_idx";
      if ((int4 && int4_part) || (fp8 && suffix == "weight_scale_inv")) {
        parts.emplace(name, std::make_pair(&open_view(name, shard), shard));
        continue;
      }
      std::string why;
      if (int4_part || suffix == "weight_scale_inv") {
        why = quant_.kind == quantization::scheme::none
                  ? "; config.json has no quantization_config"
                  : "; config.json's quantization_config is " + quant_.method + "'s";
      }
      throw load_error(dir.string() + ": unexpected tensor " + name + " (in " + shard + ")" + why);
    }
    const tensor_view& view = open_view(name, shard);
    check_tensor(view, *want->second, name, dir / shard, int8_experts(), fp8 && is_quantizable_weight(name));
    if (view.type == dtype::f8_e4m3) {
      quantized_.emplace(name, weight_form::fp8);
      if (is_expert_weight(name)) fp8_experts_ = true;
    }
    thinker_.emplace(name, &view);
  }
  // Each weight stored quantized claims its parts, whose shapes follow from its own [out, in].
  auto claim = [&](const std::string& name, const shape_t& shape, dtype type, const std::string& weight) {
    const auto it = parts.find(name);
    if (it == parts.end()) throw load_error(dir.string() + ": missing tensor " + name + " (for " + weight + ")");
    const tensor_view& v = *it->second.first;
    if (v.shape != shape || v.type != type) {
      throw load_error((dir / it->second.second).string() + ": tensor " + name + " is " + dtype_name(v.type) + " " +
                       shape_text(v.shape) + "; " + dtype_name(type) + " " + shape_text(shape) + " expected (" +
                       quant_.method + ")");
    }
    thinker_.emplace(name, &v);
    parts.erase(it);
  };
  for (const auto& [name, shape] : expected) {
    const std::string base = name.ends_with(".weight") ? name.substr(0, name.size() - 7) : name;
    if (quantized_.contains(name)) {  // fp8
      const std::int64_t rows = (shape[0] + quant_.block_rows - 1) / quant_.block_rows,
                         cols = (shape[1] + quant_.block_cols - 1) / quant_.block_cols;
      claim(name + "_scale_inv", {rows, cols}, dtype::f32, name);
      continue;
    }
    if (thinker_.contains(name)) continue;
    if (!int4 || !is_quantizable_weight(name) || !parts.contains(base + ".qweight")) {
      throw load_error(dir.string() + ": missing tensor " + name);
    }
    const std::int64_t out = shape[0], in = shape[1], group = quant_.group_size > 0 ? quant_.group_size : in;
    if (in % group != 0 || in % 8 != 0 || out % 8 != 0) {
      throw load_error(dir.string() + ": " + base + " [" + std::to_string(out) + ", " + std::to_string(in) +
                       "] cannot be stored in int4 with group_size " + std::to_string(quant_.group_size) +
                       " (inputs a multiple of the group and of 8, outputs of 8)");
    }
    claim(base + ".qweight", {in / 8, out}, dtype::i32, name);
    const auto scales = parts.find(base + ".scales");
    const dtype scale_type = scales != parts.end() && scales->second.first->type == dtype::bf16 ? dtype::bf16 : dtype::f16;
    claim(base + ".scales", {in / group, out}, scale_type, name);
    if (parts.contains(base + ".qzeros")) claim(base + ".qzeros", {in / group, out / 8}, dtype::i32, name);
    if (parts.contains(base + ".g_idx")) claim(base + ".g_idx", {in}, dtype::i32, name);
    quantized_.emplace(name, weight_form::int4);
    if (is_expert_weight(name)) int4_experts_ = true;
  }
  if (!parts.empty()) {
    const auto& [name, where] = *parts.begin();
    throw load_error(dir.string() + ": unexpected tensor " + name + " (in " + where.second +
                     "): its weight is not stored in " + quant_.method + "'s form");
  }

  if (!head) return;
  head_ = parse_head_config(dir / release_files::head_config_json);
  if (head_.hidden_size != text_.hidden_size) {
    throw load_error((dir / release_files::head_config_json).string() + ": hidden_size " +
                     std::to_string(head_.hidden_size) + " differs from the thinker's " +
                     std::to_string(text_.hidden_size));
  }
  head_file_ = std::make_unique<safetensors_file>(dir / release_files::head_weights);
  has_head_ = true;
  const auto head_expected = expected_head_tensors(head_);
  std::set<std::string, std::less<>> head_names;
  for (const auto& [name, shape] : head_expected) {
    const tensor_view* v = head_file_->find(name);
    if (v == nullptr) throw load_error(head_file_->path().string() + ": missing tensor " + name);
    check_tensor(*v, shape, name, head_file_->path());
    head_names.insert(name);
  }
  for (const auto& [name, view] : head_file_->tensors()) {
    if (!head_names.contains(name)) {
      throw load_error(head_file_->path().string() + ": unexpected tensor " + name);
    }
  }
}

weight_form release::form(const std::string& name) const {
  if (const auto it = quantized_.find(name); it != quantized_.end()) return it->second;
  return int8_experts() && is_expert_weight(name) ? weight_form::int8 : weight_form::plain;
}

dtype release::float_type() const { return thinker_tensor("thinker.model.embed_tokens.weight").type; }

void release::unmap() noexcept {
  thinker_.clear();
  shards_.clear();
  head_file_.reset();
  unmapped_ = true;
}

const tensor_view& release::thinker_tensor(const std::string& name) const {
  if (unmapped_) throw load_error(dir_.string() + ": the weight files were unmapped after the copy to the device");
  const auto it = thinker_.find(name);
  if (it == thinker_.end()) throw load_error(dir_.string() + ": missing tensor " + name);
  return *it->second;
}

const tensor_view* release::find_thinker_tensor(const std::string& name) const {
  if (unmapped_) throw load_error(dir_.string() + ": the weight files were unmapped after the copy to the device");
  const auto it = thinker_.find(name);
  return it == thinker_.end() ? nullptr : it->second;
}

const tensor_view& release::head_tensor(const std::string& name) const {
  if (unmapped_) throw load_error(dir_.string() + ": the weight files were unmapped after the copy to the device");
  const tensor_view* v = head_file_ ? head_file_->find(name) : nullptr;
  if (v == nullptr) throw load_error(dir_.string() + ": missing head tensor " + name);
  return *v;
}

}  // namespace baton::clef
