// What the load drivers (ws_load, http_load) share: reading their numeric flags and summarising
// latency samples.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace baton::bench {

// A positive decimal number, the whole of `text`.
inline bool read_number(const char* text, std::size_t& out) {
  const char* end = text + std::strlen(text);
  const auto [p, ec] = std::from_chars(text, end, out);
  return ec == std::errc() && p == end && out > 0;
}

// A command-line flag `--name VALUE`: text, or a positive number.
struct flag {
  std::string_view name;
  std::string* text = nullptr;
  std::size_t* number = nullptr;
};

// Reads every `--name VALUE` pair; false after printing the problem and `usage` to stderr.
inline bool parse_flags(int argc, char** argv, std::initializer_list<flag> flags, const char* usage) {
  if (argc % 2 == 0) {
    std::fputs(usage, stderr);
    return false;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    const auto f = std::find_if(flags.begin(), flags.end(), [&](const flag& x) { return x.name == argv[i]; });
    if (f == flags.end()) {
      std::fprintf(stderr, "unknown flag %s\n%s", argv[i], usage);
      return false;
    }
    if (f->text) {
      *f->text = argv[i + 1];
    } else if (!read_number(argv[i + 1], *f->number)) {
      std::fprintf(stderr, "%s needs a positive number\n%s", argv[i], usage);
      return false;
    }
  }
  return true;
}

struct latency_summary {
  double p50 = 0, p90 = 0, p99 = 0, max = 0;
};

// Percentiles by nearest rank; reorders `ms`.
inline latency_summary summarise(std::vector<double>& ms) {
  latency_summary s;
  if (ms.empty()) return s;
  auto at = [&](double q) {
    const std::size_t k = std::min(ms.size() - 1, static_cast<std::size_t>(q * double(ms.size() - 1) + 0.5));
    std::nth_element(ms.begin(), ms.begin() + static_cast<std::ptrdiff_t>(k), ms.end());
    return ms[k];
  };
  s.p50 = at(0.50);
  s.p90 = at(0.90);
  s.p99 = at(0.99);
  s.max = *std::max_element(ms.begin(), ms.end());
  return s;
}

}  // namespace baton::bench
