#include "engine/clef/model/thinker.hpp"

#include <torch/version.h>  // the version macros only

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <tuple>

#include "engine/clef/model/cpu_kernels.hpp"
#include "engine/clef/model/experts.hpp"
#include "engine/clef/model/quantized_weights.hpp"

// scaled_dot_product_attention takes enable_gqa from libtorch 2.5. Debian's 1.13 lacks it: the
// chunked attention.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
#define BATON_SDPA_GQA 1
#else
#define BATON_SDPA_GQA 0
#endif

namespace baton::clef::detail {

namespace {

// RMSNorm as the reference computes it: statistics in fp32, normalised value cast back to the
// activation dtype before the weight multiplies it (transformers' Qwen3OmniMoeThinkerTextRMSNorm).
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor variance = xf.pow(2).mean(-1, /*keepdim=*/true);
  return w * (xf * at::rsqrt(variance + eps)).to(x.scalar_type());
}

}  // namespace

thinker::thinker(const release& files, at::ScalarType type, at::Device device,
                 std::int64_t score_budget_bytes, bool grouped_experts, expert_library experts,
                 std::int64_t packing_budget_bytes)
    : config_(files.text()),
      type_(type),
      device_(device),
      score_budget_bytes_(score_budget_bytes),
      plan_(files, type, device, grouped_experts, experts, packing_budget_bytes),
      // bf16 only: in fp32 there is no flash kernel, and the math kernel would write the whole
      // [heads, len, len] score square (34 GB at 16k tokens) where the chunked path keeps 1 GiB.
      fused_attention_(BATON_SDPA_GQA && !device.is_cpu() && type == at::kBFloat16) {
  auto w = [&](const std::string& name) {
    return weight_tensor(files.thinker_tensor(name), type_, device_);
  };
  embed_ = mapped_tensor(files.thinker_tensor("thinker.model.embed_tokens.weight"), device_);
  lm_head_ = mapped_tensor(files.thinker_tensor("thinker.lm_head.weight"), device_);
  final_norm_ = w("thinker.model.norm.weight");
  layers_.resize(static_cast<std::size_t>(config_.num_layers));
  packed_linear timed_q = plan_.take_layer0_q_proj();  // packed already where the plan timed it
  for (std::int64_t l = 0; l < config_.num_layers; ++l) {
    const std::string p = "thinker.model.layers." + std::to_string(l) + ".";
    layer& y = layers_[static_cast<std::size_t>(l)];
    y.input_norm = w(p + "input_layernorm.weight");
    for (auto [weight, packed, name] : {std::tuple{&y.q, &y.q_packed, "q_proj"}, std::tuple{&y.k, &y.k_packed, "k_proj"},
                                        std::tuple{&y.v, &y.v_packed, "v_proj"}, std::tuple{&y.o, &y.o_packed, "o_proj"}}) {
      const std::string n = p + "self_attn." + name + ".weight";
      if (!plan_.packed_projections()) {
        *weight = linear_weight(files, n, type_, device_);
        continue;
      }
      // Packed (layer 0's q_proj as the plan timed it), the mapped pages handed back.
      *packed = packed == &y.q_packed && timed_q.packed() ? std::move(timed_q)
                                                          : packed_linear(linear_weight(files, n, type_, device_));
      packed_bytes_ += packed->bytes();
      release_weight_pages(files, n);
    }
    y.q_norm = w(p + "self_attn.q_norm.weight");
    y.k_norm = w(p + "self_attn.k_norm.weight");
    y.post_norm = w(p + "post_attention_layernorm.weight");
    y.router = linear_weight(files, p + "mlp.gate.weight", type_, device_);
  }
  std::vector<expert_weights> loaded = plan_.load_experts(files);
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    packed_bytes_ += loaded[l].packed_bytes;
    layers_[l].experts = std::move(loaded[l]);
  }
  // inv_freq exactly as the reference builds it: fp32 from an int64 arange.
  const auto dim = config_.head_dim;
  inv_freq_ = at::reciprocal(at::pow(config_.rope_theta,
                                     at::arange(0, dim, 2, at::kLong).to(at::kFloat) /
                                         static_cast<double>(dim)))
                  .to(device_);
  // Slot i rotates by the H position when i % 3 == 1 and i < 3 * section[1], by W when
  // i % 3 == 2 and i < 3 * section[2], by T otherwise (transformers' apply_interleaved_mrope).
  std::vector<std::int64_t> axis(static_cast<std::size_t>(dim / 2), 0);
  for (std::size_t i = 0; i < axis.size(); ++i) {
    const auto s = static_cast<std::int64_t>(i);
    if (s % 3 == 1 && s < 3 * config_.mrope_section[1]) axis[i] = 1;
    if (s % 3 == 2 && s < 3 * config_.mrope_section[2]) axis[i] = 2;
  }
  mrope_axis_ = long_tensor(axis, device_).view({1, 1, -1});
  if (plan_.grouped()) expert_ids_ = at::arange(config_.num_experts, at::TensorOptions().dtype(at::kLong).device(device_));
}

