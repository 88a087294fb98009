#include "engine/clef/model/joint_head.hpp"

#include <algorithm>
#include <cmath>

#include "engine/clef/model/thinker.hpp"

namespace baton::clef::detail {

namespace {

constexpr double layer_norm_eps = 1e-5;

at::Tensor gelu_erf(const at::Tensor& x) { return at::gelu(x); }  // exact erf form, as nn.GELU()

// F.normalize(x, dim=-1): x / max(||x||, 1e-12).
at::Tensor normalize(const at::Tensor& x) {
  return x / x.norm(2, {-1}, /*keepdim=*/true).clamp_min(1e-12);
}

}  // namespace

joint_head::joint_head(const release& files, at::ScalarType type, at::Device device,
                       std::int64_t score_budget_bytes)
    : config_(files.head()), type_(type), device_(device), score_budget_bytes_(score_budget_bytes) {
  auto w = [&](const std::string& name) {
    return weight_tensor(files.head_tensor(name), type_, device_);
  };
  auto n = [&](const std::string& name) { return norm{w(name + ".weight"), w(name + ".bias")}; };
  auto a = [&](const std::string& name) {
    return attention{w(name + ".in_proj_weight"), w(name + ".in_proj_bias"),
                     w(name + ".out_proj.weight"), w(name + ".out_proj.bias")};
  };
  hidden_norm_ = n("hidden_norm");
  option_summary_norm_ = n("option_summary_norm");
  field_norm_ = n("field_norm");
  option_norm_ = n("option_norm");
  memory_projection_ = w("memory_projection.weight");
  question_projection_ = w("question_projection.weight");
  option_question_projection_ = w("option_question_projection.weight");
  global_projection_ = w("global_projection.weight");
  option_context_projection_ = w("option_context_projection.weight");
  option_lexical_projection_ = w("option_lexical_projection.weight");
  type_embedding_ = w("type_embedding.weight");
  for (std::int64_t r = 0; r < config_.routing_layers; ++r) {
    const std::string p = "evidence_layers." + std::to_string(r) + ".";
    routing_.push_back(routing_layer{n(p + "query_norm"), n(p + "memory_norm"),
                                     n(p + "feedforward_norm"), a(p + "attention"),
                                     w(p + "feedforward.0.weight"), w(p + "feedforward.0.bias"),
                                     w(p + "feedforward.3.weight"), w(p + "feedforward.3.bias")});
  }
  for (std::int64_t l = 0; l < config_.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    decoder_.push_back(decoder_layer{a(p + "self_attn"), a(p + "multihead_attn"),
                                     w(p + "linear1.weight"), w(p + "linear1.bias"),
                                     w(p + "linear2.weight"), w(p + "linear2.bias"),
                                     n(p + "norm1"), n(p + "norm2"), n(p + "norm3")});
  }
  scorer1_weight_ = w("residual_scorer.0.weight");
  scorer1_bias_ = w("residual_scorer.0.bias");
  scorer2_weight_ = w("residual_scorer.3.weight");
  scorer2_bias_ = w("residual_scorer.3.bias");
  const double log100 = std::log(100.0);
  prior_scale_ = w("prior_logit_scale").clamp_max(log100).exp();
  joint_scale_ = w("joint_logit_scale").clamp_max(log100).exp();
  gate_ = w("residual_gate").sigmoid();
}

at::Tensor joint_head::layer_norm(const at::Tensor& x, const norm& n) const {
  return at::layer_norm(x, {x.size(-1)}, n.weight, n.bias, layer_norm_eps);
}

// nn.MultiheadAttention (packed in_proj, no masks, no dropout) over `memory` [T, W].
at::Tensor joint_head::mha(const at::Tensor& queries, const at::Tensor& memory,
                           const attention& a) const {
  const std::int64_t width = config_.width, heads = config_.heads, dim = width / heads;
  const std::int64_t rows = queries.size(0), keys = memory.size(0);
  const at::Tensor q = dense(queries, a.in_weight.narrow(0, 0, width), a.in_bias.narrow(0, 0, width));
  const at::Tensor k =
      dense(memory, a.in_weight.narrow(0, width, width), a.in_bias.narrow(0, width, width));
  const at::Tensor v = dense(memory, a.in_weight.narrow(0, 2 * width, width),
                              a.in_bias.narrow(0, 2 * width, width));
  const at::Tensor qh = q.view({rows, heads, dim}).transpose(0, 1);         // [h, n, d]
  const at::Tensor kh = k.view({keys, heads, dim}).permute({1, 2, 0});      // [h, d, T]
  const at::Tensor vh = v.view({keys, heads, dim}).transpose(0, 1);         // [h, T, d]
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  const std::int64_t chunk = chunk_rows(score_budget_bytes_, heads, keys, rows);
  at::Tensor out = at::empty({rows, width}, queries.options());
  const at::Tensor out_heads = out.view({rows, heads, dim}).transpose(0, 1);
  for (std::int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const std::int64_t n = std::min(chunk, rows - r0);
    const at::Tensor scores = at::bmm(qh.narrow(1, r0, n), kh) * scale;
    const at::Tensor probs = at::softmax(scores, -1, at::kFloat).to(queries.scalar_type());
    out_heads.narrow(1, r0, n).copy_(at::bmm(probs, vh));
  }
  return dense(out, a.out_weight, a.out_bias);
}

record_logits joint_head::forward(const at::Tensor& hidden_in, const at::Tensor& ids,
                                  std::span<const question_layout> questions,
                                  const thinker& backbone) const {
  const at::Tensor hidden = layer_norm(hidden_in.to(type_), hidden_norm_);  // [T, H]
  const std::int64_t tokens = hidden.size(0);
  const at::Tensor memory = dense(hidden, memory_projection_);  // [T, W]
  const at::Tensor global = hidden[tokens - 1];

  // Span means. Question and option spans never overlap, so one index_add sums them all.
  std::vector<std::int64_t> segment_of, token_rows, counts, option_question, type_ids;
  std::size_t n_options = 0;
  for (const auto& q : questions) n_options += q.options.size();
  const auto n_questions = static_cast<std::int64_t>(questions.size());
  auto add_span = [&](token_span s, std::int64_t segment) {
    for (std::int32_t t = s.begin; t < s.end; ++t) {
      segment_of.push_back(segment);
      token_rows.push_back(t);
    }
    counts.push_back(s.end - s.begin);
  };
  for (std::size_t i = 0; i < questions.size(); ++i) {
    add_span(questions[i].question, static_cast<std::int64_t>(i));
    type_ids.push_back(questions[i].type);
  }
  std::int64_t option_rows_begin = static_cast<std::int64_t>(token_rows.size());
  std::int64_t segment = n_questions;
  for (std::size_t i = 0; i < questions.size(); ++i) {
    for (const auto& s : questions[i].options) {
      add_span(s, segment++);
      option_question.push_back(static_cast<std::int64_t>(i));
    }
  }
  auto to_device = [&](const std::vector<std::int64_t>& v) { return long_tensor(v, device_); };
  const at::Tensor segments = to_device(segment_of);
  const at::Tensor rows = to_device(token_rows);
  // Sums accumulate in fp32 (as torch's mean does) whatever the head's dtype.
  const at::Tensor divisors = to_device(counts).to(at::kFloat).unsqueeze(1);
  const auto fp32 = hidden.options().dtype(at::kFloat);
  const at::Tensor sums = at::zeros({segment, hidden.size(1)}, fp32)
                              .index_add_(0, segments, hidden.index_select(0, rows).to(at::kFloat));
  const at::Tensor means = (sums / divisors).to(type_);
  const at::Tensor question_vectors = means.narrow(0, 0, n_questions);                  // [Q, H]
  const at::Tensor contexts = means.narrow(0, n_questions, static_cast<std::int64_t>(n_options));  // [N, H]
  const std::int64_t option_token_count = static_cast<std::int64_t>(token_rows.size()) - option_rows_begin;
  const at::Tensor option_rows = rows.narrow(0, option_rows_begin, option_token_count);
  const at::Tensor option_segments = segments.narrow(0, option_rows_begin, option_token_count) - n_questions;
  const at::Tensor lexical_rows = backbone.output_rows(ids.index_select(0, option_rows), at::kFloat);
  const at::Tensor lexical =
      (at::zeros({static_cast<std::int64_t>(n_options), hidden.size(1)}, fp32)
           .index_add_(0, option_segments, lexical_rows) /
       divisors.narrow(0, n_questions, static_cast<std::int64_t>(n_options)))
          .to(type_);
  const at::Tensor option_q = to_device(option_question);

  // Option queries, then evidence routing against the normalised memory.
  at::Tensor routed = dense(contexts, option_context_projection_) +
                      dense(lexical, option_lexical_projection_) +
                      dense(question_vectors, option_question_projection_).index_select(0, option_q);
  for (const auto& r : routing_) {
    const at::Tensor m = layer_norm(memory, r.memory_norm);
    routed = routed + mha(layer_norm(routed, r.query_norm), m, r.attn);
    routed = routed + dense(gelu_erf(dense(layer_norm(routed, r.feedforward_norm), r.ff1_weight,
                                         r.ff1_bias)),
                             r.ff2_weight, r.ff2_bias);
  }

  // Field vectors: question + attention summary of its own options + global + type.
  const at::Tensor base = dense(question_vectors, question_projection_);  // [Q, W]
  std::vector<at::Tensor> summaries;
  summaries.reserve(questions.size());
  const double summary_scale = std::sqrt(static_cast<double>(config_.width));
  std::int64_t first = 0;
  for (std::size_t i = 0; i < questions.size(); ++i) {
    const auto count = static_cast<std::int64_t>(questions[i].options.size());
    const at::Tensor options = routed.narrow(0, first, count);
    const at::Tensor weights = at::softmax(at::matmul(options, base[static_cast<std::int64_t>(i)]) / summary_scale, 0);
    summaries.push_back((weights.unsqueeze(-1) * options).sum(0));
    first += count;
  }
  at::Tensor fields = base + layer_norm(at::stack(summaries), option_summary_norm_) +
                      dense(global, global_projection_).unsqueeze(0) +
                      type_embedding_.index_select(0, to_device(type_ids));
  for (const auto& d : decoder_) {
    const at::Tensor x = layer_norm(fields, d.norm1);
    fields = fields + mha(x, x, d.self_attn);
    fields = fields + mha(layer_norm(fields, d.norm2), memory, d.cross_attn);
    fields = fields + dense(gelu_erf(dense(layer_norm(fields, d.norm3), d.linear1_weight,
                                         d.linear1_bias)),
                             d.linear2_weight, d.linear2_bias);
  }
  fields = layer_norm(fields, field_norm_);

  // Scores: lexical prior + gated (cosine + residual MLP).
  const at::Tensor anchors = normalize(question_vectors + global.unsqueeze(0)).index_select(0, option_q);
  const at::Tensor prior = prior_scale_ * (normalize(lexical) * anchors).sum(-1);
  const at::Tensor options = layer_norm(routed, option_norm_);
  const at::Tensor field_rows = fields.index_select(0, option_q);
  const at::Tensor cosine = at::cosine_similarity(field_rows, options, 1, 1e-8);
  const at::Tensor features =
      at::cat({field_rows, options, field_rows * options, at::abs(field_rows - options)}, -1);
  const at::Tensor residual =
      dense(gelu_erf(dense(features, scorer1_weight_, scorer1_bias_)), scorer2_weight_, scorer2_bias_)
          .squeeze(-1);
  const at::Tensor logits =
      (prior + gate_ * (joint_scale_ * cosine + residual)).to(at::kCPU, at::kFloat).contiguous();

  record_logits out(questions.size());
  const float* p = logits.data_ptr<float>();
  for (std::size_t i = 0; i < questions.size(); ++i) {
    out[i].assign(p, p + questions[i].options.size());
    p += questions[i].options.size();
  }
  return out;
}

}  // namespace baton::clef::detail
