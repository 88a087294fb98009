// Ids and clocks: decision and run ids that sort by creation time and do not repeat across restarts.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace baton {

// Unix time in milliseconds.
std::int64_t unix_ms();

// Milliseconds since `start` on the steady clock: the timings of decisions, stages and tool runs.
double ms_since(std::chrono::steady_clock::time_point start);

// Unix milliseconds as UTC ISO 8601, e.g. "2024-05-01T12:34:56.789Z".
std::string iso_utc(std::int64_t ms);

// "<prefix>-<12 hex digits of unix ms>-<8 random hex digits>", e.g. "d-0192b7c5a3e1-4f2a9c01".
std::string new_id(char prefix);

}  // namespace baton
