#include "engine/clef/model/cpu_kernels.hpp"

#include "engine/clef/model/packed_linear.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#if BATON_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#if BATON_ONEDNN
// oneDNN's bf16 GEMM (bf16 inputs, fp32 accumulation and output, row-major like dnnl_sgemm). It is
// exported by every oneDNN 2.x and 3.x library (its gemm-based matmul and benchdnn call it) but
// declared only in an internal header, hence here; bfloat16 is 16 bits either way.
extern "C" dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N,
                                               dnnl_dim_t K, float alpha, const std::uint16_t* A,
                                               dnnl_dim_t lda, const std::uint16_t* B, dnnl_dim_t ldb,
                                               float beta, float* C, dnnl_dim_t ldc);
#endif

namespace baton::clef::detail {

namespace {

// Below every score the softmax meets, and finite: this file is built with -ffast-math (for the
// vectorised expf of glibc's libmvec), which assumes no infinities.
constexpr float lowest_score = -1e30F;

#if BATON_ONEDNN
void check(dnnl_status_t status, const char* what) {
  if (status != dnnl_success) {
    throw std::runtime_error(std::string("attention: oneDNN ") + what + " failed with status " +
                             std::to_string(static_cast<int>(status)));
  }
}

// C = alpha · op(A) · op(B) + beta · C, row-major, fp32 accumulation.
void gemm(char ta, char tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
          std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  check(dnnl_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), "sgemm");
}
void gemm(char ta, char tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const c10::BFloat16* a, std::int64_t lda, const c10::BFloat16* b, std::int64_t ldb, float beta,
          float* c, std::int64_t ldc) {
  check(dnnl_gemm_bf16bf16f32(ta, tb, m, n, k, alpha, reinterpret_cast<const std::uint16_t*>(a), lda,
                              reinterpret_cast<const std::uint16_t*>(b), ldb, beta, c, ldc),
        "gemm_bf16bf16f32");
}

#endif

// x's bf16 bits, rounded to nearest even as c10::BFloat16(float) rounds the finite values these
// kernels produce (without the constructor's NaN branch, which keeps its loops scalar).
inline std::uint16_t bf16_bits(float x) {
  const auto bits = std::bit_cast<std::uint32_t>(x);
  return static_cast<std::uint16_t>((bits + 0x7fffU + ((bits >> 16) & 1U)) >> 16);
}

// The row loops, cloned per instruction set so that GCC calls libmvec's 16- or 8-wide expf.
__attribute__((target_clones("avx512f", "avx2", "default"))) float row_max(const float* s, std::int64_t n) {
  float m = lowest_score;
  for (std::int64_t j = 0; j < n; ++j) m = std::max(m, s[j]);
  return m;
}

// s[j] = exp(s[j] - shift); returns their sum.
__attribute__((target_clones("avx512f", "avx2", "default"))) float exp_shifted(float* s, std::int64_t n, float shift) {
  float sum = 0.F;
  for (std::int64_t j = 0; j < n; ++j) {
    s[j] = std::exp(s[j] - shift);
    sum += s[j];
  }
  return sum;
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void scale_row(float* o, std::int64_t n, float by) {
  for (std::int64_t j = 0; j < n; ++j) o[j] *= by;
}

// The probabilities as the second GEMM's input, rounded to bf16 (fp32 reads them where they are).
__attribute__((target_clones("avx512f", "avx2", "default"))) void store_probs(const float* s, c10::BFloat16* p,
                                                                               std::int64_t n) {
  auto* out = reinterpret_cast<std::uint16_t*>(p);
  for (std::int64_t j = 0; j < n; ++j) out[j] = bf16_bits(s[j]);
}

template <typename T>
struct block_scratch {
  std::vector<T> q;       // [group · rows, dim]: the block's query rows, head by head
  std::vector<float> s;   // [group · rows, keys]: scores, then their exponentials
  std::vector<T> p;       // the exponentials as T (bf16 only; fp32 uses s)
  std::vector<float> o;   // [group · rows, dim]: unnormalised output
  std::vector<float> m;   // running row maxima
  std::vector<float> l;   // running row sums
};

#if BATON_ONEDNN
template <typename T>
void run(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::vector<std::int64_t>& lengths,
         const std::vector<std::int64_t>& past, float scale, bool causal, at::Tensor& out, attention_blocks blocks) {
  const std::int64_t heads = q.size(1), kv_heads = k.size(1), dim = q.size(2), group = heads / kv_heads;
  const std::int64_t bq = blocks.query_rows, bk = blocks.keys;
  const T* qd = q.data_ptr<T>();
  const T* kd = k.data_ptr<T>();
  const T* vd = v.data_ptr<T>();
  T* od = out.data_ptr<T>();

  // One work item per (record, KV head, query block); the costliest (latest) blocks first. A
  // record's query rows start at `offset` in q, its keys (its `before` earlier ones first) at
  // `key_offset` in k and v; query row t sits at position before + t.
  struct item {
    std::int64_t offset, key_offset, len, before, kv, t0;
  };
  std::vector<item> items;
  std::int64_t offset = 0, key_offset = 0;
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    const std::int64_t len = lengths[r], before = past.empty() ? 0 : past[r];
    for (std::int64_t t0 = 0; t0 < len; t0 += bq) {
      for (std::int64_t g = 0; g < kv_heads; ++g) items.push_back({offset, key_offset, len, before, g, t0});
    }
    offset += len;
    key_offset += before + len;
  }
  std::stable_sort(items.begin(), items.end(),
                   [](const item& a, const item& b) { return a.before + a.t0 > b.before + b.t0; });

  const std::int64_t rows_max = group * bq;
  std::atomic<std::size_t> next{0};
  at::parallel_for(0, at::get_num_threads(), 1, [&](std::int64_t, std::int64_t) {
    thread_local block_scratch<T> b;  // kept between calls: every layer's attention reuses it
    b.q.resize(static_cast<std::size_t>(rows_max * dim));
    b.s.resize(static_cast<std::size_t>(rows_max * bk));
    if constexpr (!std::is_same_v<T, float>) b.p.resize(static_cast<std::size_t>(rows_max * bk));
    b.o.resize(static_cast<std::size_t>(rows_max * dim));
    b.m.resize(static_cast<std::size_t>(rows_max));
    b.l.resize(static_cast<std::size_t>(rows_max));
    T* p_base;
    if constexpr (std::is_same_v<T, float>) {
      p_base = b.s.data();
    } else {
      p_base = b.p.data();
    }
    const std::int64_t ld_kv = kv_heads * dim;  // K and V rows of one KV head are this far apart

    for (std::size_t i = next++; i < items.size(); i = next++) {
      const item& it = items[i];
      const std::int64_t n = std::min(bq, it.len - it.t0), rows = group * n;
      // Query rows ordered (head of the group, token): each head's n rows are contiguous in q.
      for (std::int64_t h = 0; h < group; ++h) {
        for (std::int64_t r = 0; r < n; ++r) {
          std::memcpy(b.q.data() + (h * n + r) * dim, qd + ((it.offset + it.t0 + r) * heads + it.kv * group + h) * dim,
                      static_cast<std::size_t>(dim) * sizeof(T));
        }
      }
      std::fill_n(b.m.begin(), rows, lowest_score);
      std::fill_n(b.l.begin(), rows, 0.F);
      std::fill_n(b.o.begin(), rows * dim, 0.F);
      const T* k0 = kd + (it.key_offset * kv_heads + it.kv) * dim;
      const T* v0 = vd + (it.key_offset * kv_heads + it.kv) * dim;
      const std::int64_t first = it.before + it.t0;  // the block's first row's position
      // keys [0, end) are seen by some row of the block
      const std::int64_t end = causal ? first + n : it.before + it.len;
      for (std::int64_t j0 = 0; j0 < end; j0 += bk) {
        const std::int64_t keys = std::min(bk, end - j0);
        gemm('N', 'T', rows, keys, dim, scale, b.q.data(), dim, k0 + j0 * ld_kv, ld_kv, 0.F, b.s.data(), bk);
        const bool diagonal = causal && j0 + keys > first + 1;  // some row sees only part of these keys
        for (std::int64_t r = 0; r < rows; ++r) {
          const std::int64_t t = first + r % n;  // the row's position in its record
          const std::int64_t seen = diagonal ? std::clamp<std::int64_t>(t - j0 + 1, 0, keys) : keys;
          float* s = b.s.data() + r * bk;
          T* p = p_base + r * bk;
          if (seen > 0) {
            const float m = std::max(b.m[r], row_max(s, seen));
            const float correction = std::exp(b.m[r] - m);
            b.l[r] = b.l[r] * correction + exp_shifted(s, seen, m);
            b.m[r] = m;
            if (correction != 1.F) scale_row(b.o.data() + r * dim, dim, correction);
            if constexpr (!std::is_same_v<T, float>) store_probs(s, p, seen);
          }
          std::fill(p + seen, p + keys, T(0));
        }
        gemm('N', 'N', rows, dim, keys, 1.F, p_base, bk, v0 + j0 * ld_kv, ld_kv, 1.F, b.o.data(), dim);
      }
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t h = r / n, t = it.t0 + r % n;
        const float inv = 1.F / b.l[r];
        const float* o = b.o.data() + r * dim;
        T* dst = od + ((it.offset + t) * heads + it.kv * group + h) * dim;
        for (std::int64_t c = 0; c < dim; ++c) dst[c] = static_cast<T>(o[c] * inv);
      }
    }
  });
}

