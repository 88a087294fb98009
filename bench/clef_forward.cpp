// The Clef forward pass on a random release, mid-size or at Clef-Omni's real widths with a few
// layers (--shape real): load time, RSS and page faults, time per forward with its split by part
// (per layer, and the 48-layer forward it implies), and the MoE and attention throughput against
// the machine's matmul ceiling. Needs only libtorch and engine/clef/model, so it also builds
// against another libtorch. On a GPU the parts' timers synchronise the device (the ceiling is
// still the CPU's).
//
//   clef_forward [--dtype f32|bf16|int8|int4] [--shape mid|real] [--layers 2] [--threads 2]
//                [--tokens 512,2048,8192] [--warmup 1] [--runs 5] [--dir build/bench-release-[real-]<dtype>]
//                [--from build/bench-release-[real-]bf16] [--device cpu|cuda] [--init bench|transformers]
//                [--experts default|grouped|onednn|xsmm|blas] [--json]
//
// --experts grouped runs the MoE as the GPU's grouped matmuls (model_options::grouped_experts;
// on the CPU, or a libtorch without at::_grouped_mm, a matmul per expert stands in for them), to
// count its operations per layer anywhere; onednn, xsmm or blas puts the CPU's packed experts on
// that library instead of the one timed at load (model_options::experts), to compare them.
// --init transformers draws the weights as transformers initialises a model (bench/random_release.hpp),
// into build/bench-release-...-transformers: a second kind of random release, routed less evenly.
// int8: the bf16 release (--from, written first when missing) quantized by quantize_int8, its int8
// experts multiplied in bf16 where the device has bf16 arithmetic, in f32 elsewhere (as the engine
// chooses). int4: the same by quantize_int4 (groups of 128), its experts on baton's int4 kernel. --device cuda runs the forwards on a GPU (the matmul ceiling is
// still the CPU's).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/clef_measure.hpp"
#include "bench/random_release.hpp"
#include "engine/clef/model/blas_cpu.hpp"
#include "engine/clef/model/cpu_kernels.hpp"
#include "engine/clef/model/model.hpp"
#include "engine/clef/model/packed_linear.hpp"
#include "engine/clef/model/quantize.hpp"
#include "engine/clef/model/release.hpp"

namespace {

namespace fs = std::filesystem;
using namespace baton::clef;
using namespace baton::clef::bench;
using baton::clef::detail::packed_linear;
using clock_type = std::chrono::steady_clock;

// ---- process counters ----------------------------------------------------------------------

struct memory_snapshot {
  double rss_mib = 0, anon_mib = 0, file_mib = 0;
  double peak_mib = 0;  // the process's highest RSS so far (VmHWM)
};

memory_snapshot read_memory() {
  memory_snapshot m;
  std::ifstream in("/proc/self/status");
  std::string line;
  auto mib = [](const std::string& l) { return std::stod(l.substr(l.find(':') + 1)) / 1024.0; };
  while (std::getline(in, line)) {
    if (line.starts_with("VmRSS:")) m.rss_mib = mib(line);
    if (line.starts_with("RssAnon:")) m.anon_mib = mib(line);
    if (line.starts_with("RssFile:")) m.file_mib = mib(line);
    if (line.starts_with("VmHWM:")) m.peak_mib = mib(line);
  }
  return m;
}

struct faults {
  long minor = 0, major = 0;
};

faults read_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return {u.ru_minflt, u.ru_majflt};
}

faults operator-(faults a, faults b) { return {a.minor - b.minor, a.major - b.major}; }

double ms_since(clock_type::time_point start) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - start).count();
}

struct stats {
  double median = 0, min = 0, max = 0;
};

stats summarise(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return {n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2, v.front(), v.back()};
}

std::string blas_core() {
  const std::string name = baton::clef::blas_core_name();
  return name.empty() ? name : "OpenBLAS " + name;
}

// ---- matmul ceiling ------------------------------------------------------------------------

