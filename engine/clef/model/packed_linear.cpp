#include "engine/clef/model/packed_linear.hpp"

#include "engine/clef/model/tensors.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <dlfcn.h>
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#if BATON_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_version.h>
// The C API of oneDNN 2.x (Debian 12 ships 2.6); 3.x replaced its memory and matmul descriptors.
static_assert(DNNL_VERSION_MAJOR == 2, "packed_linear is written against oneDNN 2.x");
#endif
#if BATON_XSMM
#include <libxsmm.h>
#endif

namespace baton::clef::detail {

#if BATON_ONEDNN
namespace {

void check(dnnl_status_t status, const char* what) {
  if (status != dnnl_success) {
    throw std::runtime_error(std::string("packed matmul: oneDNN ") + what + " failed with status " +
                             std::to_string(static_cast<int>(status)));
  }
}

dnnl_engine_t cpu_engine() {
  static const dnnl_engine_t engine = [] {
    dnnl_engine_t e = nullptr;
    check(dnnl_engine_create(&e, dnnl_cpu, 0), "engine_create");
    return e;
  }();
  return engine;
}

// One stream per thread: the experts run side by side.
dnnl_stream_t thread_stream() {
  thread_local struct holder {
    dnnl_stream_t stream = nullptr;
    ~holder() {
      if (stream != nullptr) dnnl_stream_destroy(stream);
    }
  } h;
  if (h.stream == nullptr) check(dnnl_stream_create(&h.stream, cpu_engine(), dnnl_stream_default_flags), "stream_create");
  return h.stream;
}

dnnl_data_type_t data_type(at::ScalarType t) {
  if (t == at::kFloat) return dnnl_f32;
  if (t == at::kBFloat16) return dnnl_bf16;
  throw std::invalid_argument("packed matmul: fp32 or bf16 weights only");
}

dnnl_memory_desc_t plain(std::int64_t rows, std::int64_t cols, dnnl_data_type_t type) {
  dnnl_memory_desc_t md;
  const dnnl_dims_t dims = {rows, cols};
  check(dnnl_memory_desc_init_by_tag(&md, 2, dims, type, dnnl_ab), "memory_desc_init");
  return md;
}

// The matmul of `rows` rows for a weight [in -> out]; the packed layout is the one oneDNN picks
// for 64 rows, and every row count's primitive is made for that layout.
struct kernel {
  dnnl_primitive_t primitive = nullptr;
  dnnl_memory_desc_t src, dst, scratch;
  std::size_t scratch_bytes = 0;
};

struct shape_key {
  std::int64_t in, out;
  dnnl_data_type_t type;
  auto operator<=>(const shape_key&) const = default;
};

std::mutex cache_mutex;
std::map<shape_key, dnnl_memory_desc_t> packed_layouts;
std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, int>, kernel> kernels;

dnnl_primitive_desc_t make_desc(std::int64_t rows, const shape_key& s, const dnnl_memory_desc_t& weights) {
  const dnnl_memory_desc_t src = plain(rows, s.in, s.type), dst = plain(rows, s.out, s.type);
  dnnl_matmul_desc_t desc;
  check(dnnl_matmul_desc_init(&desc, &src, &weights, nullptr, &dst), "matmul_desc_init");
  dnnl_primitive_attr_t attr = nullptr;
  check(dnnl_primitive_attr_create(&attr), "primitive_attr_create");
  // Our own scratchpad per call: the library's is shared between threads.
  check(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "set_scratchpad_mode");
  dnnl_primitive_desc_t pd = nullptr;
  const dnnl_status_t status = dnnl_primitive_desc_create(&pd, &desc, attr, cpu_engine(), nullptr);
  dnnl_primitive_attr_destroy(attr);
  check(status, "primitive_desc_create");
  return pd;
}

dnnl_memory_desc_t packed_layout(const shape_key& s) {
  const std::lock_guard lock(cache_mutex);
  if (const auto it = packed_layouts.find(s); it != packed_layouts.end()) return it->second;
  dnnl_memory_desc_t any;
  const dnnl_dims_t dims = {s.in, s.out};
  check(dnnl_memory_desc_init_by_tag(&any, 2, dims, s.type, dnnl_format_tag_any), "memory_desc_init");
  const dnnl_primitive_desc_t pd = make_desc(64, s, any);
  const dnnl_memory_desc_t layout = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  dnnl_primitive_desc_destroy(pd);
  return packed_layouts.emplace(s, layout).first->second;
}

const kernel& kernel_for(std::int64_t rows, const shape_key& s, const dnnl_memory_desc_t& layout) {
  const std::lock_guard lock(cache_mutex);
  const auto key = std::make_tuple(rows, s.in, s.out, static_cast<int>(s.type));
  if (const auto it = kernels.find(key); it != kernels.end()) return it->second;
  const dnnl_primitive_desc_t pd = make_desc(rows, s, layout);
  kernel k;
  k.src = plain(rows, s.in, s.type);
  k.dst = plain(rows, s.out, s.type);
  k.scratch_bytes = dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
  const dnnl_dims_t scratch_dims = {static_cast<dnnl_dim_t>(k.scratch_bytes)};
  check(dnnl_memory_desc_init_by_tag(&k.scratch, 1, scratch_dims, dnnl_u8, dnnl_a), "memory_desc_init");
  const dnnl_status_t status = dnnl_primitive_create(&k.primitive, pd);
  dnnl_primitive_desc_destroy(pd);
  check(status, "primitive_create");
  return kernels.emplace(key, k).first->second;  // kept for the process's life, as oneDNN's own cache
}

struct memory {
  dnnl_memory_t m = nullptr;
  memory(const dnnl_memory_desc_t& md, void* data) { check(dnnl_memory_create(&m, &md, cpu_engine(), data), "memory_create"); }
  ~memory() { dnnl_memory_destroy(m); }
  memory(const memory&) = delete;
  memory& operator=(const memory&) = delete;
};

// `from` (at `src`) copied into `to` (at `dst`) by a oneDNN reorder on the calling thread's stream.
// Its primitives are JIT-compiled per layout pair and kept in oneDNN's primitive cache, so packing
// many weights of one shape compiles once.
void reorder(const dnnl_memory_desc_t& from, const void* src, const dnnl_memory_desc_t& to, void* dst) {
  memory in(from, const_cast<void*>(src)), out(to, dst);
  dnnl_primitive_desc_t pd = nullptr;
  check(dnnl_reorder_primitive_desc_create(&pd, &from, cpu_engine(), &to, cpu_engine(), nullptr), "reorder_desc_create");
  dnnl_primitive_t primitive = nullptr;
  const dnnl_status_t status = dnnl_primitive_create(&primitive, pd);
  dnnl_primitive_desc_destroy(pd);
  check(status, "reorder_create");
  const dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, in.m}, {DNNL_ARG_TO, out.m}};
  const dnnl_status_t run = dnnl_primitive_execute(primitive, thread_stream(), 2, args);
  dnnl_stream_wait(thread_stream());
  dnnl_primitive_destroy(primitive);
  check(run, "reorder");
}

