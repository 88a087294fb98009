#include "engine/clef/model/int4_gemm.hpp"

// GCC 12's AVX-512 intrinsics start from a self-initialised "undefined" vector, which
// -Wmaybe-uninitialized reports wherever they are inlined (GCC PR 105593, fixed in 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

// Each path's functions are compiled for its own ISA, so the library needs no -march flag; a
// helper inlined into a kernel must carry the kernel's target, or GCC refuses to inline it.
#define BATON_INT4_AVX2 __attribute__((target("avx2,fma,f16c")))
#define BATON_INT4_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) inline
#define BATON_INT4_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))
#define BATON_INT4_AVX512_INLINE \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c"), always_inline)) inline
#define BATON_INT4_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma,f16c")))
#define BATON_INT4_BF16_INLINE \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma,f16c"), always_inline)) inline

namespace baton::clef::detail {
namespace {

// The nibble at bits 4t..4t+3 of an int32, masked in place (no shift), converts to q·16^t: the
// input it multiplies is scaled by 16^-t beforehand (scale_x), a power of two, so each product is
// the same float as with the shifted nibble. The high four nibbles are shifted down by 16 once.
// So unpacking costs an and and a convert per vector and input, and a shift per four.
constexpr std::array<float, 4> nibble_factor = {1.0f, 1.0f / 16, 1.0f / 256, 1.0f / 4096};

// One tile's operands: a few rows from the block's row `r`, a few vectors of columns from `n0`.
struct tile {
  const void* xs = nullptr;              // the tile's first row of x as the path wants it (fp32 scaled, or bf16 in pairs), stride `xs_stride`
  const float* sums = nullptr;           // its first row of Σx per group, stride `groups`
  const std::int32_t* qweight = nullptr;  // column n0 of packed row 0, stride `out`
  const std::uint16_t* scales = nullptr;  // column n0 of group 0, stride `out`
  const std::int32_t* qzeros = nullptr;   // word n0 / 8 of group 0, stride out / 8; null: symmetric
  float* y = nullptr;                     // the tile's first row at column n0, stride `out`
  std::int64_t xs_stride = 0, out = 0, group = 0, groups = 0;
  std::int64_t first_group = 0, last_group = 0;  // the groups this call sums; group 0 writes y, the rest add
  int zero_offset = 0;
  bool scales_bf16 = false;
  int lanes = 0;  // columns in the tile's last vector: the vector width, or 8 for AVX-512's half vector
};

using kernel = void (*)(const tile&);

// Packed rows ahead that a kernel asks the cache for (one group of 128 inputs): each tile reads a
// few cache lines of a packed row and jumps a row's length (out int32) to the next, a stride the
// hardware prefetchers follow poorly. Cold weights at one row: 52 GFLOP/s without, 101 with 16
// ahead, 89 with 32, 84 with 8 (AVX-512, in 2048, out 1536, Zen 5).
constexpr std::int64_t prefetch_rows = 16;

// ---- AVX2: 8 columns a vector (out % 8 == 0, so always whole) ----

// One input of the packed row (its nibble picked by `mask`) into every accumulator of the tile.
template <int R, int C>
BATON_INT4_AVX2_INLINE void avx2_input(__m256 (&acc)[R][C], const __m256i (&v)[C], __m256i mask, const float* x,
                                       std::int64_t stride) {
  __m256 w[C];
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) w[c] = _mm256_cvtepi32_ps(_mm256_and_si256(v[c], mask));
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const __m256 b = _mm256_set1_ps(x[r * stride]);
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(b, w[c], acc[r][c]);
  }
}

BATON_INT4_AVX2_INLINE __m256 avx2_scales(const std::uint16_t* p, bool bf16) {
  const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16)) : _mm256_cvtph_ps(bits);
}

// The zero points of 8 columns: one int32 of qzeros, or 8 when symmetric.
BATON_INT4_AVX2_INLINE __m256 avx2_zeros(const std::int32_t* p, int offset) {
  if (p == nullptr) return _mm256_set1_ps(8.0f);
  const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  const __m256i z = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(*p), shifts), _mm256_set1_epi32(0xF));
  return _mm256_cvtepi32_ps(_mm256_add_epi32(z, _mm256_set1_epi32(offset)));
}