struct mm_figure {
  std::int64_t m, k, n;
  double gflops;  // median over the calls of one measurement
  bool packed = false;  // oneDNN on a packed weight, one matmul per thread, as the CPU experts run
  bool streamed = false;  // packed, each call on the next of as many weights as the layer has experts
  // packed for: "oneDNN"; "BLAS" (packed_linear::over_blas, no copy) or "libxsmm" (for_xsmm) as fp32
  // experts may run
  std::string library = "oneDNN";
};

mm_figure measure_mm(std::int64_t m, std::int64_t k, std::int64_t n, at::ScalarType type) {
  return {m, k, n, matmul_gflops(m, k, n, type)};
}

// The same shape as the CPU's experts run it: the weight packed once (packed_linear), every thread
// multiplying its own rows at once; GFLOP/s of all threads together. With `weights` > 1 each call
// takes the next of that many weights, so (as in a MoE layer) weights come from memory, not cache.
// With library "BLAS" the weights are multiplied as they are by the BLAS, with "libxsmm" packed for
// it (fp32 both), as the engine's experts are where that won at load.
mm_figure measure_packed(std::int64_t m, std::int64_t k, std::int64_t n, at::ScalarType type, std::int64_t weights = 1,
                         const std::string& library = "oneDNN") {
  std::vector<packed_linear> w;
  for (std::int64_t i = 0; i < weights; ++i) {
    const at::Tensor weight = at::randn({n, k}).to(type);
    w.push_back(library == "BLAS"      ? packed_linear::over_blas({weight})
                : library == "libxsmm" ? packed_linear::for_xsmm({weight})
                                       : packed_linear(weight));
  }
  const int threads = at::get_num_threads();
  std::vector<at::Tensor> xs, ys;  // outputs kept, as the experts' kernel keeps its buffers
  for (int i = 0; i < threads; ++i) {
    xs.push_back(at::randn({m, k}).to(type));
    ys.push_back(at::empty({m, n}, xs.back().options()));
  }
  const std::int64_t calls = std::max<std::int64_t>(4, weights);
  auto round = [&] {
    at::parallel_for(0, threads, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        const auto t = static_cast<std::size_t>(i);
        for (std::int64_t c = 0; c < calls; ++c) {
          w[static_cast<std::size_t>((c + i * weights / threads) % weights)].multiply(xs[t].data_ptr(), ys[t].data_ptr(), m);
        }
      }
    });
  };
  round();
  std::vector<double> seconds;
  const auto start = clock_type::now();
  while (seconds.size() < 5 || (ms_since(start) < 500 && seconds.size() < 1000)) {
    const auto t = clock_type::now();
    round();
    seconds.push_back(ms_since(t) / 1e3);
  }
  const double flops = 2.0 * static_cast<double>(calls * threads) * static_cast<double>(m * k) * static_cast<double>(n);
  return {m, k, n, flops / summarise(seconds).median / 1e9, true, weights > 1, library};
}

