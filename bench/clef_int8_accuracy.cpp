// The int8 (or int4: --scheme int4) release against its bf16 source on the mid-size random release (bench/random_release.hpp),
// both computed in bf16 (in f32 on a CPU without bf16 arithmetic): per-layer cosine of the hidden
// states, top-k routing agreement, and over a few hundred questions the largest probability
// difference and top-1 agreement.
//
//   clef_int8_accuracy [--bf16 build/bench-release-bf16] [--int8 build/bench-release-int8]
//                      [--threads 2] [--trace-records 8] [--trace-tokens 512] [--records 100]
//                      [--tokens 256] [--batch 8] [--scheme int8|int4] [--group-size 128]
//
// Missing releases are written (the bf16 one at random, the quantized one by quantize_int8 or
// quantize_int4 from it; --int8 names either, by default build/bench-release-int4-g<group> for int4).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/random_release.hpp"
#include "engine/clef/model/blas_cpu.hpp"
#include "engine/clef/model/model.hpp"
#include "engine/clef/model/quantize.hpp"

namespace {

namespace fs = std::filesystem;
using namespace baton::clef;
using namespace baton::clef::bench;

struct arguments {
  fs::path bf16 = "build/bench-release-bf16", int8 = "build/bench-release-int8";
  int threads = 2, trace_records = 8, trace_tokens = 512, records = 100, tokens = 256, batch = 8;
  std::string scheme = "int8";
  int group = 128;
  bool named = false;  // --int8 given
};

arguments parse_arguments(int argc, char** argv) {
  arguments a;
  for (int i = 1; i < argc; ++i) {
    const std::string key = argv[i];
    if (i + 1 >= argc) throw std::runtime_error("usage: see the comment at the top of clef_int8_accuracy.cpp");
    const std::string value = argv[++i];
    if (key == "--bf16") a.bf16 = value;
    else if (key == "--int8") a.int8 = value, a.named = true;
    else if (key == "--scheme") a.scheme = value;
    else if (key == "--group-size") a.group = std::stoi(value);
    else if (key == "--threads") a.threads = std::stoi(value);
    else if (key == "--trace-records") a.trace_records = std::stoi(value);
    else if (key == "--trace-tokens") a.trace_tokens = std::stoi(value);
    else if (key == "--records") a.records = std::stoi(value);
    else if (key == "--tokens") a.tokens = std::stoi(value);
    else if (key == "--batch") a.batch = std::stoi(value);
    else throw std::runtime_error("unknown option " + key);
  }
  if (a.scheme != "int8" && a.scheme != "int4") throw std::runtime_error("--scheme is int8 or int4");
  if (a.scheme == "int4" && !a.named) a.int8 = "build/bench-release-int4-g" + std::to_string(a.group);
  return a;
}

using stages = std::map<std::string, std::vector<float>, std::less<>>;

stages trace(model& m, const std::vector<std::int32_t>& ids) {
  stages out;
  m.trace(ids, nullptr, [&](std::string_view stage, std::span<const float> v, std::int64_t) {
    out.emplace(std::string(stage), std::vector<float>(v.begin(), v.end()));
  });
  return out;
}

double cosine(const float* a, const float* b, std::size_t n) {
  double dot = 0, na = 0, nb = 0;
  for (std::size_t i = 0; i < n; ++i) {
    dot += static_cast<double>(a[i]) * b[i];
    na += static_cast<double>(a[i]) * a[i];
    nb += static_cast<double>(b[i]) * b[i];
  }
  return dot / std::sqrt(na * nb);
}

std::vector<int> top_k(const float* logits, int experts, int k) {
  std::vector<int> idx(static_cast<std::size_t>(experts));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int x, int y) { return logits[x] > logits[y]; });
  idx.resize(static_cast<std::size_t>(k));
  std::sort(idx.begin(), idx.end());
  return idx;
}

struct layer_figures {
  double dot = 0, na = 0, nb = 0;  // over every element of every traced record
  double token_cos_sum = 0, token_cos_min = 1;
  double overlap = 0, same_set = 0;  // routing: experts in common / k, whole set equal
  std::int64_t tokens = 0;
};

std::vector<float> softmax(const std::vector<float>& logits) {
  const float top = *std::max_element(logits.begin(), logits.end());
  std::vector<float> p(logits.size());
  double sum = 0;
  for (std::size_t i = 0; i < p.size(); ++i) sum += p[i] = std::exp(logits[i] - top);
  for (auto& v : p) v = static_cast<float>(v / sum);
  return p;
}

