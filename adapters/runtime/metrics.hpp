// What the server has done, for GET /metrics in Prometheus' text format: requests by endpoint and
// status, decisions by source and lane, engine errors, tool runs, resolutions, batch sizes and
// per-stage latency histograms, and the engine's prefix cache. Thread-safe; the I/O threads, the engine worker and the log writer all record.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/decision_engine.hpp"

namespace baton {

class metrics {
 public:
  enum class stage { queue, engine, policy, log, total };

  void request(std::string_view endpoint, int status);
  // source: "systemone" or "agent"; lane: the action (execute, fallback, escalate, deny, finish)
  // or "answered" for a SystemOne decision.
  void decision(std::string_view source, std::string_view lane);
  void engine_error(std::string_view source, std::string_view code);
  void stage_ms(std::string_view source, stage s, double ms);
  void batch(std::size_t size);
  // A tool baton ran itself (http, command): outcome "ok" or "failed".
  void tool_run(std::string_view tool, bool ok);
  // An escalation's resolution is durable: outcome execute | deny, by reviewer | deadline.
  void resolution(std::string_view outcome, std::string_view by);
  std::uint64_t decisions(std::string_view source, std::string_view lane) const;

  // Gauges, and counters kept elsewhere, are read when scraped: name, help, value.
  struct gauge {
    std::string name;
    std::string help;
    double value = 0;
    std::string labels = {};  // `server="x"` (escaped by the caller); gauges of one name are consecutive
  };
  using counter = gauge;
  // What is read when scraped: the gauges, and the engine's prefix cache when it keeps one
  // (decision_engine::cache_stats), as baton_prefix_cache_* counters and gauges.
  struct scraped {
    std::vector<gauge> gauges;
    std::vector<counter> counters;
    std::optional<prefix_cache_stats> cache;
  };
  std::string render(const scraped& now) const;

 private:
  struct histogram {
    std::vector<std::uint64_t> counts;  // per bucket, not cumulative; the last is +Inf
    double sum = 0;
    std::uint64_t count = 0;
  };
  static void observe(histogram& h, const std::vector<double>& bounds, double value);

  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, std::uint64_t> requests_;
  std::map<std::pair<std::string, std::string>, std::uint64_t> decisions_;
  std::map<std::pair<std::string, std::string>, std::uint64_t> engine_errors_;
  std::map<std::pair<std::string, std::string>, std::uint64_t> tool_runs_;    // tool, outcome
  std::map<std::pair<std::string, std::string>, std::uint64_t> resolutions_;  // outcome, by
  std::map<std::pair<std::string, stage>, histogram> stages_;
  histogram batches_;
};

}  // namespace baton
