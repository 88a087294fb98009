// The Clef forward pass on a random mid-size release: load time, RSS and page faults, time per
// forward with its split by part, and the MoE and attention throughput against the machine's
// matmul ceiling. Needs only libtorch and the core, so it also builds against another libtorch.
//
//   clef_forward [--dtype f32|bf16] [--threads 2] [--tokens 512,2048] [--warmup 1] [--runs 5]
//                [--dir build/bench-release-<dtype>] [--json]
#include <ATen/ATen.h>
#include <sys/resource.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/clef/core/blas_cpu.hpp"
#include "engine/clef/core/model.hpp"
#include "engine/clef/core/release.hpp"

namespace {

namespace fs = std::filesystem;
using namespace baton::clef;
using clock_type = std::chrono::steady_clock;

// The mid-size shape: Qwen3-Omni's layout at about 1/30 of the 30B thinker's size.
text_config bench_text_config() {
  text_config c;
  c.vocab_size = 32000;
  c.hidden_size = 1024;
  c.num_layers = 8;
  c.num_heads = 16;
  c.num_kv_heads = 4;
  c.head_dim = 64;
  c.moe_intermediate_size = 512;
  c.num_experts = 64;
  c.experts_per_token = 8;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 1e6;
  c.mrope_section = {16, 8, 8};
  c.max_position_embeddings = 65536;
  return c;
}

head_config bench_head_config() {
  return head_config{.hidden_size = 1024, .width = 256, .routing_layers = 2, .layers = 2,
                     .heads = 4, .feedforward = 512};
}

// ---- random release ------------------------------------------------------------------------

struct xorshift {
  std::uint64_t s;
  std::uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1Dull;
  }
};

std::uint64_t name_seed(const std::string& name) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a: each tensor gets its own stream
  for (const char ch : name) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
  return h | 1;
}

