// The thinker's fused CPU kernels against the ATen operations they replace: fp32 to 1e-5, bf16
// to its rounding, over records packed end to end, block sizes that cut every record mid-block,
// and grouped and ungrouped KV heads.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>
#include <vector>

#include "engine/clef/model/cpu_kernels.hpp"
#include "engine/clef/model/packed_linear.hpp"
#include "engine/clef/model/tensors.hpp"

namespace baton::clef::detail {
namespace {

// softmax(q kᵀ · scale) v per record and head in fp32, the causal mask as -inf: the chunked path's
// arithmetic without its chunks.
at::Tensor reference_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const std::vector<std::int64_t>& lengths, double scale, bool causal) {
  const std::int64_t heads = q.size(1), group = heads / k.size(1), dim = q.size(2);
  std::vector<at::Tensor> records;
  std::int64_t offset = 0;
  for (const auto len : lengths) {
    const at::Tensor qr = q.narrow(0, offset, len).to(at::kFloat).transpose(0, 1);  // [heads, len, dim]
    const at::Tensor kr = k.narrow(0, offset, len).to(at::kFloat).transpose(0, 1).repeat_interleave(group, 0);
    const at::Tensor vr = v.narrow(0, offset, len).to(at::kFloat).transpose(0, 1).repeat_interleave(group, 0);
    const at::Tensor mask = at::ones({len, len}, at::TensorOptions().dtype(at::kBool)).triu(causal ? 1 : len);
    const at::Tensor scores =
        at::bmm(qr, kr.transpose(1, 2)).mul(scale).masked_fill(mask, -std::numeric_limits<float>::infinity());
    records.push_back(at::bmm(at::softmax(scores, -1), vr).transpose(0, 1).reshape({len, heads * dim}));
    offset += len;
  }
  return at::cat(records);
}

at::Tensor aten_rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  const at::Tensor xf = x.to(at::kFloat);
  return w * (xf * at::rsqrt(xf.pow(2).mean(-1, true) + eps)).to(x.scalar_type());
}

at::Tensor rotate_half(const at::Tensor& x) {
  const auto half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

struct attention_case {
  std::int64_t heads, kv_heads, dim;
  std::vector<std::int64_t> lengths;
  attention_blocks blocks;
};

class cpu_kernels : public testing::TestWithParam<at::ScalarType> {};

TEST_P(cpu_kernels, equals_the_unfused_softmax_for_every_record_block_size_and_mask) {
  const at::ScalarType type = GetParam();
  if (!onednn_runs(type)) GTEST_SKIP() << "oneDNN has no kernels for this dtype here: the engine takes the ATen path";
  const double tolerance = type == at::kFloat ? 1e-5 : 2e-2;  // bf16: the probabilities' rounding
  const std::vector<attention_case> cases = {
      {8, 2, 16, {1, 37, 130}, {}},         // the chosen blocks
      {8, 2, 16, {1, 37, 130}, {5, 7}},     // blocks that end mid-record, keys not a multiple of rows
      {8, 2, 16, {64, 3}, {64, 3}},         // one query block per record, many key blocks
      {4, 4, 32, {200}, {16, 64}},          // no grouping
      {16, 2, 64, {300, 45}, {}},           // the real model's group of 8
  };
  at::manual_seed(7);
  for (const auto& c : cases) for (const bool causal : {true, false}) {
    std::int64_t n = 0;
    for (const auto len : c.lengths) n += len;
    const at::Tensor q = at::randn({n, c.heads, c.dim}).mul(2).to(type);
    const at::Tensor k = at::randn({n, c.kv_heads, c.dim}).mul(2).to(type);
    const at::Tensor v = at::randn({n, c.kv_heads, c.dim}).to(type);
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.dim));
    at::Tensor out = at::full({n, c.heads * c.dim}, std::nan(""), q.options());
    attention_cpu(q, k, v, c.lengths, scale, causal, out, c.blocks);
    const at::Tensor expected = reference_attention(q, k, v, c.lengths, scale, causal);
    const double error = (out.to(at::kFloat) - expected).abs().max().item<double>();
    EXPECT_LE(error, tolerance) << "heads " << c.heads << "/" << c.kv_heads << " dim " << c.dim << " blocks "
                                << c.blocks.query_rows << "x" << c.blocks.keys << (causal ? " causal" : " full");
  }
}