template <int R, int C>
BATON_INT4_AVX2 void avx2_tile(const tile& t) {
  const __m256i m0 = _mm256_set1_epi32(0xF), m1 = _mm256_set1_epi32(0xF0), m2 = _mm256_set1_epi32(0xF00),
                m3 = _mm256_set1_epi32(0xF000);
  const std::int64_t packed = t.group / 8, in = t.xs_stride, out = t.out;
  for (std::int64_t g = t.first_group; g < t.last_group; ++g) {
    __m256 acc[R][C];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
    const std::int32_t* q = t.qweight + g * packed * out;
    const float* x = static_cast<const float*>(t.xs) + g * t.group;
    for (std::int64_t i = 0; i < packed; ++i, q += out, x += 8) {
      __m256i v[C];
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) v[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 8 * c));
#pragma GCC unroll 16
      for (int c = 0; c < C; c += 2) _mm_prefetch(reinterpret_cast<const char*>(q + prefetch_rows * out + 8 * c), _MM_HINT_T0);
      avx2_input<R, C>(acc, v, m0, x + 0, in);
      avx2_input<R, C>(acc, v, m1, x + 1, in);
      avx2_input<R, C>(acc, v, m2, x + 2, in);
      avx2_input<R, C>(acc, v, m3, x + 3, in);
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) v[c] = _mm256_srli_epi32(v[c], 16);
      avx2_input<R, C>(acc, v, m0, x + 4, in);
      avx2_input<R, C>(acc, v, m1, x + 5, in);
      avx2_input<R, C>(acc, v, m2, x + 6, in);
      avx2_input<R, C>(acc, v, m3, x + 7, in);
    }
    // The group's scale and zero, once: y += s·(acc − z·Σx), the zero's term rounded against acc.
    __m256 s[C], z[C];
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      s[c] = avx2_scales(t.scales + g * out + 8 * c, t.scales_bf16);
      z[c] = avx2_zeros(t.qzeros ? t.qzeros + g * (out / 8) + c : nullptr, t.zero_offset);
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m256 sum = _mm256_set1_ps(t.sums[r * t.groups + g]);
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) {
        float* y = t.y + r * out + 8 * c;
        const __m256 before = g == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(y);
        _mm256_storeu_ps(y, _mm256_fmadd_ps(s[c], _mm256_fnmadd_ps(z[c], sum, acc[r][c]), before));
      }
    }
  }
}

// ---- AVX-512: 16 columns a vector; the last vector of a tile may hold 8 (out % 16 == 8) ----

template <int R, int C>
BATON_INT4_AVX512_INLINE void avx512_input(__m512 (&acc)[R][C], const __m512i (&v)[C], __m512i mask,
                                           const float* x, std::int64_t stride) {
  __m512 w[C];
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) w[c] = _mm512_cvtepi32_ps(_mm512_and_si512(v[c], mask));
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const __m512 b = _mm512_set1_ps(x[r * stride]);
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(b, w[c], acc[r][c]);
  }
}

BATON_INT4_AVX512_INLINE __m512 avx512_scales(const std::uint16_t* p, bool bf16, __mmask16 lanes) {
  const __m256i bits = _mm256_maskz_loadu_epi16(lanes, p);
  return bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16)) : _mm512_cvtph_ps(bits);
}

// The zero points of 16 columns: two int32 of qzeros (the second only where the vector's columns
// reach it), or 8 when symmetric.
BATON_INT4_AVX512_INLINE __m512 avx512_zeros(const std::int32_t* p, int offset, __mmask16 lanes) {
  if (p == nullptr) return _mm512_set1_ps(8.0f);
  const __m256i low = _mm256_set1_epi32(p[0]);
  const __m256i high = lanes == 0xFFFF ? _mm256_set1_epi32(p[1]) : low;
  const __m512i words = _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);
  const __m512i shifts = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
  const __m512i z = _mm512_and_si512(_mm512_srlv_epi32(words, shifts), _mm512_set1_epi32(0xF));
  return _mm512_cvtepi32_ps(_mm512_add_epi32(z, _mm512_set1_epi32(offset)));
}

