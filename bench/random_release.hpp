// A random "mid-size" Clef release for the benches: Qwen3-Omni's layout (thinker text part, vision
// and audio towers, joint head) at about 1/30 of the 30B thinker's size, written as safetensors
// shards with their index. Needs only engine/clef/model and nlohmann_json (clef_forward builds standalone).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/clef/model/model.hpp"
#include "engine/clef/model/json_file.hpp"
#include "engine/clef/model/release.hpp"

namespace baton::clef::bench {

inline text_config bench_text_config() {
  return text_config{.vocab_size = 32000, .hidden_size = 1024, .num_layers = 8, .num_heads = 16,
                     .num_kv_heads = 4, .head_dim = 64, .moe_intermediate_size = 512, .num_experts = 64,
                     .experts_per_token = 8, .mrope_section = {16, 8, 8}, .max_position_embeddings = 65536};
}

// Clef-Omni's thinker text part at its real widths (transformers' modeling_qwen3_omni_moe.py: hidden 2048,
// 32 query / 4 KV heads of 128, 128 experts of width 768, top 8, vocabulary 152,064 rows, MRoPE
// sections [24, 20, 20]) with `layers` of its 48 layers: a forward's per-layer cost is the real
// one, and a few layers fit in this machine's memory.
inline text_config real_text_config(std::int64_t layers) {
  return text_config{.vocab_size = 152064, .hidden_size = 2048, .num_layers = layers, .num_heads = 32,
                     .num_kv_heads = 4, .head_dim = 128, .moe_intermediate_size = 768, .num_experts = 128,
                     .experts_per_token = 8, .mrope_section = {24, 20, 20}, .max_position_embeddings = 65536};
}

// Clef-Omni's head is not published (Cloudflare's reference joint_schema_model.py): the shape Clef and Clef-Flash
// publish (width 1024, 2 routing and 4 decoder layers, 16 heads, feed-forward 4096), the largest
// plausible, on the thinker's 2048-wide states.
inline head_config real_head_config() {
  return head_config{.hidden_size = 2048, .width = 1024, .routing_layers = 2, .layers = 4,
                     .heads = 16, .feedforward = 4096};
}

inline head_config bench_head_config() {
  return head_config{.hidden_size = 1024, .width = 256, .routing_layers = 2, .layers = 2,
                     .heads = 4, .feedforward = 512};
}

// The real tower is 27 blocks of 1152 (16 heads, MLP 4304), deepstack [8, 16, 24]: a third of the
// depth and width here, the deepstack blocks at the same relative depths (each feeds one of the
// first text layers, so there can be at most 8).
inline vision_config bench_vision_config() {
  vision_config c;
  c.depth = 9;
  c.hidden_size = 384;
  c.num_heads = 6;
  c.intermediate_size = 1536;
  c.in_channels = 3;
  c.patch_size = 16;
  c.temporal_patch_size = 2;
  c.spatial_merge_size = 2;
  c.out_hidden_size = 1024;
  c.num_position_embeddings = 2304;
  c.deepstack_layers = {2, 5, 8};
  return c;
}

// The real tower is 32 layers of 1280 (20 heads, FFN 5120, downsample 480). The windows and the
// mel bins stay as they are: the preprocessor and the placeholder count depend on them.
inline audio_config bench_audio_config() {
  audio_config c;
  c.num_mel_bins = 128;
  c.d_model = 512;
  c.encoder_layers = 8;
  c.encoder_attention_heads = 8;
  c.encoder_ffn_dim = 2048;
  c.downsample_hidden_size = 160;
  c.output_dim = 1024;
  c.n_window = 50;
  c.n_window_infer = 800;
  c.max_source_positions = 1500;
  return c;
}

// Media token ids at the top of the vocabulary; random text ids must stay below them.
inline constexpr std::int32_t bench_first_media_token = 31990;

inline nlohmann::json bench_media_token_json() {
  return {{"image_token_id", 31990},        {"video_token_id", 31991},
          {"audio_token_id", 31992},        {"vision_start_token_id", 31993},
          {"vision_end_token_id", 31994},   {"audio_start_token_id", 31995},
          {"audio_end_token_id", 31996},    {"position_id_per_seconds", 13},
          {"seconds_per_chunk", 2}};
}

struct xorshift {
  std::uint64_t s;
  std::uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1Dull;
  }
};

inline std::uint64_t name_seed(const std::string& name) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a: each tensor gets its own stream
  for (const char ch : name) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
  return h | 1;
}