// cblas_sgemm as OpenBLAS and netlib's CBLAS export it; found at run time in the process's BLAS.
// With Debian's libtorch that is the very library at::mm uses (libblas.so.3, OpenBLAS); with
// another libtorch it is the system BLAS that libxsmm is linked with, a candidate timed like the
// others.
using cblas_sgemm_fn = void (*)(int order, int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a,
                                int lda, const float* b, int ldb, float beta, float* c, int ldc);
constexpr int cblas_row_major = 101, cblas_no_trans = 111, cblas_trans = 112;

cblas_sgemm_fn blas_sgemm() {
  static const auto fn = reinterpret_cast<cblas_sgemm_fn>(dlsym(RTLD_DEFAULT, "cblas_sgemm"));
  return fn;
}

// libxsmm's packed weights: blocks of xsmm_block outputs (the last one narrower where the outputs
// are not a multiple), each block input-major (for every input, the block's outputs side by side),
// so that a kernel reads it as a column-major [outputs x inputs] matrix. The kernel adds
// xsmm_step_k inputs at a time over a batch of steps (its batch-reduce form), which keeps the slice
// of the rows it reads in cache; 32 x 256 was fastest at 32-256 rows on an AVX2 EPYC (scratch
// program, docs/performance.md). A call takes at most xsmm_rows rows.
constexpr std::int64_t xsmm_block = 32, xsmm_rows = 256;

// 256 inputs a step, or the largest divisor of `in` below that, or (where that would be a short
// step) all of them in one.
std::int64_t xsmm_step_k(std::int64_t in) {
  for (std::int64_t k = std::min<std::int64_t>(256, in); k >= 64; --k) {
    if (in % k == 0) return k;
  }
  return in;
}

#if BATON_XSMM
// C [m x n] = Σ_steps A_step [m x k] · B_step [k x n], column-major: A a block of the packed weight
// (lda m), B the rows of x read as columns (ldb: x's row length), C the rows of y (ldc: y's).
// Null where libxsmm makes no such kernel.
libxsmm_smmfunction_reducebatch_strd xsmm_kernel(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t ldb,
                                                 std::int64_t ldc) {
  const libxsmm_blasint lda = m, b_ld = ldb, c_ld = ldc;
  const float alpha = 1, beta = 0;
  const int flags = LIBXSMM_GEMM_FLAG_NONE, prefetch = LIBXSMM_GEMM_PREFETCH_NONE;
  // Strides between the steps, in bytes: the next k inputs of the block, the next k rows of B.
  return libxsmm_smmdispatch_reducebatch_strd(
      m, n, k, static_cast<libxsmm_blasint>(m * k * sizeof(float)), static_cast<libxsmm_blasint>(k * sizeof(float)),
      &lda, &b_ld, &c_ld, &alpha, &beta, &flags, &prefetch);
}

// A packed shape's kernels for every row count a call takes: whole blocks and the narrower last
// one, each adding `steps` steps of the shape's input step. Made when the first weight of the
// shape is packed (512 kernels in ~12 ms) and kept for the process, so that a forward only indexes
// them: no code generated and no failure on the request path.
struct xsmm_kernels {
  unsigned long long steps = 0;
  std::array<libxsmm_smmfunction_reducebatch_strd, xsmm_rows> whole{}, rest{};
};