// A group's end on the AVX-512 paths: y = s·(acc − (z + bias)·Σx) for each row and vector of the
// tile, added to y after group 0. `bias` is what the path added to every nibble (avx512_bf16's 16;
// z + 0 is z exactly).
template <int R, int C>
BATON_INT4_AVX512_INLINE void avx512_group_end(const __m512 (&acc)[R][C], const tile& t, std::int64_t g, __mmask16 last,
                                               float bias) {
  const std::int64_t out = t.out;
  const __m512 offset = _mm512_set1_ps(bias);
  __m512 s[C], z[C];
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) {
    const __mmask16 lanes = c == C - 1 ? last : 0xFFFF;
    s[c] = avx512_scales(t.scales + g * out + 16 * c, t.scales_bf16, lanes);
    z[c] = _mm512_add_ps(avx512_zeros(t.qzeros ? t.qzeros + g * (out / 8) + 2 * c : nullptr, t.zero_offset, lanes), offset);
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const __m512 sum = _mm512_set1_ps(t.sums[r * t.groups + g]);
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      const __mmask16 lanes = c == C - 1 ? last : 0xFFFF;
      float* y = t.y + r * out + 16 * c;
      const __m512 before = g == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(lanes, y);
      _mm512_mask_storeu_ps(y, lanes, _mm512_fmadd_ps(s[c], _mm512_fnmadd_ps(z[c], sum, acc[r][c]), before));
    }
  }
}

template <int R, int C>
BATON_INT4_AVX512 void avx512_tile(const tile& t) {
  const __m512i m0 = _mm512_set1_epi32(0xF), m1 = _mm512_set1_epi32(0xF0), m2 = _mm512_set1_epi32(0xF00),
                m3 = _mm512_set1_epi32(0xF000);
  const __mmask16 last = t.lanes == 16 ? 0xFFFF : 0x00FF;
  const std::int64_t packed = t.group / 8, in = t.xs_stride, out = t.out;
  for (std::int64_t g = t.first_group; g < t.last_group; ++g) {
    __m512 acc[R][C];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
    const std::int32_t* q = t.qweight + g * packed * out;
    const float* x = static_cast<const float*>(t.xs) + g * t.group;
    for (std::int64_t i = 0; i < packed; ++i, q += out, x += 8) {
      __m512i v[C];
#pragma GCC unroll 16
      for (int c = 0; c < C - 1; ++c) v[c] = _mm512_loadu_si512(q + 16 * c);
      v[C - 1] = _mm512_maskz_loadu_epi32(last, q + 16 * (C - 1));
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) _mm_prefetch(reinterpret_cast<const char*>(q + prefetch_rows * out + 16 * c), _MM_HINT_T0);
      avx512_input<R, C>(acc, v, m0, x + 0, in);
      avx512_input<R, C>(acc, v, m1, x + 1, in);
      avx512_input<R, C>(acc, v, m2, x + 2, in);
      avx512_input<R, C>(acc, v, m3, x + 3, in);
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) v[c] = _mm512_srli_epi32(v[c], 16);
      avx512_input<R, C>(acc, v, m0, x + 4, in);
      avx512_input<R, C>(acc, v, m1, x + 5, in);
      avx512_input<R, C>(acc, v, m2, x + 6, in);
      avx512_input<R, C>(acc, v, m3, x + 7, in);
    }
    avx512_group_end<R, C>(acc, t, g, last, 0.0F);
  }
}

// ---- AVX-512 BF16: x in bf16, two inputs a vdpbf16ps; 16 columns a vector as AVX-512's ----
//
// vdpbf16ps adds to fp32 lane n the products of the two bf16 in dword n of one operand with the two
// in dword n of the other. The weight's dword n holds a packed row's nibble j in its low word and
// nibble j + 4 in its high one, each made bf16 by an and and an or (one vpternlogd): the nibble
// as the top four of the seven mantissa bits (bits 3..6) under the exponent of 16 (0x4180) is the
// bf16 of 16 + q, exactly. One shift of the int32s brings nibbles j and j + 4 there (left by 3 for
// j = 0, right by 4j − 3 else). The x operand is the broadcast dword of (x[j], x[j + 4]): pair_x
// regroups each 8 inputs so. The 16 added to every nibble joins the zero point:
// y += s·(acc − (z + 16)·Σx).

