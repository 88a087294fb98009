#include "engine/clef/model/byte_gemm.hpp"

// GCC 12's AVX-512 intrinsics start from a self-initialised "undefined" vector, which
// -W(maybe-)uninitialized reports wherever they are inlined (GCC PR 105593, fixed in 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

// Each path's functions carry their own ISA, so the library needs no -march flag; a helper inlined
// into a kernel must carry the kernel's target, or GCC refuses to inline it.
#define BATON_BYTE_AVX2 __attribute__((target("avx2,fma,f16c")))
#define BATON_BYTE_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) inline
#define BATON_BYTE_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma,f16c")))
#define BATON_BYTE_BF16_INLINE \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma,f16c"), always_inline)) inline

namespace baton::clef::detail {
namespace {

// Rows of the weight converted at a time: 64 rows of 2,048 inputs are 256 KiB in bf16, which stay
// in the L2 while every row of x passes over them.
constexpr std::int64_t block_outputs = 64;

// Scale i of the matrix times 2^8, the factor the fp16 reading of a byte leaves out.
float scale_256(const fp8_matrix& w, std::int64_t i) {
  float s = 0;
  if (w.scales_bf16) {
    const std::uint32_t bits = static_cast<std::uint32_t>(static_cast<const std::uint16_t*>(w.scales)[i]) << 16;
    std::memcpy(&s, &bits, sizeof s);
  } else {
    s = static_cast<const float*>(w.scales)[i];
  }
  return s * 256.0F;
}

// An E4M3 byte as fp16 bits worth its value · 2^-8: exponent and mantissa shifted up by 7, the sign
// (then at bit 14) moved to bit 15 by adding it to itself.
constexpr std::uint16_t fp16_bits(std::uint8_t b) {
  const auto h = static_cast<std::uint16_t>(b << 7);
  return static_cast<std::uint16_t>(h + (h & 0x4000));
}

// How far ahead of the conversion the weight's bytes are asked for (prefetching does not fault,
// so past the weight's end is harmless).
constexpr std::int64_t prefetch_bytes = 4096;

// The first scale of weight row n's blocks (one division a row: a division per block of columns
// cost as much as converting its bytes).
std::int64_t first_scale(const fp8_matrix& w, std::int64_t n) {
  return n / w.block_rows * ((w.in + w.block_cols - 1) / w.block_cols);
}

// A tile of R rows of x against C converted weight rows, over `in` inputs: y[r][c].
template <class T>
using kernel = void (*)(const T* x, std::int64_t x_stride, const T* w, std::int64_t w_stride, std::int64_t in, float* y,
                        std::int64_t y_stride);

// ---- AVX2: fp32, 8 inputs a vector ----

BATON_BYTE_AVX2_INLINE float avx2_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// Weight rows [n0, n0 + rows) into `to` [rows][stride] fp32, each times its block's scale; the
// columns from `in` to `stride` zero.
BATON_BYTE_AVX2 void avx2_convert(const fp8_matrix& w, std::int64_t n0, std::int64_t rows, float* to, std::int64_t stride) {
  const __m128i sign = _mm_set1_epi16(0x4000);
  for (std::int64_t n = 0; n < rows; ++n) {
    const std::uint8_t* from = w.weight + (n0 + n) * w.in;
    float* row = to + n * stride;
    for (std::int64_t k = 0, i = first_scale(w, n0 + n); k < w.in; ++i) {
      const std::int64_t end = std::min(w.in, k + w.block_cols);
      const float scale = scale_256(w, i);
      const __m256 s = _mm256_set1_ps(scale);
      for (; k + 8 <= end; k += 8) {
        __m128i h;
        std::memcpy(&h, from + k, 8);  // the low 8 bytes; the rest is not read
        h = _mm_slli_epi16(_mm_cvtepu8_epi16(h), 7);
        h = _mm_add_epi16(h, _mm_and_si128(h, sign));
        _mm256_storeu_ps(row + k, _mm256_mul_ps(_mm256_cvtph_ps(h), s));
      }
      for (; k < end; ++k) row[k] = _cvtsh_ss(fp16_bits(from[k])) * scale;
    }
    std::fill(row + w.in, row + stride, 0.0F);
  }
}

// int8 weight rows [n0, n0 + rows) into `to` [rows][stride] fp32, the integers as they are.
BATON_BYTE_AVX2 void avx2_convert(const int8_matrix& w, std::int64_t n0, std::int64_t rows, float* to, std::int64_t stride) {
  for (std::int64_t n = 0; n < rows; ++n) {
    const std::int8_t* from = w.weight + (n0 + n) * w.in;
    float* row = to + n * stride;
    std::int64_t k = 0;
    for (; k + 8 <= w.in; k += 8) {
      __m128i q;
      std::memcpy(&q, from + k, 8);
      _mm256_storeu_ps(row + k, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
    }
    for (; k < w.in; ++k) row[k] = static_cast<float>(from[k]);
    std::fill(row + w.in, row + stride, 0.0F);
  }
}

// One vector of inputs of R rows of x into every accumulator (the buffer's padding is zero).
template <int R, int C>
BATON_BYTE_AVX2_INLINE void avx2_step(__m256 (&acc)[R][C], const __m256 (&xv)[R], const float* w, std::int64_t w_stride) {
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) {
    const __m256 wv = _mm256_loadu_ps(w + c * w_stride);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(xv[r], wv, acc[r][c]);
  }
}

template <int R, int C>
BATON_BYTE_AVX2 void avx2_tile(const float* x, std::int64_t x_stride, const float* w, std::int64_t w_stride,
                              std::int64_t in, float* y, std::int64_t y_stride) {
  __m256 acc[R][C];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  }
  std::int64_t k = 0;
  for (; k + 8 <= in; k += 8) {
    __m256 xv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) xv[r] = _mm256_loadu_ps(x + r * x_stride + k);
    avx2_step<R, C>(acc, xv, w + k, w_stride);
  }
  if (k < in) {  // the last inputs, x's lanes past `in` masked off
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(in - k)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256 xv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) xv[r] = _mm256_maskload_ps(x + r * x_stride + k, mask);
    avx2_step<R, C>(acc, xv, w + k, w_stride);
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) y[r * y_stride + c] = avx2_sum(acc[r][c]);
  }
}

