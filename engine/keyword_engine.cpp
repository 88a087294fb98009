#include "engine/keyword_engine.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/words.hpp"

namespace baton {

namespace {

std::string fingerprint_of(const keyword_parameters& p) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "%s;bm25;k1=%g;b=%g;temperature=%g", keyword_engine::model_name, p.k1, p.b,
                p.temperature);
  return buf;
}

// A noul question is judged only when the caller describes both sides: word overlap with a
// yes/no proposition says nothing about whether it holds.
bool noul_has_own_sides(const question& q) {
  if (!q.criteria.is_object()) return false;
  for (const char* side : {"true", "false"}) {
    auto it = q.criteria.find(side);
    if (it == q.criteria.end() || it->is_null()) return false;
  }
  return true;
}

}  // namespace

keyword_engine::keyword_engine(keyword_parameters p) : params_(p) {
  description_.model_id = model_name;
  description_.fingerprint = fingerprint_of(p);
  description_.limits = request_limits::text_only();
}

std::vector<result<decision>> keyword_engine::decide(std::span<const request> batch) {
  std::vector<result<decision>> out;
  out.reserve(batch.size());
  for (const request& r : batch) out.emplace_back(decide_one(r));
  return out;
}

decision keyword_engine::decide_one(const request& r) {
  decision d;
  d.probabilities.reserve(r.questions.size());

  // The query: the state's words (a JSON state is rendered as the reference renders it).
  text_.clear();
  render_text(r.state, text_);
  query_.clear();
  std::int64_t words_read = static_cast<std::int64_t>(words::append_hashes(text_, query_));
  std::sort(query_.begin(), query_.end());

  const double k1 = params_.k1;
  const double b = params_.b;
  for (const question& q : r.questions) {
    const std::size_t n = q.option_count();
    // The instructions are read (and counted) but not scored: they are the same for every
    // option, so they cannot tell options apart, and words they share with option labels would
    // weigh against those labels.
    text_.clear();
    append_instruction_text(q, text_);
    option_terms_.clear();
    words_read += static_cast<std::int64_t>(words::append_hashes(text_, option_terms_));

    const bool judged = q.type != question_type::noul || noul_has_own_sides(q);
    postings_.clear();
    doc_length_.assign(n, 0);
    for (std::size_t i = 0; i < n; ++i) {
      // Score levels and noul sides are positions, not words: only a choice label is read.
      std::size_t length = 0;
      option_terms_.clear();
      if (q.type == question_type::choice) length += words::append_hashes(q.choice_label(i), option_terms_);
      if (const json& desc = q.option_description(i); !desc.is_null()) {
        text_.clear();
        render_text(desc, text_);
        length += words::append_hashes(text_, option_terms_);
      }
      for (std::uint64_t term : option_terms_) postings_.push_back({term, static_cast<std::uint32_t>(i)});
      doc_length_[i] = static_cast<std::uint32_t>(length);
      words_read += static_cast<std::int64_t>(length);
    }

    scores_.assign(n, 0.0f);
    if (judged && n > 1) {
      double avg_length = 0;
      for (std::uint32_t len : doc_length_) avg_length += len;
      avg_length = std::max(1.0, avg_length / static_cast<double>(n));
      std::sort(postings_.begin(), postings_.end(), [](const posting& x, const posting& y) {
        return x.term != y.term ? x.term < y.term : x.option < y.option;
      });
      for (std::size_t g = 0; g < postings_.size();) {
        std::size_t end = g;
        std::size_t df = 0;
        for (; end < postings_.size() && postings_[end].term == postings_[g].term; ++end)
          if (end == g || postings_[end].option != postings_[end - 1].option) ++df;
        const auto [lo, hi] = std::equal_range(query_.begin(), query_.end(), postings_[g].term);
        const auto qtf = static_cast<double>(hi - lo);
        // A word every option has cannot tell them apart.
        if (qtf > 0 && df < n) {
          const double idf = std::log(1.0 + (static_cast<double>(n - df) + 0.5) / (static_cast<double>(df) + 0.5));
          const double query_weight = qtf * (k1 + 1.0) / (qtf + k1);
          for (std::size_t k = g; k < end;) {
            const std::uint32_t option = postings_[k].option;
            double tf = 0;
            for (; k < end && postings_[k].option == option; ++k) tf += 1;
            const double norm = 1.0 - b + b * doc_length_[option] / avg_length;
            scores_[option] += static_cast<float>(idf * query_weight * tf * (k1 + 1.0) / (tf + k1 * norm));
          }
        }
        g = end;
      }
    }
    for (float& s : scores_) s = static_cast<float>(s / params_.temperature);
    d.probabilities.push_back(softmax(scores_));
  }
  d.input_tokens = words_read;
  d.state_truncated = false;
  return d;
}

}  // namespace baton
