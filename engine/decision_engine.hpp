// The engine interface (DESIGN §3): a batch of validated requests in, one decision or error per
// request out. Records are independent: a batch never changes a record's answer (its
// probabilities only within the rounding of kernels that run on a different shape).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "core/answers.hpp"
#include "core/error.hpp"
#include "core/limits.hpp"
#include "core/request.hpp"

namespace baton {

struct engine_description {
  std::string model_id;     // what responses name as `model`
  std::string fingerprint;  // identifies the weights or parameters that produced a decision
  request_limits limits;    // what the model accepts; requests are validated against these
  std::string description;  // one line for GET /v1/models
  std::string release_date; // YYYY-MM-DD, for GET /v1/models
};

class decision_engine {
 public:
  virtual ~decision_engine() = default;

  virtual const engine_description& describe() const noexcept = 0;

  // One result per request, in order. Requests must have passed validation with describe().limits.
  virtual std::vector<result<decision>> decide(std::span<const request> batch) = 0;
};

}  // namespace baton