// ---- AVX-512 BF16: bf16, 32 inputs a vector, two a product ----

// 32 E4M3 bytes as bf16 bits, each value · s / 2^8 rounded once.
BATON_BYTE_BF16_INLINE __m512i bf16_of(__m256i bytes, __m512 s, __m512i sign) {
  __m512i h = _mm512_slli_epi16(_mm512_cvtepu8_epi16(bytes), 7);
  h = _mm512_add_epi16(h, _mm512_and_si512(h, sign));
  const __m512 lo = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(h)), s);
  const __m512 hi = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1)), s);
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
}

// Weight rows [n0, n0 + rows) into `to` [rows][stride] bf16 bits, each E4M3 · scale rounded once
// (vcvtne2ps2bf16: to nearest even); the columns from `in` to `stride` zero.
BATON_BYTE_BF16 void bf16_convert(const fp8_matrix& w, std::int64_t n0, std::int64_t rows, std::uint16_t* to,
                                 std::int64_t stride) {
  const __m512i sign = _mm512_set1_epi16(0x4000);
  for (std::int64_t n = 0; n < rows; ++n) {
    const std::uint8_t* from = w.weight + (n0 + n) * w.in;
    std::uint16_t* row = to + n * stride;
    for (std::int64_t k = 0, i = first_scale(w, n0 + n); k < w.in; ++i) {
      const std::int64_t end = std::min(w.in, k + w.block_cols);
      const __m512 s = _mm512_set1_ps(scale_256(w, i));
      for (; k + 32 <= end; k += 32) {
        _mm_prefetch(reinterpret_cast<const char*>(from + k) + prefetch_bytes, _MM_HINT_T0);
        const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(from + k));
        _mm512_storeu_si512(row + k, bf16_of(bytes, s, sign));
      }
      if (k < end) {  // a block's last columns short of a vector: masked (a masked load is slow on AMD)
        const auto m = static_cast<__mmask32>((1U << (end - k)) - 1);
        _mm512_mask_storeu_epi16(row + k, m, bf16_of(_mm256_maskz_loadu_epi8(m, from + k), s, sign));
      }
      k = end;
    }
    std::fill(row + w.in, row + stride, std::uint16_t{0});
  }
}

