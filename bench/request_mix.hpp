// Deterministic mixes of SystemOne requests for the benchmarks: conversation or ticket states (text
// or JSON), a "which tool next" choice, and parameter, urgency and "needs a person" questions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace baton::bench {

enum class mix_profile {
  routing,  // agent routing: 40-90 word states, 4-12 tools, 3-4 questions (about 1.4 KB a request)
  compact,  // the size of the spec's examples: one or two sentences, 1-3 questions of 2-4 options (about 0.4 KB)
};

// `count` request bodies, one JSON object each (no newlines), the same for the same seed.
std::vector<std::string> request_mix(std::size_t count, mix_profile profile = mix_profile::routing,
                                     std::uint64_t seed = 1);

}  // namespace baton::bench