// The MoE's per-expert shape at each length (gate/up: tokens * top_k / experts rows), a 512-row
// block of it, and a big square; with oneDNN also the packed gate-and-up matmul at those row
// counts (what the MoE can reach at each length) and at wider blocks.
std::vector<mm_figure> measure_ceiling(const text_config& c,
                                       const std::vector<std::int64_t>& lengths,
                                       at::ScalarType type) {
  std::vector<std::int64_t> expert_rows;
  for (const auto t : lengths) expert_rows.push_back(std::max<std::int64_t>(1, t * c.experts_per_token / c.num_experts));
  std::vector<mm_figure> out;
  for (const auto rows : expert_rows) out.push_back(measure_mm(rows, c.hidden_size, c.moe_intermediate_size, type));
  out.push_back(measure_mm(512, c.hidden_size, c.moe_intermediate_size, type));
  out.push_back(measure_mm(2048, 2048, 2048, type));
  if (baton::clef::detail::onednn_runs(type)) {  // not bf16 on a CPU without avx512_core
    expert_rows.insert(expert_rows.end(), {256, 1024});
    for (const auto rows : expert_rows) out.push_back(measure_packed(rows, c.hidden_size, 2 * c.moe_intermediate_size, type));
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      out.push_back(measure_packed(expert_rows[i], c.hidden_size, 2 * c.moe_intermediate_size, type, c.num_experts));
    }
  }
  // What fp32 experts on the BLAS or on libxsmm can reach at each length: their weights from memory,
  // each thread its own expert.
  for (const auto& [library, here] : {std::pair{"BLAS", packed_linear::blas_available()},
                                      std::pair{"libxsmm", packed_linear::xsmm_available()}}) {
    if (type != at::kFloat || !here) continue;
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      out.push_back(
          measure_packed(expert_rows[i], c.hidden_size, 2 * c.moe_intermediate_size, type, c.num_experts, library));
    }
  }
  return out;
}

// ---- driver --------------------------------------------------------------------------------

struct arguments {
  fs::path dir;
  fs::path from;  // int8: the release to quantize (default: the bf16 release of the shape)
  bool real = false;  // --shape real: Clef-Omni's widths (real_text_config), `layers` of its 48
  std::int64_t layers = 0;  // 0: not given (2 with --shape real)
  std::string dtype = "f32";
  std::string device = "cpu";
  weight_init init = weight_init::bench;  // --init: how the random weights are drawn
  int threads = 2;
  std::int64_t score_budget_mib = 0;  // 0: the engine's default
  bool grouped_experts = false;       // --experts grouped
  expert_library experts = expert_library::measured;  // --experts onednn|xsmm|blas
  std::vector<std::int64_t> tokens = {512, 2048, 8192};  // long histories are the normal case
  int warmup = 1, runs = 5;
  bool json = false;
};

arguments parse_arguments(int argc, char** argv) {
  arguments a;
  for (int i = 1; i < argc; ++i) {
    const std::string key = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(key + " needs a value");
      return argv[++i];
    };
    if (key == "--dir") {
      a.dir = value();
    } else if (key == "--shape") {
      const std::string shape = value();
      if (shape != "mid" && shape != "real") throw std::runtime_error("--shape is mid or real");
      a.real = shape == "real";
    } else if (key == "--layers") {
      a.layers = std::stoll(value());
    } else if (key == "--from") {
      a.from = value();
    } else if (key == "--device") {
      a.device = value();
    } else if (key == "--dtype") {
      a.dtype = value();
    } else if (key == "--threads") {
      a.threads = std::stoi(value());
    } else if (key == "--warmup") {
      a.warmup = std::stoi(value());
    } else if (key == "--runs") {
      a.runs = std::stoi(value());
    } else if (key == "--tokens") {
      a.tokens.clear();
      std::stringstream list(value());
      for (std::string item; std::getline(list, item, ',');) a.tokens.push_back(std::stoll(item));
    } else if (key == "--score-budget-mib") {
      a.score_budget_mib = std::stoll(value());
    } else if (key == "--init") {
      const std::string init = value();
      if (init != "bench" && init != "transformers") throw std::runtime_error("--init is bench or transformers");
      a.init = init == "bench" ? weight_init::bench : weight_init::transformers;
    } else if (key == "--experts") {
      const std::string experts = value();
      static const std::map<std::string, expert_library> libraries = {
          {"onednn", expert_library::onednn}, {"xsmm", expert_library::xsmm}, {"blas", expert_library::blas}};
      if (experts == "grouped") {
        a.grouped_experts = true;
      } else if (const auto it = libraries.find(experts); it != libraries.end()) {
        a.experts = it->second;
      } else if (experts != "default") {
        throw std::runtime_error("--experts is default, grouped, onednn, xsmm or blas");
      }
    } else if (key == "--json") {
      a.json = true;
    } else {
      throw std::runtime_error(
          "usage: clef_forward [--dtype f32|bf16|int8|int4] [--shape mid|real] [--layers N] [--threads N] "
          "[--tokens 512,2048,8192] [--warmup N] [--runs N] [--dir PATH] [--from PATH] [--device cpu|cuda] "
          "[--score-budget-mib N] [--init bench|transformers] [--experts default|grouped|onednn|xsmm|blas] [--json]");
    }
  }
  if (a.dtype != "f32" && a.dtype != "bf16" && a.dtype != "int8" && a.dtype != "int4") {
    throw std::runtime_error("--dtype is f32, bf16, int8 or int4");
  }
  if (a.runs < 1 || a.warmup < 0 || a.threads < 1 || a.tokens.empty()) {
    throw std::runtime_error("--runs and --threads must be positive, --warmup non-negative");
  }
  if (!a.real && a.layers != 0) throw std::runtime_error("--layers needs --shape real");
  if (a.real && a.layers == 0) a.layers = 2;
  if (a.real && (a.layers < 1 || a.layers > 48)) throw std::runtime_error("--layers is 1 to 48");
  const std::string shape = a.real ? "real-" : "";
  const std::string init = a.init == weight_init::bench ? "" : "-transformers";
  if (a.dir.empty()) a.dir = "build/bench-release-" + shape + a.dtype + init;
  if (a.from.empty()) a.from = "build/bench-release-" + shape + "bf16" + init;
  return a;
}