template <int R, int C>
BATON_INT4_BF16_INLINE void bf16_input(__m512 (&acc)[R][C], const __m512i (&v)[C], const std::uint16_t* x,
                                       std::int64_t stride) {
  const __m512i nibble = _mm512_set1_epi32(0x00780078), sixteen = _mm512_set1_epi32(0x41804180);
  __m512bh w[C];
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) w[c] = (__m512bh)_mm512_ternarylogic_epi32(v[c], nibble, sixteen, 0xEA);  // (v & nibble) | sixteen
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    std::int32_t pair;
    std::memcpy(&pair, x + r * stride, sizeof pair);
    const __m512bh b = (__m512bh)_mm512_set1_epi32(pair);
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], b, w[c]);
  }
}

template <int R, int C>
BATON_INT4_BF16 void bf16_tile(const tile& t) {
  const __mmask16 last = t.lanes == 16 ? 0xFFFF : 0x00FF;
  const std::int64_t packed = t.group / 8, in = t.xs_stride, out = t.out;
  // A tile of few accumulators (one row) splits the pairs over two sets of them, so enough
  // vdpbf16ps chains run at once, and adds the two at the group's end.
  constexpr bool two = R * C <= 8;
  for (std::int64_t g = t.first_group; g < t.last_group; ++g) {
    __m512 acc[R][C], acc2[R][C];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) acc[r][c] = acc2[r][c] = _mm512_setzero_ps();
    const std::int32_t* q = t.qweight + g * packed * out;
    const std::uint16_t* x = static_cast<const std::uint16_t*>(t.xs) + g * t.group;
    for (std::int64_t i = 0; i < packed; ++i, q += out, x += 8) {
      __m512i v[C], u[C];
#pragma GCC unroll 16
      for (int c = 0; c < C - 1; ++c) v[c] = _mm512_loadu_si512(q + 16 * c);
      v[C - 1] = _mm512_maskz_loadu_epi32(last, q + 16 * (C - 1));
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) _mm_prefetch(reinterpret_cast<const char*>(q + prefetch_rows * out + 16 * c), _MM_HINT_T0);
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) u[c] = _mm512_slli_epi32(v[c], 3);
      bf16_input<R, C>(acc, u, x + 0, in);
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) u[c] = _mm512_srli_epi32(v[c], 1);
      bf16_input<R, C>(two ? acc2 : acc, u, x + 2, in);
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) u[c] = _mm512_srli_epi32(v[c], 5);
      bf16_input<R, C>(acc, u, x + 4, in);
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) u[c] = _mm512_srli_epi32(v[c], 9);
      bf16_input<R, C>(two ? acc2 : acc, u, x + 6, in);
    }
    if constexpr (two) {
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) acc[r][c] = _mm512_add_ps(acc[r][c], acc2[r][c]);
    }
    avx512_group_end<R, C>(acc, t, g, last, 16.0F);
  }
}

// ---- the tiling, shared by the paths ----

constexpr int max_tile_rows = 4, max_tile_vectors = 8;

// A path: its kernels for every tile of r rows × c vectors it uses.
struct path {
  int width;  // columns a vector
  int rows;   // rows of a whole tile
  std::array<int, max_tile_rows + 1> vectors;  // vectors a tile of r rows spans (r = 1..rows)
  std::array<std::array<kernel, max_tile_vectors + 1>, max_tile_rows + 1> kernels;  // [r][c], c ≤ vectors[r]
};

// Tiles of 4 rows, so every unpacked vector serves 4 rows, × 3 (AVX2) or 4 (AVX-512) vectors of
// columns; fewer rows (a tail, or decode's one) take wider tiles for enough independent FMA chains.
// Measured on a Zen 5 EPYC (bench/int4_matmul.cpp, 4 to 256 rows, GFLOP/s against an FMA peak of
// 129 and 257): AVX2 4×3 113-118 (4×2 83-86, 3×3 90-103, 2×4 98-103, 6×2 85-114, 4×4 74-77:
// spills); AVX-512 4×4 221-233 (4×2 187-201, 8×2 212-231, 6×3 215-230, 4×5 213-222, 5×4 214-230).
// One row: AVX-512 8 vectors 94, 4 vectors 78 (cold weights); AVX2 4 vectors 54, 6 vectors 32.
constexpr int avx2_rows = 4, avx512_rows = 4;
constexpr std::array<int, max_tile_rows + 1> avx2_vectors = {0, 4, 4, 3, 3};
constexpr std::array<int, max_tile_rows + 1> avx512_vectors = {0, 8, 6, 4, 4};
// AVX-512 BF16 (same machine, x rounded to bf16, 4 to 256 rows): 4×4 350-420 GFLOP/s (6×3 295-415,
// 8×2 355-410, 5×4 350-420, all within the shared machine's noise); one row 4 vectors in two sets
// of accumulators 105-128 (8 vectors in two sets 69-109, in one set 84-102; AVX-512 fp32 73-120).
constexpr int bf16_rows = 4;
constexpr std::array<int, max_tile_rows + 1> bf16_vectors = {0, 4, 6, 4, 4};

