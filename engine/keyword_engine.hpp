// The embedded keyword engine (DESIGN §3): no weights, deterministic, microseconds per decision.
// Each option of a question is a BM25 document (a choice label and the option's description); the
// state's words are the query; scores / temperature go through a softmax.
#pragma once

#include "engine/decision_engine.hpp"

namespace baton {

struct keyword_parameters {
  double k1 = 1.2;           // term-frequency saturation
  double b = 0.75;           // option-length normalisation
  double temperature = 0.5;  // one distinguishing word in common gives p_max ≈ 0.79 of 3 options
};

class keyword_engine final : public decision_engine {
 public:
  static constexpr const char* model_name = "baton-keyword-1";

  explicit keyword_engine(keyword_parameters p = {});

  const engine_description& describe() const noexcept override { return description_; }
  std::vector<result<decision>> decide(std::span<const request> batch) override;

  // One request, the same as decide() on a batch of one.
  decision decide_one(const request& r);

 private:
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
};

}  // namespace baton