TEST_P(cpu_kernels, norm_and_rotary_in_one_pass_equal_the_aten_operations) {
  const at::ScalarType type = GetParam();
  at::manual_seed(11);
  const std::int64_t n = 77, heads = 6, dim = 32;
  const double eps = 1e-6;
  const at::Tensor x = at::randn({n, heads, dim}).mul(3).to(type);
  const at::Tensor w = (1 + 0.1 * at::randn({dim})).to(type);
  const at::Tensor angles = at::randn({n, 1, dim / 2}).mul(4);
  const at::Tensor emb = at::cat({angles, angles}, -1);
  const at::Tensor cos = emb.cos().to(type), sin = emb.sin().to(type);

  const at::Tensor normed = aten_rms_norm(x, w, eps);
  const at::Tensor expected = normed * cos + rotate_half(normed) * sin;
  at::Tensor fused = x.clone();
  rms_norm_rope_cpu(fused, w, eps, cos, sin);
  ASSERT_EQ(fused.scalar_type(), type);
  const at::Tensor diff = (fused.to(at::kFloat) - expected.to(at::kFloat)).abs();
  if (type == at::kFloat) {
    EXPECT_LE(diff.max().item<double>(), 1e-5);
  } else {
    // Every rounding of the separate operations is reproduced; a different order of the sum of
    // squares may move a value by one bf16 step now and then.
    EXPECT_GE(diff.eq(0).to(at::kFloat).mean().item<double>(), 0.99);
    EXPECT_LE(diff.max().item<double>(), 0.05);
  }

  const at::Tensor rows = at::randn({n, 96}).mul(5).to(type);
  const at::Tensor rw = (1 + 0.1 * at::randn({96})).to(type);
  const at::Tensor norm_diff = (rms_norm_cpu(rows, rw, eps).to(at::kFloat) - aten_rms_norm(rows, rw, eps).to(at::kFloat)).abs();
  if (type == at::kFloat) {
    EXPECT_LE(norm_diff.max().item<double>(), 1e-5);
  } else {
    EXPECT_GE(norm_diff.eq(0).to(at::kFloat).mean().item<double>(), 0.99);
  }
}

TEST(cpu_attention_blocks, zeros_choose_about_256_gemm_rows_and_256_keys) {
  const attention_blocks real = resolve_attention_blocks({}, 8);
  EXPECT_EQ(real.query_rows, 32);
  EXPECT_EQ(real.keys, 256);
  EXPECT_EQ(resolve_attention_blocks({}, 32).query_rows, 16);
  const attention_blocks asked = resolve_attention_blocks({48, 96}, 8);
  EXPECT_EQ(asked.query_rows, 48);
  EXPECT_EQ(asked.keys, 96);
}

// Every way the row count is split (multiples of 256 and 16, the rest) and a weight read through
// strides, against ATen's matmul of the unpacked weight.
TEST_P(cpu_kernels, packed_weights_multiply_like_the_plain_matmul) {
  const at::ScalarType type = GetParam();
  if (!onednn_runs(type)) GTEST_SKIP() << "oneDNN has no kernels for this dtype here: the engine takes the ATen path";
  at::manual_seed(3);
  const at::Tensor w = at::randn({96, 80}).to(type);
  const at::Tensor strided = at::randn({80, 96}).to(type).t();  // [96, 80], not contiguous
  for (const auto& weight : {w, strided}) {
    const packed_linear packed(weight);
    EXPECT_GE(packed.bytes(), weight.numel() * static_cast<std::int64_t>(weight.element_size()));
    for (const std::int64_t rows : {1, 15, 16, 17, 255, 256, 300, 600}) {
      const at::Tensor x = at::randn({rows, 80}).to(type);
      const at::Tensor y = packed.parallel(x);
      ASSERT_EQ(y.sizes(), (std::vector<std::int64_t>{rows, 96}));
      ASSERT_EQ(y.scalar_type(), type);
      const at::Tensor expected = at::matmul(x.to(at::kFloat), weight.to(at::kFloat).t());
      const double error = (y.to(at::kFloat) - expected).abs().max().item<double>();
      // bf16: the output's rounding (values up to ~40, 8 bits of mantissa).
      EXPECT_LE(error, type == at::kFloat ? 1e-4 : 0.25) << rows << " rows";
    }
  }
}

