// baton's quantized weight-only GEMMs at the Qwen3-Omni MoE experts' shapes, gate+up (2048 →
// 1536) and down (768 → 2048), for 1 to 256 rows on one thread: the median time of a call, GFLOP/s
// and the weight's bytes per second, and the fastest call's GFLOP/s (on a shared machine the least
// disturbed). int4_matmul (int4_gemm.hpp) on each ISA path this CPU runs (avx512_bf16 on x rounded
// to bf16, through int4_matmul_bf16); fp8_matmul_bf16 (byte_gemm.hpp, 128 × 128 blocks) and
// int8_matmul_bf16 (one scale per output) on bf16 x;
// the bf16 weight packed for oneDNN as bf16 experts run (packed_linear, where the build has
// oneDNN); and the product in fp32 through at::mm (OpenBLAS on Debian). Each call takes the next of
// enough random weights to fill --weights-mb, as a forward's experts do, so the weights come from
// memory, not from a cache warmed by the previous call.
//
//   quant_bench [--repeats 31] [--group 128] [--weights-mb 128]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/clef/model/blas_cpu.hpp"
#include "engine/clef/model/cpu_kernels.hpp"
#include "engine/clef/model/byte_gemm.hpp"
#include "engine/clef/model/int4_gemm.hpp"
#include "engine/clef/model/packed_linear.hpp"

namespace {

using namespace baton::clef;
using namespace baton::clef::detail;

struct arguments {
  int repeats = 31;
  std::int64_t group = 128, weights_mb = 128;
};

arguments parse_arguments(int argc, char** argv) {
  arguments a;
  for (int i = 1; i < argc; ++i) {
    const std::string key = argv[i];
    if (i + 1 >= argc) throw std::runtime_error("usage: see the comment at the top of bench/quant_matmul.cpp");
    const std::string value = argv[++i];
    if (key == "--repeats") a.repeats = std::stoi(value);
    else if (key == "--group") a.group = std::stoll(value);
    else if (key == "--weights-mb") a.weights_mb = std::stoll(value);
    else throw std::runtime_error("unknown option " + key);
  }
  return a;
}

// One random asymmetric weight [out, in] with fp16 scales near 0.01, in the packed layout.
struct packed_weight {
  std::vector<std::int32_t> qweight, qzeros;
  std::vector<std::uint16_t> scales;
  int4_matrix m;

  packed_weight(std::int64_t in, std::int64_t out, std::int64_t group, std::mt19937& rng)
      : qweight(static_cast<std::size_t>(in / 8 * out)),
        qzeros(static_cast<std::size_t>(in / group * out / 8)),
        scales(static_cast<std::size_t>(in / group * out)) {
    for (auto& v : qweight) v = static_cast<std::int32_t>(rng());
    for (auto& v : qzeros) v = static_cast<std::int32_t>(rng());
    for (auto& v : scales) v = static_cast<std::uint16_t>(0x2000 | (rng() % 0x400));  // 2^-7 .. 2^-6
    m = {qweight.data(), scales.data(), false, qzeros.data(), 1, in, out, group};
  }
  double bytes() const { return 4.0 * (qweight.size() + qzeros.size()) + 2.0 * scales.size(); }
};

// One random FP8 weight [out, in] (no NaN codes) with fp32 block scales near 0.01.
struct fp8_weight {
  std::vector<std::uint8_t> bytes;
  std::vector<float> scales;
  fp8_matrix m;

  fp8_weight(std::int64_t in, std::int64_t out, std::mt19937& rng)
      : bytes(static_cast<std::size_t>(in * out)), scales(static_cast<std::size_t>((out + 127) / 128 * ((in + 127) / 128))) {
    for (auto& b : bytes) {
      b = static_cast<std::uint8_t>(rng());
      if ((b & 0x7F) == 0x7F) b = 0x7E;
    }
    for (auto& s : scales) s = 0.005F + static_cast<float>(rng() % 1000) * 1e-5F;
    m = {bytes.data(), scales.data(), false, in, out, 128, 128};
  }
  double size() const { return static_cast<double>(bytes.size()) + 4.0 * static_cast<double>(scales.size()); }
};

// One random int8 weight [out, in] with fp32 scales near 0.001, one per output.
struct int8_weight {
  std::vector<std::int8_t> q;
  std::vector<float> scales;
  int8_matrix m;