// int8 weight rows [n0, n0 + rows) into `to` [rows][stride] bf16 bits, the integers (exact).
BATON_BYTE_BF16 void bf16_convert(const int8_matrix& w, std::int64_t n0, std::int64_t rows, std::uint16_t* to,
                                  std::int64_t stride) {
  for (std::int64_t n = 0; n < rows; ++n) {
    const std::int8_t* from = w.weight + (n0 + n) * w.in;
    std::uint16_t* row = to + n * stride;
    std::int64_t k = 0;
    for (; k + 32 <= w.in; k += 32) {
      _mm_prefetch(reinterpret_cast<const char*>(from + k) + prefetch_bytes, _MM_HINT_T0);
      const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(from + k))));
      const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(from + k + 16))));
      _mm512_storeu_si512(row + k, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
    }
    for (; k < w.in; ++k) {  // the last inputs short of a vector
      float f = static_cast<float>(from[k]);
      std::uint32_t bits = 0;
      std::memcpy(&bits, &f, sizeof bits);
      row[k] = static_cast<std::uint16_t>(bits >> 16);  // exact: the integer's low bits are zero
    }
    std::fill(row + w.in, row + stride, std::uint16_t{0});
  }
}

// 32 inputs (those of `m`; x's others read as zero) of R rows of x into every accumulator.
template <int R, int C>
BATON_BYTE_BF16_INLINE void bf16_step(__m512 (&acc)[R][C], const std::uint16_t* x, std::int64_t x_stride,
                                     const std::uint16_t* w, std::int64_t w_stride, __mmask32 m) {
  __m512i xv[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) xv[r] = _mm512_maskz_loadu_epi16(m, x + r * x_stride);
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) {
    const __m512i wv = _mm512_loadu_si512(w + c * w_stride);  // the buffer's padding is zero
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      acc[r][c] = _mm512_dpbf16_ps(acc[r][c], reinterpret_cast<__m512bh>(xv[r]), reinterpret_cast<__m512bh>(wv));
    }
  }
}

template <int R, int C>
BATON_BYTE_BF16 void bf16_tile(const std::uint16_t* x, std::int64_t x_stride, const std::uint16_t* w,
                              std::int64_t w_stride, std::int64_t in, float* y, std::int64_t y_stride) {
  __m512 acc[R][C];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  std::int64_t k = 0;
  for (; k + 32 <= in; k += 32) bf16_step<R, C>(acc, x + k, x_stride, w + k, w_stride, ~__mmask32{0});
  if (k < in) bf16_step<R, C>(acc, x + k, x_stride, w + k, w_stride, static_cast<__mmask32>((1U << (in - k)) - 1));
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) y[r * y_stride + c] = _mm512_reduce_add_ps(acc[r][c]);
  }
}