const xsmm_kernels& kernels_for(std::int64_t in, std::int64_t out, std::int64_t step) {
  static std::mutex mutex;
  static std::map<std::pair<std::int64_t, std::int64_t>, std::unique_ptr<const xsmm_kernels>> made;
  const std::lock_guard lock(mutex);
  auto& slot = made[{in, out}];
  if (!slot) {
    auto k = std::make_unique<xsmm_kernels>();
    k->steps = static_cast<unsigned long long>(in / step);
    const std::int64_t whole = out / xsmm_block, rest = out % xsmm_block;
    for (std::int64_t n = 1; n <= xsmm_rows; ++n) {
      const auto i = static_cast<std::size_t>(n - 1);
      if (whole > 0) k->whole[i] = xsmm_kernel(xsmm_block, n, step, in, out);
      if (rest > 0) k->rest[i] = xsmm_kernel(rest, n, step, in, out);
      if ((whole > 0 && k->whole[i] == nullptr) || (rest > 0 && k->rest[i] == nullptr)) {
        made.erase({in, out});
        throw std::runtime_error("packed matmul: libxsmm made no kernel for " + std::to_string(n) + " rows of a [" +
                                 std::to_string(out) + ", " + std::to_string(in) + "] weight on this CPU");
      }
    }
    slot = std::move(k);
  }
  return *slot;
}
#endif

}  // namespace

struct packed_linear::impl {
  shape_key shape;
  dnnl_memory_desc_t layout;
  at::Tensor data;                // the packed weight
  std::optional<memory> weights;  // over `data`, made once: every call's matmul reads it
  std::vector<at::Tensor> parts;  // over the BLAS instead: the weights as they are
  std::vector<int4_part> int4;    // or int4 ones where they lie, for baton's kernel
  std::vector<fp8_matrix> fp8;    // or FP8 ones, likewise
  std::vector<int8_matrix> int8;  // or int8 ones with their scales, likewise
#if BATON_XSMM
  // Packed for libxsmm instead (in `data`; an int8 one, shape.type s8, followed by its scales): its
  // shape's kernels.
  const xsmm_kernels* kernels = nullptr;
#endif
};

bool packed_linear::blas_available() noexcept { return blas_sgemm() != nullptr; }

bool packed_linear::xsmm_available() noexcept {
#if BATON_XSMM
  // Asked for the kind of kernel the engine runs (LIBXSMM_TARGET may restrict the instruction set).
  static const bool available = [] {
    libxsmm_init();
    return xsmm_kernel(xsmm_block, 1, 256, 256, xsmm_block) != nullptr;
  }();
  return available;
#else
  return false;
#endif
}

namespace {

// The width of xsmm weights made of `parts` [out_i, in] of `type` (one in for all), refused where
// libxsmm cannot take them.
std::int64_t xsmm_inputs(const std::vector<at::Tensor>& parts, at::ScalarType type, std::int64_t& out) {
  if (!packed_linear::xsmm_available()) {
    throw std::logic_error("packed matmul: no libxsmm kernels in this build or on this CPU");
  }
  if (parts.empty()) throw std::invalid_argument("packed matmul: no weights");
  const std::int64_t in = parts.front().size(1);
  out = 0;
  for (const auto& w : parts) {
    if (w.scalar_type() != type || w.dim() != 2 || w.size(1) != in || !w.device().is_cpu()) {
      throw std::invalid_argument(std::string("packed matmul: libxsmm takes ") +
                                  (type == at::kFloat ? "fp32" : "int8") + " CPU weights [out, in] of one width");
    }
    out += w.size(0);
  }
  // libxsmm's sizes, leading dimensions and strides (a block's step: 32 x k floats) are ints.
  if (out > INT32_MAX || xsmm_block * xsmm_step_k(in) * static_cast<std::int64_t>(sizeof(float)) > INT32_MAX) {
    throw std::invalid_argument("packed matmul: a weight too large for libxsmm's int sizes");
  }
  return in;
}

// The parts' rows side by side, block by block (a block's rows may lie in two parts), each block
// written transposed into place at `packed` (elements of the parts' type). Whole blocks of a part
// that starts on a block go through one oneDNN reorder each: ATen copies a transposed int8 block
// a byte at a time, ~8x slower, which made loading the int8 experts take seconds a layer
// (docs/performance.md). The rest, a block across two parts or a narrower last one, through ATen.
void pack_xsmm_blocks(const std::vector<at::Tensor>& parts, std::int64_t in, std::int64_t out, void* packed) {
  const auto elem = static_cast<std::int64_t>(parts.front().element_size());
  const dnnl_data_type_t type = parts.front().scalar_type() == at::kChar ? dnnl_s8 : dnnl_f32;
  std::int64_t first = 0;  // the first row not yet packed
  for (const auto& w : parts) {
    const std::int64_t blocks = w.size(0) / xsmm_block;
    if (blocks > 0 && in > 0) {
      // [blocks, in, 32]: block b's input i, output j is w[32 b + j, i], read through w's strides.
      const dnnl_dims_t dims = {blocks, in, xsmm_block};
      const dnnl_dims_t from_strides = {xsmm_block * w.stride(0), w.stride(1), w.stride(0)},
                        to_strides = {in * xsmm_block, xsmm_block, 1};
      dnnl_memory_desc_t from, to;
      check(dnnl_memory_desc_init_by_strides(&from, 3, dims, type, from_strides), "memory_desc_init");
      check(dnnl_memory_desc_init_by_strides(&to, 3, dims, type, to_strides), "memory_desc_init");
      reorder(from, w.data_ptr(), to, static_cast<char*>(packed) + first * in * elem);
    }
    first += blocks * xsmm_block;
    if (w.size(0) % xsmm_block != 0) break;  // the next rows share a block with this part's last ones
  }
  for (; first < out; first += xsmm_block) {
    const std::int64_t width = std::min(xsmm_block, out - first);
    std::vector<at::Tensor> rows;
    std::int64_t start = 0;
    for (const auto& w : parts) {
      const std::int64_t from = std::max(first, start), to = std::min(first + width, start + w.size(0));
      if (from < to) rows.push_back(w.narrow(0, from - start, to - from));
      start += w.size(0);
    }
    const at::Tensor block = rows.size() == 1 ? rows.front() : at::cat(rows);
    at::from_blob(static_cast<char*>(packed) + first * in * elem, {in, width}, block.options()).copy_(block.t());
  }
}

// Where an int8 weight's scales start in its storage: they end it, after its bytes 64-byte aligned.
std::int64_t xsmm_scale_offset(std::int64_t out, std::int64_t in) {
  return packed_linear::xsmm_int8_bytes_for(out, in) - out * static_cast<std::int64_t>(sizeof(float));
}

#if BATON_XSMM
// y's `width` columns of `rows` rows (`ld` apart) times their scales, as ATen's mul_ rounds.
__attribute__((target_clones("avx512f", "avx2", "default"))) void scale_columns(float* y, std::int64_t ld,
                                                                                std::int64_t rows, std::int64_t width,
                                                                                const float* scale) {
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < width; ++j) y[r * ld + j] *= scale[j];
  }
}
#endif

}  // namespace

