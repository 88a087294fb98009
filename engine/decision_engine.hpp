// The engine interface: a batch of validated requests in, one decision or error per
// request out. Records are independent: a batch never changes a record's answer (its
// probabilities only within the rounding of kernels that run on a different shape).
#pragma once

#include <cstdint>
#include <optional>
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

// An engine's prefix cache (the clef engine's: engine/clef/prefix_cache.hpp), for /metrics.
struct prefix_cache_stats {
  std::int64_t hits = 0, misses = 0;  // records that reused a cached prefix, records that did not
  std::int64_t evictions = 0;         // entries dropped to stay within max_bytes
  std::int64_t cached_tokens = 0;     // tokens served from the cache instead of recomputed, in all
  std::int64_t entries = 0, bytes = 0, max_bytes = 0;
};

class decision_engine {
 public:
  virtual ~decision_engine() = default;

  virtual const engine_description& describe() const noexcept = 0;

  // One result per request, in order. Requests must have passed validation with describe().limits.
  virtual std::vector<result<decision>> decide(std::span<const request> batch) = 0;

  // How many tokens of the request's state the engine would cut from its end to fit its context
  // window (0: it fits, or the engine has none). The schema compiler drops old events instead.
  // The request's own refusals (an over-long schema) come back as errors, as decide() gives them.
  // Called from I/O threads while decide() runs: it must be safe alongside it.
  virtual result<std::size_t> state_overflow(const request&) {
    return result<std::size_t>(boost::system::in_place_value, std::size_t{0});
  }

  // The prefix cache's counters; none when the engine keeps no cache (or it is turned off). Called
  // from /metrics while decide() runs.
  virtual std::optional<prefix_cache_stats> cache_stats() const { return std::nullopt; }
};

}  // namespace baton
