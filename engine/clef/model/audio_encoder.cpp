#include "engine/clef/model/audio_encoder.hpp"

#include "engine/clef/model/cpu_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace baton::clef::detail {

namespace {

constexpr double layer_norm_eps = 1e-5;  // nn.LayerNorm's default, as the reference builds them

// Output length of a 3x3, stride-2, padding-1 convolution.
constexpr std::int64_t halve(std::int64_t n) { return (n - 1) / 2 + 1; }
constexpr std::int64_t halve3(std::int64_t n) { return halve(halve(halve(n))); }

// GELU in place: the convolutions' outputs are the largest activations.
at::Tensor conv_gelu(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  at::Tensor y = at::conv2d(x, w, b, /*stride=*/{2, 2}, /*padding=*/{1, 1});
  return at::gelu_(y);
}

}  // namespace

audio_encoder::audio_encoder(const release& files, at::ScalarType type, at::Device device,
                             std::int64_t budget_bytes)
    : type_(type), device_(device), budget_bytes_(budget_bytes) {
  if (!files.audio()) {
    throw load_error(files.dir().string() + ": config.json has no audio_config (no audio tower)");
  }
  config_ = *files.audio();
  const std::string where = files.dir().string() + ": audio_config";
  if (config_.num_mel_bins != mel_bins) {
    throw load_error(where + ": num_mel_bins is " + std::to_string(config_.num_mel_bins) +
                     ", the feature extractor makes " + std::to_string(mel_bins));
  }
  chunk_frames_ = 2 * config_.n_window;
  if (chunk_frames_ != 100) {
    throw load_error(where + ": n_window must be 50 (100-frame chunks, which the audio placeholder "
                             "count assumes), got " + std::to_string(config_.n_window));
  }
  chunk_tokens_ = halve3(chunk_frames_);
  window_tokens_ = chunk_tokens_ * (config_.n_window_infer / chunk_frames_);
  if (config_.max_source_positions < chunk_tokens_) {
    throw load_error(where + ": max_source_positions must cover the " +
                     std::to_string(chunk_tokens_) + " tokens of a chunk");
  }

  auto w = [&](const std::string& name) {
    return weight_tensor(files.thinker_tensor("thinker.audio_tower." + name), type_, device_);
  };
  conv1_w_ = w("conv2d1.weight");
  conv1_b_ = w("conv2d1.bias");
  conv2_w_ = w("conv2d2.weight");
  conv2_b_ = w("conv2d2.bias");
  conv3_w_ = w("conv2d3.weight");
  conv3_b_ = w("conv2d3.bias");
  conv_out_w_ = w("conv_out.weight");
  layers_.resize(static_cast<std::size_t>(config_.encoder_layers));
  for (std::int64_t l = 0; l < config_.encoder_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    layer& y = layers_[static_cast<std::size_t>(l)];
    y.attn_norm_w = w(p + "self_attn_layer_norm.weight");
    y.attn_norm_b = w(p + "self_attn_layer_norm.bias");
    y.q_w = w(p + "self_attn.q_proj.weight");
    y.q_b = w(p + "self_attn.q_proj.bias");
    y.k_w = w(p + "self_attn.k_proj.weight");
    y.k_b = w(p + "self_attn.k_proj.bias");
    y.v_w = w(p + "self_attn.v_proj.weight");
    y.v_b = w(p + "self_attn.v_proj.bias");
    y.out_w = w(p + "self_attn.out_proj.weight");
    y.out_b = w(p + "self_attn.out_proj.bias");
    y.mlp_norm_w = w(p + "final_layer_norm.weight");
    y.mlp_norm_b = w(p + "final_layer_norm.bias");
    y.fc1_w = w(p + "fc1.weight");
    y.fc1_b = w(p + "fc1.bias");
    y.fc2_w = w(p + "fc2.weight");
    y.fc2_b = w(p + "fc2.bias");
  }
  post_norm_w_ = w("ln_post.weight");
  post_norm_b_ = w("ln_post.bias");
  proj1_w_ = w("proj1.weight");
  proj1_b_ = w("proj1.bias");
  proj2_w_ = w("proj2.weight");
  proj2_b_ = w("proj2.bias");

  // SinusoidsPositionEmbedding exactly as the reference builds it (fp32, int64 positions times
  // fp32 inverse timescales); it is cast to the activation dtype before the add, as there.
  const std::int64_t half = config_.d_model / 2;
  const double increment = std::log(10000.0) / static_cast<double>(half - 1);
  const at::Tensor inv_timescales = at::exp(-increment * at::arange(half, at::kFloat));
  const at::Tensor scaled_time = at::arange(config_.max_source_positions, at::kLong).unsqueeze(1) *
                                 inv_timescales.unsqueeze(0);
  const at::Tensor table = at::cat({at::sin(scaled_time), at::cos(scaled_time)}, 1);
  // Positions restart in every chunk, so only a chunk's worth of rows is ever added.
  positions_ = table.narrow(0, 0, chunk_tokens_).to(device_, type_);
}