void print_memory(const char* when, const memory_snapshot& m) {
  std::printf("  RSS %-22s %8.1f MiB  (anon %7.1f, file-backed %7.1f; peak so far %.1f)\n", when, m.rss_mib,
              m.anon_mib, m.file_mib, m.peak_mib);
}

nlohmann::json memory_json(const memory_snapshot& m) {
  return {{"rss_mib", m.rss_mib}, {"anon_mib", m.anon_mib}, {"file_mib", m.file_mib}, {"peak_mib", m.peak_mib}};
}

nlohmann::json stats_json(const stats& s) {
  return {{"median", s.median}, {"min", s.min}, {"max", s.max}};
}

struct forward_figures {
  std::int64_t tokens = 0;
  stats total, embed, attention, moe, norms, head;
  faults first;           // the first forward at this length (the first of the process touches
  bool first_of_process;  // the weights)
  double minor_median = 0;  // per timed forward
  long major = 0;           // all timed forwards together
  memory_snapshot after_first, after_runs;
  std::vector<float> logits;  // equal across builds that compute the same thing
  double moe_flops = 0, attention_flops = 0;
  std::int64_t layers = 0;
  std::int64_t attention_ops = 0, moe_ops = 0;  // ATen operations per layer, the last timed forward
  // Routing of the record (medians over layers): experts with rows, rows of the busiest, and the
  // share of (token, slot) rows that land in experts with fewer than 16 rows (few-row matmuls).
  double active_experts = 0, busiest_rows = 0, few_row_share = 0;
  router_call closest;  // what a logit comparison between two builds is read against
  std::int64_t top_k = 0;

  // The thinker layers' share of the median forward, per layer, and the forward of Clef-Omni's 48
  // layers it implies (the embedding and the head are paid once either way).
  double per_layer_ms() const { return (total.median - embed.median - head.median) / static_cast<double>(layers); }
  double implied_48_layers_ms() const { return total.median + static_cast<double>(48 - layers) * per_layer_ms(); }
};

double median_of(std::vector<double> v) { return summarise(std::move(v)).median; }