#endif

// x rounded to bf16 and back: the rounding every bf16 ATen operation applies to its result.
inline float round_bf16(float x) { return std::bit_cast<float>(static_cast<std::uint32_t>(bf16_bits(x)) << 16); }

template <typename T>
inline float rounded(float x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    return round_bf16(x);
  }
}

// One row's RMSNorm as rms_norm in thinker.cpp computes it: statistics in fp32, the normalised
// value rounded to T, times the weight in T.
template <typename T>
void norm_row(const T* row, const T* w, std::int64_t dim, float eps, float* n) {
  float squares = 0.F;
  for (std::int64_t j = 0; j < dim; ++j) squares += static_cast<float>(row[j]) * static_cast<float>(row[j]);
  const float inv = 1.F / std::sqrt(squares / static_cast<float>(dim) + eps);
  for (std::int64_t j = 0; j < dim; ++j) n[j] = rounded<T>(static_cast<float>(w[j]) * rounded<T>(static_cast<float>(row[j]) * inv));
}

template <typename T>
void norm_rope(at::Tensor& x, const at::Tensor& weight, float eps, const at::Tensor& cos, const at::Tensor& sin) {
  if (!x.is_contiguous()) x = x.contiguous();
  const std::int64_t tokens = x.size(0), heads = x.size(1), dim = x.size(2), half = dim / 2;
  T* xd = x.data_ptr<T>();
  const at::Tensor wc = weight.contiguous(), cc = cos.contiguous(), sc = sin.contiguous();
  const T* w = wc.data_ptr<T>();
  const T* cd = cc.data_ptr<T>();
  const T* sd = sc.data_ptr<T>();
  at::parallel_for(0, tokens, 16, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> n(static_cast<std::size_t>(dim));
    for (std::int64_t t = begin; t < end; ++t) {
      const T* c = cd + t * dim;
      const T* s = sd + t * dim;
      for (std::int64_t h = 0; h < heads; ++h) {
        T* row = xd + (t * heads + h) * dim;
        norm_row(row, w, dim, eps, n.data());
        // x·cos + rotate_half(x)·sin, each product and the sum rounded to T.
        for (std::int64_t j = 0; j < dim; ++j) {
          const float partner = j < half ? -n[j + half] : n[j - half];
          row[j] = static_cast<T>(rounded<T>(n[j] * static_cast<float>(c[j])) +
                                  rounded<T>(partner * static_cast<float>(s[j])));
        }
      }
    }
  });
}