// A block's rows in bf16 as vdpbf16ps takes them: pairs of inputs side by side per output,
// pairs[p][n] = (w[n][2p], w[n][2p + 1]) for the block's block_outputs outputs n, so that a row of x
// multiplies 16 outputs a vector with one broadcast pair, and no sum crosses a vector's lanes.
// 16 rows of `rows16` [16][stride] (bf16 bits, row-major) into the outputs [n, n + 16) of `pairs`:
// a 16 × 16 transpose of 32-bit pairs per 32 inputs.
BATON_BYTE_BF16 void to_pairs(const std::uint16_t* rows16, std::int64_t stride, std::uint32_t* pairs) {
  for (std::int64_t k = 0; k < stride; k += 32) {
    __m512i r[16], t[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(rows16 + i * stride + k);
#pragma GCC unroll 8
    for (int i = 0; i < 16; i += 2) {
      t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
      t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    // u[4g + c], lane L: rows 4g .. 4g + 3 of pair 4L + c.
#pragma GCC unroll 4
    for (int g = 0; g < 16; g += 4) {
      r[g] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
      r[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
      r[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
      r[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
    }
    std::uint32_t* to = pairs + k / 2 * block_outputs;
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m512i v = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x88), w = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xDD);
      const __m512i v2 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x88), w2 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xDD);
      _mm512_storeu_si512(to + (c + 0) * block_outputs, _mm512_shuffle_i32x4(v, v2, 0x88));
      _mm512_storeu_si512(to + (c + 4) * block_outputs, _mm512_shuffle_i32x4(w, w2, 0x88));
      _mm512_storeu_si512(to + (c + 8) * block_outputs, _mm512_shuffle_i32x4(v, v2, 0xDD));
      _mm512_storeu_si512(to + (c + 12) * block_outputs, _mm512_shuffle_i32x4(w, w2, 0xDD));
    }
  }
}

// One pair of inputs of R rows of x (xp[r]: the two bf16 as one 32-bit word) into every accumulator.
template <int R, int V>
BATON_BYTE_BF16_INLINE void pair_step(__m512 (&acc)[R][V], const std::uint32_t* w, const std::int32_t (&xp)[R]) {
  __m512i wv[V];
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) wv[v] = _mm512_loadu_si512(w + v * 16);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const __m512i xv = _mm512_set1_epi32(xp[r]);
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      acc[r][v] = _mm512_dpbf16_ps(acc[r][v], reinterpret_cast<__m512bh>(xv), reinterpret_cast<__m512bh>(wv[v]));
    }
  }
}

// R rows of x against the block's block_outputs outputs in pairs: y[r][n] for n < width, times
// scales[n] where there are scales (int8's), over `in` inputs (an odd last one paired with zero).
template <int R>
BATON_BYTE_BF16 void pair_tile(const std::uint16_t* x, std::int64_t x_stride, const std::uint32_t* pairs, std::int64_t in,
                               float* y, std::int64_t y_stride, const float* scales, std::int64_t width) {
  constexpr int V = block_outputs / 16;
  __m512 acc[R][V];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  const std::int64_t whole = in / 2;
  std::int32_t xp[R];
  for (std::int64_t p = 0; p < whole; ++p) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) std::memcpy(&xp[r], x + r * x_stride + 2 * p, sizeof xp[r]);
    pair_step<R, V>(acc, pairs + p * block_outputs, xp);
  }
  if (in % 2 != 0) {  // x's last input alone: its partner past the row's end read as zero
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) xp[r] = static_cast<std::int32_t>(x[r * x_stride + in - 1]);
    pair_step<R, V>(acc, pairs + whole * block_outputs, xp);
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      const std::int64_t n = v * 16;
      if (n >= width) break;
      __m512 out = acc[r][v];
      const auto m = static_cast<__mmask16>(width - n >= 16 ? 0xFFFF : (1U << (width - n)) - 1);
      if (scales != nullptr) out = _mm512_mul_ps(out, _mm512_maskz_loadu_ps(m, scales + n));
      _mm512_mask_storeu_ps(y + r * y_stride + n, m, out);
    }
  }
}

// ---- the sweep, one for both paths ----

template <class T, int R, int C>
struct path {
  std::int64_t lanes;  // inputs a vector: the buffer's rows are padded to a multiple
  std::array<std::array<kernel<T>, C + 1>, R + 1> kernels;  // [rows][weight rows] of a tile, 1..R × 1..C
};