// Round to nearest even, as at::BFloat16 does (no NaNs come out of the generator).
std::uint16_t to_bf16(float f) {
  const auto u = std::bit_cast<std::uint32_t>(f);
  return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// Norm weights 1 and biases 0 as a fresh model has them; the rest uniform with std 0.02, except
// the input embeddings at std 1: with random weights, attention averages every token's values
// into a shared component that soon swamps 0.02-sized embeddings, and the router then sends
// nearly every token to the same few experts; a trained router spreads them.
float std_of(const std::string& name) {
  if (name.find("norm") != std::string::npos && name.ends_with(".weight")) return -1;
  if (name.ends_with("bias") || name.find('.') == std::string::npos) return 0;
  return name.ends_with("embed_tokens.weight") ? 1.0f : 0.02f;
}

using tensor_list = std::vector<std::pair<std::string, std::vector<std::int64_t>>>;

std::int64_t numel(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (const auto d : shape) n *= d;
  return n;
}

// One safetensors file: 8-byte LE header length, JSON header padded to 8 bytes, raw data.
// Data is generated and written in 4 MiB pieces: nothing close to a tensor is held in memory.
void write_safetensors(const fs::path& path, const tensor_list& tensors, bool bf16) {
  const std::size_t elem = bf16 ? 2 : 4;
  nlohmann::json header = {{"__metadata__", {{"format", "pt"}}}};
  std::uint64_t offset = 0;
  for (const auto& [name, shape] : tensors) {
    const std::uint64_t bytes = static_cast<std::uint64_t>(numel(shape)) * elem;
    header[name] = {{"dtype", bf16 ? "BF16" : "F32"}, {"shape", shape},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');
  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error(path.string() + ": cannot write");
  const std::uint64_t length = text.size();
  out.write(reinterpret_cast<const char*>(&length), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));

  constexpr std::int64_t piece = 1 << 20;
  std::vector<float> f32(piece);
  std::vector<std::uint16_t> b16(bf16 ? piece : 0);
  for (const auto& [name, shape] : tensors) {
    const float sigma = std_of(name);  // -1: all ones
    const float half_range = sigma * std::sqrt(3.0f);  // uniform [-a, a) has std a / sqrt(3)
    xorshift rng{name_seed(name)};
    for (std::int64_t left = numel(shape); left > 0;) {
      const std::int64_t n = std::min(left, piece);
      for (std::int64_t i = 0; i < n; ++i) {
        if (sigma > 0) {
          const auto bits = static_cast<std::uint32_t>(rng.next() >> 40);  // 24 bits
          f32[i] = (static_cast<float>(bits) * (1.0f / 8388608.0f) - 1.0f) * half_range;
        } else {
          f32[i] = sigma < 0 ? 1.0f : 0.0f;
        }
      }
      if (bf16) {
        for (std::int64_t i = 0; i < n; ++i) b16[i] = to_bf16(f32[i]);
        out.write(reinterpret_cast<const char*>(b16.data()), n * 2);
      } else {
        out.write(reinterpret_cast<const char*>(f32.data()), n * 4);
      }
      left -= n;
    }
  }
  if (!out.flush()) throw std::runtime_error(path.string() + ": write failed");
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out.flush()) throw std::runtime_error(path.string() + ": write failed");
}

// Writes the release into `<dir>.partial` and renames it: a present `dir` is always complete.
void write_release(const fs::path& dir, bool bf16) {
  const text_config c = bench_text_config();
  const head_config h = bench_head_config();
  const fs::path tmp = dir.string() + ".partial";
  fs::remove_all(tmp);
  fs::create_directories(tmp);

  const nlohmann::json text = {
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"num_hidden_layers", c.num_layers},
      {"num_attention_heads", c.num_heads},
      {"num_key_value_heads", c.num_kv_heads},
      {"head_dim", c.head_dim},
      {"hidden_act", "silu"},
      {"moe_intermediate_size", c.moe_intermediate_size},
      {"num_experts", c.num_experts},
      {"num_experts_per_tok", c.experts_per_token},
      {"norm_topk_prob", true},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_theta", c.rope_theta},
      {"rope_scaling",
       {{"rope_type", "default"}, {"mrope_section", c.mrope_section}, {"interleaved", true}}},
      {"max_position_embeddings", c.max_position_embeddings},
      {"attention_bias", false},
      {"decoder_sparse_step", 1},
      {"mlp_only_layers", nlohmann::json::array()},
      {"use_qk_norm", true}};
  const nlohmann::json config = {
      {"architectures", {"Qwen3OmniMoeForConditionalGeneration"}},
      {"model_type", "qwen3_omni_moe"},
      {"thinker_config", {{"model_type", "qwen3_omni_moe_thinker"}, {"text_config", text}}},
      {"torch_dtype", bf16 ? "bfloat16" : "float32"},
      {"note", "RANDOM BENCH MODEL written by bench/clef_forward (not Clef-Omni weights)"}};
  write_text(tmp / "config.json", config.dump(2));
  write_text(tmp / "joint_head_config.json",
             nlohmann::json{{"hidden_size", h.hidden_size}, {"width", h.width},
                            {"routing_layers", h.routing_layers}, {"layers", h.layers},
                            {"heads", h.heads}, {"feedforward", h.feedforward}}
                 .dump(2));

  // Shards of about 1 GiB, split at tensor boundaries, in load order.
  const tensor_list all = expected_text_tensors(c);
  const std::int64_t elem = bf16 ? 2 : 4;
  std::int64_t total = 0;
  for (const auto& [name, shape] : all) total += numel(shape) * elem;
  const std::int64_t shard_count = std::max<std::int64_t>(2, (total + (1ll << 30) - 1) >> 30);
  std::vector<tensor_list> shards(static_cast<std::size_t>(shard_count));
  std::int64_t written = 0;
  for (const auto& t : all) {
    const auto s = std::min<std::int64_t>(shard_count - 1, written * shard_count / total);
    shards[static_cast<std::size_t>(s)].push_back(t);
    written += numel(t.second) * elem;
  }
  nlohmann::json weight_map = nlohmann::json::object();
  for (std::size_t s = 0; s < shards.size(); ++s) {
    char file[64];
    std::snprintf(file, sizeof file, "model-%05zu-of-%05lld.safetensors", s + 1,
                  static_cast<long long>(shard_count));
    write_safetensors(tmp / file, shards[s], bf16);
    for (const auto& [name, shape] : shards[s]) weight_map[name] = file;
  }
  write_text(tmp / "model.safetensors.index.json",
             nlohmann::json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}
                 .dump(2));
  write_safetensors(tmp / "joint_head.safetensors", expected_head_tensors(h), bf16);
  fs::rename(tmp, dir);
}

// ---- process counters ----------------------------------------------------------------------

struct memory_snapshot {
  double rss_mib = 0, anon_mib = 0, file_mib = 0;
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
};