// oneDNN 2.6 has bf16 kernels from avx512_core up (emulated without avx512_bf16) and refuses bf16
// on an AVX2-only CPU, where the engine must take the ATen paths rather than fail.
TEST(cpu_kernels_dtypes, onednn_runs_bf16_only_where_the_cpu_has_avx512_core) {
  if (!onednn_built()) GTEST_SKIP() << "built without oneDNN";
  __builtin_cpu_init();
  const bool avx512_core = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  EXPECT_EQ(onednn_runs(at::kBFloat16), avx512_core);
  EXPECT_TRUE(onednn_runs(at::kFloat));
}

// fp32 weights over the BLAS as they are, several side by side as one: the same products as
// ATen's matmul of the weights stacked, for every row count; no packed copy; refusals.
TEST(cpu_blas_weights, multiply_like_the_plain_matmul_of_the_parts_stacked) {
  if (!onednn_built() || !packed_linear::blas_available()) GTEST_SKIP() << "no oneDNN build or no cblas_sgemm";
  at::manual_seed(4);
  const at::Tensor gate = at::randn({40, 80}), up = at::randn({56, 80});
  const packed_linear blas = packed_linear::over_blas({gate, up});
  EXPECT_TRUE(blas.packed());
  EXPECT_EQ(blas.bytes(), 0);
  EXPECT_EQ(blas.in_features(), 80);
  EXPECT_EQ(blas.out_features(), 96);
  const at::Tensor stacked = at::cat({gate, up});
  for (const std::int64_t rows : {1, 17, 256, 600}) {
    const at::Tensor x = at::randn({rows, 80});
    const at::Tensor y = blas.parallel(x);
    ASSERT_EQ(y.sizes(), (std::vector<std::int64_t>{rows, 96}));
    EXPECT_LE((y - at::matmul(x, stacked.t())).abs().max().item<double>(), 1e-4) << rows << " rows";
  }
  EXPECT_THROW((void)packed_linear::over_blas({}), std::invalid_argument);
  EXPECT_THROW((void)packed_linear::over_blas({gate.to(at::kBFloat16)}), std::invalid_argument);
  EXPECT_THROW((void)packed_linear::over_blas({at::randn({80, 40}).t()}), std::invalid_argument);  // strided rows
  EXPECT_THROW((void)packed_linear::over_blas({gate, at::randn({8, 81})}), std::invalid_argument);
}

// The two parts' rows in the tests below: a block of 32 outputs across both parts and a narrower
// last block (40 + 50), or whole blocks in each part and a narrower last one (64 + 40). Whole
// blocks of a part that starts on a block are packed by oneDNN, the others by ATen.
const std::vector<std::pair<std::int64_t, std::int64_t>> xsmm_part_rows = {{40, 50}, {64, 40}};

