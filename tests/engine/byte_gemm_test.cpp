// fp8_matmul(_bf16) and int8_matmul(_bf16) on every path this CPU runs (fp32 x on AVX2, bf16 x
// widened on AVX2, bf16 x on AVX-512 BF16: dot products along rows below 32 rows of x, weights laid
// out in pairs from 32 on) against references written from the formats' definitions, not from the
// kernels' bit tricks. Every buffer the kernel reads or writes ends where an inaccessible page
// begins, so a read or write past its end crashes.
//
// Decoding is checked exactly: with x one row per input, a one in that input and zeros elsewhere,
// y is the weight itself, whatever the summation order; the weight holds every byte (both signs,
// subnormals, the largest finite values) under blocks of both scale types, whole and partial, and
// blocks of columns that are not a multiple of a vector. Products are checked against a sum in
// double within the error bound of fp32 accumulation, at the experts' shapes and shapes that leave
// every tile's tail.
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

#include "engine/clef/model/byte_gemm.hpp"
#include "support/guarded_buffer.hpp"

namespace baton::clef::detail {
namespace {

using test::guarded;

enum class way { fp32_avx2, bf16_avx2, bf16_avx512 };

std::string way_name(way w) {
  return w == way::fp32_avx2 ? "fp32_avx2" : w == way::bf16_avx2 ? "bf16_avx2" : "bf16_avx512";
}

bool bf16_x(way w) { return w != way::fp32_avx2; }

// E4M3 as the OCP FP8 specification defines it: bias 7, subnormals m · 2^-9, S.1111.111 NaN.
double e4m3(std::uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  const double magnitude = e == 0 ? std::ldexp(m, -9) : std::ldexp(1.0 + m / 8.0, e - 7);
  return (b & 0x80) ? -magnitude : magnitude;
}

float bf16_round(float v) {  // to nearest even, as vcvtne2ps2bf16 (no NaN here)
  std::uint32_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  bits += 0x7FFF + ((bits >> 16) & 1);
  bits &= 0xFFFF0000U;
  float y = 0;
  std::memcpy(&y, &bits, sizeof y);
  return y;
}

std::uint16_t bf16_bits(float v) {  // v already a bf16 value
  std::uint32_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  return static_cast<std::uint16_t>(bits >> 16);
}

// x rounded to bf16 in place, and its bits into `bits` (the kernels' bf16 input).
void round_to_bf16(std::vector<float>& x, test::guarded<std::uint16_t>& bits) {
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = bf16_round(x[i]);
    bits[i] = bf16_bits(x[i]);
  }
}

struct shape {
  std::int64_t in = 256, out = 40, block_rows = 128, block_cols = 128;
  bool scales_bf16 = false;
};

// A weight of random bytes (no NaN) or of every byte in turn, with random scales.
struct weight {
  weight(const shape& s, std::mt19937_64& rng, bool every_byte = false)
      : shape_(s),
        block_rows_(static_cast<std::size_t>((s.out + s.block_rows - 1) / s.block_rows)),
        block_cols_(static_cast<std::size_t>((s.in + s.block_cols - 1) / s.block_cols)),
        bytes(static_cast<std::size_t>(s.in * s.out)),
        scale(block_rows_ * block_cols_),
        scales_f32(s.scales_bf16 ? 1 : scale.size()),
        scales_bf16(s.scales_bf16 ? scale.size() : 1) {
    std::vector<std::uint8_t> finite;
    for (int b = 0; b < 256; ++b) {
      if ((b & 0x7F) != 0x7F) finite.push_back(static_cast<std::uint8_t>(b));
    }
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      bytes[i] = every_byte ? finite[(i * 7 + i / static_cast<std::size_t>(s.in)) % finite.size()]
                            : finite[rng() % finite.size()];
    }
    for (std::size_t i = 0; i < scale.size(); ++i) {
      // ±(1 + m/128) · 2^e: scales as releases have them (a block's max / 448), bf16-exact.
      const double m = static_cast<double>(rng() % 128), e = -14 + static_cast<double>(rng() % 8);
      const auto v = static_cast<float>(std::ldexp(1.0 + m / 128, static_cast<int>(e)) * (rng() % 2 ? -1 : 1));
      scale[i] = v;
      if (s.scales_bf16) scales_bf16[i] = bf16_bits(v);
      else scales_f32[i] = v;
    }
  }