template <typename T>
at::Tensor norm_rows(const at::Tensor& x, const at::Tensor& weight, float eps) {
  const at::Tensor xc = x.contiguous(), wc = weight.contiguous();
  at::Tensor out = at::empty_like(xc);
  const std::int64_t dim = xc.size(-1), rows = xc.numel() / std::max<std::int64_t>(dim, 1);
  const T* xd = xc.data_ptr<T>();
  const T* w = wc.data_ptr<T>();
  T* od = out.data_ptr<T>();
  at::parallel_for(0, rows, 8, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> n(static_cast<std::size_t>(dim));
    for (std::int64_t r = begin; r < end; ++r) {
      norm_row(xd + r * dim, w, dim, eps, n.data());
      for (std::int64_t j = 0; j < dim; ++j) od[r * dim + j] = static_cast<T>(n[j]);
    }
  });
  return out;
}

// silu(x) = x / (1 + exp(-x)) in place, as ATen computes it; -x is capped at 88 so that exp stays
// finite (the file assumes no infinities): below x = -88 the value is ~1e-37 instead of 0.
__attribute__((target_clones("avx512f", "avx2", "default"))) void silu_row(float* s, std::int64_t n) {
  for (std::int64_t j = 0; j < n; ++j) s[j] = s[j] / (1.F + std::exp(std::min(-s[j], 88.F)));
}
// The same with exp(-x), 1 + exp(-x) and the quotient each rounded to bf16: libtorch 1.13's bf16
// silu runs its formula on bf16 vectors, where later versions compute in fp32 and round once.
__attribute__((target_clones("avx512f", "avx2", "default"))) void silu_row_bf16_steps(float* s, std::int64_t n) {
  for (std::int64_t j = 0; j < n; ++j) {
    const float e = round_bf16(std::exp(std::min(-s[j], 88.F)));
    s[j] = round_bf16(s[j] / round_bf16(1.F + e));
  }
}