// fp32 weights packed for libxsmm, several side by side as one (xsmm_part_rows), inputs in one
// step (80) or several (512): the products of ATen's matmul of the weights stacked, for every row
// count; a row's result is the same bit for bit whatever rows share its call; refusals.
TEST(cpu_xsmm_weights, multiply_like_the_plain_matmul_of_the_parts_stacked_whatever_the_rows) {
  if (!packed_linear::xsmm_available()) GTEST_SKIP() << "no libxsmm in this build or no kernels for this CPU";
  at::manual_seed(14);
  for (const auto& [gate_rows, up_rows] : xsmm_part_rows) {
    const std::int64_t out = gate_rows + up_rows;
    for (const std::int64_t in : {80, 512}) {
      const at::Tensor gate = at::randn({gate_rows, in}), up = at::randn({up_rows, in});
      const packed_linear xsmm = packed_linear::for_xsmm({gate, up});
      EXPECT_TRUE(xsmm.packed());
      EXPECT_EQ(xsmm.bytes(), packed_linear::xsmm_bytes_for(out, in));
      EXPECT_EQ(xsmm.in_features(), in);
      EXPECT_EQ(xsmm.out_features(), out);
      const at::Tensor stacked = at::cat({gate, up});
      const at::Tensor x = at::randn({600, in});
      const at::Tensor all = xsmm.parallel(x);
      ASSERT_EQ(all.sizes(), (std::vector<std::int64_t>{600, out}));
      EXPECT_LE((all - at::matmul(x, stacked.t())).abs().max().item<double>(), 1e-4 * std::sqrt(in / 80.0))
          << gate_rows << " + " << up_rows << " outputs, " << in << " inputs";
      for (const std::int64_t rows : {1, 17, 256, 300}) {
        at::Tensor y = at::empty({rows, out});
        xsmm.multiply(x.data_ptr(), y.data_ptr(), rows);
        EXPECT_TRUE(at::equal(y, all.narrow(0, 0, rows))) << out << " outputs, " << in << " inputs, " << rows << " rows";
      }
    }
  }
  const at::Tensor w = at::randn({32, 64});
  EXPECT_THROW((void)packed_linear::for_xsmm({}), std::invalid_argument);
  EXPECT_THROW((void)packed_linear::for_xsmm({w.to(at::kBFloat16)}), std::invalid_argument);
  EXPECT_THROW((void)packed_linear::for_xsmm({w, at::randn({8, 65})}), std::invalid_argument);
  EXPECT_THROW((void)packed_linear::for_xsmm({w}, at::empty({100}, at::TensorOptions().dtype(at::kByte))),
               std::invalid_argument);
  // Strided weights are read through their strides.
  const at::Tensor wide = at::randn({64, 32});
  const at::Tensor x = at::randn({5, 64});
  EXPECT_LE((packed_linear::for_xsmm({wide.t()}).parallel(x) - at::matmul(x, wide)).abs().max().item<double>(), 1e-4);
}