// How the router spreads the record's tokens over the experts, from the traced router logits.
void measure_routing(model& m, const bench_record& r, forward_figures& f) {
  const text_config& c = m.files().text();
  std::vector<double> active, busiest, few;
  m.trace(r.ids, nullptr, [&](std::string_view stage, std::span<const float> values, std::int64_t rows) {
    if (!stage.starts_with("router_logits.")) return;
    const at::Tensor logits = at::from_blob(const_cast<float*>(values.data()), {rows, c.num_experts});
    const at::Tensor chosen = std::get<1>(at::topk(logits, c.experts_per_token, -1)).reshape({-1});
    fold_router_call(stage, values, rows, c, f.closest);
    const at::Tensor counts = at::bincount(chosen, {}, c.num_experts);
    active.push_back(counts.gt(0).sum().item<double>());
    busiest.push_back(counts.max().item<double>());
    few.push_back(counts.masked_select(counts.lt(16)).sum().item<double>() / static_cast<double>(chosen.numel()));
  });
  f.top_k = c.experts_per_token;
  f.active_experts = median_of(active);
  f.busiest_rows = median_of(busiest);
  f.few_row_share = median_of(few);
}

forward_figures time_forwards(model& m, std::int64_t tokens, const arguments& args,
                              bool first_of_process) {
  const text_config& c = m.files().text();
  // Seeded by the length, as always: the logits stay comparable across builds.
  const bench_record r = make_bench_record(tokens, c.vocab_size, static_cast<std::uint64_t>(tokens) * 7919 + 1);
  const record_input input{r.ids, r.questions};
  forward_figures f;
  f.tokens = tokens;
  f.first_of_process = first_of_process;
  std::vector<double> total, embed, attention, moe, norms, head, minor;
  for (int i = 0; i < args.warmup + args.runs; ++i) {
    const faults before = read_faults();
    const auto start = clock_type::now();
    const auto logits = m.forward({&input, 1});
    const double ms = ms_since(start);
    const faults used = read_faults() - before;
    if (i == 0) {
      f.first = used;
      f.after_first = read_memory();
      for (const auto& q : logits[0]) f.logits.insert(f.logits.end(), q.begin(), q.end());
    }
    if (i < args.warmup) continue;
    const forward_profile& p = m.last_profile();
    total.push_back(ms);
    embed.push_back(p.embed_ms);
    attention.push_back(p.attention_ms);
    moe.push_back(p.moe_ms);
    norms.push_back(p.norms_ms);
    head.push_back(p.head_ms);
    minor.push_back(static_cast<double>(used.minor));
    f.major += used.major;
    f.attention_ops = p.attention_ops / c.num_layers;
    f.moe_ops = p.moe_ops / c.num_layers;
  }
  f.after_runs = read_memory();
  f.total = summarise(total);
  f.embed = summarise(embed);
  f.attention = summarise(attention);
  f.moe = summarise(moe);
  f.norms = summarise(norms);
  f.head = summarise(head);
  f.minor_median = summarise(minor).median;
  f.layers = c.num_layers;
  measure_routing(m, r, f);

  const double n = static_cast<double>(tokens), h = static_cast<double>(c.hidden_size),
               layers = static_cast<double>(c.num_layers);
  const double q_width = static_cast<double>(c.num_heads * c.head_dim);
  const double kv_width = static_cast<double>(c.num_kv_heads * c.head_dim);
  f.moe_flops = n * static_cast<double>(c.experts_per_token) * 3 * 2 * h *
                static_cast<double>(c.moe_intermediate_size) * layers;
  // q, k, v, o projections plus the causal half of QK^T and PV: the useful work, not what the
  // query chunks compute.
  f.attention_flops = (2 * n * h * (2 * q_width + 2 * kv_width) + 4 * q_width * n * (n + 1) / 2) *
                      layers;
  return f;
}