// Which of the two the linked libtorch's bf16 silu is, asked once with values that tell them
// apart: the one that agrees with it more often (an ulp of expf may flip a rounding now and then).
bool aten_silu_bf16_in_steps() {
  static const bool steps = [] {
    const at::Tensor x = at::linspace(-6, 6, 4097).to(at::kBFloat16);
    const at::Tensor want = at::silu(x).to(at::kFloat), xf = x.to(at::kFloat);
    auto disagreements = [&](void (*silu)(float*, std::int64_t)) {
      std::vector<float> f(static_cast<std::size_t>(xf.numel()));
      std::memcpy(f.data(), xf.data_ptr<float>(), f.size() * sizeof(float));
      silu(f.data(), xf.numel());
      // Rounded to bf16 as the kernel stores them.
      for (float& v : f) v = round_bf16(v);
      return at::ne(want, at::from_blob(f.data(), {xf.numel()}, at::kFloat)).sum().item<std::int64_t>();
    };
    return disagreements(silu_row_bf16_steps) < disagreements(silu_row);
  }();
  return steps;
}

template <typename T>
struct expert_scratch {
  std::vector<T> x, gate_up, h;  // the expert's rows, [rows, 2·inter], [rows, inter]
  std::vector<float> f;          // one row of gate as fp32
};

// Per token, its (token, slot) pairs in ascending expert order (a token's experts are distinct):
// out = out + row · weight, the product and the sum rounded to T as the reference's separate
// operations round them (no weights: the rows alone, which a weight of 1 leaves exact).
// row_of(pair): the pair's output row; weights: [tokens · top_k] or null.
template <typename T, typename RowOf>
at::Tensor sum_pairs_in_expert_order(std::int64_t tokens, std::int64_t hidden, std::int64_t top_k,
                                     const std::int64_t* expert_of, const T* weights, RowOf row_of,
                                     const at::TensorOptions& options) {
  at::Tensor out = at::empty({tokens, hidden}, options);
  T* od = out.data_ptr<T>();
  at::parallel_for(0, tokens, 16, [&](std::int64_t begin, std::int64_t end) {
    std::vector<std::int64_t> slots(static_cast<std::size_t>(top_k));
    for (std::int64_t t = begin; t < end; ++t) {
      for (std::int64_t k = 0; k < top_k; ++k) slots[static_cast<std::size_t>(k)] = t * top_k + k;
      std::sort(slots.begin(), slots.end(), [&](std::int64_t p, std::int64_t q) { return expert_of[p] < expert_of[q]; });
      T* acc = od + t * hidden;
      std::fill_n(acc, hidden, T(0));
      for (const std::int64_t p : slots) {
        const T* row = row_of(p);
        const float w = weights != nullptr ? static_cast<float>(weights[p]) : 1.F;
        for (std::int64_t j = 0; j < hidden; ++j) {
          acc[j] = static_cast<T>(static_cast<float>(acc[j]) + rounded<T>(static_cast<float>(row[j]) * w));
        }
      }
    }
  });
  return out;
}

