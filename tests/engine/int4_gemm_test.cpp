// int4_matmul (and int4_matmul_bf16 on the avx512_bf16 path, x rounded to bf16 first and the
// reference computed on the rounded x) against a scalar reference that dequantizes in the test and
// sums in double, on every ISA path this CPU runs: symmetric and asymmetric weights (zero_offset 0 and 1), fp16 and bf16
// scales, groups of 32 to 2048 inputs, row counts that leave every row tile's tail, column counts
// that leave every column tile's tail, and the real expert shapes. Every buffer the kernel reads
// or writes ends where an inaccessible page begins, so a read or write past its end crashes.
//
// Most cases use values on which fp32 arithmetic is exact (below), so the kernel must match the
// reference exactly, in any summation order: a wrong nibble, zero, scale or tail shows. One case
// uses arbitrary floats and checks the error bound of fp32 accumulation instead.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/clef/model/int4_gemm.hpp"
#include "support/guarded_buffer.hpp"

namespace baton::clef::detail {

// The path's name in failure messages (found by GoogleTest through the type's namespace).
void PrintTo(int4_isa isa, std::ostream* os) {
  *os << (isa == int4_isa::avx2 ? "avx2" : isa == int4_isa::avx512 ? "avx512" : "avx512_bf16");
}

namespace {

using test::guarded;

double fp16_value(std::uint16_t bits) {  // normal numbers only, which is all the tests make
  const int exponent = (bits >> 10) & 0x1F;
  const double value = std::ldexp(1.0 + (bits & 0x3FF) / 1024.0, exponent - 15);
  return (bits & 0x8000) ? -value : value;
}

double bf16_value(std::uint16_t bits) {
  const std::uint32_t word = std::uint32_t{bits} << 16;
  float value = 0;
  std::memcpy(&value, &word, sizeof value);
  return value;
}

struct shape {
  std::int64_t in = 256, out = 72, group = 64;
  bool symmetric = true;
  int zero_offset = 0;
  bool bf16 = false;
  // Exact: x in multiples of 1/4 in [-1, 1]; scales ±(1 + k/8)·2^e, k < 8, e in -10..-8. Then
  // x·q is a multiple of 1/4, a group's Σ x·q and Σx stay below 2^12, s·(acc − z·Σx) is a
  // multiple of 2^-15, and |y| ≤ in · 1 · 16 · 2^-7 ≤ 2^8 for in ≤ 2048: every intermediate fits
  // fp32's 24 bits, so fp32 computes each exactly whatever the order, and equals the reference.
  // Not exact: x uniform in [-1, 1] and scales with any mantissa, 2^-13 to 2^-6.
  bool exact = true;
};

// A random weight in the packed layout, its nibbles, zeros and scales kept for the reference.
struct weight {
  explicit weight(const shape& s, std::mt19937_64& rng)
      : shape_(s),
        groups(s.in / s.group),
        q(static_cast<std::size_t>(s.in * s.out)),
        z(static_cast<std::size_t>(groups * s.out), 8),
        scale(static_cast<std::size_t>(groups * s.out)),
        qweight(static_cast<std::size_t>(s.in / 8 * s.out)),
        scales(static_cast<std::size_t>(groups * s.out)),
        qzeros(s.symmetric ? 1 : static_cast<std::size_t>(groups * s.out / 8)) {
    for (auto& v : q) v = static_cast<int>(rng() % 16);
    for (std::size_t i = 0; i < qweight.size(); ++i) qweight[i] = 0;
    for (std::int64_t k = 0; k < s.in; ++k) {
      for (std::int64_t n = 0; n < s.out; ++n) {
        const auto nibble = static_cast<std::uint32_t>(q[k * s.out + n]) << (4 * (k % 8));
        qweight[(k / 8) * s.out + n] = static_cast<std::int32_t>(static_cast<std::uint32_t>(qweight[(k / 8) * s.out + n]) | nibble);
      }
    }
    if (!s.symmetric) {
      for (std::size_t i = 0; i < qzeros.size(); ++i) qzeros[i] = 0;
      for (std::int64_t g = 0; g < groups; ++g) {
        for (std::int64_t n = 0; n < s.out; ++n) {
          const auto stored = static_cast<std::uint32_t>(rng() % 16);
          z[g * s.out + n] = static_cast<int>(stored) + s.zero_offset;
          const std::size_t word = g * (s.out / 8) + n / 8;
          qzeros[word] = static_cast<std::int32_t>(static_cast<std::uint32_t>(qzeros[word]) | (stored << (4 * (n % 8))));
        }
      }
    }
    for (std::size_t i = 0; i < scales.size(); ++i) {
      const auto sign = static_cast<std::uint16_t>(rng() % 2);
      if (s.bf16) {  // 8 exponent bits (bias 127), 7 mantissa bits
        const auto exponent = static_cast<std::uint16_t>(127 + (s.exact ? -10 + static_cast<int>(rng() % 3) : -13 + static_cast<int>(rng() % 7)));
        const auto mantissa = static_cast<std::uint16_t>(s.exact ? (rng() % 8) << 4 : rng() % 128);
        scales[i] = static_cast<std::uint16_t>(sign << 15 | exponent << 7 | mantissa);
        scale[i] = bf16_value(scales[i]);
      } else {  // 5 exponent bits (bias 15), 10 mantissa bits
        const auto exponent = static_cast<std::uint16_t>(15 + (s.exact ? -10 + static_cast<int>(rng() % 3) : -13 + static_cast<int>(rng() % 7)));
        const auto mantissa = static_cast<std::uint16_t>(s.exact ? (rng() % 8) << 7 : rng() % 1024);
        scales[i] = static_cast<std::uint16_t>(sign << 15 | exponent << 10 | mantissa);
        scale[i] = fp16_value(scales[i]);
      }
    }
  }

