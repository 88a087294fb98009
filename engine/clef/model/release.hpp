// A Clef-Omni release directory: config.json (nested as Qwen3-Omni's), sharded safetensors with
// model.safetensors.index.json, joint_head_config.json and joint_head.safetensors. Everything is
// memory-mapped; nothing here copies or converts tensor data. Start-up code: throws load_error.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/clef/model/safetensors.hpp"

namespace baton::clef {

// thinker_config.text_config (transformers' modeling_qwen3_omni_moe.py).
struct text_config {
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t num_layers = 0;
  std::int64_t num_heads = 0;
  std::int64_t num_kv_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t moe_intermediate_size = 0;
  std::int64_t num_experts = 0;
  std::int64_t experts_per_token = 0;
  bool norm_topk_prob = true;
  double rms_norm_eps = 1e-6;
  double rope_theta = 1e6;
  std::array<std::int64_t, 3> mrope_section{};  // frequency slots on the T, H, W axes
  std::int64_t max_position_embeddings = 0;
};

// thinker_config.vision_config and .audio_config: the media encoders' shapes and settings
// (transformers' modeling_qwen3_omni_moe.py).
struct vision_config {
  std::int64_t depth = 0, hidden_size = 0, num_heads = 0, intermediate_size = 0, in_channels = 0,
               patch_size = 0, temporal_patch_size = 0, spatial_merge_size = 0, out_hidden_size = 0,
               num_position_embeddings = 0;
  std::vector<std::int64_t> deepstack_layers;  // blocks whose output feeds merger_list[i]
};
struct audio_config {
  std::int64_t num_mel_bins = 0, d_model = 0, encoder_layers = 0, encoder_attention_heads = 0,
               encoder_ffn_dim = 0, downsample_hidden_size = 0, output_dim = 0;
  // Absent keys take transformers' class defaults (the real release sets 50 / 800 / 1500).
  std::int64_t n_window = 100;          // the convolutions' chunk is 2 * n_window mel frames
  std::int64_t n_window_infer = 400;    // attention window in mel frames
  std::int64_t max_source_positions = 1500;
};

// thinker_config's media token ids and timing (transformers' modeling_qwen3_omni_moe.py): absent ids leave that
// kind of media unusable; the HF class defaults are stale, so none are assumed.
struct media_tokens {
  std::optional<std::int64_t> image, video, audio, vision_start, vision_end, audio_start, audio_end;
  double position_id_per_seconds = 13;  // temporal MRoPE units per second
  double seconds_per_chunk = 2;         // audio-in-video interleaving
};

// joint_head_config.json: the head's constructor arguments (Cloudflare's reference joint_schema_model.py).
struct head_config {
  std::int64_t hidden_size = 0;
  std::int64_t width = 0;
  std::int64_t routing_layers = 0;
  std::int64_t layers = 0;
  std::int64_t heads = 0;
  std::int64_t feedforward = 0;
};

// From config.json, or from its already parsed contents (`config_json` then names it in errors).
text_config parse_text_config(const std::filesystem::path& config_json);
text_config parse_text_config(const nlohmann::json& config, const std::filesystem::path& config_json);
// Absent when the config has no vision_config / audio_config (a text-only thinker).
std::optional<vision_config> parse_vision_config(const std::filesystem::path& config_json);
std::optional<vision_config> parse_vision_config(const nlohmann::json& config,
                                                 const std::filesystem::path& config_json);
std::optional<audio_config> parse_audio_config(const std::filesystem::path& config_json);
std::optional<audio_config> parse_audio_config(const nlohmann::json& config,
                                               const std::filesystem::path& config_json);
media_tokens parse_media_tokens(const nlohmann::json& config, const std::filesystem::path& config_json);
head_config parse_head_config(const std::filesystem::path& head_config_json);

// config.json's `quantization_config` as `baton quantize --int8` writes it: expert projections
// stored as I8 with one F32 scale per output channel (w = q * scale[row], q in [-127, 127]).
inline constexpr const char* int8_quant_method = "baton-int8";
nlohmann::json int8_quantization_config();

// How config.json's `quantization_config` says the thinker's linear weights are stored
// (docs/real-model.md, "Quantized releases"). Which linears are quantized is read from the
// tensors themselves, so mixed releases load: any of the text layers' projections, routers and
// experts may be quantized or float.
struct quantization {
  enum class scheme : std::uint8_t {
    none,
    int8,  // baton's: experts I8 with "<weight>_scale" F32 per output channel
    // GPTQ's packed int4 (AutoGPTQ, GPTQModel, AutoRound's GPTQ packing): for a linear P [out, in],
    // P.qweight I32 [in / 8, out] (input k in nibble k % 8, lowest first), P.scales F16/BF16
    // [in / group, out], P.qzeros I32 [in / group, out / 8] (absent: every zero is 8), P.g_idx I32
    // [in] (absent: k / group); w[n][k] = (q - zero) * scale, of k's group. v1 checkpoints store
    // each word of zeros less 0x11111111 (zero_offset 1).
    int4,
    // FP8 E4M3 weights P.weight [out, in] with P.weight_scale_inv F32 [⌈out / rows⌉, ⌈in / cols⌉]:
    // w = fp8 * scale_inv of the block.
    fp8,
  };
  scheme kind = scheme::none;
  std::string method;  // quant_method as written, for messages
  std::int64_t group_size = 0;  // int4
  int zero_offset = 0;          // int4: 1 where the stored zeros are zero - 1 (GPTQ's v1 format), by whole words
  std::int64_t block_rows = 0, block_cols = 0;  // fp8
};

// config.json's `quantization_config`: none, baton's int8, GPTQ's or AutoRound's 4-bit integers,
// or FP8 E4M3 with block scales. Throws load_error naming what it cannot compute (a method, bit
// width, layout or setting) and what is supported.
quantization parse_quantization(const nlohmann::json& config, const std::filesystem::path& config_json);

// How one linear weight of a release is stored (release::form).
enum class weight_form : std::uint8_t { plain, int8, int4, fp8 };

// Whether `name` is an expert projection weight ("thinker.model.layers.L.mlp.experts.E.
// {gate,up,down}_proj.weight"): what the int8 format quantizes.
bool is_expert_weight(std::string_view name);
// Whether `name` is a weight the 4-bit and FP8 formats may store quantized: a text layer's
// attention projections, router or experts ("thinker.model.layers.L.{self_attn.*_proj,mlp.gate,
// mlp.experts.E.*_proj}.weight").
bool is_quantizable_weight(std::string_view name);

// The thinker text tensors a configuration requires, with their shapes, in load order. With
// `int8_experts`, each expert weight is followed by its "<name>_scale" ([out_features]).
std::vector<std::pair<std::string, std::vector<std::int64_t>>> expected_text_tensors(
    const text_config& c, bool int8_experts = false);
// The vision and audio encoder tensors, for the media configs present.
std::vector<std::pair<std::string, std::vector<std::int64_t>>> expected_media_tensors(
    const std::optional<vision_config>& vision, const std::optional<audio_config>& audio);
// The joint head tensors (Cloudflare's reference joint_schema_model.py).
std::vector<std::pair<std::string, std::vector<std::int64_t>>> expected_head_tensors(
    const head_config& c);

// Throws load_error naming `dir` ("model directory DIR: does not exist", "…: is not a directory")
// unless it is a directory: checked before any file in it is looked for.
void check_model_dir(const std::filesystem::path& dir);

class release {
 public:
  // Opens `dir`. Thinker tensors (text, and vision / audio when the config has them) must match
  // the configuration exactly (names and shapes); `talker.*` and `code2wav.*` are skipped without
  // being read; anything else is an error. A release whose config declares int8 experts must have
  // every expert weight in I8 with its F32 scale. One declaring int4 or fp8 may store each text
  // layer's projections, router and experts in that form or float (is_quantizable_weight), each
  // quantized weight with all its tensors in their shapes; a release without one has float
  // tensors only.
  // With `head` false the joint head files are not needed (a bare thinker checkpoint).
  explicit release(const std::filesystem::path& dir, bool head = true);