template <typename T>
at::Tensor sum_results(const std::vector<at::Tensor>& results, const at::Tensor& flat, const at::Tensor& order,
                       const std::vector<std::int64_t>& start, std::int64_t tokens, std::int64_t top_k) {
  std::vector<at::Tensor> rows(results.size());
  std::vector<const T*> base(results.size(), nullptr);  // each expert's first output row
  std::int64_t hidden = 0;
  at::TensorOptions options;
  for (std::size_t e = 0; e < results.size(); ++e) {
    if (!results[e].defined()) continue;
    rows[e] = results[e].contiguous();
    base[e] = rows[e].template data_ptr<T>();
    hidden = rows[e].size(1);
    options = rows[e].options();
  }
  const at::Tensor experts = flat.contiguous(), sorted = order.contiguous();
  const auto* expert_of = experts.data_ptr<std::int64_t>();
  const auto* by_expert = sorted.data_ptr<std::int64_t>();
  std::vector<std::int64_t> rank(static_cast<std::size_t>(tokens * top_k));  // a pair's place in `order`
  for (std::size_t j = 0; j < rank.size(); ++j) rank[static_cast<std::size_t>(by_expert[j])] = static_cast<std::int64_t>(j);
  return sum_pairs_in_expert_order<T>(tokens, hidden, top_k, expert_of, nullptr, [&](std::int64_t p) {
    const auto e = static_cast<std::size_t>(expert_of[p]);
    return base[e] + (rank[static_cast<std::size_t>(p)] - start[e]) * hidden;
  }, options);
}

