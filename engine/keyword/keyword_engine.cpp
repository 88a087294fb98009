#include "engine/keyword/keyword_engine.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/keyword/words.hpp"

namespace baton {

namespace {

std::string fingerprint_of(const keyword_parameters& p) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "%s;bm25;k1=%g;b=%g;temperature=%g", keyword_engine::model_name, p.k1, p.b,
                p.temperature);
  return buf;
}

// Word overlap with a yes/no proposition says nothing about whether it holds; the sides the
// caller describes can be compared with the state.
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
  description_.description = "baton's embedded keyword engine: BM25 word overlap, no weights";
  description_.release_date = release_date;
}

std::vector<result<decision>> keyword_engine::decide(std::span<const request> batch) {
  std::vector<result<decision>> out;
  out.reserve(batch.size());
  for (const request& r : batch) out.emplace_back(decide_one(r));
  return out;
}

std::size_t keyword_engine::hash_words(const json& v, std::vector<std::uint64_t>& out, std::size_t* bytes) {
  const std::string* text = &text_;
  if (v.is_string()) {
    text = &v.get_ref<const std::string&>();
  } else {
    text_.clear();
    render_text(v, text_);
  }
  if (bytes) *bytes += text->size();
  return words::append_hashes(*text, out);
}

const keyword_engine::option_index& keyword_engine::index_of(const question& q) {
  // Schemas compiled from one tool registry repeat from request to request: the options' words
  // are read once per distinct (type, criteria).
  const std::uint64_t key = std::hash<json>{}(q.criteria) * 3 + static_cast<std::uint64_t>(q.type);
  if (auto it = cache_.find(key); it != cache_.end()) {
    const option_index& hit = it->second;
    if (hit.type == q.type && hit.criteria == q.criteria) return hit;
  }
  build_index(q, scratch_index_);
  // Large option sets are not kept (a hash collision is not either): the cache stays small.
  if (scratch_index_.text_bytes > max_cached_text_bytes || cache_.contains(key)) return scratch_index_;
  if (cache_.size() >= max_cached_schemas) cache_.clear();
  option_index& kept = cache_[key];
  kept = std::move(scratch_index_);
  return kept;
}

std::size_t keyword_engine::instruction_words(const question& q) {
  text_.clear();
  append_instruction_text(q, text_);
  option_terms_.clear();
  return words::append_hashes(text_, option_terms_);
}

void keyword_engine::build_index(const question& q, option_index& index) {
  const std::size_t n = q.option_count();
  index.type = q.type;
  index.criteria = q.criteria;
  index.options = n;
  index.words = 0;
  index.text_bytes = 0;
  index.terms.clear();
  index.weights.clear();

  // A noul question is judged only when the caller describes both sides.
  if (n < 2 || (q.type == question_type::noul && !noul_has_own_sides(q))) return;

  postings_.clear();
  doc_length_.assign(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    // Score levels and noul sides are positions, not words: only a choice label is read.
    option_terms_.clear();
    if (q.type == question_type::choice) {
      words::append_hashes(q.choice_label(i), option_terms_);
      index.text_bytes += q.choice_label(i).size();
    }
    if (const json& desc = q.option_description(i); !desc.is_null()) hash_words(desc, option_terms_, &index.text_bytes);
    for (std::uint64_t term : option_terms_) postings_.push_back({term, static_cast<std::uint32_t>(i)});
    doc_length_[i] = static_cast<std::uint32_t>(option_terms_.size());
    index.words += option_terms_.size();
  }
  double avg_length = 0;
  for (std::uint32_t len : doc_length_) avg_length += len;
  avg_length = std::max(1.0, avg_length / static_cast<double>(n));

  std::sort(postings_.begin(), postings_.end(), [](const posting& x, const posting& y) {
    return x.term != y.term ? x.term < y.term : x.option < y.option;
  });
  const double k1 = params_.k1;
  const double b = params_.b;
  for (std::size_t g = 0; g < postings_.size();) {
    std::size_t end = g;
    std::size_t df = 0;
    for (; end < postings_.size() && postings_[end].term == postings_[g].term; ++end)
      if (end == g || postings_[end].option != postings_[end - 1].option) ++df;
    // A word every option has cannot tell them apart.
    if (df < n) {
      const double idf = std::log(1.0 + (static_cast<double>(n - df) + 0.5) / (static_cast<double>(df) + 0.5));
      index.terms.push_back({postings_[g].term, static_cast<std::uint32_t>(index.weights.size()), 0});
      for (std::size_t k = g; k < end;) {
        const std::uint32_t option = postings_[k].option;
        double tf = 0;
        for (; k < end && postings_[k].option == option; ++k) tf += 1;
        const double norm = 1.0 - b + b * doc_length_[option] / avg_length;
        index.weights.push_back({option, idf * tf * (k1 + 1.0) / (tf + k1 * norm)});
      }
      index.terms.back().weights_end = static_cast<std::uint32_t>(index.weights.size());
    }
    g = end;
  }
}

decision keyword_engine::decide_one(const request& r) {
  decision d;
  d.probabilities.reserve(r.questions.size());

  // The query: the state's words (a JSON state is rendered as the reference renders it).
  query_.clear();
  std::int64_t words_read = static_cast<std::int64_t>(words::append_hashes(state_text(r, text_), query_));
  std::sort(query_.begin(), query_.end());

  const double k1 = params_.k1;
  for (const question& q : r.questions) {
    // The instructions are read (and counted) but not scored: they are the same for every
    // option, so they cannot tell options apart, and words they share with option labels would
    // weigh against those labels.
    words_read += static_cast<std::int64_t>(instruction_words(q));
    const option_index& index = index_of(q);
    words_read += static_cast<std::int64_t>(index.words);
    scores_.assign(index.options, 0.0f);
    for (const option_index::term& t : index.terms) {
      const auto [lo, hi] = std::equal_range(query_.begin(), query_.end(), t.hash);
      if (lo == hi) continue;
      const auto qtf = static_cast<double>(hi - lo);
      const double query_weight = qtf * (k1 + 1.0) / (qtf + k1);
      for (std::uint32_t w = t.weights_begin; w < t.weights_end; ++w)
        scores_[index.weights[w].option] += static_cast<float>(query_weight * index.weights[w].weight);
    }
    for (float& s : scores_) s = static_cast<float>(s / params_.temperature);
    d.probabilities.push_back(softmax(scores_));
  }
  d.input_tokens = words_read;
  d.state_truncated = false;
  return d;
}

}  // namespace baton