packed_linear packed_linear::xsmm_packed(const std::vector<at::Tensor>& parts, at::ScalarType type,
                                         at::Tensor storage) {
  std::int64_t out = 0;
  const std::int64_t in = xsmm_inputs(parts, type, out);
  const std::int64_t bytes = type == at::kChar ? xsmm_int8_bytes_for(out, in) : xsmm_bytes_for(out, in);
  if (storage.defined() && storage.nbytes() < static_cast<std::size_t>(bytes)) {
    throw std::invalid_argument("packed matmul: the storage is smaller than the packed weight");
  }
  packed_linear p;
  p.impl_ = std::make_unique<impl>();
  p.impl_->shape = {in, out, type == at::kChar ? dnnl_s8 : dnnl_f32};
#if BATON_XSMM
  p.impl_->kernels = &kernels_for(in, out, xsmm_step_k(in));
#endif
  p.impl_->data = storage.defined() ? storage.narrow(0, 0, bytes) : at::empty({bytes}, at::TensorOptions().dtype(at::kByte));
  if (type == at::kChar && reinterpret_cast<std::uintptr_t>(p.impl_->data.data_ptr()) % 64 != 0) {
    throw std::invalid_argument("packed matmul: an int8 weight's storage must be 64-byte aligned (its scales follow it)");
  }
  pack_xsmm_blocks(parts, in, out, p.impl_->data.data_ptr());
  return p;
}

packed_linear packed_linear::for_xsmm(const std::vector<at::Tensor>& parts, at::Tensor storage) {
  return xsmm_packed(parts, at::kFloat, std::move(storage));
}

packed_linear packed_linear::for_xsmm_int8(const std::vector<at::Tensor>& parts, const std::vector<at::Tensor>& scales,
                                           at::Tensor storage) {
  packed_linear p = xsmm_packed(parts, at::kChar, std::move(storage));
  if (scales.size() != parts.size()) throw std::invalid_argument("packed matmul: a scale vector per int8 weight");
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (scales[i].scalar_type() != at::kFloat || scales[i].dim() != 1 || scales[i].size(0) != parts[i].size(0)) {
      throw std::invalid_argument("packed matmul: an int8 weight's scales are fp32 [out]");
    }
  }
  const std::int64_t in = p.impl_->shape.in, out = p.impl_->shape.out;
  at::from_blob(static_cast<std::byte*>(p.impl_->data.data_ptr()) + xsmm_scale_offset(out, in), {out},
                at::TensorOptions().dtype(at::kFloat))
      .copy_(at::cat(scales));
  return p;
}