template <int R, int... C>
constexpr std::array<kernel, max_tile_vectors + 1> avx2_row(std::integer_sequence<int, C...>) {
  return {nullptr, &avx2_tile<R, C + 1>...};
}
template <int R, int... C>
constexpr std::array<kernel, max_tile_vectors + 1> avx512_row(std::integer_sequence<int, C...>) {
  return {nullptr, &avx512_tile<R, C + 1>...};
}
template <int... R>
constexpr std::array<std::array<kernel, max_tile_vectors + 1>, max_tile_rows + 1> avx2_kernels(std::integer_sequence<int, R...>) {
  return {{{}, avx2_row<R + 1>(std::make_integer_sequence<int, avx2_vectors[R + 1]>())...}};
}
template <int... R>
constexpr std::array<std::array<kernel, max_tile_vectors + 1>, max_tile_rows + 1> avx512_kernels(std::integer_sequence<int, R...>) {
  return {{{}, avx512_row<R + 1>(std::make_integer_sequence<int, avx512_vectors[R + 1]>())...}};
}

template <int R, int... C>
constexpr std::array<kernel, max_tile_vectors + 1> bf16_row(std::integer_sequence<int, C...>) {
  return {nullptr, &bf16_tile<R, C + 1>...};
}
template <int... R>
constexpr std::array<std::array<kernel, max_tile_vectors + 1>, max_tile_rows + 1> bf16_kernels(std::integer_sequence<int, R...>) {
  return {{{}, bf16_row<R + 1>(std::make_integer_sequence<int, bf16_vectors[R + 1]>())...}};
}

constexpr path avx2_path = {8, avx2_rows, avx2_vectors, avx2_kernels(std::make_integer_sequence<int, avx2_rows>())};
constexpr path avx512_path = {16, avx512_rows, avx512_vectors,
                              avx512_kernels(std::make_integer_sequence<int, avx512_rows>())};
constexpr path bf16_path = {16, bf16_rows, bf16_vectors, bf16_kernels(std::make_integer_sequence<int, bf16_rows>())};

// Rows of x scaled and summed at a time: their scaled copy (here 256 KiB) stays in the L2 cache
// while every column tile reads it.
constexpr std::int64_t block_bytes = 256 * 1024;
// Groups of inputs a sweep over the columns covers: a panel of the weight of at most this many
// bytes (at least one group; one group of 128 at the experts' shapes, 96-128 KiB), read from
// memory once and kept in L2 for every row tile. Walking the whole of `in` per column tile
// instead (a 1.5 MiB strip at a 6 KiB stride) ran one row at 26 against 97 GFLOP/s (AVX-512,
// cold weights) and 4 rows at 54 against 217; panels of 256 KiB: 68 and 156.
constexpr std::int64_t panel_bytes = 64 * 1024;

// x scaled per input by nibble_factor (xs) and summed per group in fp32 (sums), for `rows` rows.
void scale_x(const float* x, std::int64_t rows, std::int64_t in, std::int64_t group, float* xs, std::int64_t stride,
             float* sums) {
  const std::int64_t groups = in / group;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t g = 0; g < groups; ++g) {
      const float* from = x + r * in + g * group;
      float* to = xs + r * stride + g * group;
      float part[8] = {};  // eight partial sums, so the loop vectorises
      for (std::int64_t i = 0; i < group; i += 8) {
        for (int j = 0; j < 8; ++j) {
          part[j] += from[i + j];
          to[i + j] = from[i + j] * nibble_factor[j % 4];
        }
      }
      sums[r * groups + g] = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
    }
  }
}

float bf16_float(std::uint16_t bits) {
  const std::uint32_t word = std::uint32_t{bits} << 16;
  float f;
  std::memcpy(&f, &word, sizeof f);
  return f;
}

