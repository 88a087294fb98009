// Answers: from per-option probabilities to SystemOne answers (choice, score, noul), the response
// and its wire form.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/error.hpp"
#include "core/json.hpp"
#include "core/request.hpp"

namespace baton {

// p_max is the Clef reference's confidence; margin is TypeSafe's normalised form:
// choice (K·p_max − 1)/(K − 1), score max(0, 1 − Σ p_i·|i − mode| / MAD).
enum class confidence_metric { p_max, margin };

std::optional<confidence_metric> parse_confidence_metric(std::string_view name) noexcept;
std::string_view to_string(confidence_metric m) noexcept;

double choice_confidence(std::span<const double> p, confidence_metric m) noexcept;
double score_confidence(std::span<const double> p, confidence_metric m) noexcept;

// Softmax at temperature 1 in float32, as the reference computes it (max-subtracted).
std::vector<double> softmax(std::span<const float> logits);

using probability_list = std::vector<std::pair<std::string, double>>;  // option id -> p, request order

struct noul_answer {
  double noul = 0;  // P(true)
};

struct choice_answer {
  std::string choice;
  double confidence = 0;
  probability_list probabilities;
};

struct score_answer {
  double score = 0;  // Σ k·p_k
  double confidence = 0;
  std::vector<std::pair<std::string, json>> legend;  // "0".. -> the caller's level, verbatim
  probability_list probabilities;
};

using answer = std::variant<noul_answer, choice_answer, score_answer>;

struct usage {
  std::int64_t input_tokens = 0;
  std::int64_t output_tokens = 0;
  std::optional<bool> state_truncated;  // baton always sends it; other servers may not
  // Tokens of the input served from the engine's prefix cache instead of recomputed; baton always
  // sends it (0 without a cache), other servers may not.
  std::optional<std::int64_t> cached_tokens;
};

struct response {
  std::string model;
  std::vector<std::pair<std::string, answer>> answers;  // request question order
  baton::usage usage;
};

// The answer to question `id`, or null when the response has none.
const answer* find_answer(const response& r, std::string_view id);

// What an engine found for one request: for each question (request order) a distribution over
// its options (request order: noul true, false; choice criteria keys; score levels).
struct decision {
  std::vector<std::vector<double>> probabilities;
  std::int64_t input_tokens = 0;
  std::int64_t cached_tokens = 0;  // of input_tokens, served from a prefix cache
  bool state_truncated = false;
};

// Builds the answers. Argmax, score and confidence use the unrounded probabilities; the first
// option in request order wins a tie. Fails (500 INFERENCE_FAILED) if the decision does not match
// the request's questions and options or holds a value that is not a probability.
result<response> make_response(const request& req, const decision& d, confidence_metric metric,
                               std::string model);

// The wire form: every probability, noul, score and confidence rounded to `decimals` places as
// Python's round() does (no rounding when decimals < 0); field order as the reference writes it.
void render_response(const response& r, std::string& out, int decimals = 4);
// Only its "answers" object, in the same form.
void render_answers(const response& r, std::string& out, int decimals = 4);
std::string render_response(const response& r, int decimals = 4);

// Reads a SystemOne response body (what another server sent). Unknown fields are ignored.
result<response> response_from_json(const json& body);

}  // namespace baton