// int8 weights packed for libxsmm with their scales, two parts side by side (xsmm_part_rows),
// inputs in one step or several: bit for bit the fp32 path on the weights widened, times the
// scales; within fp32's rounding of ATen's int8 path (the widened weight's matmul, then mul_ by the
// scales); a row's result the same whatever rows share its call; refusals.
TEST(cpu_xsmm_weights, int8_ones_multiply_as_the_widened_weights_then_their_scales) {
  if (!packed_linear::xsmm_available()) GTEST_SKIP() << "no libxsmm in this build or no kernels for this CPU";
  at::manual_seed(15);
  auto int8 = [](std::int64_t out, std::int64_t in) { return at::randint(-127, 128, {out, in}).to(at::kChar); };
  for (const auto& [gate_rows, up_rows] : xsmm_part_rows) {
    const std::int64_t out = gate_rows + up_rows;
    for (const std::int64_t in : {80, 512}) {
      const at::Tensor gate = int8(gate_rows, in), up = int8(up_rows, in);
      const at::Tensor gate_scale = at::rand({gate_rows}).add(0.5).div(127),
                       up_scale = at::rand({up_rows}).add(0.5).div(127);
      const packed_linear q = packed_linear::for_xsmm_int8({gate, up}, {gate_scale, up_scale});
      EXPECT_TRUE(q.packed());
      EXPECT_EQ(q.bytes(), packed_linear::xsmm_int8_bytes_for(out, in));
      EXPECT_LT(q.bytes(), packed_linear::xsmm_bytes_for(out, in) / 3);  // a byte a weight, and the scales
      EXPECT_EQ(q.in_features(), in);
      EXPECT_EQ(q.out_features(), out);
      const at::Tensor widened = at::cat({gate, up}).to(at::kFloat), scale = at::cat({gate_scale, up_scale});
      const at::Tensor x = at::randn({600, in});
      const at::Tensor all = q.parallel(x);
      ASSERT_EQ(all.sizes(), (std::vector<std::int64_t>{600, out}));
      EXPECT_TRUE(at::equal(all, packed_linear::for_xsmm({widened}).parallel(x).mul_(scale))) << out << ", " << in;
      const at::Tensor aten = at::matmul(x, widened.t()).mul_(scale);
      EXPECT_LE((all - aten).abs().max().item<double>(), 1e-5 * aten.abs().max().item<double>()) << out << ", " << in;
      for (const std::int64_t rows : {1, 17, 256, 300}) {
        at::Tensor y = at::empty({rows, out});
        q.multiply(x.data_ptr(), y.data_ptr(), rows);
        EXPECT_TRUE(at::equal(y, all.narrow(0, 0, rows))) << out << " outputs, " << in << " inputs, " << rows << " rows";
      }
    }
  }
  const at::Tensor w = int8(32, 64), s = at::ones({32});
  EXPECT_THROW((void)packed_linear::for_xsmm_int8({}, {}), std::invalid_argument);
  EXPECT_THROW((void)packed_linear::for_xsmm_int8({w.to(at::kFloat)}, {s}), std::invalid_argument);  // not int8
  EXPECT_THROW((void)packed_linear::for_xsmm_int8({w}, {}), std::invalid_argument);                  // no scales
  EXPECT_THROW((void)packed_linear::for_xsmm_int8({w}, {at::ones({31})}), std::invalid_argument);    // one short
  EXPECT_THROW((void)packed_linear::for_xsmm_int8({w}, {s.to(at::kDouble)}), std::invalid_argument);
  EXPECT_THROW((void)packed_linear::for_xsmm({w}), std::invalid_argument);  // int8 to the fp32 packing
  EXPECT_THROW((void)packed_linear::for_xsmm_int8({w}, {s}, at::empty({100}, at::TensorOptions().dtype(at::kByte))),
               std::invalid_argument);
}

// The fused experts over BLAS weights, and over libxsmm-packed ones where this build has libxsmm,
// give what they give over oneDNN-packed ones (fp32, the sums' order aside), whole experts or
// chunks: the engine takes whichever is fastest here.
TEST(cpu_blas_weights, experts_over_the_blas_or_libxsmm_equal_the_packed_experts) {
  if (!onednn_built() || !packed_linear::blas_available()) GTEST_SKIP() << "no oneDNN build or no cblas_sgemm";
  at::manual_seed(12);
  const std::int64_t tokens = 600, top_k = 2, n_experts = 5, hidden = 48, inter = 40;
  // Expert 0 for every token (600 rows: chunks of 256 + 256 + 88), the rest in turn.
  const at::Tensor t = at::arange(tokens);
  const at::Tensor experts = at::stack({at::zeros_like(t), 1 + t % (n_experts - 1)}, 1);
  ASSERT_TRUE(at::all(experts.select(1, 0) != experts.select(1, 1)).item<bool>());
  const at::Tensor weights = at::rand({tokens, top_k}), b = at::randn({tokens, hidden});
  std::vector<packed_linear> gate_up, down, gate_up_blas, down_blas, gate_up_xsmm, down_xsmm;
  for (std::int64_t e = 0; e < n_experts; ++e) {
    const at::Tensor g = at::randn({inter, hidden}).div(7), u = at::randn({inter, hidden}).div(7),
                     d = at::randn({hidden, inter}).div(6);
    gate_up.emplace_back(at::cat({g, u}));
    down.emplace_back(d);
    gate_up_blas.push_back(packed_linear::over_blas({g, u}));
    down_blas.push_back(packed_linear::over_blas({d}));
    if (packed_linear::xsmm_available()) {
      gate_up_xsmm.push_back(packed_linear::for_xsmm({g, u}));
      down_xsmm.push_back(packed_linear::for_xsmm({d}));
    }
  }
  const at::Tensor packed = experts_cpu(b, experts, weights, gate_up, down);
  const at::Tensor blas = experts_cpu(b, experts, weights, gate_up_blas, down_blas);
  const double scale = packed.abs().max().item<double>();
  ASSERT_GT(scale, 0.1);
  EXPECT_LE((blas - packed).abs().max().item<double>(), 1e-5 * scale);
  EXPECT_TRUE(at::equal(experts_cpu(b, experts, weights, gate_up_blas, down_blas, 256), blas));
  if (packed_linear::xsmm_available()) {  // the third library the engine may take
    const at::Tensor xsmm = experts_cpu(b, experts, weights, gate_up_xsmm, down_xsmm);
    EXPECT_LE((xsmm - packed).abs().max().item<double>(), 1e-5 * scale);
    EXPECT_TRUE(at::equal(experts_cpu(b, experts, weights, gate_up_xsmm, down_xsmm, 256), xsmm));
  }
}