// Tiles of R rows of x × C weight rows: AVX2 3 × 4 (12 accumulators, 3 x vectors and a weight
// vector: the 16 registers), AVX-512 BF16 4 × 6. Measured for the latter on a Zen 5 EPYC
// (bench/quant_matmul.cpp, 64 and 256 rows, GFLOP/s): 4 × 6 324-392, 4 × 4 312-364, 6 × 4 318-368,
// 8 × 3 234-255.
constexpr int avx2_rows = 3, avx2_columns = 4, bf16_rows = 4, bf16_columns = 6;

template <int R, int... C>
constexpr std::array<kernel<float>, avx2_columns + 1> avx2_row(std::integer_sequence<int, C...>) {
  return {nullptr, &avx2_tile<R, C + 1>...};
}
template <int... R>
constexpr auto avx2_kernels(std::integer_sequence<int, R...>) {
  return std::array<std::array<kernel<float>, avx2_columns + 1>, avx2_rows + 1>{
      {{}, avx2_row<R + 1>(std::make_integer_sequence<int, avx2_columns>())...}};
}

template <int R, int... C>
constexpr std::array<kernel<std::uint16_t>, bf16_columns + 1> bf16_row(std::integer_sequence<int, C...>) {
  return {nullptr, &bf16_tile<R, C + 1>...};
}
template <int... R>
constexpr auto bf16_kernels(std::integer_sequence<int, R...>) {
  return std::array<std::array<kernel<std::uint16_t>, bf16_columns + 1>, bf16_rows + 1>{
      {{}, bf16_row<R + 1>(std::make_integer_sequence<int, bf16_columns>())...}};
}

constexpr path<float, avx2_rows, avx2_columns> avx2_path = {8, avx2_kernels(std::make_integer_sequence<int, avx2_rows>())};
constexpr path<std::uint16_t, bf16_rows, bf16_columns> bf16_path = {
    32, bf16_kernels(std::make_integer_sequence<int, bf16_rows>())};

// A block's weight rows converted for the path (an overload per matrix and buffer type).
void convert(const fp8_matrix& w, std::int64_t n0, std::int64_t rows, float* to, std::int64_t stride) {
  avx2_convert(w, n0, rows, to, stride);
}
void convert(const fp8_matrix& w, std::int64_t n0, std::int64_t rows, std::uint16_t* to, std::int64_t stride) {
  bf16_convert(w, n0, rows, to, stride);
}
void convert(const int8_matrix& w, std::int64_t n0, std::int64_t rows, float* to, std::int64_t stride) {
  avx2_convert(w, n0, rows, to, stride);
}
void convert(const int8_matrix& w, std::int64_t n0, std::int64_t rows, std::uint16_t* to, std::int64_t stride) {
  bf16_convert(w, n0, rows, to, stride);
}

// The scales that multiply each output's fp32 sum once: int8's; none for FP8, whose scales are in
// the converted weights.
const float* output_scales(const fp8_matrix&) { return nullptr; }
const float* output_scales(const int8_matrix& w) { return w.scales; }

// A block's outputs [n0, n0 + count) of every row of y once its sums are in, times their scales.
template <class M>
void finish_block(const M& w, std::int64_t n0, std::int64_t count, std::int64_t rows, float* y) {
  const float* scales = output_scales(w);
  if (scales == nullptr) return;
  for (std::int64_t r = 0; r < rows; ++r) {
    float* out = y + r * w.out + n0;
    for (std::int64_t c = 0; c < count; ++c) out[c] *= scales[n0 + c];
  }
}