int run(const arguments& args) {
  if (!release_is_current(args.bf16)) {
    std::printf("writing a random bf16 release to %s ...\n", args.bf16.c_str());
    write_release(args.bf16, true);
  }
  if (!release_is_current(args.int8)) {
    std::printf("quantizing it to %s ...\n", args.int8.c_str());
    fs::remove_all(args.int8);
    if (args.scheme == "int4") {
      quantize_int4(args.bf16, args.int8, args.group);
    } else {
      quantize_int8(args.bf16, args.int8);
    }
  }
  // Both computed in bf16 where the CPU has bf16 arithmetic, in f32 where bf16 would be emulated
  // (~50x slower: hours for this bench), as the engine picks by default. bf16 weights are exact in
  // f32, so the figures then measure the int8 rounding alone.
  const bool bf16 = cpu_has_native_bf16();
  model_options options;
  options.dtype = bf16 ? compute_dtype::bf16 : compute_dtype::f32;
  options.head_dtype = *options.dtype;
  options.threads = args.threads;
  const auto a = model::load(args.bf16, options);
  const auto b = model::load(args.int8, options);
  if (args.scheme == "int4" ? !b->files().int4_experts() : !b->files().int8_experts()) {
    throw std::runtime_error(args.int8.string() + " is not an " + args.scheme + " release");
  }
  const text_config& c = a->files().text();
  const int k = static_cast<int>(c.experts_per_token), experts = static_cast<int>(c.num_experts);
  const auto hidden = static_cast<std::size_t>(c.hidden_size);

  // Hidden states and routing, layer by layer.
  std::vector<layer_figures> layers(static_cast<std::size_t>(c.num_layers) + 1);  // + final_hidden
  for (int r = 0; r < args.trace_records; ++r) {
    const bench_record rec = make_bench_record(args.trace_tokens, c.vocab_size, 1000003u * (r + 1));
    const stages sa = trace(*a, rec.ids), sb = trace(*b, rec.ids);
    for (std::size_t l = 0; l < layers.size(); ++l) {
      const bool last = l == layers.size() - 1;
      const std::string name = last ? "final_hidden" : "layer_out." + std::to_string(l);
      const auto& x = sa.at(name);
      const auto& y = sb.at(name);
      layer_figures& f = layers[l];
      for (std::size_t t = 0; t < rec.ids.size(); ++t) {
        const double cos = cosine(&x[t * hidden], &y[t * hidden], hidden);
        f.token_cos_sum += cos;
        f.token_cos_min = std::min(f.token_cos_min, cos);
        ++f.tokens;
      }
      for (std::size_t i = 0; i < x.size(); ++i) {
        f.dot += static_cast<double>(x[i]) * y[i];
        f.na += static_cast<double>(x[i]) * x[i];
        f.nb += static_cast<double>(y[i]) * y[i];
      }
      if (last) continue;
      const auto& ra = sa.at("router_logits." + std::to_string(l));
      const auto& rb = sb.at("router_logits." + std::to_string(l));
      for (std::size_t t = 0; t < rec.ids.size(); ++t) {
        const auto ea = top_k(&ra[t * experts], experts, k), eb = top_k(&rb[t * experts], experts, k);
        std::vector<int> common;
        std::set_intersection(ea.begin(), ea.end(), eb.begin(), eb.end(), std::back_inserter(common));
        f.overlap += static_cast<double>(common.size()) / k;
        f.same_set += ea == eb;
      }
    }
  }
  std::printf("\n%s (%s) against bf16 (%s), both computed in %s, %d threads; %d records of %d "
              "random tokens traced\n",
              args.scheme.c_str(), args.int8.c_str(), args.bf16.c_str(), bf16 ? "bf16" : "f32", args.threads, args.trace_records,
              args.trace_tokens);
  std::printf("  %-14s %10s %12s %12s %14s %12s\n", "layer", "cosine", "token mean", "token min",
              "top-k overlap", "same set");
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const layer_figures& f = layers[l];
    const bool last = l == layers.size() - 1;
    const std::string name = last ? "final_hidden" : "layer_out." + std::to_string(l);
    std::printf("  %-14s %10.6f %12.6f %12.6f", name.c_str(), f.dot / std::sqrt(f.na * f.nb),
                f.token_cos_sum / f.tokens, f.token_cos_min);
    if (last) {
      std::printf("\n");
    } else {
      std::printf(" %13.4f%% %11.2f%%\n", 100 * f.overlap / f.tokens, 100 * f.same_set / f.tokens);
    }
  }

  // Questions: probabilities over each question's options.
  std::int64_t questions = 0, top1 = 0;
  double max_dp = 0, sum_dp = 0;
  double widest_flip = 0;  // the bf16 margin (top-1 minus top-2) of the widest question that flipped
  std::int64_t probabilities = 0;
  for (int r0 = 0; r0 < args.records; r0 += args.batch) {
    std::vector<bench_record> recs;
    for (int r = r0; r < std::min(args.records, r0 + args.batch); ++r) {
      recs.push_back(make_bench_record(args.tokens, c.vocab_size, 7777u * (r + 1) + 13));
    }
    std::vector<record_input> batch;
    for (const auto& rec : recs) batch.push_back({rec.ids, rec.questions});
    const auto la = a->forward(batch), lb = b->forward(batch);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      for (std::size_t q = 0; q < la[i].size(); ++q) {
        const auto pa = softmax(la[i][q]), pb = softmax(lb[i][q]);
        ++questions;
        const bool same = std::max_element(pa.begin(), pa.end()) - pa.begin() ==
                          std::max_element(pb.begin(), pb.end()) - pb.begin();
        top1 += same;
        if (!same) {
          std::vector<float> sorted = pa;
          std::sort(sorted.rbegin(), sorted.rend());
          widest_flip = std::max(widest_flip, static_cast<double>(sorted[0] - sorted[1]));
        }
        for (std::size_t o = 0; o < pa.size(); ++o) {
          const double d = std::abs(static_cast<double>(pa[o]) - pb[o]);
          max_dp = std::max(max_dp, d);
          sum_dp += d;
          ++probabilities;
        }
      }
    }
  }
  std::printf("\n  %lld questions (%d records of %d tokens, batches of %d): top-1 agreement %.2f%% "
              "(%lld / %lld), max |dp| %.5f, mean |dp| %.6f; the questions that flipped had a bf16 "
              "top-1 margin of at most %.5f\n",
              static_cast<long long>(questions), args.records, args.tokens, args.batch,
              100.0 * static_cast<double>(top1) / static_cast<double>(questions), static_cast<long long>(top1),
              static_cast<long long>(questions), max_dp, sum_dp / static_cast<double>(probabilities), widest_flip);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  baton::clef::reexec_with_better_blas_core(argv);
  try {
    return run(parse_arguments(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "clef_int8_accuracy: %s\n", e.what());
    return 1;
  }
}