// The per-token sum must be bit for bit the index_add_ loop it replaces (the reference's order),
// with an expert that gets no rows.
TEST_P(cpu_kernels, expert_outputs_sum_per_token_exactly_as_the_index_add_loop) {
  const at::ScalarType type = GetParam();
  at::manual_seed(5);
  const std::int64_t tokens = 53, top_k = 3, experts = 8, hidden = 40;
  std::vector<at::Tensor> picks;
  for (std::int64_t t = 0; t < tokens; ++t) picks.push_back(at::randperm(experts - 1, at::kLong).narrow(0, 0, top_k));
  const at::Tensor flat = at::stack(picks).reshape({-1});  // expert 7 never chosen
  const at::Tensor order = std::get<1>(at::sort(flat, c10::optional<bool>(true), 0, false));
  const at::Tensor counts = at::bincount(flat, {}, experts);
  std::vector<std::int64_t> start(static_cast<std::size_t>(experts) + 1, 0);
  std::vector<at::Tensor> results(static_cast<std::size_t>(experts));
  at::Tensor expected = at::zeros({tokens, hidden}, at::TensorOptions().dtype(type));
  for (std::int64_t e = 0; e < experts; ++e) {
    const std::int64_t n = counts[e].item<std::int64_t>();
    start[static_cast<std::size_t>(e) + 1] = start[static_cast<std::size_t>(e)] + n;
    if (n == 0) continue;
    results[static_cast<std::size_t>(e)] = at::randn({n, hidden}).mul(3).to(type);
    const at::Tensor rows = at::floor_divide(order.narrow(0, start[static_cast<std::size_t>(e)], n), top_k);
    expected.index_add_(0, rows, results[static_cast<std::size_t>(e)]);
  }
  const at::Tensor summed = sum_in_expert_order(results, flat, order, start, tokens, top_k);
  ASSERT_EQ(summed.scalar_type(), type);
  EXPECT_TRUE(at::equal(summed, expected)) << (summed.to(at::kFloat) - expected.to(at::kFloat)).abs().max().item<double>();
}