// Per block of weight rows: converted into the thread's buffer, then every tile of x rows against
// it, a few weight rows at a time (which stay in the L1 while x's rows pass).
template <class T, class M, int R, int C>
void run(const path<T, R, C>& p, const T* x, std::int64_t rows, const M& w, float* y) {
  const std::int64_t stride = (w.in + p.lanes - 1) / p.lanes * p.lanes;
  thread_local std::vector<T> buffer;
  if (buffer.size() < static_cast<std::size_t>(block_outputs * stride)) buffer.resize(static_cast<std::size_t>(block_outputs * stride));
  for (std::int64_t n0 = 0; n0 < w.out; n0 += block_outputs) {
    const std::int64_t nb = std::min(block_outputs, w.out - n0);
    convert(w, n0, nb, buffer.data(), stride);
    for (std::int64_t c0 = 0; c0 < nb; c0 += C) {
      const std::int64_t cc = std::min<std::int64_t>(C, nb - c0);
      for (std::int64_t r0 = 0; r0 < rows; r0 += R) {
        const std::int64_t rr = std::min<std::int64_t>(R, rows - r0);
        p.kernels[static_cast<std::size_t>(rr)][static_cast<std::size_t>(cc)](
            x + r0 * w.in, w.in, buffer.data() + c0 * stride, stride, w.in, y + r0 * w.out + n0 + c0, w.out);
      }
    }
    finish_block(w, n0, nb, rows, y);
  }
}

// From how many rows of x the bf16 path lays the weights out in pairs: below, laying them out
// costs more than the sums it saves (bench/quant_matmul.cpp, Zen 5, one row 1.6x the time of
// dot products along rows, 16 rows 1.16x; 64 rows 0.91x, 256 rows 0.78x).
constexpr std::int64_t pair_min_rows = 32;

// Tiles of the pairs: 6 rows of x × the block's 64 outputs (24 accumulators, 4 weight vectors
// and a broadcast x pair of the 32 registers).
constexpr int pair_rows = 6;

template <int... R>
constexpr auto pair_kernels(std::integer_sequence<int, R...>) {
  using tile = void (*)(const std::uint16_t*, std::int64_t, const std::uint32_t*, std::int64_t, float*, std::int64_t,
                        const float*, std::int64_t);
  return std::array<tile, pair_rows + 1>{nullptr, &pair_tile<R + 1>...};
}
constexpr auto pair_tiles = pair_kernels(std::make_integer_sequence<int, pair_rows>());


// The bf16 path: per block of block_outputs weight rows, 16 rows at a time converted (row-major,
// in the thread's `rows16`) and laid out in pairs (to_pairs, in the thread's `pairs`), then every
// tile of x's rows against the block.
template <class M>
void run_pairs(const std::uint16_t* x, std::int64_t rows, const M& w, float* y) {
  const std::int64_t stride = (w.in + 31) / 32 * 32;
  thread_local std::vector<std::uint16_t> rows16;
  thread_local std::vector<std::uint32_t> pairs;
  rows16.resize(static_cast<std::size_t>(16 * stride));
  pairs.resize(static_cast<std::size_t>(block_outputs * stride / 2));
  const float* scales = output_scales(w);
  for (std::int64_t n0 = 0; n0 < w.out; n0 += block_outputs) {
    const std::int64_t nb = std::min(block_outputs, w.out - n0);
    for (std::int64_t n = 0; n < block_outputs; n += 16) {
      const std::int64_t converted = std::clamp<std::int64_t>(nb - n, 0, 16);
      if (converted > 0) convert(w, n0 + n, converted, rows16.data(), stride);
      std::fill(rows16.begin() + converted * stride, rows16.end(), std::uint16_t{0});  // outputs past the weight's end
      to_pairs(rows16.data(), stride, pairs.data() + n);
    }
    for (std::int64_t r0 = 0; r0 < rows; r0 += pair_rows) {
      const std::int64_t rr = std::min<std::int64_t>(pair_rows, rows - r0);
      pair_tiles[static_cast<std::size_t>(rr)](x + r0 * w.in, w.in, pairs.data(), w.in, y + r0 * w.out + n0, w.out,
                                               scales == nullptr ? nullptr : scales + n0, nb);
    }
  }
}