packed_linear packed_linear::over_blas(std::vector<at::Tensor> parts) {
  if (!blas_available()) throw std::logic_error("packed matmul: the process has no cblas_sgemm");
  if (parts.empty()) throw std::invalid_argument("packed matmul: no weights");
  packed_linear p;
  p.impl_ = std::make_unique<impl>();
  std::int64_t out = 0;
  for (const auto& w : parts) {
    if (w.scalar_type() != at::kFloat || w.dim() != 2 || w.size(1) != parts.front().size(1) || w.stride(1) != 1 ||
        w.stride(0) != w.size(1) || w.size(0) > INT32_MAX || w.size(1) > INT32_MAX) {
      throw std::invalid_argument("packed matmul: the BLAS takes fp32 weights [out, in] with contiguous rows");
    }
    out += w.size(0);
  }
  p.impl_->shape = {parts.front().size(1), out, dnnl_f32};
  p.impl_->parts = std::move(parts);
  return p;
}

std::int64_t packed_linear::bytes_for(std::int64_t out, std::int64_t in, at::ScalarType type) {
  const dnnl_memory_desc_t layout = packed_layout({in, out, data_type(type)});
  return static_cast<std::int64_t>(dnnl_memory_desc_get_size(&layout));
}

packed_linear::packed_linear(const at::Tensor& w, at::Tensor storage) : impl_(std::make_unique<impl>()) {
  impl_->shape = {w.size(1), w.size(0), data_type(w.scalar_type())};
  impl_->layout = packed_layout(impl_->shape);
  const auto size = static_cast<std::int64_t>(dnnl_memory_desc_get_size(&impl_->layout));
  if (storage.defined() && storage.nbytes() < static_cast<std::size_t>(size)) {
    throw std::invalid_argument("packed matmul: the storage is smaller than the packed weight");
  }
  impl_->data = storage.defined() ? storage.narrow(0, 0, size) : at::empty({size}, at::TensorOptions().dtype(at::kByte));
  impl_->weights.emplace(impl_->layout, impl_->data.data_ptr());
  // w [out, in] read as the matmul's [in, out] weights through its strides.
  dnnl_memory_desc_t from;
  const dnnl_dims_t dims = {w.size(1), w.size(0)}, strides = {w.stride(1), w.stride(0)};
  check(dnnl_memory_desc_init_by_strides(&from, 2, dims, impl_->shape.type, strides), "memory_desc_init");
  reorder(from, w.data_ptr(), impl_->layout, impl_->data.data_ptr());
}

packed_linear packed_linear::for_int4(std::vector<int4_part> parts, at::ScalarType type) {
  if (parts.empty()) throw std::invalid_argument("packed matmul: no weights");
  if (type != at::kFloat && type != at::kBFloat16) throw std::invalid_argument("packed matmul: int4 computes fp32 or bf16");
  std::int64_t out = 0;
  for (const auto& w : parts) {
    if (w.matrix.in != parts.front().matrix.in) throw std::invalid_argument("packed matmul: int4 parts of unequal inputs");
    out += w.matrix.out;
  }
  packed_linear p;
  p.impl_ = std::make_unique<impl>();
  p.impl_->shape = {parts.front().matrix.in, out, data_type(type)};
  p.impl_->int4 = std::move(parts);
  return p;
}

namespace {

// The parts' shape as one weight [Σ out_i, in]; throws on parts of unequal inputs.
template <class M>
std::int64_t side_by_side_outputs(const std::vector<M>& parts, at::ScalarType type, const char* what) {
  if (parts.empty()) throw std::invalid_argument("packed matmul: no weights");
  if (type != at::kFloat && type != at::kBFloat16) {
    throw std::invalid_argument(std::string("packed matmul: ") + what + " computes fp32 or bf16");
  }
  std::int64_t out = 0;
  for (const auto& w : parts) {
    if (w.in != parts.front().in) throw std::invalid_argument(std::string("packed matmul: ") + what + " parts of unequal inputs");
    out += w.out;
  }
  return out;
}

}  // namespace

packed_linear packed_linear::for_fp8(std::vector<fp8_matrix> parts, at::ScalarType type) {
  const std::int64_t out = side_by_side_outputs(parts, type, "FP8");
  packed_linear p;
  p.impl_ = std::make_unique<impl>();
  p.impl_->shape = {parts.front().in, out, data_type(type)};
  p.impl_->fp8 = std::move(parts);
  return p;
}

packed_linear packed_linear::for_int8(std::vector<int8_matrix> parts, at::ScalarType type, at::Tensor storage) {
  const std::int64_t out = side_by_side_outputs(parts, type, "int8");
  packed_linear p;
  p.impl_ = std::make_unique<impl>();
  p.impl_->shape = {parts.front().in, out, data_type(type)};
  p.impl_->int8 = std::move(parts);
  p.impl_->data = std::move(storage);
  return p;
}

std::int64_t packed_linear::bytes() const noexcept {
  if (!impl_) return 0;
  std::int64_t reordered = 0;
  for (const auto& w : impl_->int4) {
    for (const at::Tensor& t : {w.keep, w.keep_zeros}) reordered += t.defined() ? static_cast<std::int64_t>(t.nbytes()) : 0;
  }
  return impl_->data.defined() ? impl_->data.numel() : reordered;
}

namespace {

// Each part's fp32 outputs (rows × width) into its columns of y, rounded to bf16 for a bf16 model.
void place_part(const float* part_out, bool bf16, void* y, std::int64_t rows, std::int64_t width, std::int64_t out,
                     std::int64_t column) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* from = part_out + r * width;
    if (bf16) {
      auto* to = static_cast<c10::BFloat16*>(y) + r * out + column;
      for (std::int64_t n = 0; n < width; ++n) to[n] = static_cast<c10::BFloat16>(from[n]);
    } else {
      std::copy(from, from + width, static_cast<float*>(y) + r * out + column);
    }
  }
}

