// The CPU's weight-only GEMMs for weights of a byte each, read in place from a mapped release:
// FP8 (E4M3, block-scaled) and int8 (one scale per output), so such a release costs its own bytes
// in memory, not bf16's twice as many. A block of the weight's rows at a time is converted into a
// buffer of the thread (bf16 or fp32) while it stays in cache, and every row of x is multiplied by
// it there; the next block reuses the buffer. No Debian library multiplies these layouts (oneDNN
// 2.6 has neither fp8 nor weight decompression). Torch-free. One path per ISA, each compiled for
// its own target, chosen at run time.
//
// The conversions are exact. An E4M3 byte's bits shifted into an fp16's are that value times 2^-8
// (subnormals included, which F16C widens exactly), so the 2^8 goes into the block's scale and each
// weight is value · scale rounded once, as the dequantized release's (quantized_weights.hpp). An
// int8 weight is its integer (|q| <= 127 fits bf16's 8 bits), and its row's scale multiplies the
// row's fp32 sums, once each.
#pragma once

#include <cstdint>

namespace baton::clef::detail {

// A weight [out, in] of E4M3 bytes with one scale per block of block_rows × block_cols (the
// `weight_scale_inv` of DeepSeek-V3's and Qwen3's FP8 releases; the last blocks may be partial).
struct fp8_matrix {
  const std::uint8_t* weight = nullptr;  // [out, in], row-major
  const void* scales = nullptr;          // [ceil(out / block_rows), ceil(in / block_cols)]: fp32, or bf16 bits where scales_bf16
  bool scales_bf16 = false;
  std::int64_t in = 0, out = 0, block_rows = 0, block_cols = 0;
};

// A weight [out, in] of int8 with one fp32 scale per output (`baton quantize --int8`'s experts).
struct int8_matrix {
  const std::int8_t* weight = nullptr;  // [out, in], row-major
  const float* scales = nullptr;        // [out]
  std::int64_t in = 0, out = 0;
};

// avx2 converts to fp32 and multiplies with FMA (every x86-64 CPU baton supports); avx512_bf16
// converts to bf16 and multiplies bf16 x by vdpbf16ps, accumulating in fp32.
enum class byte_gemm_isa { avx2, avx512_bf16 };

byte_gemm_isa byte_gemm_best_isa() noexcept;  // avx512_bf16 where the CPU has avx512bf16 (and f, bw, vl), else avx2
bool byte_gemm_isa_runs(byte_gemm_isa isa) noexcept;
const char* byte_gemm_isa_name(byte_gemm_isa isa) noexcept;  // "AVX2", "AVX-512 BF16"

// y [rows, out] = x [rows, in] (fp32, row-major) times the weight transposed, each weight
// E4M3(byte) · scale in fp32 (bytes 0x7f and 0xff, NaN in E4M3, read as ±480: no release stores
// them). fp32 accumulation, on the calling thread, on the AVX2 path. y is written, not added to.
// Allocates nothing after the thread's first calls of a size. Throws std::invalid_argument on a
// matrix whose sizes do not hold together.
void fp8_matmul(const float* x, std::int64_t rows, const fp8_matrix& w, float* y);

// The same for x in bf16 (bits, row-major [rows, in]); y in fp32. On avx512_bf16 each weight is
// rounded once to bf16 (round to nearest even, as the dequantized release in bf16 is) and the
// products accumulate in fp32; on avx2, x is widened to fp32 (exactly) and multiplied as
// fp8_matmul does. Throws as fp8_matmul does, and on an `isa` this CPU does not run.
void fp8_matmul_bf16(const std::uint16_t* x, std::int64_t rows, const fp8_matrix& w, float* y,
                     byte_gemm_isa isa = byte_gemm_best_isa());

// y [rows, out] = (x [rows, in] times the int8 weight transposed) · its row's scale: the products
// of x and the integers summed in fp32, then each output times its scale. fp32 x on the AVX2 path;
// bf16 x (bits) on either, widened to fp32 on avx2. Throws as fp8_matmul does.
void int8_matmul(const float* x, std::int64_t rows, const int8_matrix& w, float* y);
void int8_matmul_bf16(const std::uint16_t* x, std::int64_t rows, const int8_matrix& w, float* y,
                      byte_gemm_isa isa = byte_gemm_best_isa());

}  // namespace baton::clef::detail