at::Tensor thinker::norm(const at::Tensor& x, const at::Tensor& w) const {
  return device_.is_cpu() ? rms_norm_cpu(x, w, config_.rms_norm_eps) : rms_norm(x, w, config_.rms_norm_eps);
}

at::Tensor thinker::output_rows(const at::Tensor& ids, at::ScalarType type) const {
  return lm_head_.index_select(0, ids).to(type);
}

at::Tensor thinker::embed(const at::Tensor& ids) const { return embed_.index_select(0, ids).to(type_); }

std::int64_t prefix_state::bytes() const noexcept {
  std::int64_t n = hidden.defined() ? hidden.nbytes() : 0;
  for (const auto& k : keys) n += k.nbytes();
  for (const auto& v : values) n += v.nbytes();
  return n;
}

std::pair<at::Tensor, at::Tensor> thinker::rotary(const at::Tensor& positions, const std::vector<std::int64_t>& lengths,
                                                  const std::vector<std::int64_t>& first) const {
  at::Tensor freqs;
  if (!positions.defined()) {
    // Text-only positions are 0..len-1 on all three MRoPE axes, so every frequency slot sees the
    // same position and the interleaving reduces to plain RoPE.
    std::vector<at::Tensor> pieces;
    pieces.reserve(lengths.size());
    for (std::size_t r = 0; r < lengths.size(); ++r) {
      pieces.push_back(at::arange(first[r], first[r] + lengths[r], at::TensorOptions().dtype(at::kFloat).device(device_)));
    }
    freqs = at::cat(pieces).unsqueeze(1) * inv_freq_.unsqueeze(0);
  } else {
    // Interleaved MRoPE (transformers' apply_interleaved_mrope): each frequency slot takes the
    // angle of its own axis.
    const at::Tensor all = positions.unsqueeze(2) * inv_freq_.view({1, 1, -1});  // [3, N, half]
    freqs = all.gather(0, mrope_axis_.expand({1, all.size(1), all.size(2)})).squeeze(0);
  }
  const at::Tensor emb = at::cat({freqs, freqs}, -1);
  return {emb.cos().to(type_).unsqueeze(1), emb.sin().to(type_).unsqueeze(1)};  // broadcast over heads
}