// x's rows [rows, in] with their inputs in the order of a weight whose rows were regrouped
// (int4_part::perm), in `buffer`; x itself where they were not.
template <class T>
const T* in_weight_order(const T* x, std::int64_t rows, std::int64_t in, const std::vector<std::int64_t>& perm,
                         std::vector<T>& buffer) {
  if (perm.empty()) return x;
  buffer.resize(static_cast<std::size_t>(rows * in));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t k = 0; k < in; ++k) buffer[static_cast<std::size_t>(r * in + k)] = x[r * in + perm[static_cast<std::size_t>(k)]];
  }
  return buffer.data();
}

// bf16 x where the CPU has AVX-512 BF16: the rows as they are (or permuted, still bf16) through
// int4_matmul_bf16, no widening.
void multiply_int4_bf16(const std::vector<int4_part>& parts, const void* x, void* y, std::int64_t rows,
                        std::int64_t in, std::int64_t out) {
  thread_local std::vector<std::uint16_t> permuted;
  thread_local std::vector<float> part_out;
  const auto* xb = static_cast<const std::uint16_t*>(x);
  std::int64_t column = 0;
  for (const auto& w : parts) {
    const std::uint16_t* rows_in = in_weight_order(xb, rows, in, w.perm, permuted);
    const std::int64_t width = w.matrix.out;
    part_out.resize(static_cast<std::size_t>(rows * width));
    int4_matmul_bf16(rows_in, rows, w.matrix, part_out.data(), int4_isa::avx512_bf16);
    place_part(part_out.data(), true, y, rows, width, out, column);
    column += width;
  }
}

// int4 parts side by side: x (fp32 rows, or bf16 widened here where the CPU lacks AVX-512 BF16)
// through int4_matmul part by part, each part's outputs written into its columns of y. Buffers are
// the thread's.
void multiply_int4(const std::vector<int4_part>& parts, bool bf16, const void* x, void* y, std::int64_t rows,
                   std::int64_t in, std::int64_t out) {
  // One row (decode's expert calls) stays on the fp32 path: there the weight's reading bounds both,
  // and bench/int4_matmul.cpp measured the bf16 path at one row 0-15 % slower than AVX-512's fp32
  // (4 to 256 rows: 1.6-1.8x faster).
  static const bool bf16_path = int4_best_isa_bf16() == int4_isa::avx512_bf16;
  if (bf16 && bf16_path && rows > 1) {
    multiply_int4_bf16(parts, x, y, rows, in, out);
    return;
  }
  thread_local std::vector<float> widened, permuted, part_out;
  const float* xf = static_cast<const float*>(x);
  if (bf16) {
    widened.resize(static_cast<std::size_t>(rows * in));
    const auto* xb = static_cast<const c10::BFloat16*>(x);
    for (std::int64_t i = 0; i < rows * in; ++i) widened[static_cast<std::size_t>(i)] = static_cast<float>(xb[i]);
    xf = widened.data();
  }
  const bool whole = parts.size() == 1 && !bf16;  // the kernel writes y itself
  std::int64_t column = 0;
  for (const auto& w : parts) {
    const float* rows_in = in_weight_order(xf, rows, in, w.perm, permuted);
    const std::int64_t width = w.matrix.out;
    if (whole) {
      int4_matmul(rows_in, rows, w.matrix, static_cast<float*>(y));
      return;
    }
    part_out.resize(static_cast<std::size_t>(rows * width));
    int4_matmul(rows_in, rows, w.matrix, part_out.data());
    place_part(part_out.data(), bf16, y, rows, width, out, column);
    column += width;
  }
}

// The byte kernels (byte_gemm.hpp) by matrix type and x's dtype.
void byte_matmul(const fp8_matrix& w, bool bf16, const void* x, std::int64_t rows, float* y) {
  if (bf16) fp8_matmul_bf16(static_cast<const std::uint16_t*>(x), rows, w, y);
  else fp8_matmul(static_cast<const float*>(x), rows, w, y);
}
void byte_matmul(const int8_matrix& w, bool bf16, const void* x, std::int64_t rows, float* y) {
  if (bf16) int8_matmul_bf16(static_cast<const std::uint16_t*>(x), rows, w, y);
  else int8_matmul(static_cast<const float*>(x), rows, w, y);
}

// FP8 or int8 parts side by side: x through their kernel part by part, each part's outputs written
// into its columns of y.
template <class M>
void multiply_bytes(const std::vector<M>& parts, bool bf16, const void* x, void* y, std::int64_t rows, std::int64_t out) {
  thread_local std::vector<float> part_out;
  std::int64_t column = 0;
  for (const auto& w : parts) {
    const bool whole = parts.size() == 1 && !bf16;  // the kernel writes y itself
    float* to = whole ? static_cast<float*>(y) : nullptr;
    if (!whole) {
      part_out.resize(static_cast<std::size_t>(rows * w.out));
      to = part_out.data();
    }
    byte_matmul(w, bf16, x, rows, to);
    if (!whole) place_part(to, bf16, y, rows, w.out, out, column);
    column += w.out;
  }
}

}  // namespace

