#include "core/ids.hpp"

#include <chrono>
#include <random>

namespace baton {

std::int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
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
