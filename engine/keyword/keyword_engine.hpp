// The embedded keyword engine: no weights, deterministic, microseconds per decision.
// Each option of a question is a BM25 document (a choice label and the option's description); the
// state's words are the query; scores / temperature go through a softmax.
#pragma once

#include <unordered_map>

#include "engine/decision_engine.hpp"

namespace baton {

struct keyword_parameters {
  double k1 = 1.2;           // term-frequency saturation
  double b = 0.75;           // option-length normalisation
  double temperature = 0.5;  // one distinguishing word in common gives p_max ≈ 0.8 of 3 options
};

// Not thread-safe: it keeps scratch buffers and a cache of option indexes. Use one per thread.
class keyword_engine final : public decision_engine {
 public:
  static constexpr const char* model_name = "baton-keyword-1";
  static constexpr const char* release_date = "2026-12-03";  // when these parameters were fixed

  explicit keyword_engine(keyword_parameters p = {});

  const engine_description& describe() const noexcept override { return description_; }
  std::vector<result<decision>> decide(std::span<const request> batch) override;

  // One request, the same as decide() on a batch of one.
  decision decide_one(const request& r);

 private:
  // What a question's options contribute, ready to score against any state: for each word that
  // tells options apart, idf · the BM25 term weight in each option that has it.
  struct option_index {
    question_type type = question_type::noul;
    json criteria;
    std::size_t options = 0;
    std::size_t words = 0;       // words read from the options
    std::size_t text_bytes = 0;  // bytes of option text read
    struct term {
      std::uint64_t hash;
      std::uint32_t weights_begin;
      std::uint32_t weights_end;
    };
    struct weight {
      std::uint32_t option;
      double weight;
    };
    std::vector<term> terms;
    std::vector<weight> weights;
  };
  // At most 1,024 schemas of at most 16 KiB of option text each are kept.
  static constexpr std::size_t max_cached_schemas = 1024;
  static constexpr std::size_t max_cached_text_bytes = 16u << 10;

  const option_index& index_of(const question& q);
  void build_index(const question& q, option_index& index);
  std::size_t instruction_words(const question& q);
  // Appends the word hashes of a value's text (strings as they are, JSON rendered); returns how
  // many, and adds the text's length to *bytes when given.
  std::size_t hash_words(const json& v, std::vector<std::uint64_t>& out, std::size_t* bytes = nullptr);

  keyword_parameters params_;
  engine_description description_;
  // Reused between requests: no allocation once warm.
  std::string text_;
  std::vector<std::uint64_t> query_;
  std::vector<std::uint64_t> option_terms_;
  struct posting {
    std::uint64_t term;
    std::uint32_t option;
  };
  std::vector<posting> postings_;
  std::vector<std::uint32_t> doc_length_;
  std::vector<float> scores_;
  std::unordered_map<std::uint64_t, option_index> cache_;
  option_index scratch_index_;
};

}  // namespace baton