// Rows of x times the weight into y, on the calling thread. Row counts go in at most three calls
// (a multiple of 256, of 16, and the rest), so a layer's experts share ~31 primitives per weight
// shape instead of one per row count. The scratchpad is the thread's, grown as needed.
void packed_linear::multiply(const void* x, void* y, std::int64_t rows) const {
  if (!impl_->int4.empty()) {
    multiply_int4(impl_->int4, impl_->shape.type == dnnl_bf16, x, y, rows, impl_->shape.in, impl_->shape.out);
    return;
  }
  if (!impl_->fp8.empty()) {
    multiply_bytes(impl_->fp8, impl_->shape.type == dnnl_bf16, x, y, rows, impl_->shape.out);
    return;
  }
  if (!impl_->int8.empty()) {
    multiply_bytes(impl_->int8, impl_->shape.type == dnnl_bf16, x, y, rows, impl_->shape.out);
    return;
  }
#if BATON_XSMM
  if (const xsmm_kernels* kernels = impl_->kernels) {
    const std::int64_t in = impl_->shape.in, out = impl_->shape.out;
    const auto* b = static_cast<const float*>(x);
    auto* c = static_cast<float*>(y);
    if (impl_->shape.type == dnnl_s8) {
      // Per call of at most 256 rows (which stay in cache), a block of outputs at a time: widened
      // into the thread's buffer, multiplied, its columns scaled.
      const auto* q = static_cast<const std::int8_t*>(impl_->data.data_ptr());
      const auto* scale = reinterpret_cast<const float*>(static_cast<const std::byte*>(impl_->data.data_ptr()) +
                                                         xsmm_scale_offset(out, in));
      thread_local std::vector<float> widened;
      if (widened.size() < static_cast<std::size_t>(xsmm_block * in)) widened.resize(static_cast<std::size_t>(xsmm_block * in));
      for (std::int64_t done = 0; done < rows; done += xsmm_rows) {
        const std::int64_t n = std::min(xsmm_rows, rows - done);
        for (std::int64_t first = 0; first < out; first += xsmm_block) {
          const std::int64_t width = std::min(xsmm_block, out - first);
          widen_int8_to_f32(q + first * in, widened.data(), width * in);
          const auto& kernel = width == xsmm_block ? kernels->whole : kernels->rest;
          kernel[static_cast<std::size_t>(n - 1)](widened.data(), b + done * in, c + done * out + first, &kernels->steps);
          scale_columns(c + done * out + first, out, n, width, scale + first);
        }
      }
      return;
    }
    const std::int64_t whole = out / xsmm_block, rest = out % xsmm_block;
    const auto* a = static_cast<const float*>(impl_->data.data_ptr());
    for (std::int64_t done = 0; done < rows; done += xsmm_rows) {
      const auto i = static_cast<std::size_t>(std::min(xsmm_rows, rows - done) - 1);
      const float* rows_in = b + done * in;
      float* rows_out = c + done * out;
      for (std::int64_t block = 0; block < whole; ++block) {
        kernels->whole[i](a + block * xsmm_block * in, rows_in, rows_out + block * xsmm_block, &kernels->steps);
      }
      if (rest > 0) kernels->rest[i](a + whole * xsmm_block * in, rows_in, rows_out + whole * xsmm_block, &kernels->steps);
    }
    return;
  }
#endif
  if (!impl_->parts.empty()) {
    // Single-threaded inside the caller's parallel region, as OpenBLAS runs any call made there.
    // Calls of at most 256 rows, so that a work item of 256 or 512 rows of an expert makes the very
    // calls the whole expert makes (OpenBLAS's rounding may depend on a call's row count).
    for (std::int64_t done = 0; done < rows; done += 256) {
      const std::int64_t n = std::min<std::int64_t>(256, rows - done);
      std::int64_t column = 0;
      for (const auto& w : impl_->parts) {
        blas_sgemm()(cblas_row_major, cblas_no_trans, cblas_trans, static_cast<int>(n), static_cast<int>(w.size(0)),
                     static_cast<int>(impl_->shape.in), 1.F,
                     static_cast<const float*>(x) + done * impl_->shape.in, static_cast<int>(impl_->shape.in),
                     w.data_ptr<float>(), static_cast<int>(impl_->shape.in), 0.F,
                     static_cast<float*>(y) + done * impl_->shape.out + column, static_cast<int>(impl_->shape.out));
        column += w.size(0);
      }
    }
    return;
  }
  thread_local std::vector<std::byte> scratch;
  const auto elem = static_cast<std::int64_t>(dnnl_data_type_size(impl_->shape.type));
  const auto* src = static_cast<const char*>(x);
  auto* dst = static_cast<char*>(y);
  for (std::int64_t done = 0; done < rows;) {
    const std::int64_t left = rows - done;
    const std::int64_t n = left >= 256 ? 256 : left >= 16 ? left / 16 * 16 : left;
    const kernel& k = kernel_for(n, impl_->shape, impl_->layout);
    if (scratch.size() < k.scratch_bytes) scratch.resize(k.scratch_bytes);
    memory s(k.src, const_cast<char*>(src) + done * impl_->shape.in * elem),
        d(k.dst, dst + done * impl_->shape.out * elem), pad(k.scratch, k.scratch_bytes > 0 ? scratch.data() : nullptr);
    const dnnl_exec_arg_t args[] = {
        {DNNL_ARG_SRC, s.m}, {DNNL_ARG_WEIGHTS, impl_->weights->m}, {DNNL_ARG_DST, d.m}, {DNNL_ARG_SCRATCHPAD, pad.m}};
    check(dnnl_primitive_execute(k.primitive, thread_stream(), 4, args), "matmul");
    dnnl_stream_wait(thread_stream());
    done += n;
  }
}