// Round to nearest even, as at::BFloat16 does (no NaNs come out of the generator).
inline std::uint16_t to_bf16(float f) {
  const auto u = std::bit_cast<std::uint32_t>(f);
  return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// How the weights are drawn.
//  - bench: norm weights 1 and biases 0 as a fresh model has them; the rest uniform with std 0.02,
//    except the input embeddings at std 1: with random weights, attention averages every token's
//    values into a shared component that soon swamps 0.02-sized embeddings, and the router then
//    sends nearly every token to the same few experts; a trained router spreads them.
//  - transformers: what issue 18 measured the reference on: matrices N(0, 1)/sqrt(fan_in),
//    embeddings 0.5·N(0, 1), norm weights 1 + 0.1·N(0, 1), biases 0. Its routing is less even.
enum class weight_init { bench, transformers };

inline const char* init_name(weight_init init) { return init == weight_init::bench ? "bench" : "transformers"; }

struct draw {
  float mean = 0;   // the value when sigma is 0
  float sigma = 0;  // 0: every element is `mean`
  bool normal = false;
};

inline draw draw_of(const std::string& name, const std::vector<std::int64_t>& shape, weight_init init) {
  const bool norm = name.find("norm") != std::string::npos || name.find(".ln_") != std::string::npos;
  const bool bias = name.ends_with("bias") || name.find('.') == std::string::npos;
  const bool embedding = name.ends_with("embed_tokens.weight");
  if (init == weight_init::bench) {
    if (norm && name.ends_with(".weight")) return {1, 0};
    if (bias) return {0, 0};
    return {0, embedding ? 1.0f : 0.02f};
  }
  if (norm && name.ends_with(".weight")) return {1, 0.1f, true};
  if (bias) return {0, 0};
  if (embedding || shape.size() < 2) return {0, 0.5f, true};
  std::int64_t fan_in = 1;
  for (std::size_t i = 1; i < shape.size(); ++i) fan_in *= shape[i];
  return {0, 1.0f / std::sqrt(static_cast<float>(fan_in)), true};
}

using tensor_list = std::vector<std::pair<std::string, std::vector<std::int64_t>>>;

inline std::int64_t numel(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (const auto d : shape) n *= d;
  return n;
}

// One safetensors file: 8-byte LE header length, JSON header padded to 8 bytes, raw data.
// Data is generated and written in 4 MiB pieces: nothing close to a tensor is held in memory.
inline void write_safetensors(const std::filesystem::path& path, const tensor_list& tensors, bool bf16,
                              weight_init init = weight_init::bench) {
  const std::size_t elem = bf16 ? 2 : 4;
  nlohmann::json header = {{"__metadata__", {{"format", "pt"}}}};
  std::uint64_t offset = 0;
  for (const auto& [name, shape] : tensors) {
    const std::uint64_t bytes = static_cast<std::uint64_t>(numel(shape)) * elem;
    header[name] = {{"dtype", bf16 ? "BF16" : "F32"}, {"shape", shape},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');
  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error(path.string() + ": cannot write");
  const std::uint64_t length = text.size();
  out.write(reinterpret_cast<const char*>(&length), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));

  constexpr std::int64_t piece = 1 << 20;
  std::vector<float> f32(piece);
  std::vector<std::uint16_t> b16(bf16 ? piece : 0);
  for (const auto& [name, shape] : tensors) {
    const draw d = draw_of(name, shape, init);
    const float half_range = d.sigma * std::sqrt(3.0f);  // uniform [-a, a) has std a / sqrt(3)
    xorshift rng{name_seed(name)};
    auto unit = [&rng] {  // uniform in (0, 1]
      return (static_cast<float>(rng.next() >> 40) + 1.0f) * (1.0f / 16777216.0f);
    };
    for (std::int64_t left = numel(shape); left > 0;) {
      const std::int64_t n = std::min(left, piece);
      for (std::int64_t i = 0; i < n; ++i) {
        if (d.sigma == 0) {
          f32[i] = d.mean;
        } else if (d.normal) {  // Box-Muller, one value per pair
          const float radius = std::sqrt(-2.0f * std::log(unit()));
          f32[i] = d.mean + d.sigma * radius * std::cos(6.2831853f * unit());
        } else {
          const auto bits = static_cast<std::uint32_t>(rng.next() >> 40);  // 24 bits
          f32[i] = d.mean + (static_cast<float>(bits) * (1.0f / 8388608.0f) - 1.0f) * half_range;
        }
      }
      if (bf16) {
        for (std::int64_t i = 0; i < n; ++i) b16[i] = to_bf16(f32[i]);
        out.write(reinterpret_cast<const char*>(b16.data()), n * 2);
      } else {
        out.write(reinterpret_cast<const char*>(f32.data()), n * 4);
      }
      left -= n;
    }
  }
  if (!out.flush()) throw std::runtime_error(path.string() + ": write failed");
}

inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out.flush()) throw std::runtime_error(path.string() + ": write failed");
}