  fp8_matrix matrix() const {
    fp8_matrix m;
    m.weight = bytes.data();
    m.scales = shape_.scales_bf16 ? static_cast<const void*>(scales_bf16.data()) : static_cast<const void*>(scales_f32.data());
    m.scales_bf16 = shape_.scales_bf16;
    m.in = shape_.in;
    m.out = shape_.out;
    m.block_rows = shape_.block_rows;
    m.block_cols = shape_.block_cols;
    return m;
  }

  // Weight [n][k] as the path multiplies it: value · scale rounded to fp32, then to bf16 on the
  // avx512_bf16 path (as the dequantized release in bf16 is).
  float value(std::int64_t n, std::int64_t k, way w) const {
    const auto i = static_cast<std::size_t>(n / shape_.block_rows) * block_cols_ + static_cast<std::size_t>(k / shape_.block_cols);
    const auto v = static_cast<float>(e4m3(bytes[static_cast<std::size_t>(n * shape_.in + k)]) * scale[i]);
    return w == way::bf16_avx512 ? bf16_round(v) : v;
  }

  shape shape_;
  std::size_t block_rows_, block_cols_;
  guarded<std::uint8_t> bytes;
  std::vector<float> scale;
  guarded<float> scales_f32;
  guarded<std::uint16_t> scales_bf16;
};

class byte_gemm : public testing::TestWithParam<way> {
 protected:
  void SetUp() override {
    const byte_gemm_isa isa = GetParam() == way::bf16_avx512 ? byte_gemm_isa::avx512_bf16 : byte_gemm_isa::avx2;
    if (!byte_gemm_isa_runs(isa)) GTEST_SKIP() << "this CPU does not run " << byte_gemm_isa_name(isa);
  }

  // y for x [rows, in] (rounded to bf16 first on the bf16 ways, and that rounded x returned in x),
  // on guarded copies, y filled with NaN first so that every output must be written.
  std::vector<float> multiply(std::vector<float>& x, std::int64_t rows, const weight& w) const {
    const fp8_matrix m = w.matrix();
    guarded<float> gx(x.size()), gy(static_cast<std::size_t>(rows * m.out));
    guarded<std::uint16_t> gb(x.size());
    std::fill(gy.data(), gy.data() + gy.size(), std::numeric_limits<float>::quiet_NaN());
    if (bf16_x(GetParam())) {
      round_to_bf16(x, gb);
      fp8_matmul_bf16(gb.data(), rows, m, gy.data(), GetParam() == way::bf16_avx512 ? byte_gemm_isa::avx512_bf16 : byte_gemm_isa::avx2);
    } else {
      std::copy(x.begin(), x.end(), gx.data());
      fp8_matmul(gx.data(), rows, m, gy.data());
    }
    return {gy.data(), gy.data() + gy.size()};
  }

  // Decoding: x the identity (in rows), so y[k][n] is the weight [n][k] exactly.
  void check_decoding(const shape& s) {
    std::mt19937_64 rng(7);
    const weight w(s, rng, /*every_byte=*/true);
    std::vector<float> x(static_cast<std::size_t>(s.in * s.in), 0.0F);
    for (std::int64_t k = 0; k < s.in; ++k) x[static_cast<std::size_t>(k * s.in + k)] = 1.0F;
    const std::vector<float> y = multiply(x, s.in, w);
    int wrong = 0;
    for (std::int64_t k = 0; k < s.in; ++k) {
      for (std::int64_t n = 0; n < s.out; ++n) {
        const float want = w.value(n, k, GetParam()), got = y[static_cast<std::size_t>(k * s.out + n)];
        if (got != want && ++wrong <= 5) {
          ADD_FAILURE() << "weight [" << n << "][" << k << "] byte 0x" << std::hex
                        << int{w.bytes[static_cast<std::size_t>(n * s.in + k)]} << std::dec << ": " << got << ", want " << want;
        }
      }
    }
    EXPECT_EQ(wrong, 0);
  }

