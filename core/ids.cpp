#include "core/ids.hpp"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>

namespace baton {

std::int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

std::string iso_utc(std::int64_t ms) {
  const std::int64_t seconds = ms >= 0 ? ms / 1000 : -((-ms + 999) / 1000);
  const auto millis = static_cast<int>(ms - seconds * 1000);
  const auto t = static_cast<std::time_t>(seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, millis);
  return buf;
}

std::string new_id(char prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char hex[] = "0123456789abcdef";
  std::string id(23, '-');
  id[0] = prefix;
  auto put = [&](std::size_t at, std::uint64_t v, int digits) {
    for (int i = digits - 1; i >= 0; --i, v >>= 4) id[at + i] = hex[v & 15];
  };
  put(2, static_cast<std::uint64_t>(unix_ms()), 12);
  put(15, rng(), 8);
  return id;
}

}  // namespace baton