  int4_matrix matrix() const {
    int4_matrix m;
    m.qweight = qweight.data();
    m.scales = scales.data();
    m.scales_bf16 = shape_.bf16;
    m.qzeros = shape_.symmetric ? nullptr : qzeros.data();
    m.zero_offset = shape_.zero_offset;
    m.in = shape_.in;
    m.out = shape_.out;
    m.group = shape_.group;
    return m;
  }

  // y[r][n] = Σ_k x[r][k]·(q − z)·s in double, and the bound on fp32's error for it:
  // the kernel sums a group's x·q in one fp32 chain (≤ group roundings), Σx in eight chains and
  // a tree (≤ group / 8 + 3), applies the zero and scale with one rounding each, and adds the
  // groups' terms in one chain (≤ groups). Each error is at most γ_m = m·u / (1 − m·u) (u = 2^-24,
  // Higham's bound on recursive summation) times Σ |x|·(q + z)·|s| over the terms it sums, so their
  // sum is below γ_M times that over all k, M = group + group / 8 + groups + 5.
  // The avx512_bf16 path (`offset` 16) sums x·(q + 16) instead, and subtracts (z + 16)·Σx: a product
  // of two bf16 is exact in fp32, and each vdpbf16ps adds its two products to the accumulator with
  // at most two roundings, so a group's chain still rounds at most `group` times, plus once where
  // two sets of accumulators are added (M + 1); the terms it sums are |x|·(q + 16), the zero's term
  // |x|·(z + 16). So the same bound holds with Σ |x|·(q + z + 32)·|s| and M + 1. x is bf16 there, and
  // the reference takes the same bf16-rounded x, so rounding x costs nothing against it.
  void reference(const std::vector<float>& x, std::int64_t rows, std::vector<double>& y, std::vector<double>& bound,
                 int offset = 0) const {
    const std::int64_t in = shape_.in, out = shape_.out;
    const double u = std::ldexp(1.0, -24),
                 m = static_cast<double>(shape_.group + shape_.group / 8 + groups + 5 + (offset > 0 ? 1 : 0));
    const double gamma = m * u / (1 - m * u);
    y.assign(static_cast<std::size_t>(rows * out), 0.0);
    bound.assign(y.size(), 0.0);
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t n = 0; n < out; ++n) {
        double sum = 0, magnitude = 0;
        for (std::int64_t k = 0; k < in; ++k) {
          const std::int64_t g = k / shape_.group;
          const double xv = x[r * in + k], s = scale[g * out + n];
          const int qv = q[k * out + n], zv = z[g * out + n];
          sum += xv * (qv - zv) * s;
          magnitude += std::abs(xv) * (qv + zv + 2 * offset) * std::abs(s);
        }
        y[r * out + n] = sum;
        bound[r * out + n] = gamma * magnitude;
      }
    }
  }

  shape shape_;
  std::int64_t groups;
  std::vector<int> q, z;       // [in, out] nibbles; [groups, out] zero points, the offset added
  std::vector<double> scale;   // [groups, out]
  guarded<std::int32_t> qweight;
  guarded<std::uint16_t> scales;
  guarded<std::int32_t> qzeros;
};