  // Products: against double within fp32 accumulation's bound γ_M · Σ|x·w| (M: the inputs plus the
  // reduction of a vector's lanes and, on vdpbf16ps, one more rounding a pair).
  void check_products(const shape& s, std::int64_t rows, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    const weight w(s, rng);
    std::vector<float> x(static_cast<std::size_t>(rows * s.in));
    for (auto& v : x) v = static_cast<float>(std::ldexp(static_cast<double>(rng() >> 11), -52) * 2.0 - 1.0);
    const std::vector<float> y = multiply(x, rows, w);
    const double u = std::ldexp(1.0, -24), m = static_cast<double>(s.in + 32), gamma = m * u / (1 - m * u);
    int wrong = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t n = 0; n < s.out; ++n) {
        double sum = 0, magnitude = 0;
        for (std::int64_t k = 0; k < s.in; ++k) {
          const double p = static_cast<double>(x[static_cast<std::size_t>(r * s.in + k)]) * w.value(n, k, GetParam());
          sum += p;
          magnitude += std::abs(p);
        }
        const double got = y[static_cast<std::size_t>(r * s.out + n)];
        if (!(std::abs(got - sum) <= gamma * magnitude) && ++wrong <= 5) {
          ADD_FAILURE() << "y[" << r << "][" << n << "] = " << got << ", want " << sum << " within " << gamma * magnitude;
        }
      }
    }
    EXPECT_EQ(wrong, 0) << "in " << s.in << ", out " << s.out << ", rows " << rows;
  }
};

TEST_P(byte_gemm, every_byte_decodes_exactly_under_fp32_scales) { check_decoding({256, 40, 128, 128, false}); }

TEST_P(byte_gemm, every_byte_decodes_exactly_under_bf16_scales) { check_decoding({256, 40, 128, 128, true}); }

TEST_P(byte_gemm, partial_blocks_and_blocks_off_the_vector_decode_exactly) {
  check_decoding({200, 70, 32, 48, false});  // 48-column blocks straddle AVX-512's 32-input steps
  check_decoding({77, 13, 5, 11, true});     // nothing a multiple of anything
}

TEST_P(byte_gemm, expert_shapes_within_fp32_bound) {
  for (const std::int64_t rows : {1, 4, 9, 40}) {
    check_products({2048, 1536, 128, 128, false}, rows, 11 + static_cast<std::uint64_t>(rows));
    check_products({768, 2048, 128, 128, true}, rows, 21 + static_cast<std::uint64_t>(rows));
  }
}

TEST_P(byte_gemm, every_tile_tail_within_fp32_bound) {
  for (const std::int64_t rows : {1, 2, 3, 5, 7, 13, 32, 37, 47}) {
    check_products({100, 67, 128, 128, false}, rows, 31 + static_cast<std::uint64_t>(rows));
    check_products({33, 131, 64, 16, true}, rows, 41 + static_cast<std::uint64_t>(rows));
  }
}

// A row's result does not depend on the rows that share its call, within each of the paths the
// row count picks (below 32 rows, and from 32 on: they sum in different orders).
TEST_P(byte_gemm, a_row_does_not_depend_on_its_call) {
  std::mt19937_64 rng(5);
  const shape s{512, 96, 128, 128, false};
  const weight w(s, rng);
  std::vector<float> x(static_cast<std::size_t>(70 * s.in));
  for (auto& v : x) v = static_cast<float>(static_cast<int>(rng() % 201) - 100) / 64;
  const auto rows_of = [&](std::int64_t first, std::int64_t count) {
    std::vector<float> part(x.begin() + first * s.in, x.begin() + (first + count) * s.in);
    return multiply(part, count, w);
  };
  const auto same_rows = [&](const std::vector<float>& a, std::int64_t a_first, const std::vector<float>& b, std::int64_t b_first,
                             std::int64_t count) {
    for (std::int64_t r = 0; r < count; ++r) {
      for (std::int64_t n = 0; n < s.out; ++n) {
        ASSERT_EQ(a[static_cast<std::size_t>((a_first + r) * s.out + n)], b[static_cast<std::size_t>((b_first + r) * s.out + n)])
            << "row " << r << ", output " << n;
      }
    }
  };
  const std::vector<float> nine = rows_of(0, 9);
  for (std::int64_t r = 0; r < 9; ++r) same_rows(rows_of(r, 1), 0, nine, r, 1);
  const std::vector<float> seventy = rows_of(0, 70);
  same_rows(rows_of(0, 40), 0, seventy, 0, 40);
  same_rows(rows_of(33, 37), 0, seventy, 33, 37);
}