void print_forward(const forward_figures& f, const arguments& args, double peak) {
  std::printf("\n  %lld tokens, %d warm-up + %d timed runs\n", static_cast<long long>(f.tokens),
              args.warmup, args.runs);
  std::printf("    %-10s %10s %10s %10s\n", "part", "median ms", "min", "max");
  auto row = [](const char* name, const stats& s) {
    std::printf("    %-10s %10.1f %10.1f %10.1f\n", name, s.median, s.min, s.max);
  };
  row("forward", f.total);
  row("attention", f.attention);
  row("moe", f.moe);
  row("norms", f.norms);
  row("embed", f.embed);
  row("head", f.head);
  std::printf("    %.0f tokens/s\n", static_cast<double>(f.tokens) / (f.total.median / 1e3));
  std::printf("    per layer %.1f ms; %lld layers here, 48 would take %.1f ms\n", f.per_layer_ms(),
              static_cast<long long>(f.layers), f.implied_48_layers_ms());
  std::printf("    ATen operations per layer: attention %lld, MoE %lld\n", static_cast<long long>(f.attention_ops),
              static_cast<long long>(f.moe_ops));
  const double moe = f.moe_flops / (f.moe.median / 1e3) / 1e9;
  const double attention = f.attention_flops / (f.attention.median / 1e3) / 1e9;
  std::printf("    MoE       %7.1f GFLOP/s = %4.1f %% of the ceiling\n", moe, 100 * moe / peak);
  std::printf("    attention %7.1f GFLOP/s = %4.1f %% (useful FLOPs: the causal half)\n", attention,
              100 * attention / peak);
  std::printf("    page faults: first forward%s %ld minor / %ld major; timed runs median %.0f "
              "minor, %ld major in all\n",
              f.first_of_process ? " of the process" : "", f.first.minor, f.first.major,
              f.minor_median, f.major);
  if (f.active_experts > 0) {
    std::printf("    routing (median of layers): %.0f experts with rows, the busiest %.0f rows, %.1f %% of rows in "
                "experts with < 16\n",
                f.active_experts, f.busiest_rows, 100 * f.few_row_share);
  }
  if (f.closest.margin >= 0) {
    auto ordinal = [](std::int64_t n) {
      const char* suffix = n % 100 / 10 == 1 ? "th" : n % 10 == 1 ? "st" : n % 10 == 2 ? "nd" : n % 10 == 3 ? "rd" : "th";
      return std::to_string(n) + suffix;
    };
    std::printf("    closest router call: %.3g between a token's %s and %s largest router logits (layer %lld, token "
                "%lld); moved by more, by any other summation order, it swaps an expert and the logits move\n",
                f.closest.margin, ordinal(f.top_k).c_str(), ordinal(f.top_k + 1).c_str(),
                static_cast<long long>(f.closest.layer), static_cast<long long>(f.closest.token));
  }
  print_memory("after first forward", f.after_first);
  print_memory("after the timed runs", f.after_runs);
  std::printf("    logits:");
  for (const float v : f.logits) std::printf(" %.9g", v);
  std::printf("\n");
}

nlohmann::json forward_json(const forward_figures& f, const arguments& args, double peak) {
  const double moe = f.moe_flops / (f.moe.median / 1e3) / 1e9;
  const double attention = f.attention_flops / (f.attention.median / 1e3) / 1e9;
  return {{"kind", "forward"},
          {"dtype", args.dtype},
          {"threads", args.threads},
          {"tokens", f.tokens},
          {"runs", args.runs},
          {"total_ms", stats_json(f.total)},
          {"tokens_per_s", static_cast<double>(f.tokens) / (f.total.median / 1e3)},
          {"embed_ms", stats_json(f.embed)},
          {"attention_ms", stats_json(f.attention)},
          {"moe_ms", stats_json(f.moe)},
          {"norms_ms", stats_json(f.norms)},
          {"head_ms", stats_json(f.head)},
          {"layers", f.layers},
          {"per_layer_ms", f.per_layer_ms()},
          {"implied_48_layers_ms", f.implied_48_layers_ms()},
          {"moe_gflops", moe},
          {"attention_gflops", attention},
          {"ceiling_gflops", peak},
          {"moe_of_ceiling", moe / peak},
          {"attention_of_ceiling", attention / peak},
          {"logits", f.logits},
          {"attention_ops_per_layer", f.attention_ops},
          {"moe_ops_per_layer", f.moe_ops},
          {"first_forward",
           {{"first_of_process", f.first_of_process},
            {"minor_faults", f.first.minor},
            {"major_faults", f.first.major},
            {"memory", memory_json(f.after_first)}}},
          {"minor_faults_median", f.minor_median},
          {"major_faults", f.major},
          {"memory_after_runs", memory_json(f.after_runs)},
          {"routing", {{"active_experts", f.active_experts}, {"busiest_rows", f.busiest_rows}, {"few_row_share", f.few_row_share},
                       {"closest_margin", f.closest.margin}, {"closest_layer", f.closest.layer},
                       {"closest_token", f.closest.token}}}};
}