std::vector<float> random_x(std::int64_t rows, std::int64_t in, bool exact, std::mt19937_64& rng) {
  std::vector<float> x(static_cast<std::size_t>(rows * in));
  for (auto& v : x) {
    v = exact ? static_cast<float>(static_cast<int>(rng() % 9) - 4) / 4
              : static_cast<float>(std::ldexp(static_cast<double>(rng() >> 11), -52) - 1.0);
  }
  return x;
}

std::uint16_t bf16_bits(float v) {  // round to nearest even (no NaNs in these tests)
  std::uint32_t word = 0;
  std::memcpy(&word, &v, sizeof word);
  return static_cast<std::uint16_t>((word + 0x7FFF + ((word >> 16) & 1)) >> 16);
}

// x rounded to bf16, as floats.
std::vector<float> bf16_rounded(const std::vector<float>& x) {
  std::vector<float> rounded(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) rounded[i] = static_cast<float>(bf16_value(bf16_bits(x[i])));
  return rounded;
}

// int4_matmul on guarded copies of x and y (y filled with NaN first, so every output must be
// written); with `bf16_x` (always on the avx512_bf16 path), int4_matmul_bf16 on x in bf16 (rounded).
std::vector<float> multiply(const std::vector<float>& x, std::int64_t rows, const weight& w, int4_isa isa,
                            bool bf16_x = false) {
  const std::int64_t out = w.shape_.out;
  guarded<float> gx(x.size()), gy(static_cast<std::size_t>(rows * out));
  guarded<std::uint16_t> gb(x.size());
  std::memcpy(gx.data(), x.data(), x.size() * sizeof(float));
  for (std::size_t i = 0; i < x.size(); ++i) gb[i] = bf16_bits(x[i]);
  for (std::size_t i = 0; i < gy.size(); ++i) gy[i] = std::numeric_limits<float>::quiet_NaN();
  if (bf16_x || isa == int4_isa::avx512_bf16) {
    int4_matmul_bf16(gb.data(), rows, w.matrix(), gy.data(), isa);
  } else {
    int4_matmul(gx.data(), rows, w.matrix(), gy.data(), isa);
  }
  return {gy.data(), gy.data() + gy.size()};
}

std::string describe(const shape& s, std::int64_t rows) {
  return "in " + std::to_string(s.in) + " out " + std::to_string(s.out) + " group " + std::to_string(s.group) +
         " rows " + std::to_string(rows) + (s.symmetric ? " symmetric" : " zero_offset " + std::to_string(s.zero_offset)) +
         (s.bf16 ? " bf16" : " fp16") + (s.exact ? " exact" : " real");
}

// Exact cases: equal to the reference; otherwise within its bound.
void expect_matches(const shape& s, const std::vector<std::int64_t>& rows_list, int4_isa isa, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const weight w(s, rng);
  std::vector<double> want, bound;
  for (const auto rows : rows_list) {
    SCOPED_TRACE(describe(s, rows));
    const bool bf16 = isa == int4_isa::avx512_bf16;
    std::vector<float> x = random_x(rows, s.in, s.exact, rng);  // exact values are bf16 already
    if (bf16) x = bf16_rounded(x);
    const std::vector<float> y = multiply(x, rows, w, isa);
    w.reference(x, rows, want, bound, bf16 ? 16 : 0);
    int wrong = 0;
    for (std::size_t i = 0; i < y.size() && wrong < 5; ++i) {
      const bool ok = s.exact ? static_cast<double>(y[i]) == want[i] : std::abs(y[i] - want[i]) <= bound[i];
      if (!ok) {
        ++wrong;
        ADD_FAILURE() << "y[" << i / s.out << "][" << i % s.out << "] = " << y[i] << ", reference " << want[i]
                      << " (bound " << bound[i] << ")";
      }
    }
  }
}

const std::vector<std::int64_t> all_rows = {1, 2, 3, 5, 17, 64};

class int4_gemm : public testing::TestWithParam<int4_isa> {
 protected:
  void SetUp() override {
    if (!int4_isa_runs(GetParam())) {
      GTEST_SKIP() << (GetParam() == int4_isa::avx512_bf16
                           ? "this CPU lacks AVX-512 BF16 (avx512bf16 with avx512f, bw, vl and dq): the avx512_bf16 path cannot run here"
                           : "this CPU lacks AVX-512 (avx512f, bw, vl and dq): the avx512 path cannot run here");
    }
  }
  int4_isa isa() const { return GetParam(); }
};

TEST_P(int4_gemm, symmetric_fp16_scales_match_exactly) {
  for (const std::int64_t group : {32, 64, 128}) {
    expect_matches({.in = 256, .out = 72, .group = group}, all_rows, isa(), 1);
  }
}