at::Tensor thinker::forward(const thinker_input& input, const std::vector<std::int64_t>& lengths,
                            const stage_observer* observe, forward_profile* profile, const prefix_list& past,
                            std::vector<prefix_state>* kept) const {
  if (!past.empty() && past.size() != lengths.size()) throw std::invalid_argument("thinker: one prefix per record");
  std::vector<std::int64_t> past_lengths(lengths.size(), 0);
  bool any_past = false;
  for (std::size_t r = 0; r < past.size(); ++r) {
    if (past[r] == nullptr) continue;
    if (past[r]->keys.size() != layers_.size() || past[r]->values.size() != layers_.size()) {
      throw std::invalid_argument("thinker: a cached prefix with another number of layers");
    }
    past_lengths[r] = past[r]->length();
    any_past = true;
  }
  // From here on a list of prefixes is empty unless some record has one.
  const prefix_list none;
  const prefix_list& prefixes = any_past ? past : none;
  if (kept) {
    kept->assign(lengths.size(), {});
    for (auto& k : *kept) {
      k.keys.resize(layers_.size());
      k.values.resize(layers_.size());
    }
  }
  at::Tensor x = input.embeds;
  if (input.positions.defined()) report(observe, "position_ids", input.positions);
  report(observe, "inputs_embeds", x);

  at::Tensor cos, sin;
  {
    scoped_timer t(profile ? &profile->norms_ms : nullptr, device_);
    std::tie(cos, sin) = rotary(input.positions, lengths, past_lengths);
  }

  const attention_scratch scratch = make_attention_scratch(lengths, past_lengths);
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const layer& w = layers_[l];
    at::Tensor a;
    {
      scoped_timer t(profile ? &profile->norms_ms : nullptr, device_);
      a = norm(x, w.input_norm);
    }
    {
      scoped_timer t(profile ? &profile->attention_ms : nullptr, device_, profile ? &profile->attention_ops : nullptr);
      x = x + attention(l, a, cos, sin, lengths, scratch, prefixes, past_lengths, kept);
    }
    at::Tensor b;
    {
      scoped_timer t(profile ? &profile->norms_ms : nullptr, device_);
      b = norm(x, w.post_norm);
    }
    if (observe) report(observe, "router_logits." + std::to_string(l), dense(b, w.router));
    {
      scoped_timer t(profile ? &profile->moe_ms : nullptr, device_, profile ? &profile->moe_ops : nullptr);
      x = x + moe(w, b);
    }
    if (observe) report(observe, "layer_out." + std::to_string(l), x);
    if (l < input.deepstack.size()) x.index_add_(0, input.visual_rows, input.deepstack[l]);
  }
  {
    scoped_timer t(profile ? &profile->norms_ms : nullptr, device_);
    x = norm(x, final_norm_);
  }
  report(observe, "final_hidden", x);
  return x;
}

thinker::attention_scratch thinker::make_attention_scratch(const std::vector<std::int64_t>& lengths,
                                                           const std::vector<std::int64_t>& past_lengths) const {
  const bool any_past = std::any_of(past_lengths.begin(), past_lengths.end(), [](std::int64_t n) { return n > 0; });
  if (plan_.onednn() || (fused_attention_ && !any_past)) return {};  // the fused kernels keep their own
  const std::int64_t heads = config_.num_heads;
  std::int64_t rows = 1, most = 1;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const std::int64_t len = lengths[i], keys = past_lengths[i] + len;
    const std::int64_t r = chunk_rows(score_budget_bytes_, heads, keys, len);
    rows = std::max(rows, r);
    most = std::max(most, heads * r * keys);
  }
  const auto options = at::TensorOptions().dtype(type_).device(device_);
  attention_scratch s;
  s.causal = at::ones({rows, rows}, options.dtype(at::kBool)).triu(1);
  s.scores = at::empty({most}, options);
  s.probs_f32 = at::empty({most}, options.dtype(at::kFloat));
  s.probs = type_ == at::kFloat ? s.probs_f32 : at::empty({most}, options);
  s.ctx = at::empty({heads * rows * config_.head_dim}, options);
  return s;
}