template <typename T>
at::Tensor run_experts(const at::Tensor& b, const at::Tensor& experts, const at::Tensor& weights,
                       const std::vector<packed_linear>& gate_up, const std::vector<packed_linear>& down,
                       std::int64_t chunk_rows) {
  const std::int64_t tokens = b.size(0), hidden = b.size(1), top_k = experts.size(1), pairs = tokens * top_k;
  const auto n_experts = static_cast<std::int64_t>(gate_up.size());
  const std::int64_t inter = gate_up.empty() ? 0 : gate_up[0].out_features() / 2;
  const T* bd = b.data_ptr<T>();
  const std::int64_t* ex = experts.data_ptr<std::int64_t>();
  const T* wd = weights.data_ptr<T>();

  // (token, slot) pairs grouped by expert, in pair order within each (a stable counting sort).
  std::vector<std::int64_t> start(static_cast<std::size_t>(n_experts) + 1, 0), at_place(static_cast<std::size_t>(pairs)),
      place_of(static_cast<std::size_t>(pairs));
  for (std::int64_t p = 0; p < pairs; ++p) {
    if (ex[p] < 0 || ex[p] >= n_experts) throw std::out_of_range("experts: an expert index is out of range");
    ++start[static_cast<std::size_t>(ex[p]) + 1];
  }
  std::vector<std::size_t> busy;  // active experts
  for (std::int64_t e = 0; e < n_experts; ++e) {
    if (start[static_cast<std::size_t>(e) + 1] > 0) busy.push_back(static_cast<std::size_t>(e));
    start[static_cast<std::size_t>(e) + 1] += start[static_cast<std::size_t>(e)];
  }
  auto rows_of = [&](std::size_t e) { return start[e + 1] - start[e]; };
  // Work items of at most chunk_rows rows of one expert (whole experts when 0), the biggest first.
  // Cut at multiples of 256, a chunk's matmuls split their rows as the whole expert's would.
  struct item {
    std::size_t expert;
    std::int64_t first, rows;  // rows [first, first + rows) of the expert's group
  };
  std::vector<item> items;
  for (const std::size_t e : busy) {
    const std::int64_t rows = rows_of(e), step = chunk_rows > 0 ? chunk_rows : rows;
    for (std::int64_t r = 0; r < rows; r += step) items.push_back({e, start[e] + r, std::min(step, rows - r)});
  }
  std::stable_sort(items.begin(), items.end(), [](const item& x, const item& y) { return x.rows > y.rows; });
  {
    std::vector<std::int64_t> fill(start.begin(), start.end() - 1);
    for (std::int64_t p = 0; p < pairs; ++p) {
      const std::int64_t place = fill[static_cast<std::size_t>(ex[p])]++;
      at_place[static_cast<std::size_t>(place)] = p;
      place_of[static_cast<std::size_t>(p)] = place;
    }
  }

  const bool silu_in_steps = std::is_same_v<T, c10::BFloat16> && aten_silu_bf16_in_steps();
  // Row `place` of y: the down projection for that pair, unweighted.
  at::Tensor y = at::empty({pairs, hidden}, b.options());
  T* yd = y.data_ptr<T>();
  std::atomic<std::size_t> next{0};
  at::parallel_for(0, at::get_num_threads(), 1, [&](std::int64_t, std::int64_t) {
    thread_local expert_scratch<T> s;
    for (std::size_t i = next++; i < items.size(); i = next++) {
      const std::size_t e = items[i].expert;
      const std::int64_t rows = items[i].rows, first = items[i].first;
      s.x.resize(static_cast<std::size_t>(rows * hidden));
      s.gate_up.resize(static_cast<std::size_t>(rows * 2 * inter));
      s.h.resize(static_cast<std::size_t>(rows * inter));
      s.f.resize(static_cast<std::size_t>(inter));
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t token = at_place[static_cast<std::size_t>(first + r)] / top_k;
        std::memcpy(s.x.data() + r * hidden, bd + token * hidden, static_cast<std::size_t>(hidden) * sizeof(T));
      }
      gate_up[e].multiply(s.x.data(), s.gate_up.data(), rows);
      for (std::int64_t r = 0; r < rows; ++r) {
        const T* g = s.gate_up.data() + r * 2 * inter;
        const T* u = g + inter;
        T* h = s.h.data() + r * inter;
        for (std::int64_t j = 0; j < inter; ++j) s.f[static_cast<std::size_t>(j)] = static_cast<float>(g[j]);
        if (silu_in_steps) {
          silu_row_bf16_steps(s.f.data(), inter);
        } else {
          silu_row(s.f.data(), inter);
        }
        // silu rounded to T, then its product with up rounded again: silu(gate).mul_(up).
        for (std::int64_t j = 0; j < inter; ++j) {
          h[j] = static_cast<T>(rounded<T>(s.f[static_cast<std::size_t>(j)]) * static_cast<float>(u[j]));
        }
      }
      down[e].multiply(s.h.data(), yd + first * hidden, rows);
    }
  });

  return sum_pairs_in_expert_order<T>(tokens, hidden, top_k, ex, wd, [&](std::int64_t p) {
    return yd + place_of[static_cast<std::size_t>(p)] * hidden;
  }, b.options());
}

}  // namespace

void rms_norm_rope_cpu(at::Tensor& x, const at::Tensor& weight, double eps, const at::Tensor& cos,
                       const at::Tensor& sin) {
  if (x.scalar_type() == at::kFloat) {
    norm_rope<float>(x, weight, static_cast<float>(eps), cos, sin);
  } else if (x.scalar_type() == at::kBFloat16) {
    norm_rope<c10::BFloat16>(x, weight, static_cast<float>(eps), cos, sin);
  } else {
    throw std::invalid_argument("attention: the CPU kernel takes fp32 or bf16");
  }
}

at::Tensor rms_norm_cpu(const at::Tensor& x, const at::Tensor& weight, double eps) {
  if (x.scalar_type() == at::kFloat) return norm_rows<float>(x, weight, static_cast<float>(eps));
  if (x.scalar_type() == at::kBFloat16) return norm_rows<c10::BFloat16>(x, weight, static_cast<float>(eps));
  throw std::invalid_argument("rms_norm: the CPU kernel takes fp32 or bf16");
}

attention_blocks resolve_attention_blocks(attention_blocks blocks, std::int64_t group) {
  // ~256 GEMM rows per block (the group's heads share their keys) and 256 keys: the scores, 256
  // KiB of fp32, stay in the core's L2. Measured in docs/performance.md.
  if (blocks.query_rows <= 0) blocks.query_rows = std::max<std::int64_t>(16, 256 / std::max<std::int64_t>(group, 1));
  if (blocks.keys <= 0) blocks.keys = 256;
  return blocks;
}

bool onednn_built() noexcept { return BATON_ONEDNN != 0; }