TEST_P(int4_gemm, asymmetric_zero_offset_0_matches_exactly) {
  for (const std::int64_t group : {32, 64, 128}) {
    expect_matches({.in = 256, .out = 72, .group = group, .symmetric = false, .zero_offset = 0}, all_rows, isa(), 2);
  }
}

TEST_P(int4_gemm, asymmetric_zero_offset_1_matches_exactly) {
  for (const std::int64_t group : {32, 64, 128}) {
    expect_matches({.in = 256, .out = 72, .group = group, .symmetric = false, .zero_offset = 1}, all_rows, isa(), 3);
  }
}

TEST_P(int4_gemm, bf16_scales_match_exactly) {
  for (const std::int64_t group : {32, 64, 128}) {
    expect_matches({.in = 256, .out = 72, .group = group, .bf16 = true}, all_rows, isa(), 4);
    expect_matches({.in = 256, .out = 72, .group = group, .symmetric = false, .zero_offset = 1, .bf16 = true}, all_rows,
                   isa(), 5);
  }
}

// Every column tail: fewer columns than one vector, half an AVX-512 vector, and one to several
// vectors short of the widest tile; each with every row-tile tail.
TEST_P(int4_gemm, column_tails_match_exactly) {
  for (const std::int64_t out : {8, 16, 24, 40, 56, 88, 120, 136, 200}) {
    expect_matches({.in = 64, .out = out, .group = 32, .symmetric = false, .zero_offset = 1}, {1, 2, 3, 4, 5, 7, 9},
                   isa(), 6);
  }
}

// One group spanning all the inputs (GPTQ's group size -1), and a group of 8, the smallest.
TEST_P(int4_gemm, one_group_and_groups_of_8_match_exactly) {
  expect_matches({.in = 512, .out = 40, .group = 512, .symmetric = false}, {1, 4, 6}, isa(), 7);
  expect_matches({.in = 64, .out = 40, .group = 8, .symmetric = false, .bf16 = true}, {1, 4, 6}, isa(), 8);
}

// gate+up (2048 → 1536) and down (768 → 2048) of the Qwen3-Omni MoE's experts.
TEST_P(int4_gemm, expert_shapes_match_exactly) {
  expect_matches({.in = 2048, .out = 1536, .group = 128, .symmetric = false, .zero_offset = 1}, {1, 5}, isa(), 9);
  expect_matches({.in = 768, .out = 2048, .group = 128, .bf16 = true}, {1, 6}, isa(), 10);
}

TEST_P(int4_gemm, arbitrary_floats_within_fp32_bound) {
  expect_matches({.in = 2048, .out = 1536, .group = 128, .symmetric = false, .zero_offset = 1, .exact = false}, {3},
                 isa(), 11);
  expect_matches({.in = 768, .out = 2048, .group = 64, .bf16 = true, .exact = false}, {2}, isa(), 12);
  for (const std::int64_t group : {32, 128}) {
    expect_matches({.in = 256, .out = 72, .group = group, .symmetric = false, .exact = false}, all_rows, isa(), 13);
  }
}

// Each output is one chain of FMAs over its inputs whatever the tile, so a row's result is the
// same bit for bit alone or among others, and on either fp32 path. The avx512_bf16 path sums
// x·(q + 16) in pairs (other roundings than the fp32 paths), and a row alone takes a tile of one
// row, whose two sets of accumulators add its pairs in another order than a tile of more rows: a
// row alone and among others differ there by at most the sum of their bounds (twice the bound).
TEST_P(int4_gemm, a_row_does_not_depend_on_its_call) {
  std::mt19937_64 rng(14);
  const shape s{.in = 768, .out = 264, .group = 64, .symmetric = false, .zero_offset = 1, .exact = false};
  const weight w(s, rng);
  const std::int64_t rows = 19;
  const bool bf16 = isa() == int4_isa::avx512_bf16;
  std::vector<float> x = random_x(rows, s.in, false, rng);
  if (bf16) x = bf16_rounded(x);
  const std::vector<float> all = multiply(x, rows, w, isa());
  const std::vector<float> avx2 = multiply(x, rows, w, int4_isa::avx2);
  std::vector<double> want, bound;
  w.reference(x, rows, want, bound, 16);
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::vector<float> one(x.begin() + r * s.in, x.begin() + (r + 1) * s.in);
    const std::vector<float> y = multiply(one, 1, w, isa());
    for (std::int64_t n = 0; n < s.out; ++n) {
      if (bf16) {
        const std::size_t i = static_cast<std::size_t>(r * s.out + n);
        ASSERT_LE(std::abs(static_cast<double>(y[n]) - all[i]), 2 * bound[i]) << "row " << r << " column " << n;
        continue;
      }
      ASSERT_EQ(y[n], all[r * s.out + n]) << "row " << r << " column " << n;
      ASSERT_EQ(avx2[r * s.out + n], all[r * s.out + n]) << "row " << r << " column " << n;
    }
  }
}