at::Tensor audio_encoder::encode(const log_mel& features, std::int64_t batch_frames) const {
  const std::int64_t total = features.frames;
  if (total <= 0) throw std::runtime_error("audio features have no frames");
  if (features.values.size() != static_cast<std::size_t>(mel_bins * total)) {
    throw std::runtime_error("audio features have " + std::to_string(features.values.size()) +
                             " values for " + std::to_string(total) + " frames, not " +
                             std::to_string(mel_bins) + " mel bins per frame");
  }
  if (features.frame_mask.size() != static_cast<std::size_t>(total)) {
    throw std::runtime_error("audio frame_mask has " + std::to_string(features.frame_mask.size()) +
                             " entries for " + std::to_string(total) + " frames");
  }
  // The mask marks the audio's frames first, then the batch padding.
  const auto first_pad = std::find(features.frame_mask.begin(), features.frame_mask.end(), 0);
  const auto frames = static_cast<std::int64_t>(first_pad - features.frame_mask.begin());
  if (std::any_of(first_pad, features.frame_mask.end(), [](std::int32_t m) { return m != 0; })) {
    throw std::runtime_error("audio frame_mask must mark a prefix of the frames");
  }
  if (frames == 0) throw std::runtime_error("audio frame_mask marks no frames");

  // Read only: from_blob needs a non-const pointer.
  const at::Tensor all = at::from_blob(const_cast<float*>(features.values.data()),
                                       {mel_bins, total}, at::TensorOptions().dtype(at::kFloat));
  // The batch's longest chunk: a full one as soon as any stream has one (this one alone: its own).
  const std::int64_t width = std::min(chunk_frames_, std::max(frames, batch_frames));
  at::Tensor x = embed(all.narrow(1, 0, frames), frames, width);

  for (const layer& w : layers_) {
    const at::Tensor a = at::layer_norm(x, {config_.d_model}, w.attn_norm_w, w.attn_norm_b,
                                        layer_norm_eps);
    x = x + attention(w, a);
    const at::Tensor b = at::layer_norm(x, {config_.d_model}, w.mlp_norm_w, w.mlp_norm_b,
                                        layer_norm_eps);
    at::Tensor h = dense(b, w.fc1_w, w.fc1_b);
    x = x + dense(at::gelu_(h), w.fc2_w, w.fc2_b);
  }
  x = at::layer_norm(x, {config_.d_model}, post_norm_w_, post_norm_b_, layer_norm_eps);
  at::Tensor h = dense(x, proj1_w_, proj1_b_);
  x = dense(at::gelu_(h), proj2_w_, proj2_b_);
  if (x.size(0) != audio_token_count(frames)) {
    throw std::logic_error("audio encoder made " + std::to_string(x.size(0)) + " tokens for " +
                           std::to_string(frames) + " frames, the placeholder count is " +
                           std::to_string(audio_token_count(frames)));
  }
  return x;
}