int run(const arguments& args) {
  // int8 experts multiply in the activations' dtype, which the engine picks by default: bf16 where the
  // device has bf16 arithmetic, f32 where it has not (emulated bf16 is ~50x slower: an AVX2-only
  // CPU took 48.7 s for a 512-token forward in bf16).
  const bool int8 = args.dtype == "int8" || args.dtype == "int4";  // quantized experts
  const bool bf16 = args.dtype == "bf16" || (int8 && (args.device != "cpu" || cpu_has_native_bf16()));
  const std::string dtype_text =
      int8 ? args.dtype + " experts, " + (bf16 ? "bf16" : "f32") + " activations" : args.dtype;
  const text_config shape = args.real ? real_text_config(args.layers) : bench_text_config();
  const head_config head = args.real ? real_head_config() : bench_head_config();
  if (!release_is_current(args.dir, shape, args.init)) {
    if (!args.json) {
      std::printf("writing a random %s release to %s ...\n", args.dtype.c_str(), args.dir.c_str());
    }
    const auto start = clock_type::now();
    if (int8) {
      if (!release_is_current(args.from, shape, args.init)) write_release(args.from, true, shape, head, args.init);
      fs::remove_all(args.dir);
      if (args.dtype == "int4") {
        quantize_int4(args.from, args.dir, 128);
      } else {
        quantize_int8(args.from, args.dir);
      }
    } else {
      write_release(args.dir, bf16, shape, head, args.init);
    }
    if (!args.json) std::printf("  written in %.1f s\n", ms_since(start) / 1e3);
  }
  std::uintmax_t disk_bytes = 0;
  for (const auto& e : fs::directory_iterator(args.dir)) {
    if (e.is_regular_file()) disk_bytes += e.file_size();
  }

  model_options options;
  const compute_dtype dtype = bf16 ? compute_dtype::bf16 : compute_dtype::f32;
  options.dtype = dtype;
  options.head_dtype = dtype;  // the reference runs the head in the model dtype
  options.threads = args.threads;
  options.device = args.device;
  options.score_budget_bytes = args.score_budget_mib << 20;
  options.grouped_experts = args.grouped_experts;
  options.experts = args.experts;
  const memory_snapshot before_load = read_memory();
  const faults f0 = read_faults();
  const auto load_start = clock_type::now();
  const auto m = model::load(args.dir, options);
  const double load_ms = ms_since(load_start);
  const faults load_faults = read_faults() - f0;
  const memory_snapshot after_load = read_memory();
  m->set_profiling(true);
  const text_config& c = m->files().text();

  // The ceiling before and after the forwards, keeping the better of each: the VM's speed drifts
  // over minutes, and a ceiling caught in a slow minute would flatter the model.
  const at::ScalarType type = bf16 ? at::kBFloat16 : at::kFloat;
  std::vector<mm_figure> ceiling = measure_ceiling(c, args.tokens, type);
  std::vector<forward_figures> forwards;
  for (const auto tokens : args.tokens) {
    forwards.push_back(time_forwards(*m, tokens, args, forwards.empty()));
  }
  const std::vector<mm_figure> again = measure_ceiling(c, args.tokens, type);
  double peak = 0;
  for (std::size_t i = 0; i < ceiling.size(); ++i) {
    ceiling[i].gflops = std::max(ceiling[i].gflops, again[i].gflops);
    peak = std::max(peak, ceiling[i].gflops);
  }
  const std::string blas = blas_core();

  if (args.json) {
    std::cout << nlohmann::json{{"kind", "load"},
                                {"dtype", args.dtype},
                                {"compute_dtype", bf16 ? "bf16" : "f32"},
                                {"shape", args.real ? "real" : "mid"},
                                {"dir", args.dir.string()},
                                {"disk_mib", static_cast<double>(disk_bytes) / (1 << 20)},
                                {"load_ms", load_ms},
                                {"packed_mib", static_cast<double>(m->packed_bytes()) / (1 << 20)},
                                {"expert_schedule", m->expert_schedule()},
                                {"matmul_choice", m->matmul_choice()},
                                {"minor_faults", load_faults.minor},
                                {"major_faults", load_faults.major},
                                {"before", memory_json(before_load)},
                                {"after", memory_json(after_load)}}
                     .dump()
              << "\n";
    for (const auto& f : ceiling) {
      std::cout << nlohmann::json{{"kind", "matmul"}, {"dtype", args.dtype},
                                  {"threads", args.threads}, {"blas", blas},
                                  {"m", f.m}, {"k", f.k}, {"n", f.n}, {"gflops", f.gflops},
                                  {"packed", f.packed}, {"streamed", f.streamed}, {"library", f.packed ? f.library : "at::mm"}}
                       .dump()
                << "\n";
    }
    for (const auto& f : forwards) std::cout << forward_json(f, args, peak).dump() << "\n";
    return 0;
  }
  std::printf("\nClef forward, %s, %d threads, release %s (%.0f MiB on disk)\n", dtype_text.c_str(),
              args.threads, args.dir.c_str(), static_cast<double>(disk_bytes) / (1 << 20));
  std::printf("  load %.1f ms, page faults %ld minor / %ld major\n", load_ms, load_faults.minor,
              load_faults.major);
  print_memory("before load", before_load);
  print_memory("after load", after_load);
  std::printf("  packed at load: %.1f MiB\n", static_cast<double>(m->packed_bytes()) / (1 << 20));
  if (const std::string choice = m->matmul_choice(); !choice.empty()) std::printf("  matmuls: %s\n", choice.c_str());
  if (const std::string schedule = m->expert_schedule(); !schedule.empty()) {
    std::printf("  experts: %s\n", schedule.c_str());
  }
  std::printf("\n  matmul ceiling (x @ w.T, %s, %d threads; at::mm's fp32 BLAS: %s; packed: oneDNN on a weight "
              "packed once, a matmul per thread; BLAS: the weight as it is, on that BLAS, a matmul per thread; "
              "libxsmm: its kernels on a weight packed once for them, a matmul per thread)\n",
              bf16 ? "bf16" : "f32", args.threads, blas.empty() ? "not OpenBLAS" : blas.c_str());
  for (const auto& f : ceiling) {
    const std::string kind =
        !f.packed ? "at::mm" : (f.library == "oneDNN" ? "" : f.library + " ") + (f.streamed ? "streamed" : "packed");
    std::printf("    %-16s %5lld x %4lld x %4lld %8.1f GFLOP/s\n", kind.c_str(),
                static_cast<long long>(f.m), static_cast<long long>(f.k), static_cast<long long>(f.n), f.gflops);
  }
  std::printf("    ceiling: %.1f GFLOP/s\n", peak);
  for (const auto& f : forwards) print_forward(f, args, peak);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  baton::clef::reexec_with_better_blas_core(argv);
  try {
    return run(parse_arguments(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "clef_forward: %s\n", e.what());
    return 1;
  }
}