// Each record's keys (or values) with its cached prefix's first: [Σ (past + length), kv, dim], as
// attention_cpu and chunked_attention take them; `own` as it is when no record has a prefix. With
// `kept`, each record's rows are handed to it (copied apart when the batch has several records,
// so that a kept record does not hold the whole batch's tensor).
static at::Tensor with_prefixes(const at::Tensor& own, std::size_t l, bool values, const prefix_list& past,
                         const std::vector<std::int64_t>& lengths, std::vector<prefix_state>* kept) {
  at::Tensor all = own;
  if (!past.empty()) {
    std::vector<at::Tensor> pieces;
    std::int64_t offset = 0;
    for (std::size_t r = 0; r < lengths.size(); ++r) {
      if (past[r] != nullptr) pieces.push_back(values ? past[r]->values[l] : past[r]->keys[l]);
      pieces.push_back(own.narrow(0, offset, lengths[r]));
      offset += lengths[r];
    }
    all = at::cat(pieces);
  }
  if (kept) {
    std::int64_t offset = 0;
    for (std::size_t r = 0; r < lengths.size(); ++r) {
      const std::int64_t rows = lengths[r] + (past.empty() || past[r] == nullptr ? 0 : past[r]->length());
      at::Tensor mine = lengths.size() == 1 ? all : all.narrow(0, offset, rows).clone();
      (values ? (*kept)[r].values[l] : (*kept)[r].keys[l]) = std::move(mine);
      offset += rows;
    }
  }
  return all;
}

at::Tensor thinker::attention(std::size_t l, const at::Tensor& a, const at::Tensor& cos, const at::Tensor& sin,
                              const std::vector<std::int64_t>& lengths, const attention_scratch& scratch,
                              const prefix_list& past, const std::vector<std::int64_t>& past_lengths,
                              std::vector<prefix_state>* kept) const {
  const layer& w = layers_[l];
  const std::int64_t n_tokens = a.size(0), heads = config_.num_heads,
                     kv_heads = config_.num_kv_heads, dim = config_.head_dim;
  const double eps = config_.rms_norm_eps;
  auto project = [&](const at::Tensor& x, const at::Tensor& weight, const packed_linear& packed) {
    return packed.packed() ? packed.parallel(x) : dense(x, weight);
  };
  if (device_.is_cpu()) {
    // Norm and rotary in one pass over the projections.
    at::Tensor q = project(a, w.q, w.q_packed).view({n_tokens, heads, dim});
    at::Tensor k = project(a, w.k, w.k_packed).view({n_tokens, kv_heads, dim});
    at::Tensor v = project(a, w.v, w.v_packed).view({n_tokens, kv_heads, dim});
    rms_norm_rope_cpu(q, w.q_norm, eps, cos, sin);
    rms_norm_rope_cpu(k, w.k_norm, eps, cos, sin);
    k = with_prefixes(k, l, false, past, lengths, kept);
    v = with_prefixes(v, l, true, past, lengths, kept);
    if (plan_.onednn()) {  // attention_cpu
      at::Tensor out = at::empty({n_tokens, heads * dim}, a.options());
      attention_cpu(q, k, v, lengths, 1.0 / std::sqrt(static_cast<double>(dim)), /*causal=*/true, out, {},
                    past_lengths);
      return project(out, w.o, w.o_packed);
    }
    return chunked_attention(w, q, k, v, lengths, scratch, past_lengths);
  }
  at::Tensor q = rms_norm(dense(a, w.q).view({n_tokens, heads, dim}), w.q_norm, eps);
  at::Tensor k = rms_norm(dense(a, w.k).view({n_tokens, kv_heads, dim}), w.k_norm, eps);
  at::Tensor v = dense(a, w.v).view({n_tokens, kv_heads, dim});
  q = q * cos + rotate_half(q) * sin;
  k = k * cos + rotate_half(k) * sin;
  k = with_prefixes(k, l, false, past, lengths, kept);
  v = with_prefixes(v, l, true, past, lengths, kept);
#if BATON_SDPA_GQA
  // A record continuing a cached prefix goes through chunked_attention: its causal mask is offset
  // by the prefix, which SDPA's is_causal (aligned to the first key) does not express.
  if (fused_attention_ && past.empty()) {
    // One fused causal kernel per record (flash or memory-efficient attention on a GPU): the
    // scores are never written out, and the KV heads are shared by their query groups in it.
    at::Tensor out = at::empty({n_tokens, heads * dim}, a.options());
    std::int64_t offset = 0;
    for (const auto len : lengths) {
      auto heads_first = [&](const at::Tensor& t) { return t.narrow(0, offset, len).transpose(0, 1).unsqueeze(0); };
      const at::Tensor o = at::scaled_dot_product_attention(heads_first(q), heads_first(k), heads_first(v), {}, 0.0,
                                                            /*is_causal=*/true, std::nullopt, /*enable_gqa=*/true);
      out.narrow(0, offset, len).view({len, heads, dim}).copy_(o.squeeze(0).transpose(0, 1));
      offset += len;
    }
    return dense(out, w.o);
  }
#endif
  return chunked_attention(w, q, k, v, lengths, scratch, past_lengths);
}