bool onednn_runs(at::ScalarType type) noexcept {
#if BATON_ONEDNN
  if (type != at::kBFloat16) return true;
  static const bool bf16 = [] {
    const std::uint16_t one = 0x3f80;  // 1.0 in bf16
    float c = 0.F;
    return dnnl_gemm_bf16bf16f32('N', 'N', 1, 1, 1, 1.F, &one, 1, &one, 1, 0.F, &c, 1) == dnnl_success && c == 1.F;
  }();
  return bf16;
#else
  (void)type;
  return false;
#endif
}

void attention_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                   const std::vector<std::int64_t>& lengths, double scale, bool causal, at::Tensor& out,
                   attention_blocks blocks, const std::vector<std::int64_t>& past) {
#if !BATON_ONEDNN
  throw std::logic_error("attention: built without oneDNN, so without the fused CPU kernel");
#else
  std::int64_t queries = 0, keys = 0;
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    queries += lengths[r];
    keys += lengths[r] + (past.empty() ? 0 : past[r]);
  }
  if ((!past.empty() && past.size() != lengths.size()) || q.size(0) != queries || k.size(0) != keys ||
      v.size(0) != keys) {
    throw std::invalid_argument("attention: the lengths and earlier keys do not match q, k and v");
  }
  const at::Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  blocks = resolve_attention_blocks(blocks, q.size(1) / k.size(1));
  if (q.scalar_type() == at::kFloat) {
    run<float>(qc, kc, vc, lengths, past, static_cast<float>(scale), causal, out, blocks);
  } else if (q.scalar_type() == at::kBFloat16) {
    run<c10::BFloat16>(qc, kc, vc, lengths, past, static_cast<float>(scale), causal, out, blocks);
  } else {
    throw std::invalid_argument("attention: the CPU kernel takes fp32 or bf16");
  }
#endif
}

at::Tensor experts_cpu(const at::Tensor& b, const at::Tensor& experts, const at::Tensor& weights,
                       const std::vector<packed_linear>& gate_up, const std::vector<packed_linear>& down,
                       std::int64_t chunk_rows) {
  if (chunk_rows < 0 || chunk_rows % 256 != 0) throw std::invalid_argument("experts: chunk_rows is 0 or a multiple of 256");
  const at::Tensor bc = b.contiguous(), ec = experts.contiguous(), wc = weights.to(b.scalar_type()).contiguous();
  const std::int64_t hidden = b.size(1), inter = gate_up.empty() ? 0 : gate_up[0].out_features() / 2;
  bool shapes = gate_up.size() == down.size() && experts.dim() == 2 && experts.size(0) == b.size(0) &&
                weights.sizes() == experts.sizes();
  for (std::size_t e = 0; shapes && e < gate_up.size(); ++e) {
    shapes = gate_up[e].in_features() == hidden && gate_up[e].out_features() == 2 * inter &&
             down[e].in_features() == inter && down[e].out_features() == hidden;
  }
  if (!shapes) throw std::invalid_argument("experts: the weights, experts and activations do not fit together");
  if (bc.scalar_type() == at::kFloat) return run_experts<float>(bc, ec, wc, gate_up, down, chunk_rows);
  if (bc.scalar_type() == at::kBFloat16) return run_experts<c10::BFloat16>(bc, ec, wc, gate_up, down, chunk_rows);
  throw std::invalid_argument("experts: the CPU kernel takes fp32 or bf16");
}

void prepare_experts_cpu() { (void)aten_silu_bf16_in_steps(); }

at::Tensor sum_in_expert_order(const std::vector<at::Tensor>& results, const at::Tensor& flat, const at::Tensor& order,
                               const std::vector<std::int64_t>& start, std::int64_t tokens, std::int64_t top_k) {
  at::ScalarType type = at::kFloat;
  for (const auto& r : results) {
    if (r.defined()) type = r.scalar_type();
  }
  if (type == at::kBFloat16) return sum_results<c10::BFloat16>(results, flat, order, start, tokens, top_k);
  if (type == at::kFloat) return sum_results<float>(results, flat, order, start, tokens, top_k);
  throw std::invalid_argument("sum_in_expert_order: fp32 or bf16 outputs only");
}

}  // namespace baton::clef::detail