  const std::filesystem::path& dir() const noexcept { return dir_; }
  const text_config& text() const noexcept { return text_; }
  const head_config& head() const noexcept { return head_; }
  const std::optional<vision_config>& vision() const noexcept { return vision_; }
  const std::optional<audio_config>& audio() const noexcept { return audio_; }
  const media_tokens& tokens() const noexcept { return tokens_; }
  // config.json as read (token ids and the media settings live there too).
  const nlohmann::json& config() const noexcept { return config_; }
  bool has_head() const noexcept { return has_head_; }
  // Expert weights are I8 with "<name>_scale" F32 tensors (config.json's quantization_config).
  bool int8_experts() const noexcept { return quant_.kind == quantization::scheme::int8; }
  const quantization& quant() const noexcept { return quant_; }
  // How the weight `name` ("….weight", as a float release names it) is stored: for int4 its
  // tensors are "<P>.qweight" and the rest (P: `name` without ".weight"), for fp8 `name` with
  // "<name>_scale_inv".
  weight_form form(const std::string& name) const;
  // Whether some layer's experts are int4, or FP8 (the CPU's kernel for them is then baton's own).
  bool int4_experts() const noexcept { return int4_experts_; }
  bool fp8_experts() const noexcept { return fp8_experts_; }
  // The dtype of the release's float weights (the embeddings'): what it was made from.
  dtype float_type() const;

  // A thinker tensor by its full name ("thinker.model.norm.weight"); throws when absent.
  const tensor_view& thinker_tensor(const std::string& name) const;
  // The same, or nullptr when the release has none of that name (a quantized weight's optional
  // tensors: qzeros, g_idx).
  const tensor_view* find_thinker_tensor(const std::string& name) const;
  const tensor_view& head_tensor(const std::string& name) const;
  std::size_t thinker_tensor_count() const noexcept { return thinker_.size(); }

  // Unmaps the weight files once every weight has been copied elsewhere (a model on a GPU), so
  // the host does not keep the whole release mapped: the configuration stays, and thinker_tensor
  // and head_tensor throw from then on.
  void unmap() noexcept;

 private:
  std::filesystem::path dir_;
  nlohmann::json config_;
  text_config text_;
  head_config head_;
  std::optional<vision_config> vision_;
  std::optional<audio_config> audio_;
  media_tokens tokens_;
  quantization quant_;
  std::unordered_map<std::string, weight_form> quantized_;  // weights not stored plain, by "….weight" name
  bool int4_experts_ = false, fp8_experts_ = false;
  bool has_head_ = false;
  bool unmapped_ = false;
  std::vector<std::unique_ptr<safetensors_file>> shards_;
  std::unique_ptr<safetensors_file> head_file_;
  std::unordered_map<std::string, const tensor_view*> thinker_;
};

}  // namespace baton::clef