INSTANTIATE_TEST_SUITE_P(fp8, byte_gemm, testing::Values(way::fp32_avx2, way::bf16_avx2, way::bf16_avx512),
                         [](const testing::TestParamInfo<way>& info) { return way_name(info.param); });

// int8: q [out, in] in -127..127 with one fp32 scale per output, y = (Σ x · q) · scale.
struct int8_weight {
  int8_weight(std::int64_t in, std::int64_t out, std::mt19937_64& rng, bool every_value = false)
      : in_(in), out_(out), q(static_cast<std::size_t>(in * out)), scales(static_cast<std::size_t>(out)) {
    for (std::size_t i = 0; i < q.size(); ++i) {
      q[i] = static_cast<std::int8_t>(every_value ? static_cast<int>((i * 7 + i / static_cast<std::size_t>(in)) % 255) - 127
                                                  : static_cast<int>(rng() % 255) - 127);
    }
    for (std::size_t i = 0; i < scales.size(); ++i) {
      scales[i] = static_cast<float>(std::ldexp(1.0 + static_cast<double>(rng() % 1000) / 1000, -12) * (rng() % 2 ? -1 : 1));
    }
  }
  int8_matrix matrix() const { return {q.data(), scales.data(), in_, out_}; }
  std::int64_t in_, out_;
  guarded<std::int8_t> q;
  guarded<float> scales;
};

class int8_gemm : public testing::TestWithParam<way> {
 protected:
  void SetUp() override {
    if (!byte_gemm_isa_runs(isa())) GTEST_SKIP() << "this CPU does not run " << byte_gemm_isa_name(isa());
  }
  byte_gemm_isa isa() const { return GetParam() == way::bf16_avx512 ? byte_gemm_isa::avx512_bf16 : byte_gemm_isa::avx2; }

  // As byte_gemm::multiply: x rounded to bf16 on the bf16 ways, y all NaN before.
  std::vector<float> multiply(std::vector<float>& x, std::int64_t rows, const int8_weight& w) const {
    guarded<float> gx(x.size()), gy(static_cast<std::size_t>(rows * w.out_));
    guarded<std::uint16_t> gb(x.size());
    std::fill(gy.data(), gy.data() + gy.size(), std::numeric_limits<float>::quiet_NaN());
    if (bf16_x(GetParam())) {
      round_to_bf16(x, gb);
      int8_matmul_bf16(gb.data(), rows, w.matrix(), gy.data(), isa());
    } else {
      std::copy(x.begin(), x.end(), gx.data());
      int8_matmul(gx.data(), rows, w.matrix(), gy.data());
    }
    return {gy.data(), gy.data() + gy.size()};
  }

  // x the identity: y[k][n] = q[n][k] · scale[n], one fp32 rounding, whatever the path.
  void check_decoding(std::int64_t in, std::int64_t out) {
    std::mt19937_64 rng(3);
    const int8_weight w(in, out, rng, /*every_value=*/true);
    std::vector<float> x(static_cast<std::size_t>(in * in), 0.0F);
    for (std::int64_t k = 0; k < in; ++k) x[static_cast<std::size_t>(k * in + k)] = 1.0F;
    const std::vector<float> y = multiply(x, in, w);
    int wrong = 0;
    for (std::int64_t k = 0; k < in; ++k) {
      for (std::int64_t n = 0; n < out; ++n) {
        const float want = static_cast<float>(w.q[static_cast<std::size_t>(n * in + k)]) * w.scales[static_cast<std::size_t>(n)];
        const float got = y[static_cast<std::size_t>(k * out + n)];
        if (got != want && ++wrong <= 5) ADD_FAILURE() << "q [" << n << "][" << k << "]: " << got << ", want " << want;
      }
    }
    EXPECT_EQ(wrong, 0);
  }

