// The CPU's 4-bit weight-only GEMM: x (fp32) times a GPTQ/AutoRound int4 weight read in place from
// a mapped release, no Debian library multiplying that layout. The nibbles are unpacked and scaled
// in registers inside the loop; no dequantized copy of a weight is ever made, not even per call.
// Per group of inputs, x·q accumulates in fp32 for a tile of rows × columns, and the scale and
// zero point apply once at the group's end (y += s·(acc − z·Σx)), so the inner loop is and,
// convert and FMA only. Torch-free. One path per ISA, each compiled for its own target, chosen at
// run time: the library builds without -march flags.
#pragma once

#include <cstdint>

namespace baton::clef::detail {

// A weight [out, in] of the GPTQ/AutoRound packed layout, read in place from a mapped release.
struct int4_matrix {
  const std::int32_t* qweight = nullptr;  // [in / 8, out]: input rows 8i..8i+7 of column n in one int32, row 8i in the lowest nibble
  const std::uint16_t* scales = nullptr;  // [in / group, out]: fp16 bits, or bf16 bits where scales_bf16
  bool scales_bf16 = false;
  const std::int32_t* qzeros = nullptr;   // [in / group, out / 8]: zero points, 8 per int32 along out, column 8j in the lowest nibble; null: symmetric, every zero is 8
  int zero_offset = 0;                    // added to each stored zero (1 for GPTQ v1 checkpoints, which store zero - 1); unused when symmetric
  std::int64_t in = 0, out = 0, group = 0;  // group divides in and is a multiple of 8; out % 8 == 0
};

// avx2 and avx512 multiply fp32 x; avx512_bf16 multiplies bf16 x (vdpbf16ps, two inputs a
// product), so only int4_matmul_bf16 takes it.
enum class int4_isa { avx2, avx512, avx512_bf16 };

// The best path this CPU runs for fp32 x (__builtin_cpu_supports at run time:
// avx512f+avx512bw(+vl) -> avx512, else avx2; every x86-64 CPU baton supports has AVX2+FMA+F16C).
int4_isa int4_best_isa() noexcept;
// The best for bf16 x: avx512_bf16 where the CPU has avx512bf16 too, else int4_best_isa().
int4_isa int4_best_isa_bf16() noexcept;
bool int4_isa_runs(int4_isa isa) noexcept;
const char* int4_isa_name(int4_isa isa) noexcept;  // "AVX2", "AVX-512", "AVX-512 BF16"

// y [rows, out] = x [rows, in] (fp32, row-major) times the dequantized weight transposed:
// y[r][n] = sum_k x[r][k] * (q[k][n] - (z[k/group][n] + zero_offset)) * s[k/group][n]. fp32
// accumulation. On the calling thread; allocates nothing on the hot path: x, scaled per input for
// the unpacking, and its sums per group go to buffers of the thread, grown on a first larger call.
// y is written, not added to. Throws std::invalid_argument on a shape the layout cannot hold or an
// `isa` this CPU does not run.
// `isa` avx512_bf16 is refused here: that path takes bf16 x.
void int4_matmul(const float* x, std::int64_t rows, const int4_matrix& w, float* y, int4_isa isa = int4_best_isa());

// The same product for x in bf16 (bits, row-major [rows, in]); y in fp32 as above. On avx512_bf16
// the bf16 x is multiplied as it is: pairs of inputs (regrouped into a buffer of the thread, still
// bf16) against the nibbles made bf16 in registers, by vdpbf16ps, accumulating in fp32, and Σx
// summed in fp32 from the same bf16 values. On avx2 or avx512, x is widened to fp32 (exactly) into
// a buffer of the thread and multiplied as int4_matmul does. Throws as int4_matmul does.
void int4_matmul_bf16(const std::uint16_t* x, std::int64_t rows, const int4_matrix& w, float* y,
                      int4_isa isa = int4_best_isa_bf16());

}  // namespace baton::clef::detail