// x [m, k] @ w.T for w [n, k], as the model's dense() lays its weights out; output preallocated.
mm_figure measure_mm(std::int64_t m, std::int64_t k, std::int64_t n, at::ScalarType type) {
  const at::Tensor x = at::randn({m, k}).to(type);
  const at::Tensor w = at::randn({n, k}).to(type);
  at::Tensor y = at::empty({m, n}, x.options());
  for (int i = 0; i < 3; ++i) at::mm_out(y, x, w.t());
  std::vector<double> seconds;
  const auto start = clock_type::now();
  while (seconds.size() < 5 || (ms_since(start) < 500 && seconds.size() < 1000)) {
    const auto t = clock_type::now();
    at::mm_out(y, x, w.t());
    seconds.push_back(ms_since(t) / 1e3);
  }
  const double flops = 2.0 * static_cast<double>(m * k) * static_cast<double>(n);
  return {m, k, n, flops / summarise(seconds).median / 1e9};
}

// The MoE's per-expert shape at each length (gate/up: tokens * top_k / experts rows), a 512-row
// block of it, and a big square.
std::vector<mm_figure> measure_ceiling(const text_config& c,
                                       const std::vector<std::int64_t>& lengths,
                                       at::ScalarType type) {
  std::vector<mm_figure> out;
  for (const auto t : lengths) {
    const std::int64_t rows = std::max<std::int64_t>(1, t * c.experts_per_token / c.num_experts);
    out.push_back(measure_mm(rows, c.hidden_size, c.moe_intermediate_size, type));
  }
  out.push_back(measure_mm(512, c.hidden_size, c.moe_intermediate_size, type));
  out.push_back(measure_mm(2048, 2048, 2048, type));
  return out;
}

// ---- the record ----------------------------------------------------------------------------

struct record {
  std::vector<std::int32_t> ids;
  std::vector<question_layout> questions;
};

// Random ids; three questions (choice of 4, noul, score of 8) with ~10-token options, packed
// just before the last few tokens, where a real prompt puts the schema.
record make_record(std::int64_t tokens, std::int64_t vocab) {
  record r;
  xorshift rng{static_cast<std::uint64_t>(tokens) * 7919 + 1};
  for (std::int64_t i = 0; i < tokens; ++i) {
    r.ids.push_back(static_cast<std::int32_t>(rng.next() % static_cast<std::uint64_t>(vocab)));
  }
  const std::uint8_t types[] = {1, 0, 2};
  const int option_counts[] = {4, 2, 8};
  std::int32_t length = 0;
  for (int q = 0; q < 3; ++q) {
    length += 12;
    for (int o = 0; o < option_counts[q]; ++o) length += 8 + (o * 3) % 5;
  }
  std::int32_t at = static_cast<std::int32_t>(tokens) - 4 - length;
  if (at < 0) throw std::runtime_error("--tokens must be at least " + std::to_string(length + 4));
  for (int q = 0; q < 3; ++q) {
    question_layout layout;
    layout.type = types[q];
    layout.question = {at, at + 12};
    at += 12;
    for (int o = 0; o < option_counts[q]; ++o) {
      const std::int32_t n = 8 + (o * 3) % 5;
      layout.options.push_back({at, at + n});
      at += n;
    }
    r.questions.push_back(std::move(layout));
  }
  return r;
}

// ---- driver --------------------------------------------------------------------------------

struct arguments {
  fs::path dir;
  std::string dtype = "f32";
  int threads = 2;
  std::vector<std::int64_t> tokens = {512, 2048};
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
    } else if (key == "--json") {
      a.json = true;
    } else {
      throw std::runtime_error(
          "usage: clef_forward [--dtype f32|bf16] [--threads N] [--tokens 512,2048] [--warmup N] "
          "[--runs N] [--dir PATH] [--json]");
    }
  }
  if (a.dtype != "f32" && a.dtype != "bf16") throw std::runtime_error("--dtype is f32 or bf16");
  if (a.runs < 1 || a.warmup < 0 || a.threads < 1 || a.tokens.empty()) {
    throw std::runtime_error("--runs and --threads must be positive, --warmup non-negative");
  }
  if (a.dir.empty()) a.dir = "build/bench-release-" + a.dtype;
  return a;
}

void print_memory(const char* when, const memory_snapshot& m) {
  std::printf("  RSS %-22s %8.1f MiB  (anon %7.1f, file-backed %7.1f)\n", when, m.rss_mib,
              m.anon_mib, m.file_mib);
}

nlohmann::json memory_json(const memory_snapshot& m) {
  return {{"rss_mib", m.rss_mib}, {"anon_mib", m.anon_mib}, {"file_mib", m.file_mib}};
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
};

