// Per-request costs of the decide path with the keyword engine (Google Benchmark). Each counter
// is per request; "faults" are minor page faults per request (first touches of memory).
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include "bench/request_mix.hpp"
#include "core/answers.hpp"
#include "core/request.hpp"
#include "engine/keyword/keyword_engine.hpp"

namespace {

using namespace baton;

using bench::mix_profile;

const std::vector<std::string>& mix(mix_profile profile) {
  static const std::vector<std::string> routing = bench::request_mix(1000, mix_profile::routing);
  static const std::vector<std::string> compact = bench::request_mix(1000, mix_profile::compact);
  return profile == mix_profile::routing ? routing : compact;
}

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

void report(benchmark::State& state, long faults_before, std::size_t bytes) {
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
  state.counters["faults"] = benchmark::Counter(static_cast<double>(minor_faults() - faults_before),
                                                benchmark::Counter::kAvgIterations);
}

void parse(benchmark::State& state, mix_profile profile) {
  const auto& m = mix(profile);
  const auto limits = keyword_engine().describe().limits;
  std::size_t i = 0, bytes = 0;
  const long faults = minor_faults();
  for (auto _ : state) {
    const std::string& body = m[i++ % m.size()];
    bytes += body.size();
    auto r = parse_request(body, limits);
    benchmark::DoNotOptimize(r);
  }
  report(state, faults, bytes);
}
BENCHMARK_CAPTURE(parse, routing, mix_profile::routing);
BENCHMARK_CAPTURE(parse, compact, mix_profile::compact);

void keyword_decide(benchmark::State& state, mix_profile profile) {
  keyword_engine engine;
  std::vector<request> requests;
  for (const auto& body : mix(profile)) requests.push_back(*parse_request(body, engine.describe().limits));
  std::size_t i = 0;
  const long faults = minor_faults();
  for (auto _ : state) {
    auto d = engine.decide_one(requests[i++ % requests.size()]);
    benchmark::DoNotOptimize(d);
  }
  report(state, faults, 0);
}
BENCHMARK_CAPTURE(keyword_decide, routing, mix_profile::routing);
BENCHMARK_CAPTURE(keyword_decide, compact, mix_profile::compact);

void answer_and_render(benchmark::State& state, mix_profile profile) {
  keyword_engine engine;
  std::vector<request> requests;
  std::vector<decision> decisions;
  for (const auto& body : mix(profile)) {
    requests.push_back(*parse_request(body, engine.describe().limits));
    decisions.push_back(engine.decide_one(requests.back()));
  }
  std::string out;
  std::size_t i = 0;
  const long faults = minor_faults();
  for (auto _ : state) {
    const std::size_t k = i++ % requests.size();
    out.clear();
    render_response(*make_response(requests[k], decisions[k], confidence_metric::p_max, "baton-keyword-1"), out);
    benchmark::DoNotOptimize(out.data());
  }
  report(state, faults, 0);
}
BENCHMARK_CAPTURE(answer_and_render, routing, mix_profile::routing);
BENCHMARK_CAPTURE(answer_and_render, compact, mix_profile::compact);

// JSON text in, JSON text out: what `baton decide` does per JSONL line.
void end_to_end(benchmark::State& state, mix_profile profile) {
  keyword_engine engine;
  const auto& m = mix(profile);
  std::string out;
  std::size_t i = 0, bytes = 0;
  const long faults = minor_faults();
  for (auto _ : state) {
    const std::string& body = m[i++ % m.size()];
    bytes += body.size();
    auto r = parse_request(body, engine.describe().limits);
    out.clear();
    render_response(*make_response(*r, engine.decide_one(*r), confidence_metric::p_max, "baton-keyword-1"), out);
    benchmark::DoNotOptimize(out.data());
  }
  report(state, faults, bytes);
}
BENCHMARK_CAPTURE(end_to_end, routing, mix_profile::routing);
BENCHMARK_CAPTURE(end_to_end, compact, mix_profile::compact);

}  // namespace

BENCHMARK_MAIN();
