#include "engine/clef/model/vision_encoder.hpp"

#include "engine/clef/model/cpu_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <tuple>

namespace baton::clef::detail {

namespace {

constexpr double layer_norm_eps = 1e-6;

// Side of the square learned position grid (48 for 2304 entries); 0 when not a square.
std::int64_t grid_side(std::int64_t entries) {
  const auto side = static_cast<std::int64_t>(std::llround(std::sqrt(static_cast<double>(entries))));
  return side * side == entries ? side : 0;
}

std::string grid_text(const vision_patches& p) {
  return std::to_string(p.grid_t) + " x " + std::to_string(p.grid_h) + " x " +
         std::to_string(p.grid_w);
}

}  // namespace

vision_encoder::vision_encoder(const release& files, at::ScalarType type, at::Device device,
                               std::int64_t score_budget_bytes)
    : type_(type), device_(device), score_budget_bytes_(score_budget_bytes) {
  if (!files.vision()) {
    throw load_error(files.dir().string() + ": config.json has no vision_config");
  }
  config_ = *files.vision();
  const vision_config& c = config_;
  // The preprocessor fixes the row layout (channel, temporal, y, x) and the 2 x 2 merge-block
  // row order; a tower built for another layout would silently read garbage.
  if (c.in_channels * c.temporal_patch_size * c.patch_size * c.patch_size != vision_patch_values ||
      c.patch_size != vision_patch_size || c.temporal_patch_size != vision_temporal_patch_size ||
      c.spatial_merge_size != vision_merge_size) {
    throw load_error(files.dir().string() +
                     ": vision_config's patch layout (in_channels, temporal_patch_size, patch_size, "
                     "spatial_merge_size) differs from the preprocessor's 3, 2, 16, 2");
  }
  if (grid_side(c.num_position_embeddings) == 0) {
    throw load_error(files.dir().string() +
                     ": vision_config.num_position_embeddings must be a square (the position grid)");
  }

  auto w = [&](const std::string& name) {
    return weight_tensor(files.thinker_tensor("thinker.visual." + name), type_, device_);
  };
  auto lin = [&](const std::string& name) { return linear{w(name + ".weight"), w(name + ".bias")}; };
  auto ln = [&](const std::string& name) { return norm{w(name + ".weight"), w(name + ".bias")}; };

  patch_embed_ = {w("patch_embed.proj.weight").reshape({c.hidden_size, vision_patch_values}),
                  w("patch_embed.proj.bias")};
  pos_embed_ = w("pos_embed.weight");
  for (std::int64_t b = 0; b < c.depth; ++b) {
    const std::string p = "blocks." + std::to_string(b) + ".";
    blocks_.push_back({ln(p + "norm1"), ln(p + "norm2"), lin(p + "attn.qkv"), lin(p + "attn.proj"),
                       lin(p + "mlp.linear_fc1"), lin(p + "mlp.linear_fc2")});
  }
  merger_ = {ln("merger.ln_q"), lin("merger.mlp.0"), lin("merger.mlp.2")};
  for (std::size_t m = 0; m < c.deepstack_layers.size(); ++m) {
    const std::string p = "merger_list." + std::to_string(m) + ".";
    deepstack_.push_back({ln(p + "ln_q"), lin(p + "mlp.0"), lin(p + "mlp.2")});
  }
  // The reference's rotary table has head_dim / 2 dims (half for rows, half for columns), each
  // half with head_dim / 4 frequencies: fp32 from a float arange.
  const std::int64_t dim = c.hidden_size / c.num_heads / 2;
  const at::Tensor exponent = at::arange(0, dim, 2, at::kFloat) / static_cast<double>(dim);
  inv_freq_ = at::reciprocal(at::pow(10000.0, exponent)).to(device_);
}

at::Tensor vision_encoder::position_embedding(std::int64_t h, std::int64_t w) const {
  const std::int64_t side = grid_side(config_.num_position_embeddings);
  // Bilinear, align-corners, exactly as fast_pos_embed_interpolate: fp32 coordinates, truncated
  // floor, the four weights cast to the table dtype before they multiply it.
  auto axis = [&](std::int64_t n) {
    const at::Tensor coord = at::linspace(0, static_cast<double>(side - 1), n, at::kFloat);
    const at::Tensor lo = coord.to(at::kLong);
    const at::Tensor hi = (lo + 1).clamp_max(side - 1);
    return std::tuple{lo, hi, coord - lo};
  };
  const auto [h_lo, h_hi, dh] = axis(h);
  const auto [w_lo, w_hi, dw] = axis(w);
  auto index = [&](const at::Tensor& r, const at::Tensor& col) {
    return (r.unsqueeze(1) * side + col.unsqueeze(0)).flatten().to(device_);
  };
  auto weight = [&](const at::Tensor& a, const at::Tensor& b) {
    return (a.unsqueeze(1) * b.unsqueeze(0)).flatten().to(device_, type_).unsqueeze(1);
  };
  auto term = [&](const at::Tensor& r, const at::Tensor& col, const at::Tensor& wr,
                  const at::Tensor& wc) {
    return pos_embed_.index_select(0, index(r, col)) * weight(wr, wc);
  };
  const at::Tensor pe = term(h_lo, w_lo, 1 - dh, 1 - dw) + term(h_lo, w_hi, 1 - dh, dw) +
                        term(h_hi, w_lo, dh, 1 - dw) + term(h_hi, w_hi, dh, dw);
  // Row-major (h, w) to the patch rows' merge-block order.
  const std::int64_t m = config_.spatial_merge_size;
  return pe.view({h / m, m, w / m, m, config_.hidden_size})
      .permute({0, 2, 1, 3, 4})
      .reshape({h * w, config_.hidden_size});
}

at::Tensor vision_encoder::attention(const block& b, const at::Tensor& a, const at::Tensor& cos,
                                     const at::Tensor& sin, std::int64_t frames) const {
  const std::int64_t n = a.size(0), len = n / frames, heads = config_.num_heads,
                     dim = config_.hidden_size / heads;
  const at::Tensor qkv = dense(a, b.qkv.weight, b.qkv.bias).view({frames, len, 3, heads, dim});
  // Rotated in fp32 and cast back, as apply_rotary_pos_emb_vision does.
  auto rotate = [&](const at::Tensor& x) {
    const at::Tensor f = x.to(at::kFloat);
    return (f * cos + rotate_half(f) * sin).to(type_);
  };
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  if (device_.is_cpu() && onednn_runs(type_)) {
    // Each frame pair's patches see each other (the reference's cu_seqlens): one fused call.
    const at::Tensor q = rotate(qkv.select(2, 0)).view({n, heads, dim});
    const at::Tensor k = rotate(qkv.select(2, 1)).view({n, heads, dim});
    at::Tensor out = at::empty({n, heads * dim}, a.options());
    attention_cpu(q, k, qkv.select(2, 2).reshape({n, heads, dim}), std::vector<std::int64_t>(frames, len), scale,
                  /*causal=*/false, out, {});
    return dense(out, b.proj.weight, b.proj.bias);
  }
  // q and v [t, heads, len, dim], k transposed [t, heads, dim, len].
  const at::Tensor q = rotate(qkv.select(2, 0)).permute({0, 2, 1, 3}).contiguous();
  const at::Tensor kt = rotate(qkv.select(2, 1)).permute({0, 2, 3, 1}).contiguous();
  const at::Tensor v = qkv.select(2, 2).permute({0, 2, 1, 3}).contiguous();
  at::Tensor out = at::empty({frames, len, heads, dim}, a.options());
  const std::int64_t rows_per_chunk = chunk_rows(score_budget_bytes_, heads, len, len);
  // Attention stays within each frame pair (the reference's cu_seqlens).
  for (std::int64_t f = 0; f < frames; ++f) {
    for (std::int64_t r0 = 0; r0 < len; r0 += rows_per_chunk) {
      const std::int64_t rows = std::min(rows_per_chunk, len - r0);
      at::Tensor scores = at::bmm(q[f].narrow(1, r0, rows), kt[f]);
      scores.mul_(scale);
      const at::Tensor probs = at::softmax(scores, -1, at::kFloat).to(type_);
      out[f].narrow(0, r0, rows).copy_(at::bmm(probs, v[f]).permute({1, 0, 2}));
    }
  }
  return dense(out.view({n, heads * dim}), b.proj.weight, b.proj.bias);
}

at::Tensor vision_encoder::merge(const merger& m, const at::Tensor& x, bool norm_after_merge) const {
  const std::int64_t m_size = config_.spatial_merge_size,
                     width = config_.hidden_size * m_size * m_size;
  const at::Tensor merged =
      norm_after_merge
          ? at::layer_norm(x.view({-1, width}), {width}, m.ln_q.weight, m.ln_q.bias, layer_norm_eps)
          : at::layer_norm(x, {config_.hidden_size}, m.ln_q.weight, m.ln_q.bias, layer_norm_eps)
                .view({-1, width});
  return dense(at::gelu(dense(merged, m.fc1.weight, m.fc1.bias)), m.fc2.weight, m.fc2.bias);
}

vision_features vision_encoder::encode(const vision_patches& p) const {
  const std::int64_t m = config_.spatial_merge_size;
  if (p.grid_t <= 0 || p.grid_h <= 0 || p.grid_w <= 0 || p.grid_h % m != 0 || p.grid_w % m != 0) {
    throw std::runtime_error("vision input: grid " + grid_text(p) +
                             " must be positive with height and width multiples of " +
                             std::to_string(m));
  }
  std::int64_t rows = 0, values = 0;
  if (__builtin_mul_overflow(p.grid_t, p.grid_h, &rows) ||
      __builtin_mul_overflow(rows, p.grid_w, &rows) ||
      __builtin_mul_overflow(rows, vision_patch_values, &values) ||
      static_cast<std::size_t>(values) != p.pixel_values.size()) {
    throw std::runtime_error("vision input: grid " + grid_text(p) + " needs rows of " +
                             std::to_string(vision_patch_values) +
                             " values (the patch embedding's width), got " +
                             std::to_string(p.pixel_values.size()) + " values");
  }
  const std::int64_t frames = p.grid_t, hw = p.grid_h * p.grid_w, hidden = config_.hidden_size;

  // The caller's buffer is only read.
  const at::Tensor pixels =
      at::from_blob(const_cast<float*>(p.pixel_values.data()), {rows, vision_patch_values}, at::kFloat)
          .to(device_, type_);
  at::Tensor x = dense(pixels, patch_embed_.weight, patch_embed_.bias);
  x = (x.view({frames, hw, hidden}) + position_embedding(p.grid_h, p.grid_w)).view({rows, hidden});

  // 2-D rotary angles per patch of one frame (full-resolution row and column, in merge-block
  // order); every frame pair has the same ones.
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(device_);
  const at::Tensor row = at::arange(p.grid_h, opts).view({p.grid_h / m, 1, m, 1})
                             .expand({p.grid_h / m, p.grid_w / m, m, m}).reshape({hw, 1});
  const at::Tensor col = at::arange(p.grid_w, opts).view({1, p.grid_w / m, 1, m})
                             .expand({p.grid_h / m, p.grid_w / m, m, m}).reshape({hw, 1});
  const at::Tensor freqs = at::cat({row * inv_freq_, col * inv_freq_}, 1);
  const at::Tensor emb = at::cat({freqs, freqs}, 1).unsqueeze(1);  // [hw, 1, head_dim]
  const at::Tensor cos = emb.cos(), sin = emb.sin();

  vision_features out;
  for (std::size_t l = 0; l < blocks_.size(); ++l) {
    const block& b = blocks_[l];
    const at::Tensor a1 = at::layer_norm(x, {hidden}, b.norm1.weight, b.norm1.bias, layer_norm_eps);
    x = x + attention(b, a1, cos, sin, frames);
    const at::Tensor a2 = at::layer_norm(x, {hidden}, b.norm2.weight, b.norm2.bias, layer_norm_eps);
    x = x + dense(at::gelu(dense(a2, b.fc1.weight, b.fc1.bias), "tanh"), b.fc2.weight, b.fc2.bias);
    // As the reference: features in block order, each through the merger of the block's first
    // listing in deepstack_visual_indexes.
    const auto& layers = config_.deepstack_layers;
    const auto listed = std::find(layers.begin(), layers.end(), static_cast<std::int64_t>(l));
    if (listed != layers.end()) {
      const auto slot = static_cast<std::size_t>(listed - layers.begin());
      out.deepstack.push_back(merge(deepstack_[slot], x, /*norm_after_merge=*/true));
    }
  }
  out.embeds = merge(merger_, x, /*norm_after_merge=*/false);
  return out;
}

}  // namespace baton::clef::detail