// int4_matmul_bf16 on the fp32 paths widens x exactly: the same bits as int4_matmul on the widened x.
TEST_P(int4_gemm, bf16_x_on_fp32_paths_is_widened_exactly) {
  if (isa() == int4_isa::avx512_bf16) GTEST_SKIP() << "the fp32 paths only";
  std::mt19937_64 rng(16);
  const shape s{.in = 768, .out = 264, .group = 128, .symmetric = false, .zero_offset = 1, .exact = false};
  const weight w(s, rng);
  for (const std::int64_t rows : {1, 5, 19}) {
    const std::vector<float> x = bf16_rounded(random_x(rows, s.in, false, rng));
    const std::vector<float> want = multiply(x, rows, w, isa());
    const std::vector<float> got = multiply(x, rows, w, isa(), true);
    for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "rows " << rows << " at " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(int4, int4_gemm, testing::Values(int4_isa::avx2, int4_isa::avx512, int4_isa::avx512_bf16),
                         [](const testing::TestParamInfo<int4_isa>& info) {
                           return std::string(info.param == int4_isa::avx2     ? "avx2"
                                              : info.param == int4_isa::avx512 ? "avx512"
                                                                                : "avx512_bf16");
                         });

TEST(int4_gemm_dispatch, the_best_isa_runs) {
  EXPECT_TRUE(int4_isa_runs(int4_isa::avx2));  // every x86-64 CPU baton supports
  EXPECT_TRUE(int4_isa_runs(int4_best_isa()));
  EXPECT_EQ(int4_best_isa() == int4_isa::avx512, int4_isa_runs(int4_isa::avx512));
  EXPECT_TRUE(int4_isa_runs(int4_best_isa_bf16()));
  EXPECT_EQ(int4_best_isa_bf16() == int4_isa::avx512_bf16, int4_isa_runs(int4_isa::avx512_bf16));
  EXPECT_NE(int4_best_isa(), int4_isa::avx512_bf16);  // fp32 x never goes to the bf16 path
}

TEST(int4_gemm_dispatch, refuses_what_the_layout_cannot_hold) {
  std::mt19937_64 rng(15);
  const weight w({.in = 64, .out = 16, .group = 32}, rng);
  std::vector<float> x(64, 1.0f), y(16, -1.0f);
  const auto refused = [&](int4_matrix m) {
    try {
      int4_matmul(x.data(), 1, m, y.data(), int4_isa::avx2);
    } catch (const std::invalid_argument&) {
      return true;
    }
    return false;
  };
  int4_matrix m = w.matrix();
  EXPECT_FALSE(refused(m));
  m.group = 12;  // not a multiple of 8
  EXPECT_TRUE(refused(m));
  m.group = 48;  // does not divide in
  EXPECT_TRUE(refused(m));
  m = w.matrix();
  m.out = 12;
  EXPECT_TRUE(refused(m));
  m = w.matrix();
  m.scales = nullptr;
  EXPECT_TRUE(refused(m));
  if (!int4_isa_runs(int4_isa::avx512)) {
    EXPECT_THROW(int4_matmul(x.data(), 1, w.matrix(), y.data(), int4_isa::avx512), std::invalid_argument);
  }
  // fp32 x on the bf16 path, or that path where the CPU lacks it, are refused.
  EXPECT_THROW(int4_matmul(x.data(), 1, w.matrix(), y.data(), int4_isa::avx512_bf16), std::invalid_argument);
  const std::vector<std::uint16_t> xb(64, 0x3F80);  // 1.0
  if (!int4_isa_runs(int4_isa::avx512_bf16)) {
    EXPECT_THROW(int4_matmul_bf16(xb.data(), 1, w.matrix(), y.data(), int4_isa::avx512_bf16), std::invalid_argument);
  }
  m = w.matrix();
  m.group = 12;
  EXPECT_THROW(int4_matmul_bf16(xb.data(), 1, m, y.data()), std::invalid_argument);
  std::fill(y.begin(), y.end(), -1.0f);
  int4_matmul(x.data(), 0, w.matrix(), y.data(), int4_isa::avx2);  // no rows: nothing written
  EXPECT_EQ(y[0], -1.0f);
}

}  // namespace
}  // namespace baton::clef::detail