  // Against double: Σ x · q within fp32 accumulation's bound, then the scale's one rounding.
  void check_products(std::int64_t in, std::int64_t out, std::int64_t rows, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    const int8_weight w(in, out, rng);
    std::vector<float> x(static_cast<std::size_t>(rows * in));
    for (auto& v : x) v = static_cast<float>(std::ldexp(static_cast<double>(rng() >> 11), -52) * 2.0 - 1.0);
    const std::vector<float> y = multiply(x, rows, w);
    const double u = std::ldexp(1.0, -24), m = static_cast<double>(in + 32), gamma = m * u / (1 - m * u);
    int wrong = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t n = 0; n < out; ++n) {
        double sum = 0, magnitude = 0;
        for (std::int64_t k = 0; k < in; ++k) {
          const double p = static_cast<double>(x[static_cast<std::size_t>(r * in + k)]) * w.q[static_cast<std::size_t>(n * in + k)];
          sum += p;
          magnitude += std::abs(p);
        }
        const double scale = w.scales[static_cast<std::size_t>(n)], want = sum * scale;
        const double bound = (gamma * magnitude + u * std::abs(sum)) * std::abs(scale) + u * std::abs(want);
        const double got = y[static_cast<std::size_t>(r * out + n)];
        if (!(std::abs(got - want) <= bound) && ++wrong <= 5) {
          ADD_FAILURE() << "y[" << r << "][" << n << "] = " << got << ", want " << want << " within " << bound;
        }
      }
    }
    EXPECT_EQ(wrong, 0) << "in " << in << ", out " << out << ", rows " << rows;
  }
};

TEST_P(int8_gemm, every_value_decodes_exactly) {
  check_decoding(256, 40);  // 256 rows of x: the pairs on AVX-512 BF16
  check_decoding(77, 13);   // odd inputs: the last one paired with zero
}

TEST_P(int8_gemm, expert_shapes_within_fp32_bound) {
  for (const std::int64_t rows : {1, 4, 9, 40}) {
    check_products(2048, 1536, rows, 51 + static_cast<std::uint64_t>(rows));
    check_products(768, 2048, rows, 61 + static_cast<std::uint64_t>(rows));
  }
}

TEST_P(int8_gemm, every_tile_tail_within_fp32_bound) {
  for (const std::int64_t rows : {1, 2, 3, 5, 7, 13, 31, 32, 37, 47}) {
    check_products(100, 67, rows, 71 + static_cast<std::uint64_t>(rows));
    check_products(33, 131, rows, 81 + static_cast<std::uint64_t>(rows));
  }
}

INSTANTIATE_TEST_SUITE_P(int8, int8_gemm, testing::Values(way::fp32_avx2, way::bf16_avx2, way::bf16_avx512),
                         [](const testing::TestParamInfo<way>& info) { return way_name(info.param); });

TEST(byte_gemm_dispatch, the_best_isa_runs) {
  EXPECT_TRUE(byte_gemm_isa_runs(byte_gemm_best_isa()));
  EXPECT_TRUE(byte_gemm_isa_runs(byte_gemm_isa::avx2));
}

TEST(byte_gemm_dispatch, refuses_sizes_that_do_not_hold_together) {
  const std::uint8_t bytes[8] = {};
  const float scales[1] = {1.0F}, x[8] = {};
  float y[1] = {};
  fp8_matrix m;
  m.weight = bytes;
  m.scales = scales;
  m.in = 8;
  m.out = 1;
  m.block_rows = 0;
  m.block_cols = 128;
  EXPECT_THROW(fp8_matmul(x, 1, m, y), std::invalid_argument);
  m.block_rows = 128;
  m.scales = nullptr;
  EXPECT_THROW(fp8_matmul(x, 1, m, y), std::invalid_argument);
  m.scales = scales;
  EXPECT_NO_THROW(fp8_matmul(x, 1, m, y));
  EXPECT_EQ(y[0], 0.0F);
  if (!byte_gemm_isa_runs(byte_gemm_isa::avx512_bf16)) {
    const std::uint16_t xb[8] = {};
    EXPECT_THROW(fp8_matmul_bf16(xb, 1, m, y, byte_gemm_isa::avx512_bf16), std::invalid_argument);
  }
  const std::int8_t q[8] = {};
  EXPECT_THROW(int8_matmul(x, 1, int8_matrix{q, nullptr, 8, 1}, y), std::invalid_argument);
  EXPECT_THROW(int8_matmul(x, 1, int8_matrix{q, scales, 0, 1}, y), std::invalid_argument);
  EXPECT_NO_THROW(int8_matmul(x, 1, int8_matrix{q, scales, 8, 1}, y));
  EXPECT_EQ(y[0], 0.0F);
}

}  // namespace
}  // namespace baton::clef::detail