forward_figures time_forwards(model& m, std::int64_t tokens, const arguments& args,
                              bool first_of_process) {
  const text_config& c = m.files().text();
  const record r = make_record(tokens, c.vocab_size);
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
  }
  f.after_runs = read_memory();
  f.total = summarise(total);
  f.embed = summarise(embed);
  f.attention = summarise(attention);
  f.moe = summarise(moe);
  f.norms = summarise(norms);
  f.head = summarise(head);
  f.minor_median = summarise(minor).median;

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
  const double moe = f.moe_flops / (f.moe.median / 1e3) / 1e9;
  const double attention = f.attention_flops / (f.attention.median / 1e3) / 1e9;
  std::printf("    MoE       %7.1f GFLOP/s = %4.1f %% of the ceiling\n", moe, 100 * moe / peak);
  std::printf("    attention %7.1f GFLOP/s = %4.1f %% (useful FLOPs: the causal half)\n", attention,
              100 * attention / peak);
  std::printf("    page faults: first forward%s %ld minor / %ld major; timed runs median %.0f "
              "minor, %ld major in all\n",
              f.first_of_process ? " of the process" : "", f.first.minor, f.first.major,
              f.minor_median, f.major);
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
          {"moe_gflops", moe},
          {"attention_gflops", attention},
          {"ceiling_gflops", peak},
          {"moe_of_ceiling", moe / peak},
          {"attention_of_ceiling", attention / peak},
          {"first_forward",
           {{"first_of_process", f.first_of_process},
            {"minor_faults", f.first.minor},
            {"major_faults", f.first.major},
            {"memory", memory_json(f.after_first)}}},
          {"minor_faults_median", f.minor_median},
          {"major_faults", f.major},
          {"memory_after_runs", memory_json(f.after_runs)},
          {"logits", f.logits}};
}

int run(const arguments& args) {
  const bool bf16 = args.dtype == "bf16";
  if (!fs::exists(args.dir)) {
    if (!args.json) {
      std::printf("writing a random %s release to %s ...\n", args.dtype.c_str(), args.dir.c_str());
    }
    const auto start = clock_type::now();
    write_release(args.dir, bf16);
    if (!args.json) std::printf("  written in %.1f s\n", ms_since(start) / 1e3);
  }
  std::uintmax_t disk_bytes = 0;
  for (const auto& e : fs::directory_iterator(args.dir)) {
    if (e.is_regular_file()) disk_bytes += e.file_size();
  }

  model_options options;
  compute_dtype dtype = compute_dtype::f32;
  parse_compute_dtype(args.dtype, dtype);
  options.dtype = dtype;
  options.head_dtype = dtype;  // the reference runs the head in the model dtype
  options.threads = args.threads;
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
                                {"dir", args.dir.string()},
                                {"disk_mib", static_cast<double>(disk_bytes) / (1 << 20)},
                                {"load_ms", load_ms},
                                {"minor_faults", load_faults.minor},
                                {"major_faults", load_faults.major},
                                {"before", memory_json(before_load)},
                                {"after", memory_json(after_load)}}
                     .dump()
              << "\n";
    for (const auto& f : ceiling) {
      std::cout << nlohmann::json{{"kind", "matmul"}, {"dtype", args.dtype},
                                  {"threads", args.threads}, {"blas", blas},
                                  {"m", f.m}, {"k", f.k}, {"n", f.n}, {"gflops", f.gflops}}
                       .dump()
                << "\n";
    }
    for (const auto& f : forwards) std::cout << forward_json(f, args, peak).dump() << "\n";
    return 0;
  }
  std::printf("\nClef forward, %s, %d threads, release %s (%.0f MiB on disk)\n", args.dtype.c_str(),
              args.threads, args.dir.c_str(), static_cast<double>(disk_bytes) / (1 << 20));
  std::printf("  load %.1f ms, page faults %ld minor / %ld major\n", load_ms, load_faults.minor,
              load_faults.major);
  print_memory("before load", before_load);
  print_memory("after load", after_load);
  std::printf("\n  at::mm ceiling (x @ w.T, %s, %d threads; fp32 BLAS: %s)\n", args.dtype.c_str(),
              args.threads, blas.empty() ? "not OpenBLAS" : blas.c_str());
  for (const auto& f : ceiling) {
    std::printf("    %5lld x %4lld x %4lld %8.1f GFLOP/s\n", static_cast<long long>(f.m),
                static_cast<long long>(f.k), static_cast<long long>(f.n), f.gflops);
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