  int8_weight(std::int64_t in, std::int64_t out, std::mt19937& rng)
      : q(static_cast<std::size_t>(in * out)), scales(static_cast<std::size_t>(out)) {
    for (auto& v : q) v = static_cast<std::int8_t>(static_cast<int>(rng() % 255) - 127);
    for (auto& s : scales) s = 0.0005F + static_cast<float>(rng() % 1000) * 1e-6F;
    m = {q.data(), scales.data(), in, out};
  }
  double size() const { return static_cast<double>(q.size()) + 4.0 * static_cast<double>(scales.size()); }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct timing {
  double median = 0, best = 0;  // seconds a call
};

// `repeats` timed calls of f(i), i counting calls (after two untimed ones).
template <class F>
timing time_calls(int repeats, F f) {
  std::vector<double> t;
  for (int i = 0; i < repeats + 2; ++i) {
    const auto start = std::chrono::steady_clock::now();
    f(i);
    const std::chrono::duration<double> d = std::chrono::steady_clock::now() - start;
    if (i >= 2) t.push_back(d.count());
  }
  return {median(t), *std::min_element(t.begin(), t.end())};
}

void print(const char* what, std::int64_t rows, std::int64_t in, std::int64_t out, timing t, double weight_bytes) {
  const double flops = 2.0 * static_cast<double>(rows * in * out);
  std::printf("  %-12s rows %4lld  %9.1f us  %7.1f GFLOP/s  %6.1f GB/s weight  (best %7.1f GFLOP/s)\n", what,
              static_cast<long long>(rows), t.median * 1e6, flops / t.median * 1e-9, weight_bytes / t.median * 1e-9,
              flops / t.best * 1e-9);
}

int run(const arguments& a) {
  at::set_num_threads(1);
  const std::string core = blas_core_name();
  std::printf("int4_matmul, fp8_matmul and int8_matmul, one thread, group %lld, median of %d calls, weights rotated over %lld MB%s%s\n",
              static_cast<long long>(a.group), a.repeats, static_cast<long long>(a.weights_mb),
              core.empty() ? "" : "; at::mm on OpenBLAS ", core.c_str());
  std::vector<int4_isa> isas = {int4_isa::avx2};
  if (int4_isa_runs(int4_isa::avx512)) isas.push_back(int4_isa::avx512);
  if (int4_isa_runs(int4_isa::avx512_bf16)) isas.push_back(int4_isa::avx512_bf16);
  std::mt19937 rng(1);
  const std::int64_t shapes[][2] = {{2048, 1536}, {768, 2048}};
  for (const auto& [in, out] : shapes) {
    std::printf("in %lld -> out %lld\n", static_cast<long long>(in), static_cast<long long>(out));
    std::vector<packed_weight> weights;
    const double one = static_cast<double>(in * out) / 2;
    const auto count = std::max<std::int64_t>(2, static_cast<std::int64_t>(a.weights_mb * 1e6 / one));
    for (std::int64_t i = 0; i < count; ++i) weights.emplace_back(in, out, a.group, rng);
    std::vector<fp8_weight> fp8;
    for (std::int64_t i = 0; i < std::max<std::int64_t>(2, count / 2); ++i) fp8.emplace_back(in, out, rng);
    std::vector<int8_weight> int8;
    for (std::int64_t i = 0; i < std::max<std::int64_t>(2, count / 2); ++i) int8.emplace_back(in, out, rng);
    std::vector<packed_linear> bf16;  // oneDNN's packed copies, as bf16 experts run
    if (onednn_built()) {
      for (std::int64_t i = 0; i < std::max<std::int64_t>(2, count / 4); ++i) bf16.emplace_back(at::randn({out, in}).to(at::kBFloat16));
    }
    const auto fp32_count = std::max<std::int64_t>(2, static_cast<std::int64_t>(a.weights_mb * 1e6 / (8 * one)));
    std::vector<at::Tensor> fp32;
    for (std::int64_t i = 0; i < fp32_count; ++i) fp32.push_back(at::randn({out, in}));
    for (const std::int64_t rows : {1, 4, 16, 64, 256}) {
      const at::Tensor x = at::rand({rows, in}).mul_(2).sub_(1);
      const at::Tensor xb = x.to(at::kBFloat16);
      const auto* xb_bits = reinterpret_cast<const std::uint16_t*>(xb.data_ptr<at::BFloat16>());
      at::Tensor y = at::empty({rows, out});
      for (const auto isa : isas) {
        const timing s = time_calls(a.repeats, [&](int i) {
          const int4_matrix& m = weights[static_cast<std::size_t>(i) % weights.size()].m;
          if (isa == int4_isa::avx512_bf16) {
            int4_matmul_bf16(xb_bits, rows, m, y.data_ptr<float>(), isa);
          } else {
            int4_matmul(x.data_ptr<float>(), rows, m, y.data_ptr<float>(), isa);
          }
        });
        print(isa == int4_isa::avx512_bf16 ? "int4 bf16" : isa == int4_isa::avx512 ? "int4 avx512" : "int4 avx2", rows, in,
              out, s, weights[0].bytes());
      }
      const timing f = time_calls(a.repeats, [&](int i) {
        fp8_matmul_bf16(xb_bits, rows, fp8[static_cast<std::size_t>(i) % fp8.size()].m, y.data_ptr<float>());
      });
      print(byte_gemm_best_isa() == byte_gemm_isa::avx512_bf16 ? "fp8 bf16" : "fp8 avx2", rows, in, out, f, fp8[0].size());
      const timing q = time_calls(a.repeats, [&](int i) {
        int8_matmul_bf16(xb_bits, rows, int8[static_cast<std::size_t>(i) % int8.size()].m, y.data_ptr<float>());
      });
      print(byte_gemm_best_isa() == byte_gemm_isa::avx512_bf16 ? "int8 bf16" : "int8 avx2", rows, in, out, q, int8[0].size());
      if (!bf16.empty()) {
        at::Tensor yb = at::empty({rows, out}, at::kBFloat16);
        const timing b = time_calls(a.repeats, [&](int i) {
          bf16[static_cast<std::size_t>(i) % bf16.size()].multiply(xb.data_ptr(), yb.data_ptr(), rows);
        });
        print("bf16 oneDNN", rows, in, out, b, 2.0 * static_cast<double>(in * out));
      }
      const timing s = time_calls(a.repeats, [&](int i) {
        at::mm_out(y, x, fp32[static_cast<std::size_t>(i) % fp32.size()].t());
      });
      print("fp32 at::mm", rows, in, out, s, 4.0 * static_cast<double>(in * out));
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  reexec_with_better_blas_core(argv);
  try {
    return run(parse_arguments(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "quant_bench: %s\n", e.what());
    return 1;
  }
}
