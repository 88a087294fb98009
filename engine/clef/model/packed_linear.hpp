// A weight packed once, at load, into oneDNN's blocked layout for its matmul, so the expert
// matmuls of a few rows each no longer pack their weight on every call (a fifth of the MoE's time
// at 512 tokens, docs/performance.md). Only in builds with oneDNN (onednn_built()).
// Or, in fp32, the weight as it is multiplied by the process's BLAS (libtorch's own on Debian):
// where that BLAS beats oneDNN's kernels (OpenBLAS against oneDNN 2.6 on an AVX2-only CPU: 2x),
// the engine measures it at load and takes it (expert_plan::choose_matmuls), and no packed copy is made.
// Or, in fp32, packed once into blocks of 32 outputs for libxsmm's batch-reduce GEMM kernels,
// generated for the CPU at run time: OpenBLAS's speed without its per-call packing of the weight
// (64 rows on an AVX2-only EPYC: 170 against 145 GFLOP/s). Also measured at load.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/clef/model/byte_gemm.hpp"
#include "engine/clef/model/int4_gemm.hpp"

namespace baton::clef::detail {

// A weight in GPTQ's int4 layout as baton's kernel reads it (int4_gemm.hpp): `keep` and
// `keep_zeros` hold the qweight and qzeros the matrix points into where those are not the
// release's mapping (reordered rows; v1 zeros converted); `perm`, where the input rows were
// reordered by group (GPTQ's act-order), the input each of the kernel's rows reads (empty: in
// order).
struct int4_part {
  int4_matrix matrix;
  at::Tensor keep, keep_zeros;
  std::vector<std::int64_t> perm;
};

class packed_linear {
 public:
  // Bytes the packed copy of a weight [out, in] of `type` takes.
  static std::int64_t bytes_for(std::int64_t out, std::int64_t in, at::ScalarType type);
  // Bytes for packed weights, 2 MiB-aligned and backed by transparent huge pages where the kernel
  // allows: one page fault per 2 MiB instead of per 4 KiB when they are first written.
  static at::Tensor arena(std::int64_t bytes);

  // Whether the process has the BLAS's cblas_sgemm (that of libtorch's at::mm: OpenBLAS on Debian).
  static bool blas_available() noexcept;
  // fp32 weights [out_i, in] (contiguous rows) multiplied as they are by that BLAS, their outputs
  // side by side as if they were one weight [Σ out_i, in]: no copy, so a mapped release's pages
  // stay the file's. The tensors are kept.
  static packed_linear over_blas(std::vector<at::Tensor> parts);

  // Whether this build has libxsmm and it generates kernels for this CPU (AVX or better).
  static bool xsmm_available() noexcept;
  // Bytes the libxsmm copy of an fp32 weight [out, in] takes.
  static std::int64_t xsmm_bytes_for(std::int64_t out, std::int64_t in);
  // fp32 weights [out_i, in] packed side by side, as if one weight [Σ out_i, in], for libxsmm's
  // kernels, into `storage` (bytes, at least xsmm_bytes_for; a fresh buffer when undefined). The
  // weights are not read afterwards. Each output is summed over the inputs in order, whatever the
  // row count, so a row's result does not depend on how many rows share its call.
  static packed_linear for_xsmm(const std::vector<at::Tensor>& parts, at::Tensor storage = {});
  // Bytes the libxsmm copy of an int8 weight [out, in] takes, its scales included.
  static std::int64_t xsmm_int8_bytes_for(std::int64_t out, std::int64_t in);
  // int8 weights [out_i, in] with their fp32 scales [out_i] (one per output), packed side by side
  // in for_xsmm's layout at a byte a weight. multiply() widens one block of outputs at a time into
  // a buffer of the thread (exact: |q| <= 127) and runs the fp32 kernels on it, then scales the
  // block's outputs with one rounding, as ATen's mul_ does: for_xsmm's products on the widened
  // weights, times the scales. Every row of a call reads the block while it is in cache, and the
  // weights stream at a quarter of fp32's bytes. `storage` must be 64-byte aligned.
  static packed_linear for_xsmm_int8(const std::vector<at::Tensor>& parts, const std::vector<at::Tensor>& scales,
                                     at::Tensor storage = {});

  // int4 weights [out_i, in] side by side, as if one weight [Σ out_i, in], multiplied by baton's
  // own kernel (int4_gemm.hpp) where they lie: nothing is copied, or dequantized, at load or per
  // call. multiply() takes and gives `type` (fp32 or bf16; bf16 inputs are widened per call, the
  // kernel computes in fp32).
  static packed_linear for_int4(std::vector<int4_part> parts, at::ScalarType type);
  // FP8 weights [out_i, in] side by side, multiplied by baton's own kernel (byte_gemm.hpp) where
  // they lie: a block of rows at a time converted into a buffer of the thread per call, nothing
  // kept. multiply() takes and gives `type` (fp32 or bf16: bf16 x multiplied as it is on AVX-512
  // BF16, widened elsewhere).
  static packed_linear for_fp8(std::vector<fp8_matrix> parts, at::ScalarType type);
  // int8 weights [out_i, in] with an fp32 scale per output (`baton quantize --int8`), side by side,
  // multiplied by the same kernel structure (byte_gemm.hpp) where they lie: for bf16 models, whose
  // int8 experts ATen would widen whole per matmul. `storage`: where the parts' bytes were copied,
  // kept (bytes() is its size); undefined: they lie in the mapping. multiply() takes and gives `type`.
  static packed_linear for_int8(std::vector<int8_matrix> parts, at::ScalarType type, at::Tensor storage = {});

  packed_linear() noexcept;
  // Packs w [out, in] (fp32 or bf16, on the CPU, any strides) into `storage` (bytes, at least
  // bytes_for; a fresh buffer when undefined); w is not read afterwards.
  explicit packed_linear(const at::Tensor& w, at::Tensor storage = {});
  packed_linear(packed_linear&&) noexcept;
  packed_linear& operator=(packed_linear&&) noexcept;
  ~packed_linear();

  bool packed() const noexcept { return impl_ != nullptr; }  // holds a weight, either way
  std::int64_t bytes() const noexcept;  // the packed copy's size (0 over the BLAS, for FP8 and in-place int8; int4: what was reordered)

  // x [rows, in] (the weight's dtype) @ wᵀ: [rows, out], in blocks of 256 rows spread over the
  // threads (each block as multiply() would do it): for a whole batch's tokens.
  at::Tensor parallel(const at::Tensor& x) const;
  // x [rows, in] (row-major, the weight's dtype; fp32 for int8 weights) @ wᵀ into y [rows, out],
  // on the calling thread, allocating nothing after the thread's first calls: for kernels that
  // keep their own buffers.
  void multiply(const void* x, void* y, std::int64_t rows) const;

  std::int64_t in_features() const noexcept;
  std::int64_t out_features() const noexcept;

 private:
  // for_xsmm and for_xsmm_int8: the parts (fp32 or int8) checked and packed into `storage`.
  static packed_linear xsmm_packed(const std::vector<at::Tensor>& parts, at::ScalarType type, at::Tensor storage);

  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace baton::clef::detail