at::Tensor thinker::chunked_attention(const layer& w, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const std::vector<std::int64_t>& lengths, const attention_scratch& scratch,
                                      const std::vector<std::int64_t>& past) const {
  const std::int64_t n_tokens = q.size(0), heads = config_.num_heads, kv_heads = config_.num_kv_heads,
                     dim = config_.head_dim, group = heads / kv_heads;
  // Per KV head, its `group` query heads share one matmul: q rows ordered (head in group, token).
  const at::Tensor qg = q.view({n_tokens, kv_heads, group, dim}).permute({1, 2, 0, 3});
  const at::Tensor kt = k.permute({1, 2, 0});  // [kv, dim, N]
  const at::Tensor vt = v.permute({1, 0, 2});  // [kv, N, dim]
  at::Tensor out = at::empty({n_tokens, heads * dim}, q.options());
  const at::Tensor out_heads = out.view({n_tokens, kv_heads, group, dim}).permute({1, 2, 0, 3});
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  const float neg_inf = -std::numeric_limits<float>::infinity();

  std::int64_t offset = 0, key_offset = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const std::int64_t len = lengths[i], before = past[i];
    const std::int64_t rows_per_chunk = chunk_rows(score_budget_bytes_, heads, before + len, len);
    for (std::int64_t r0 = 0; r0 < len; r0 += rows_per_chunk) {
      const std::int64_t rows = std::min(rows_per_chunk, len - r0), keys = before + r0 + rows;
      const std::int64_t n = heads * rows * keys;
      // [kv, group, rows, dim] -> [kv, group*rows, dim]
      const at::Tensor qc = qg.narrow(2, offset + r0, rows).reshape({kv_heads, group * rows, dim});
      at::Tensor scores = scratch.scores.narrow(0, 0, n).view({kv_heads, group * rows, keys});
      at::bmm_out(scores, qc, kt.narrow(2, key_offset, keys));
      scores.mul_(scale);
      scores = scores.view({kv_heads, group, rows, keys});
      // Query r0+i sees keys 0..before+r0+i: the strictly-upper part of the last `rows` keys is masked.
      if (rows > 1) {
        scores.narrow(3, before + r0, rows)
            .masked_fill_(scratch.causal.narrow(0, 0, rows).narrow(1, 0, rows), neg_inf);
      }
      at::Tensor probs_f32 = scratch.probs_f32.narrow(0, 0, n).view({kv_heads, group, rows, keys});
      at::softmax_out(probs_f32, scores, -1, at::kFloat);
      at::Tensor probs = scratch.probs.narrow(0, 0, n).view({kv_heads, group * rows, keys});
      if (probs.data_ptr() != probs_f32.data_ptr()) probs.copy_(probs_f32.view({kv_heads, group * rows, keys}));
      at::Tensor ctx = scratch.ctx.narrow(0, 0, heads * rows * dim).view({kv_heads, group * rows, dim});
      at::bmm_out(ctx, probs, vt.narrow(1, key_offset, keys));
      out_heads.narrow(2, offset + r0, rows).copy_(ctx.view({kv_heads, group, rows, dim}));
    }
    offset += len;
    key_offset += before + len;
  }
  return dense(out, w.o);
}

