#include "adapters/runtime/metrics.hpp"

#include "core/json.hpp"

namespace baton {

namespace {

// Seconds: from 100 µs (a keyword decision) to 10 s (a long clef record on CPU).
const std::vector<double> seconds_bounds = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                            0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,     10};
const std::vector<double> batch_bounds = {1, 2, 4, 8, 16, 32, 64, 128, 256};

std::string_view stage_name(metrics::stage s) {
  switch (s) {
    case metrics::stage::queue: return "queue";
    case metrics::stage::engine: return "engine";
    case metrics::stage::policy: return "policy";
    case metrics::stage::log: return "log";
    case metrics::stage::total: return "total";
  }
  return "?";
}

// A label value: backslash, double quote and newline escaped, as the text format wants.
void label(std::string& out, std::string_view name, std::string_view value) {
  out += name;
  out += "=\"";
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  out += '"';
}

void header(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

void number(std::string& out, double v) { render_json(json(v), out, false); }

std::string label_text(int v) { return std::to_string(v); }
const std::string& label_text(const std::string& v) { return v; }

// A counter keyed by two label values.
template <class Key>
void write_counter(std::string& out, std::string_view name, std::string_view help, std::string_view first,
                   std::string_view second, const std::map<Key, std::uint64_t>& values) {
  header(out, name, "counter", help);
  for (const auto& [k, n] : values) {
    out += name;
    out += '{';
    label(out, first, label_text(k.first));
    out += ',';
    label(out, second, label_text(k.second));
    out += "} " + std::to_string(n) + '\n';
  }
}

}  // namespace

void metrics::observe(histogram& h, const std::vector<double>& bounds, double value) {
  if (h.counts.empty()) h.counts.assign(bounds.size() + 1, 0);
  std::size_t i = 0;
  while (i < bounds.size() && value > bounds[i]) ++i;
  ++h.counts[i];
  h.sum += value;
  ++h.count;
}

void metrics::request(std::string_view endpoint, int status) {
  std::lock_guard lock(mutex_);
  ++requests_[{std::string(endpoint), status}];
}

void metrics::decision(std::string_view source, std::string_view lane) {
  std::lock_guard lock(mutex_);
  ++decisions_[{std::string(source), std::string(lane)}];
}

std::uint64_t metrics::decisions(std::string_view source, std::string_view lane) const {
  std::lock_guard lock(mutex_);
  const auto it = decisions_.find({std::string(source), std::string(lane)});
  return it == decisions_.end() ? 0 : it->second;
}

void metrics::engine_error(std::string_view source, std::string_view code) {
  std::lock_guard lock(mutex_);
  ++engine_errors_[{std::string(source), std::string(code)}];
}

void metrics::tool_run(std::string_view tool, bool ok) {
  std::lock_guard lock(mutex_);
  ++tool_runs_[{std::string(tool), ok ? "ok" : "failed"}];
}

void metrics::resolution(std::string_view outcome, std::string_view by) {
  std::lock_guard lock(mutex_);
  ++resolutions_[{std::string(outcome), std::string(by)}];
}

void metrics::stage_ms(std::string_view source, stage s, double ms) {
  std::lock_guard lock(mutex_);
  observe(stages_[{std::string(source), s}], seconds_bounds, ms / 1000.0);
}

void metrics::batch(std::size_t size) {
  std::lock_guard lock(mutex_);
  observe(batches_, batch_bounds, double(size));
}

std::string metrics::render(const scraped& now) const {
  std::string out;
  out.reserve(8192);
  std::lock_guard lock(mutex_);

  write_counter(out, "baton_http_requests_total", "HTTP requests answered, by endpoint and status.", "endpoint",
                "status", requests_);
  write_counter(out, "baton_decisions_total",
                "Decisions made, by source (agent or systemone) and lane (the action; answered for SystemOne).",
                "source", "lane", decisions_);
  write_counter(out, "baton_engine_errors_total", "Requests the engine failed or did not answer in time, by code.",
                "source", "code", engine_errors_);
  write_counter(out, "baton_tool_runs_total", "Tool runs baton made itself (http, command), by tool and outcome (ok or failed).",
                "tool", "outcome", tool_runs_);
  write_counter(out, "baton_resolutions_total",
                "Escalations resolved, by outcome (execute or deny) and by whom (reviewer or deadline).", "outcome", "by",
                resolutions_);

  auto write_histogram = [&](std::string_view name, std::string_view labels, const histogram& h,
                             const std::vector<double>& bounds) {
    std::uint64_t cumulative = 0;
    for (std::size_t i = 0; i <= bounds.size(); ++i) {
      cumulative += h.counts.empty() ? 0 : h.counts[i];
      out += name;
      out += "_bucket{";
      out += labels;
      if (!labels.empty()) out += ',';
      out += "le=\"";
      if (i < bounds.size()) {
        number(out, bounds[i]);
      } else {
        out += "+Inf";
      }
      out += "\"} " + std::to_string(cumulative) + '\n';
    }
    for (const std::string_view suffix : {"_sum", "_count"}) {
      out += name;
      out += suffix;
      if (!labels.empty()) {
        out += '{';
        out += labels;
        out += '}';
      }
      out += ' ';
      if (suffix == "_sum") {
        number(out, h.sum);
      } else {
        out += std::to_string(h.count);
      }
      out += '\n';
    }
  };

  header(out, "baton_stage_seconds", "histogram",
         "Time per decision stage (queue: waiting for the engine; engine; policy; log: until the row is "
         "committed; total), by source.");
  for (const auto& [k, h] : stages_) {
    std::string labels;
    label(labels, "source", k.first);
    labels += ',';
    label(labels, "stage", stage_name(k.second));
    write_histogram("baton_stage_seconds", labels, h, seconds_bounds);
  }
  header(out, "baton_engine_batch_size", "histogram", "Requests per engine call.");
  write_histogram("baton_engine_batch_size", "", batches_, batch_bounds);

  // One header per name: a labelled metric's series follow it.
  const auto series = [&](const std::vector<gauge>& all, const char* type) {
    for (std::size_t i = 0; i < all.size(); ++i) {
      const gauge& g = all[i];
      if (i == 0 || all[i - 1].name != g.name) header(out, g.name, type, g.help);
      out += g.name + (g.labels.empty() ? "" : "{" + g.labels + "}") + ' ';
      number(out, g.value);
      out += '\n';
    }
  };
  series(now.gauges, "gauge");
  series(now.counters, "counter");
  if (const auto& cache = now.cache) {
    auto write_count = [&](std::string_view name, std::string_view type, std::string_view help, std::int64_t value) {
      header(out, name, type, help);
      out += name;
      out += ' ';
      out += std::to_string(value);
      out += '\n';
    };
    // The engine counts: these are its totals since it started.
    write_count("baton_prefix_cache_hits_total", "counter", "Records that reused a prefix from the engine's cache.",
                cache->hits);
    write_count("baton_prefix_cache_misses_total", "counter", "Records that found no prefix in the engine's cache.",
                cache->misses);
    write_count("baton_prefix_cache_evictions_total", "counter",
                "Prefix cache entries dropped to stay within its max_bytes.", cache->evictions);
    write_count("baton_prefix_cache_cached_tokens_total", "counter",
                "Input tokens served from the prefix cache instead of recomputed.", cache->cached_tokens);
    write_count("baton_prefix_cache_entries", "gauge", "Prefixes the cache holds.", cache->entries);
    write_count("baton_prefix_cache_bytes", "gauge", "Bytes the prefix cache holds.", cache->bytes);
    write_count("baton_prefix_cache_max_bytes", "gauge", "Bytes the prefix cache may hold.", cache->max_bytes);
  }
  return out;
}

}  // namespace baton