// bf16 x regrouped for bf16_tile, each 8 inputs as (x0, x4, x1, x5, x2, x6, x3, x7), and summed per
// group in fp32 (sums; each bf16 exact in fp32), for `rows` rows.
void pair_x(const std::uint16_t* x, std::int64_t rows, std::int64_t in, std::int64_t group, std::uint16_t* xs,
            std::int64_t stride, float* sums) {
  const std::int64_t groups = in / group;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::uint16_t* from = x + r * in + g * group;
      std::uint16_t* to = xs + r * stride + g * group;
      float part[8] = {};
      for (std::int64_t i = 0; i < group; i += 8) {
        for (int j = 0; j < 8; ++j) part[j] += bf16_float(from[i + j]);
        for (int j = 0; j < 4; ++j) {
          to[i + 2 * j] = from[i + j];
          to[i + 2 * j + 1] = from[i + j + 4];
        }
      }
      sums[r * groups + g] = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
    }
  }
}

// fp32 x, scaled as scale_x does, from bf16 x (widened exactly).
void scale_x(const std::uint16_t* x, std::int64_t rows, std::int64_t in, std::int64_t group, float* xs,
             std::int64_t stride, float* sums) {
  const std::int64_t groups = in / group;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::uint16_t* from = x + r * in + g * group;
      float* to = xs + r * stride + g * group;
      float part[8] = {};
      for (std::int64_t i = 0; i < group; i += 8) {
        for (int j = 0; j < 8; ++j) {
          const float v = bf16_float(from[i + j]);
          part[j] += v;
          to[i + j] = v * nibble_factor[j % 4];
        }
      }
      sums[r * groups + g] = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
    }
  }
}

// `rows` rows (from the block's row `first`) in tiles of `tile_rows` rows, every column tile, over
// groups [first_group, last_group).
void sweep(const path& p, int tile_rows, std::int64_t first, std::int64_t rows, std::int64_t first_group,
           std::int64_t last_group, const void* xs, std::int64_t element, std::int64_t stride, const float* sums,
           const int4_matrix& w, float* y) {
  const int vectors = p.vectors[tile_rows];
  const std::int64_t span = std::int64_t{vectors} * p.width, groups = w.in / w.group;
  tile t;
  t.xs_stride = stride;
  t.out = w.out;
  t.group = w.group;
  t.groups = groups;
  t.first_group = first_group;
  t.last_group = last_group;
  t.zero_offset = w.zero_offset;
  t.scales_bf16 = w.scales_bf16;
  for (std::int64_t n0 = 0; n0 < w.out; n0 += span) {
    const std::int64_t columns = std::min(span, w.out - n0);
    const auto used = static_cast<int>((columns + p.width - 1) / p.width);
    t.lanes = static_cast<int>(columns - std::int64_t{used - 1} * p.width);
    t.qweight = w.qweight + n0;
    t.scales = w.scales + n0;
    t.qzeros = w.qzeros ? w.qzeros + n0 / 8 : nullptr;
    const kernel k = p.kernels[tile_rows][used];
    for (std::int64_t r = first; r < first + rows; r += tile_rows) {
      t.xs = static_cast<const char*>(xs) + r * stride * element;
      t.sums = sums + r * groups;
      t.y = y + r * w.out + n0;
      k(t);
    }
  }
}

