// Tokenizer throughput (Google Benchmark) on ~300 KB of English prose mixed with JSON, with the real
// Qwen3-Omni tokenizer.json. "cold" empties the piece cache before every pass over the text, "warm"
// keeps it; bytes_per_second is the figure to read.
#include <benchmark/benchmark.h>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/tokenizer/tokenizer.hpp"

namespace {

using baton::tokenizer;

const tokenizer& qwen() {
  static const auto t = tokenizer::load(BATON_TEST_DATA "/vectors/tokenizer/qwen3_omni_tokenizer.json");
  return *t;
}

// Deterministic pseudo-random text: paragraphs of English sentences alternating with JSON records.
std::string mixed_text(std::size_t bytes) {
  constexpr std::array<std::string_view, 48> words = {
      "the", "customer", "asked", "whether", "their", "refund", "was", "processed", "before", "shipping",
      "invoice", "overdue", "payment", "account", "support", "team", "reviewed", "order", "delivery", "status",
      "and", "of", "to", "in", "is", "that", "for", "with", "on", "as",
      "quickly", "because", "policy", "requires", "manager", "approval", "within", "business", "days", "however",
      "we", "can't", "confirm", "it's", "already", "received", "complaint", "escalated"};
  constexpr std::array<std::string_view, 8> keys = {"id", "vendor", "total", "currency", "status", "items", "note", "created_at"};
  std::uint64_t state = 0x2545F4914F6CDD1Dull;
  const auto next = [&](std::uint64_t n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (state >> 33) % n;
  };
  std::string text;
  while (text.size() < bytes) {
    for (int s = 0, sentences = 3 + static_cast<int>(next(4)); s < sentences; ++s) {
      const int n = 6 + static_cast<int>(next(12));
      for (int w = 0; w < n; ++w) {
        std::string word(words[next(words.size())]);
        if (w == 0) word[0] = static_cast<char>(word[0] - 'a' + 'A');
        text += word;
        if (w + 1 < n) text += next(8) == 0 ? ", " : " ";
      }
      if (next(5) == 0) ((text += " (ref ") += std::to_string(next(100000))) += ')';
      text += next(6) == 0 ? "? " : ". ";
    }
    text += "\n\n{";
    for (std::size_t k = 0; k < keys.size(); ++k) {
      ((text += '"') += keys[k]) += "\": ";
      switch (next(4)) {
        case 0: text += std::to_string(next(1000000)); break;
        case 1: ((text += std::to_string(next(10000))) += '.') += std::to_string(next(100)); break;
        case 2: ((((text += "[\"") += words[next(words.size())]) += "\", ") += std::to_string(next(50))) += ']'; break;
        default: ((((text += '"') += words[next(words.size())]) += ' ') += words[next(words.size())]) += '"';
      }
      text += k + 1 < keys.size() ? ", " : "}\n\n";
    }
  }
  return text;
}

const std::string& text() {
  static const std::string t = mixed_text(300 * 1024);
  return t;
}

void encode_cold(benchmark::State& state) {
  const tokenizer& t = qwen();
  std::vector<std::int32_t> ids;
  for (auto _ : state) {
    t.clear_cache();
    ids.clear();
    t.encode(text(), ids);
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * text().size()));
  state.counters["tokens"] = static_cast<double>(ids.size());
}
BENCHMARK(encode_cold)->Unit(benchmark::kMillisecond);

void encode_warm(benchmark::State& state) {
  const tokenizer& t = qwen();
  std::vector<std::int32_t> ids;
  t.encode(text(), ids);
  for (auto _ : state) {
    ids.clear();
    t.encode(text(), ids);
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * text().size()));
  state.counters["tokens"] = static_cast<double>(ids.size());
}
BENCHMARK(encode_warm)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
