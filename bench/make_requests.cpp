// Writes N requests of a benchmark mix as JSONL:
//   baton_make_requests N [routing|compact] [SEED] > requests.jsonl
#include <charconv>
#include <iostream>
#include <string_view>

#include "bench/request_mix.hpp"

int main(int argc, char** argv) {
  std::size_t n = 0;
  std::uint64_t seed = 1;
  auto number = [](const char* text, auto& out) {
    const std::string_view t(text);
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), out);
    return ec == std::errc() && p == t.data() + t.size();
  };
  const std::string_view profile = argc > 2 ? argv[2] : "routing";
  if (argc < 2 || argc > 4 || !number(argv[1], n) || (profile != "routing" && profile != "compact") ||
      (argc > 3 && !number(argv[3], seed))) {
    std::cerr << "usage: baton_make_requests N [routing|compact] [SEED]\n";
    return 64;
  }
  const auto mix = profile == "routing" ? baton::bench::mix_profile::routing : baton::bench::mix_profile::compact;
  for (const std::string& line : baton::bench::request_mix(n, mix, seed)) std::cout << line << '\n';
  return 0;
}