void check(const char* what, const void* x, std::int64_t rows, const void* weight, const void* scales,
           std::int64_t in, std::int64_t out, const float* y, byte_gemm_isa isa) {
  if (!byte_gemm_isa_runs(isa)) throw std::invalid_argument(std::string(what) + ": this CPU does not run " + byte_gemm_isa_name(isa));
  if (rows < 0 || in <= 0 || out <= 0) throw std::invalid_argument(std::string(what) + ": sizes must be positive");
  if (weight == nullptr || scales == nullptr || (rows > 0 && (x == nullptr || y == nullptr))) {
    throw std::invalid_argument(std::string(what) + ": a null operand");
  }
}
void check(const void* x, std::int64_t rows, const fp8_matrix& w, const float* y, byte_gemm_isa isa) {
  if (w.block_rows <= 0 || w.block_cols <= 0) throw std::invalid_argument("fp8 matmul: blocks must be positive");
  check("fp8 matmul", x, rows, w.weight, w.scales, w.in, w.out, y, isa);
}
void check(const void* x, std::int64_t rows, const int8_matrix& w, const float* y, byte_gemm_isa isa) {
  check("int8 matmul", x, rows, w.weight, w.scales, w.in, w.out, y, isa);
}

// bf16 x through `path` on avx512_bf16, else widened to fp32 (exact: the bits moved up) for the
// AVX2 path.
template <class M>
void bf16_or_widened(const std::uint16_t* x, std::int64_t rows, const M& w, float* y, byte_gemm_isa isa) {
  check(x, rows, w, y, isa);
  if (isa == byte_gemm_isa::avx512_bf16) {
    if (rows >= pair_min_rows) run_pairs(x, rows, w, y);
    else run(bf16_path, x, rows, w, y);
    return;
  }
  thread_local std::vector<float> widened;
  widened.resize(static_cast<std::size_t>(rows * w.in));
  for (std::int64_t i = 0; i < rows * w.in; ++i) {
    const std::uint32_t bits = static_cast<std::uint32_t>(x[i]) << 16;
    std::memcpy(&widened[static_cast<std::size_t>(i)], &bits, sizeof(float));
  }
  run(avx2_path, widened.data(), rows, w, y);
}

}  // namespace

bool byte_gemm_isa_runs(byte_gemm_isa isa) noexcept {
  switch (isa) {
    case byte_gemm_isa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case byte_gemm_isa::avx512_bf16:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("f16c");
  }
  return false;
}

byte_gemm_isa byte_gemm_best_isa() noexcept {
  return byte_gemm_isa_runs(byte_gemm_isa::avx512_bf16) ? byte_gemm_isa::avx512_bf16 : byte_gemm_isa::avx2;
}

const char* byte_gemm_isa_name(byte_gemm_isa isa) noexcept { return isa == byte_gemm_isa::avx2 ? "AVX2" : "AVX-512 BF16"; }

void fp8_matmul(const float* x, std::int64_t rows, const fp8_matrix& w, float* y) {
  check(x, rows, w, y, byte_gemm_isa::avx2);
  run(avx2_path, x, rows, w, y);
}

void fp8_matmul_bf16(const std::uint16_t* x, std::int64_t rows, const fp8_matrix& w, float* y, byte_gemm_isa isa) {
  bf16_or_widened(x, rows, w, y, isa);
}

void int8_matmul(const float* x, std::int64_t rows, const int8_matrix& w, float* y) {
  check(x, rows, w, y, byte_gemm_isa::avx2);
  run(avx2_path, x, rows, w, y);
}

void int8_matmul_bf16(const std::uint16_t* x, std::int64_t rows, const int8_matrix& w, float* y, byte_gemm_isa isa) {
  bf16_or_widened(x, rows, w, y, isa);
}

}  // namespace baton::clef::detail