at::Tensor thinker::moe(const layer& w, const at::Tensor& b) const {
  // Tokens are routed independently, so long inputs go through in blocks: the experts' outputs
  // for one block are all held until they are summed (8192 tokens x top-8 x 2048 x 4 bytes = 512
  // MiB on the real thinker in fp32).
  constexpr std::int64_t block = 8192;
  auto run = [&](const at::Tensor& part) { return plan_.grouped() ? moe_grouped(w, part) : moe_block(w, part); };
  if (b.size(0) <= block) return run(b);
  std::vector<at::Tensor> parts;
  for (std::int64_t t = 0; t < b.size(0); t += block) {
    parts.push_back(run(b.narrow(0, t, std::min(block, b.size(0) - t))));
  }
  return at::cat(parts);
}

at::Tensor thinker::moe_grouped(const layer& w, const at::Tensor& b) const {
  const std::int64_t n_tokens = b.size(0), top_k = config_.experts_per_token;
  const at::Tensor logits = at::linear(b, w.router);
  at::Tensor weights, experts;
  if (config_.norm_topk_prob) {
    // The top-k of the softmax renormalised is the softmax of the top-k logits (softmax keeps
    // the order): two operations where four were.
    std::tie(weights, experts) = at::topk(logits, top_k, -1);
    weights = at::softmax(weights, -1, at::kFloat);
  } else {
    std::tie(weights, experts) = at::topk(at::softmax(logits, 1, at::kFloat), top_k, -1);
  }
  // The (token, slot) pairs sorted by expert: `sorted` is each row's expert, `order` its pair.
  auto [sorted, order] = at::sort(experts.view({-1}), c10::optional<bool>(true), 0, false);
  // Group ends as int32 on the device. Not bincount: on CUDA it reads the input's maximum back
  // to the host.
  const at::Tensor offs = at::searchsorted(sorted, expert_ids_, /*out_int32=*/true, /*right=*/true);
  const at::Tensor x = b.index_select(0, at::floor_divide(order, top_k));  // rows grouped by expert
  // int8 weights widened for the layer (exact), their scales applied to each row's outputs
  // by its expert, as the per-expert path does.
  const expert_weights& e = w.experts;
  const bool int8 = e.gate_up_scale_all.defined();
  at::Tensor gu = grouped_mm(x, int8 ? e.gate_up_all.to(b.scalar_type()) : e.gate_up_all, offs, plan_.native_grouped());
  if (int8) gu.mul_(e.gate_up_scale_all.index_select(0, sorted));
  const std::vector<at::Tensor> halves = gu.chunk(2, 1);  // gate, up
  const at::Tensor h = at::silu(halves[0]).mul_(halves[1]);
  at::Tensor y = grouped_mm(h, int8 ? e.down_all.to(b.scalar_type()) : e.down_all, offs, plan_.native_grouped());
  if (int8) y.mul_(e.down_scale_all.index_select(0, sorted));
  // Back to (token, slot) order in one copy, then each token's rows weighted and summed in one
  // batched matmul (rounded to the dtype once; cuBLAS accumulates bf16 in fp32): deterministic,
  // where one index_add_ would add a token's rows in bf16 by atomics in any order.
  const at::Tensor by_token = at::empty_like(y).index_copy_(0, order, y);
  return at::einsum("nk,nkh->nh", {weights.to(b.scalar_type()), by_token.view({n_tokens, top_k, y.size(1)})});
}

at::Tensor thinker::moe_block(const layer& w, const at::Tensor& b) const {
  const std::int64_t top_k = config_.experts_per_token;
  const at::Tensor router_logits = dense(b, w.router);
  const at::Tensor probs = at::softmax(router_logits, 1, at::kFloat);
  auto [weights, experts] = at::topk(probs, top_k, -1);
  if (config_.norm_topk_prob) weights = weights / weights.sum(-1, /*keepdim=*/true);
  weights = weights.to(b.scalar_type());
  return run_experts(w.experts, b, experts, weights, plan_.chunk_rows());
}

}  // namespace baton::clef::detail