at::Tensor audio_encoder::embed(const at::Tensor& mel, std::int64_t frames, std::int64_t width) const {
  // Every chunk is zero-padded to `width`, as the reference pads its batch to its longest chunk:
  // the padding is not only convolution padding (GELU of the bias is not zero), so the last
  // chunk's border tokens depend on it.
  const std::int64_t full = frames / chunk_frames_, rest = frames % chunk_frames_;
  const std::int64_t chunks = full + (rest > 0 ? 1 : 0);
  const at::Tensor padded = at::constant_pad_nd(mel, {0, chunks * width - frames})
                                .reshape({mel_bins, chunks, width})
                                .permute({1, 0, 2})
                                .unsqueeze(1);  // [chunks, 1, mel_bins, width]
  const std::int64_t steps = halve3(width);
  const std::int64_t conv1_bytes = config_.downsample_hidden_size * halve(mel_bins) * halve(width) *
                                   static_cast<std::int64_t>(c10::elementSize(type_));
  const std::int64_t batch = std::max<std::int64_t>(1, budget_bytes_ / conv1_bytes);

  std::vector<at::Tensor> parts;
  for (std::int64_t c0 = 0; c0 < chunks; c0 += batch) {
    const std::int64_t n = std::min(batch, chunks - c0);
    at::Tensor h = padded.narrow(0, c0, n).to(device_, type_);
    h = conv_gelu(h, conv1_w_, conv1_b_);
    h = conv_gelu(h, conv2_w_, conv2_b_);
    h = conv_gelu(h, conv3_w_, conv3_b_);
    // [n, C, F, T] -> [n, T, C * F]: conv_out's input index is c * F + f.
    const std::int64_t c = h.size(1), f = h.size(2);
    h = dense(h.permute({0, 3, 1, 2}).reshape({n * steps, c * f}), conv_out_w_)
            .view({n, steps, config_.d_model});
    h = h + positions_.narrow(0, 0, steps);
    // Only the last chunk can be short: keep its valid steps.
    const bool has_short = rest > 0 && rest < width && c0 + n == chunks;
    if (has_short && n > 1) parts.push_back(h.narrow(0, 0, n - 1).reshape({-1, config_.d_model}));
    parts.push_back(has_short ? h[n - 1].narrow(0, 0, halve3(rest))
                              : h.reshape({-1, config_.d_model}));
  }
  return parts.size() == 1 ? parts.front() : at::cat(parts);
}

at::Tensor audio_encoder::attention(const layer& w, const at::Tensor& a) const {
  // Attention stays inside consecutive windows of window_tokens_, the last one shorter (the
  // flash-attention / vLLM semantics, transformers' modeling_qwen3_omni_moe.py).
  const std::int64_t n_tokens = a.size(0), heads = config_.encoder_attention_heads,
                     dim = config_.d_model / heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  const at::Tensor q = dense(a, w.q_w, w.q_b), k = dense(a, w.k_w, w.k_b),
                   v = dense(a, w.v_w, w.v_b);
  at::Tensor out = at::empty({n_tokens, config_.d_model}, a.options());
  const std::int64_t full = n_tokens / window_tokens_, rest = n_tokens % window_tokens_;
  if (device_.is_cpu() && onednn_runs(type_)) {
    std::vector<std::int64_t> windows(static_cast<std::size_t>(full), window_tokens_);
    if (rest > 0) windows.push_back(rest);
    attention_cpu(q.view({n_tokens, heads, dim}), k.view({n_tokens, heads, dim}), v.view({n_tokens, heads, dim}),
                  windows, scale, /*causal=*/false, out, {});
    return dense(out, w.out_w, w.out_b);
  }

  // `count` windows of `len` tokens from token `t0`, batched as [count * heads, len, dim].
  auto windows = [&](std::int64_t t0, std::int64_t count, std::int64_t len) {
    auto split = [&](const at::Tensor& t) {
      return t.narrow(0, t0, count * len)
          .view({count, len, heads, dim})
          .permute({0, 2, 1, 3})
          .reshape({count * heads, len, dim});
    };
    at::Tensor scores = at::bmm(split(q), split(k).transpose(1, 2));
    scores.mul_(scale);
    const at::Tensor probs = at::softmax(scores, -1, at::kFloat).to(a.scalar_type());
    out.narrow(0, t0, count * len)
        .view({count, len, heads, dim})
        .copy_(at::bmm(probs, split(v)).view({count, heads, len, dim}).permute({0, 2, 1, 3}));
  };
  const std::int64_t per_batch = std::max<std::int64_t>(
      1, budget_bytes_ / (4 * heads * window_tokens_ * window_tokens_));
  for (std::int64_t w0 = 0; w0 < full; w0 += per_batch) {
    windows(w0 * window_tokens_, std::min(per_batch, full - w0), window_tokens_);
  }
  if (rest > 0) windows(full * window_tokens_, 1, rest);
  return dense(out, w.out_w, w.out_b);
}

}  // namespace baton::clef::detail