std::int64_t packed_linear::in_features() const noexcept { return impl_ ? impl_->shape.in : 0; }
std::int64_t packed_linear::out_features() const noexcept { return impl_ ? impl_->shape.out : 0; }

at::Tensor packed_linear::parallel(const at::Tensor& x) const {
  const at::Tensor xc = x.contiguous();
  const std::int64_t rows = xc.size(0), blocks = (rows + 255) / 256;
  at::Tensor y = at::empty({rows, impl_->shape.out}, xc.options());
  at::parallel_for(0, blocks, 1, [&](std::int64_t begin, std::int64_t end) {
    const std::int64_t first = begin * 256, last = std::min(rows, end * 256);
    multiply(static_cast<const char*>(xc.data_ptr()) + first * xc.stride(0) * xc.element_size(),
             static_cast<char*>(y.data_ptr()) + first * y.stride(0) * y.element_size(), last - first);
  });
  return y;
}

#else

struct packed_linear::impl {};
bool packed_linear::blas_available() noexcept { return false; }
packed_linear packed_linear::over_blas(std::vector<at::Tensor>) {
  throw std::logic_error("packed matmul: this build has no oneDNN");
}
bool packed_linear::xsmm_available() noexcept { return false; }
packed_linear packed_linear::for_xsmm(const std::vector<at::Tensor>&, at::Tensor) {
  throw std::logic_error("packed matmul: this build has no oneDNN");
}
packed_linear packed_linear::for_xsmm_int8(const std::vector<at::Tensor>&, const std::vector<at::Tensor>&, at::Tensor) {
  throw std::logic_error("packed matmul: this build has no oneDNN");
}
packed_linear packed_linear::for_int4(std::vector<int4_part>, at::ScalarType) {
  throw std::logic_error("packed matmul: this build has no oneDNN");
}
packed_linear packed_linear::for_fp8(std::vector<fp8_matrix>, at::ScalarType) {
  throw std::logic_error("packed matmul: this build has no oneDNN");
}
packed_linear packed_linear::for_int8(std::vector<int8_matrix>, at::ScalarType, at::Tensor) {
  throw std::logic_error("packed matmul: this build has no oneDNN");
}
std::int64_t packed_linear::bytes_for(std::int64_t, std::int64_t, at::ScalarType) {
  throw std::logic_error("packed matmul: this build has no oneDNN");
}
packed_linear::packed_linear(const at::Tensor&, at::Tensor) {
  throw std::logic_error("packed matmul: this build has no oneDNN");
}
std::int64_t packed_linear::bytes() const noexcept { return 0; }
at::Tensor packed_linear::parallel(const at::Tensor&) const {
  throw std::logic_error("packed matmul: this build has no oneDNN");
}
void packed_linear::multiply(const void*, void*, std::int64_t) const {
  throw std::logic_error("packed matmul: this build has no oneDNN");
}
std::int64_t packed_linear::in_features() const noexcept { return 0; }
std::int64_t packed_linear::out_features() const noexcept { return 0; }

#endif

std::int64_t packed_linear::xsmm_bytes_for(std::int64_t out, std::int64_t in) {
  return out * in * static_cast<std::int64_t>(sizeof(float));
}

std::int64_t packed_linear::xsmm_int8_bytes_for(std::int64_t out, std::int64_t in) {
  return (out * in + 63) / 64 * 64 + out * static_cast<std::int64_t>(sizeof(float));
}

at::Tensor packed_linear::arena(std::int64_t bytes) {
  constexpr std::size_t huge = 2u << 20;
  const std::size_t size = (static_cast<std::size_t>(std::max<std::int64_t>(bytes, 1)) + huge - 1) / huge * huge;
  void* p = nullptr;
  if (::posix_memalign(&p, huge, size) != 0) throw std::bad_alloc();
  ::madvise(p, size, MADV_HUGEPAGE);  // advice only: without THP the pages are simply 4 KiB
  return at::from_blob(p, {bytes}, [](void* q) { std::free(q); }, at::TensorOptions().dtype(at::kByte));
}

packed_linear::packed_linear() noexcept = default;
packed_linear::packed_linear(packed_linear&&) noexcept = default;
packed_linear& packed_linear::operator=(packed_linear&&) noexcept = default;
packed_linear::~packed_linear() = default;

}  // namespace baton::clef::detail
