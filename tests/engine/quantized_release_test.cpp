// Quantized releases: config.json's quantization_config as the published tools write it (GPTQ,
// AutoRound, FP8 with block scales), what baton refuses and why, and the FP8 E4M3 values.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/clef/model/model.hpp"
#include "engine/clef/model/quantized_weights.hpp"
#include "engine/clef/model/release.hpp"

namespace baton::clef {
namespace {

quantization parsed(const nlohmann::json& q) {
  return parse_quantization(nlohmann::json{{"quantization_config", q}}, "config.json");
}

// The load_error parse_quantization throws for `q`, or "" when it accepts it.
std::string refusal(const nlohmann::json& q) {
  try {
    (void)parsed(q);
  } catch (const load_error& e) {
    return e.what();
  }
  return "";
}

void expect_mentions(const std::string& message, const std::vector<std::string>& parts) {
  EXPECT_FALSE(message.empty()) << "accepted";
  for (const auto& part : parts) {
    EXPECT_NE(message.find(part), std::string::npos) << "\"" << message << "\" lacks \"" << part << "\"";
  }
}

TEST(quantization_config, no_config_is_a_float_release) {
  EXPECT_EQ(parse_quantization(nlohmann::json::object(), "config.json").kind, quantization::scheme::none);
  EXPECT_EQ(parsed(nullptr).kind, quantization::scheme::none);
}

TEST(quantization_config, gptq_v1_stores_zeros_less_one_and_v2_as_they_are) {
  const quantization v1 = parsed({{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 128}, {"sym", true},
                                  {"desc_act", true}});
  EXPECT_EQ(v1.kind, quantization::scheme::int4);
  EXPECT_EQ(v1.group_size, 128);
  EXPECT_EQ(v1.zero_offset, 1);
  const quantization v2 = parsed({{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 32},
                                  {"checkpoint_format", "gptq_v2"}});
  EXPECT_EQ(v2.zero_offset, 0);
  EXPECT_EQ(v2.group_size, 32);
  EXPECT_EQ(parsed({{"quant_method", "gptq"}, {"bits", 4}, {"group_size", -1}}).group_size, -1);
}

TEST(quantization_config, auto_round_packings) {
  const nlohmann::json base = {{"quant_method", "auto-round"}, {"bits", 4}, {"group_size", 128}, {"sym", true},
                               {"data_type", "int"}};
  nlohmann::json q = base;
  q["packing_format"] = "auto_round:auto_gptq";
  EXPECT_EQ(parsed(q).zero_offset, 1);
  q["packing_format"] = "auto_round:gptqmodel";
  EXPECT_EQ(parsed(q).zero_offset, 0);
  q["quant_method"] = "intel/auto-round";  // older releases' spelling
  EXPECT_EQ(parsed(q).kind, quantization::scheme::int4);
  // Layers kept in 16 bits are read from the tensors; a layer in other bits is refused.
  q["extra_config"] = {{"thinker.model.layers.0.mlp.gate", {{"bits", 16}}}};
  EXPECT_EQ(parsed(q).kind, quantization::scheme::int4);
  q["extra_config"] = {{"thinker.model.layers.0.self_attn.q_proj", {{"bits", 8}}}};
  expect_mentions(refusal(q), {"extra_config", "thinker.model.layers.0.self_attn.q_proj", "bits 8", "4 bits"});
}

TEST(quantization_config, fp8_block_scales) {
  const quantization q = parsed({{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"},
                                 {"weight_block_size", {128, 64}}});
  EXPECT_EQ(q.kind, quantization::scheme::fp8);
  EXPECT_EQ(q.block_rows, 128);
  EXPECT_EQ(q.block_cols, 64);
}

TEST(quantization_config, what_baton_cannot_compute_is_named_with_what_it_can) {
  expect_mentions(refusal({{"quant_method", "awq"}, {"bits", 4}}), {"\"awq\"", "gptq", "auto-round", "fp8", "baton-int8"});
  expect_mentions(refusal({{"bits", 4}}), {"(none)"});
  expect_mentions(refusal({{"quant_method", "gptq"}, {"bits", 3}, {"group_size", 128}}), {"bits 3", "4-bit"});
  expect_mentions(refusal({{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 256}}), {"group_size 256", "32, 64, 128"});
  expect_mentions(refusal({{"quant_method", "gptq"}, {"bits", 4}, {"checkpoint_format", "marlin"}}), {"\"marlin\"", "gptq_v2"});
  expect_mentions(refusal({{"quant_method", "auto-round"}, {"bits", 4}, {"data_type", "nv_fp"}}), {"\"nv_fp\"", "(int)"});
  expect_mentions(refusal({{"quant_method", "auto-round"}, {"bits", 4}, {"packing_format", "auto_round:auto_awq"}}),
                  {"\"auto_round:auto_awq\"", "GPTQ's packing"});
  expect_mentions(refusal({{"quant_method", "fp8"}, {"activation_scheme", "static"}, {"weight_block_size", {128, 128}}}),
                  {"\"static\"", "dynamic"});
  expect_mentions(refusal({{"quant_method", "fp8"}}), {"weight_block_size", "per-tensor"});
  expect_mentions(refusal({{"quant_method", "fp8"}, {"fmt", "e5m2"}, {"weight_block_size", {128, 128}}}), {"\"e5m2\"", "e4m3"});
  expect_mentions(refusal({{"quant_method", "gptq"}, {"bits", "4"}}), {"`bits`", "wrong type"});
  expect_mentions(refusal("gptq"), {"not an object"});
}

TEST(fp8_e4m3, values) {
  using detail::fp8_e4m3_value;
  EXPECT_EQ(fp8_e4m3_value(0x00), 0.0F);
  EXPECT_EQ(fp8_e4m3_value(0x38), 1.0F);         // exponent 7 = the bias
  EXPECT_EQ(fp8_e4m3_value(0xB8), -1.0F);
  EXPECT_EQ(fp8_e4m3_value(0x3C), 1.5F);
  EXPECT_EQ(fp8_e4m3_value(0x7E), 448.0F);       // the largest
  EXPECT_EQ(fp8_e4m3_value(0x08), 0.015625F);    // the smallest normal, 2^-6
  EXPECT_EQ(fp8_e4m3_value(0x01), 0.001953125F);  // the smallest subnormal, 2^-9
  EXPECT_EQ(fp8_e4m3_value(0x07), 7 * 0.001953125F);
  EXPECT_TRUE(std::isnan(fp8_e4m3_value(0x7F)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_value(0xFF)));
  // Monotonic over the positive codes.
  for (int b = 1; b < 0x7F; ++b) {
    EXPECT_LT(fp8_e4m3_value(static_cast<std::uint8_t>(b - 1)), fp8_e4m3_value(static_cast<std::uint8_t>(b))) << b;
  }
}

// The fixture is required: a missing directory fails the test instead of skipping it.
std::filesystem::path quant_release(const std::string& name) {
  const auto dir = std::filesystem::path(BATON_QUANT_RELEASES) / name / "release";
  EXPECT_TRUE(std::filesystem::is_directory(dir)) << dir << " missing: run the make_quant_releases test";
  return dir;
}

TEST(quantized_release, each_weight_is_read_in_the_form_it_is_stored) {
  const std::string layer = "thinker.model.layers.1.", expert = layer + "mlp.experts.3.";
  {
    const release r(quant_release("autoround_sym_g32"));
    EXPECT_EQ(r.quant().kind, quantization::scheme::int4);
    EXPECT_EQ(r.quant().zero_offset, 1);
    EXPECT_TRUE(r.int4_experts());
    EXPECT_FALSE(r.int8_experts());
    EXPECT_EQ(r.form(layer + "self_attn.q_proj.weight"), weight_form::int4);
    EXPECT_EQ(r.form(expert + "down_proj.weight"), weight_form::int4);
    EXPECT_EQ(r.form(layer + "mlp.gate.weight"), weight_form::plain);  // AutoRound leaves routers float
    EXPECT_EQ(r.thinker_tensor(expert + "down_proj.qweight").type, dtype::i32);
    EXPECT_EQ(r.float_type(), dtype::bf16);
  }
  {
    const release r(quant_release("autoround_mixed_g64"));
    EXPECT_EQ(r.form("thinker.model.layers.0.mlp.experts.3.gate_proj.weight"), weight_form::int4);
    EXPECT_EQ(r.form(expert + "gate_proj.weight"), weight_form::plain);  // layer 1's experts: bf16
    EXPECT_EQ(r.form(layer + "self_attn.q_proj.weight"), weight_form::plain);
  }
  {
    const release r(quant_release("fp8_block"));
    EXPECT_EQ(r.quant().kind, quantization::scheme::fp8);
    EXPECT_EQ(r.form(expert + "up_proj.weight"), weight_form::fp8);
    EXPECT_EQ(r.form(layer + "mlp.gate.weight"), weight_form::plain);
    EXPECT_FALSE(r.int4_experts());
    EXPECT_TRUE(r.fp8_experts());
  }
}

// baton's kernel on each int4 expert weight, in place (v1 zeros converted, act-order rows
// reordered), gives what a matmul on the dequantized weight gives.
TEST(quantized_release, the_int4_kernel_computes_the_dequantized_weight) {
  at::manual_seed(7);
  for (const char* name : {"autoround_sym_g32", "gptq_asym_g64_actorder", "gptq_v2_asym_g32"}) {
    const release r(quant_release(name));
    for (const char* proj : {"gate_proj", "down_proj"}) {
      const std::string weight = std::string("thinker.model.layers.2.mlp.experts.5.") + proj + ".weight";
      const at::Tensor w = detail::linear_weight(r, weight, at::kFloat, at::kCPU);
      const detail::packed_linear p = detail::packed_linear::for_int4({detail::int4_weight(r, weight)}, at::kFloat);
      for (const std::int64_t rows : {1, 3, 40}) {
        const at::Tensor x = at::randn({rows, w.size(1)});
        const at::Tensor want = at::matmul(x, w.t()), got = p.parallel(x);
        EXPECT_LT((got - want).abs().max().item<float>(), 1e-4F * (1 + want.abs().max().item<float>()))
            << name << " " << proj << " rows " << rows;
      }
      // bf16 activations in, bf16 out: the same products, rounded once.
      const at::Tensor x = at::randn({5, w.size(1)}).to(at::kBFloat16);
      const detail::packed_linear pb = detail::packed_linear::for_int4({detail::int4_weight(r, weight)}, at::kBFloat16);
      const at::Tensor want = at::matmul(x.to(at::kFloat), w.t());
      EXPECT_LT((pb.parallel(x).to(at::kFloat) - want).abs().max().item<float>(), 1e-2F * (1 + want.abs().max().item<float>()))
          << name << " bf16";
    }
  }
}

// baton's FP8 kernel on each FP8 expert weight (partial edge blocks), in place, gives what a
// matmul on the dequantized weight gives: in fp32, and in bf16 against the weight the load would
// have dequantized to bf16.
TEST(quantized_release, the_fp8_kernel_computes_the_dequantized_weight) {
  at::manual_seed(8);
  const release r(quant_release("fp8_block"));
  for (const char* proj : {"gate_proj", "down_proj"}) {
    const std::string weight = std::string("thinker.model.layers.2.mlp.experts.5.") + proj + ".weight";
    const at::Tensor w = detail::linear_weight(r, weight, at::kFloat, at::kCPU);
    const detail::packed_linear p = detail::packed_linear::for_fp8({detail::fp8_weight(r, weight)}, at::kFloat);
    for (const std::int64_t rows : {1, 3, 40}) {
      const at::Tensor x = at::randn({rows, w.size(1)});
      const at::Tensor want = at::matmul(x, w.t()), got = p.parallel(x);
      EXPECT_LT((got - want).abs().max().item<float>(), 1e-4F * (1 + want.abs().max().item<float>())) << proj << " rows " << rows;
    }
    const at::Tensor x = at::randn({5, w.size(1)}).to(at::kBFloat16);
    const detail::packed_linear pb = detail::packed_linear::for_fp8({detail::fp8_weight(r, weight)}, at::kBFloat16);
    const at::Tensor wb = detail::linear_weight(r, weight, at::kBFloat16, at::kCPU).to(at::kFloat);
    const at::Tensor want = at::matmul(x.to(at::kFloat), wb.t());
    EXPECT_LT((pb.parallel(x).to(at::kFloat) - want).abs().max().item<float>(), 1e-2F * (1 + want.abs().max().item<float>()))
        << proj << " bf16";
  }
  // The model runs its experts on that kernel, not on a dequantized copy.
  model_options options;
  options.dtype = compute_dtype::f32;
  const auto m = model::load(quant_release("fp8_block"), options);
  EXPECT_NE(m->matmul_choice().find("FP8 experts on baton's byte kernel"), std::string::npos) << m->matmul_choice();
}

TEST(quantized_release, a_quantized_tensor_of_the_wrong_shape_is_named) {
  const auto src = quant_release("gptq_v2_asym_g32");
  const auto dir = std::filesystem::temp_directory_path() / "baton-quant-wrong-config";
  std::filesystem::remove_all(dir);
  std::filesystem::copy(src, dir, std::filesystem::copy_options::recursive);
  // The same tensors read with another group size: the scales' rows no longer fit.
  nlohmann::json config;
  std::ifstream(dir / "config.json") >> config;
  config["quantization_config"]["group_size"] = 64;
  std::ofstream(dir / "config.json") << config.dump();
  std::string message;
  try {
    (void)release(dir);
  } catch (const load_error& e) {
    message = e.what();
  }
  expect_mentions(message, {".scales", "expected (gptq)"});
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace baton::clef