// Writes the release into `<dir>.partial` and renames it over `dir`: a present `dir` is always
// complete. `c` is the thinker's text part (the real shape's, say); the head and both towers
// take its hidden size, and its vocabulary must hold the media token ids.
inline void write_release(const std::filesystem::path& dir, bool bf16,
                          const text_config& c = bench_text_config(),
                          head_config h = bench_head_config(), weight_init init = weight_init::bench) {
  namespace fs = std::filesystem;
  if (c.vocab_size <= bench_first_media_token + 6) {
    throw std::runtime_error("the vocabulary must hold the media token ids (31990-31996)");
  }
  vision_config v = bench_vision_config();
  audio_config a = bench_audio_config();
  h.hidden_size = v.out_hidden_size = a.output_dim = c.hidden_size;
  const fs::path tmp = dir.string() + ".partial";
  fs::remove_all(tmp);
  fs::create_directories(tmp);

  const nlohmann::json text = {
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"num_hidden_layers", c.num_layers},
      {"num_attention_heads", c.num_heads},
      {"num_key_value_heads", c.num_kv_heads},
      {"head_dim", c.head_dim},
      {"hidden_act", "silu"},
      {"moe_intermediate_size", c.moe_intermediate_size},
      {"num_experts", c.num_experts},
      {"num_experts_per_tok", c.experts_per_token},
      {"norm_topk_prob", true},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_theta", c.rope_theta},
      {"rope_scaling",
       {{"rope_type", "default"}, {"mrope_section", c.mrope_section}, {"interleaved", true}}},
      {"max_position_embeddings", c.max_position_embeddings},
      {"attention_bias", false},
      {"decoder_sparse_step", 1},
      {"mlp_only_layers", nlohmann::json::array()},
      {"use_qk_norm", true}};
  const nlohmann::json vision = {
      {"depth", v.depth},
      {"hidden_size", v.hidden_size},
      {"hidden_act", "gelu_pytorch_tanh"},
      {"intermediate_size", v.intermediate_size},
      {"num_heads", v.num_heads},
      {"in_channels", v.in_channels},
      {"patch_size", v.patch_size},
      {"spatial_merge_size", v.spatial_merge_size},
      {"temporal_patch_size", v.temporal_patch_size},
      {"out_hidden_size", v.out_hidden_size},
      {"num_position_embeddings", v.num_position_embeddings},
      {"deepstack_visual_indexes", v.deepstack_layers},
      {"apply_vit_abs_pos_embed", true}};
  const nlohmann::json audio = {
      {"num_mel_bins", a.num_mel_bins},
      {"encoder_layers", a.encoder_layers},
      {"encoder_attention_heads", a.encoder_attention_heads},
      {"encoder_ffn_dim", a.encoder_ffn_dim},
      {"d_model", a.d_model},
      {"activation_function", "gelu"},
      {"scale_embedding", false},
      {"max_source_positions", a.max_source_positions},
      {"n_window", a.n_window},
      {"n_window_infer", a.n_window_infer},
      {"output_dim", a.output_dim},
      {"downsample_hidden_size", a.downsample_hidden_size}};
  nlohmann::json thinker = {{"model_type", "qwen3_omni_moe_thinker"},
                            {"text_config", text},
                            {"vision_config", vision},
                            {"audio_config", audio}};
  thinker.update(bench_media_token_json());
  const nlohmann::json config = {
      {"architectures", {"Qwen3OmniMoeForConditionalGeneration"}},
      {"model_type", "qwen3_omni_moe"},
      {"thinker_config", thinker},
      {"torch_dtype", bf16 ? "bfloat16" : "float32"},
      {"note", "RANDOM BENCH MODEL written by baton's bench/ (not Clef-Omni weights)"},
      {"bench_init", init_name(init)}};
  write_text(tmp / "config.json", config.dump(2));
  write_text(tmp / "joint_head_config.json",
             nlohmann::json{{"hidden_size", h.hidden_size}, {"width", h.width},
                            {"routing_layers", h.routing_layers}, {"layers", h.layers},
                            {"heads", h.heads}, {"feedforward", h.feedforward}}
                 .dump(2));

  // Shards of about 1 GiB, split at tensor boundaries, in load order (the towers last).
  tensor_list all = expected_text_tensors(c);
  for (auto& t : expected_media_tensors(v, a)) all.push_back(std::move(t));
  const std::int64_t elem = bf16 ? 2 : 4;
  std::int64_t total = 0;
  for (const auto& [name, shape] : all) total += numel(shape) * elem;
  const std::int64_t shard_count = std::max<std::int64_t>(2, (total + (1ll << 30) - 1) >> 30);
  std::vector<tensor_list> shards(static_cast<std::size_t>(shard_count));
  std::int64_t written = 0;
  for (const auto& t : all) {
    const auto s = std::min<std::int64_t>(shard_count - 1, written * shard_count / total);
    shards[static_cast<std::size_t>(s)].push_back(t);
    written += numel(t.second) * elem;
  }
  nlohmann::json weight_map = nlohmann::json::object();
  for (std::size_t s = 0; s < shards.size(); ++s) {
    char file[64];
    std::snprintf(file, sizeof file, "model-%05zu-of-%05lld.safetensors", s + 1,
                  static_cast<long long>(shard_count));
    write_safetensors(tmp / file, shards[s], bf16, init);
    for (const auto& [name, shape] : shards[s]) weight_map[name] = file;
  }
  write_text(tmp / "model.safetensors.index.json",
             nlohmann::json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}
                 .dump(2));
  write_safetensors(tmp / "joint_head.safetensors", expected_head_tensors(h), bf16, init);
  fs::remove_all(dir);
  fs::rename(tmp, dir);
}