// The fused experts against the ATen operations they replace (gather, the packed matmuls, silu,
// the weighting, the index_add_ loop in expert order): row counts that take every matmul split
// (over 256, multiples of 16, the rest, a single row) and an expert with no rows.
TEST_P(cpu_kernels, fused_experts_equal_the_aten_operations) {
  const at::ScalarType type = GetParam();
  if (!onednn_runs(type)) GTEST_SKIP() << "oneDNN has no kernels for this dtype here: the engine takes the ATen path";
  at::manual_seed(9);
  const std::int64_t tokens = 700, top_k = 2, n_experts = 6, hidden = 48, inter = 40;
  // Expert 5 never chosen; expert 4 once; expert 0 by every token (700 rows); the rest unevenly.
  std::vector<std::int64_t> picks;
  for (std::int64_t t = 0; t < tokens; ++t) {
    const std::int64_t first = t == 0 ? 4 : (t % 7 == 0 ? 3 : t % 3);
    picks.push_back(first);
    picks.push_back(first == 0 ? 1 + t % 3 : 0);
  }
  const at::Tensor experts = at::tensor(picks, at::kLong).view({tokens, top_k});
  const at::Tensor weights = at::rand({tokens, top_k}).to(type);
  const at::Tensor b = at::randn({tokens, hidden}).to(type);
  std::vector<packed_linear> gate_up, down;
  for (std::int64_t e = 0; e < n_experts; ++e) {
    gate_up.emplace_back(at::randn({2 * inter, hidden}).div(7).to(type));
    down.emplace_back(at::randn({hidden, inter}).div(6).to(type));
  }
  at::Tensor expected = at::zeros({tokens, hidden}, b.options());
  const at::Tensor flat = experts.reshape({-1});
  for (std::int64_t e = 0; e < n_experts; ++e) {
    const at::Tensor pairs = at::nonzero(flat == e).view({-1});
    if (pairs.numel() == 0) continue;
    const at::Tensor rows = at::floor_divide(pairs, top_k);
    const at::Tensor gu = gate_up[static_cast<std::size_t>(e)].parallel(b.index_select(0, rows));
    const at::Tensor h = at::silu(gu.narrow(1, 0, inter)).mul_(gu.narrow(1, inter, inter));
    const at::Tensor y = down[static_cast<std::size_t>(e)].parallel(h).mul_(weights.reshape({-1}).index_select(0, pairs).unsqueeze(1));
    expected.index_add_(0, rows, y);
  }
  const at::Tensor got = experts_cpu(b, experts, weights, gate_up, down);
  // Chunks of an expert's rows as separate work items: bit for bit the same (256 + 256 + 188).
  EXPECT_TRUE(at::equal(experts_cpu(b, experts, weights, gate_up, down, 256), got));
  EXPECT_THROW((void)experts_cpu(b, experts, weights, gate_up, down, 100), std::invalid_argument);
  // No tokens: no rows; weights that do not fit the activations: refused, not read past.
  EXPECT_EQ(experts_cpu(b.narrow(0, 0, 0), experts.narrow(0, 0, 0), weights.narrow(0, 0, 0), gate_up, down).size(0), 0);
  EXPECT_THROW((void)experts_cpu(b.narrow(1, 0, hidden - 8).contiguous(), experts, weights, gate_up, down),
               std::invalid_argument);
  ASSERT_EQ(got.sizes(), expected.sizes());
  ASSERT_EQ(got.scalar_type(), type);
  const at::Tensor diff = (got.to(at::kFloat) - expected.to(at::kFloat)).abs();
  const double scale = expected.to(at::kFloat).abs().max().item<double>();
  ASSERT_GT(scale, 0.1);
  if (type == at::kFloat) {
    // Only silu's expf may differ (libmvec's against ATen's Sleef), by an ulp or so.
    EXPECT_LE(diff.max().item<double>(), 1e-5 * scale);
  } else {
    // silu's roundings follow the linked libtorch's (1.13: every step in bf16, bit-identical
    // here); an ulp of expf may still flip a rounding of h now and then.
    EXPECT_LE(diff.max().item<double>(), 0.02 * scale);
    EXPECT_GE((diff == 0).to(at::kFloat).mean().item<double>(), 0.99);
  }
}

INSTANTIATE_TEST_SUITE_P(dtypes, cpu_kernels, testing::Values(at::kFloat, at::kBFloat16),
                         [](const testing::TestParamInfo<at::ScalarType>& info) {
                           return std::string(info.param == at::kFloat ? "f32" : "bf16");
                         });

}  // namespace
}  // namespace baton::clef::detail