// X: the caller's x, float or bf16 bits; XS: the path's x, float (scaled) or bf16 bits (paired).
template <class XS, class X>
void run(const path& p, const X* x, std::int64_t rows, const int4_matrix& w, float* y) {
  // Grown on a first larger call, then reused: nothing is allocated on the hot path.
  thread_local std::vector<XS> xs_buffer;
  thread_local std::vector<float> sums_buffer;
  const std::int64_t groups = w.in / w.group;
  // A row of scaled x one cache line longer than x's: at a power-of-two stride (in 2048: 8 KiB) a
  // group's inputs of every row of the block fall in the same few L1 sets. 256 rows of in 2048,
  // best of 5 runs on a busy machine: 221 against 157 GFLOP/s (AVX-512); no change to 64 rows.
  const std::int64_t element = sizeof(XS), stride = w.in + 64 / element;
  const std::int64_t fit = block_bytes / (stride * element) / p.rows * p.rows;
  const std::int64_t block = std::min(rows, std::max<std::int64_t>(fit, p.rows));
  const std::int64_t group_bytes = w.group / 8 * w.out * std::int64_t{sizeof(std::int32_t)};
  const std::int64_t panel = std::max<std::int64_t>(1, panel_bytes / group_bytes);
  if (xs_buffer.size() < static_cast<std::size_t>(block * stride)) xs_buffer.resize(static_cast<std::size_t>(block * stride));
  if (sums_buffer.size() < static_cast<std::size_t>(block * groups)) {
    sums_buffer.resize(static_cast<std::size_t>(block * groups));
  }
  XS* xs = xs_buffer.data();
  float* sums = sums_buffer.data();
  for (std::int64_t r0 = 0; r0 < rows; r0 += block) {
    const std::int64_t n = std::min(block, rows - r0);
    if constexpr (std::is_same_v<XS, float>) {
      scale_x(x + r0 * w.in, n, w.in, w.group, xs, stride, sums);
    } else {
      pair_x(x + r0 * w.in, n, w.in, w.group, xs, stride, sums);
    }
    const std::int64_t whole = n / p.rows * p.rows;
    for (std::int64_t g = 0; g < groups; g += panel) {
      const std::int64_t g1 = std::min(groups, g + panel);
      if (whole > 0) sweep(p, p.rows, 0, whole, g, g1, xs, element, stride, sums, w, y + r0 * w.out);
      if (n > whole) {
        sweep(p, static_cast<int>(n - whole), whole, n - whole, g, g1, xs, element, stride, sums, w, y + r0 * w.out);
      }
    }
  }
}

void check(const void* x, std::int64_t rows, const int4_matrix& w, const float* y, int4_isa isa) {
  const auto fail = [](const std::string& why) { throw std::invalid_argument("int4_matmul: " + why); };
  if (w.qweight == nullptr || w.scales == nullptr) fail("no qweight or scales");
  if (w.in <= 0 || w.out <= 0 || w.group <= 0) fail("in, out and group must be positive");
  if (w.group % 8 != 0 || w.in % w.group != 0) fail("group must be a multiple of 8 that divides in");
  if (w.out % 8 != 0) fail("out must be a multiple of 8");
  if (rows < 0 || (rows > 0 && (x == nullptr || y == nullptr))) fail("bad rows, x or y");
  if (!int4_isa_runs(isa)) fail("this CPU does not run the requested ISA's path");
}

}  // namespace

bool int4_isa_runs(int4_isa isa) noexcept {
  __builtin_cpu_init();
  switch (isa) {
    case int4_isa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case int4_isa::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case int4_isa::avx512_bf16:
      return int4_isa_runs(int4_isa::avx512) && __builtin_cpu_supports("avx512bf16");
  }
  return false;
}

int4_isa int4_best_isa() noexcept { return int4_isa_runs(int4_isa::avx512) ? int4_isa::avx512 : int4_isa::avx2; }

int4_isa int4_best_isa_bf16() noexcept {
  return int4_isa_runs(int4_isa::avx512_bf16) ? int4_isa::avx512_bf16 : int4_best_isa();
}

const char* int4_isa_name(int4_isa isa) noexcept {
  switch (isa) {
    case int4_isa::avx2: return "AVX2";
    case int4_isa::avx512: return "AVX-512";
    case int4_isa::avx512_bf16: return "AVX-512 BF16";
  }
  return "?";
}

void int4_matmul(const float* x, std::int64_t rows, const int4_matrix& w, float* y, int4_isa isa) {
  check(x, rows, w, y, isa);
  if (isa == int4_isa::avx512_bf16) throw std::invalid_argument("int4_matmul: the avx512_bf16 path takes bf16 x (int4_matmul_bf16)");
  if (rows == 0) return;
  run<float>(isa == int4_isa::avx512 ? avx512_path : avx2_path, x, rows, w, y);
}

void int4_matmul_bf16(const std::uint16_t* x, std::int64_t rows, const int4_matrix& w, float* y, int4_isa isa) {
  check(x, rows, w, y, isa);
  if (rows == 0) return;
  if (isa == int4_isa::avx512_bf16) {
    run<std::uint16_t>(bf16_path, x, rows, w, y);
  } else {
    run<float>(isa == int4_isa::avx512 ? avx512_path : avx2_path, x, rows, w, y);
  }
}

}  // namespace baton::clef::detail