// A benchmark record: `tokens` random ids of the vocabulary, and three questions (choice of
// 4, noul, score of 8) with ~10-token options packed just before the last few tokens, where a
// real prompt puts the schema. The same `seed` gives the same record.
struct bench_record {
  std::vector<std::int32_t> ids;
  std::vector<question_layout> questions;
};

inline bench_record make_bench_record(std::int64_t tokens, std::int64_t vocab, std::uint64_t seed) {
  bench_record r;
  xorshift rng{seed};
  for (std::int64_t i = 0; i < tokens; ++i) {
    r.ids.push_back(static_cast<std::int32_t>(rng.next() % static_cast<std::uint64_t>(vocab)));
  }
  const std::uint8_t types[] = {1, 0, 2};
  const int option_counts[] = {4, 2, 8};
  auto span_of = [&](int questions) {
    std::int32_t length = 0;
    for (int q = 0; q < questions; ++q) {
      length += 12;
      for (int o = 0; o < option_counts[q]; ++o) length += 8 + (o * 3) % 5;
    }
    return length;
  };
  // Records too short for the three questions (64 and 128 tokens) ask the first one only.
  const int questions = tokens >= span_of(3) + 4 ? 3 : 1;
  const std::int32_t length = span_of(questions);
  std::int32_t at = static_cast<std::int32_t>(tokens) - 4 - length;
  if (at < 0) throw std::runtime_error("records need at least " + std::to_string(length + 4) + " tokens");
  for (int q = 0; q < questions; ++q) {
    question_layout layout;
    layout.type = types[q];
    layout.question = {at, at + 12};
    at += 12;
    for (int o = 0; o < option_counts[q]; ++o) {
      const std::int32_t n = 8 + (o * 3) % 5;
      layout.options.push_back({at, at + n});
      at += n;
    }
    r.questions.push_back(std::move(layout));
  }
  return r;
}

// Whether `dir` holds a complete release with both towers (one written before the towers, text
// only, is not: write_release replaces it) and the text part's shape of `c`.
inline bool release_is_current(const std::filesystem::path& dir, const text_config& c = bench_text_config(),
                               weight_init init = weight_init::bench) {
  const std::filesystem::path config = dir / "config.json";
  if (!std::filesystem::exists(config)) return false;
  const nlohmann::json root = read_json_file(config);  // once, for the three parts
  if (root.value("bench_init", std::string("bench")) != init_name(init)) return false;
  if (!parse_vision_config(root, config) || !parse_audio_config(root, config)) return false;
  const text_config on_disk = parse_text_config(root, config);
  return on_disk.hidden_size == c.hidden_size && on_disk.num_layers == c.num_layers &&
         on_disk.num_experts == c.num_experts && on_disk.vocab_size == c.vocab_size;
}

}  // namespace baton::clef::bench
