// The release loader and the safetensors reader on tiny checkpoints: the valid release written by
// tests/engine/data/make_releases.py (the make_test_releases fixture), each broken copy of it, and
// small hand-made safetensors files.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/clef/model/blas_cpu.hpp"
#include "engine/clef/model/packed_linear.hpp"
#include "engine/clef/model/model.hpp"
#include "engine/clef/model/cpu_kernels.hpp"
#include "engine/clef/model/tensors.hpp"
#include "support/files.hpp"
#include "support/scratch_dir.hpp"

namespace baton::clef {
namespace {

// The fixture is required: a missing directory fails the test instead of skipping it.
std::filesystem::path release_dir(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(BATON_TEST_RELEASES) / name;
  EXPECT_TRUE(std::filesystem::is_directory(dir)) << dir << " missing: run the make_test_releases test";
  return dir;
}

void expect_mentions(const std::string& message, const std::vector<std::string>& parts) {
  for (const auto& part : parts) {
    EXPECT_NE(message.find(part), std::string::npos) << "\"" << message << "\" lacks \"" << part << "\"";
  }
}

TEST(release_loader, valid_release_loads_keeps_media_and_skips_talker_and_code2wav) {
  const release r(release_dir("valid"));
  EXPECT_EQ(r.text().hidden_size, 32);
  EXPECT_EQ(r.text().num_layers, 2);
  EXPECT_EQ(r.text().num_kv_heads, 2);
  EXPECT_EQ(r.text().num_experts, 4);
  EXPECT_EQ((r.text().mrope_section), (std::array<std::int64_t, 3>{4, 2, 2}));
  EXPECT_EQ(r.head().width, 16);
  EXPECT_EQ(r.head().routing_layers, 1);
  // Every text and media tensor; the talker and code2wav ones are not there.
  const auto media = expected_media_tensors(parse_vision_config(release_dir("valid") / "config.json"),
                                            parse_audio_config(release_dir("valid") / "config.json"));
  EXPECT_EQ(media.size(), 3u + 2 * 12 + 6 + 6 + 7 + 16 + 6);
  EXPECT_EQ(r.thinker_tensor_count(), expected_text_tensors(r.text()).size() + media.size());
  EXPECT_EQ(r.thinker_tensor("thinker.visual.patch_embed.proj.weight").shape,
            (std::vector<std::int64_t>{8, 3, 2, 4, 4}));
  EXPECT_EQ(r.thinker_tensor("thinker.audio_tower.conv_out.weight").shape, (std::vector<std::int64_t>{8, 8}));
  EXPECT_EQ(r.thinker_tensor("thinker.model.layers.1.self_attn.q_proj.weight").type, dtype::bf16);
  EXPECT_EQ(r.head_tensor("residual_gate").type, dtype::f32);
  EXPECT_THROW((void)r.thinker_tensor("talker.model.norm.weight"), load_error);
  EXPECT_THROW((void)r.thinker_tensor("code2wav.code_embedding.weight"), load_error);
}

namespace {
// How many of this process's mappings are of files under `dir`.
int mappings_under(const std::filesystem::path& dir) {
  std::ifstream maps("/proc/self/maps");
  const std::string prefix = std::filesystem::canonical(dir).string() + "/";
  int n = 0;
  for (std::string line; std::getline(maps, line);) n += line.find(prefix) != std::string::npos;
  return n;
}
}  // namespace

// A model on a GPU unmaps the release after its copy: the configuration stays, the files go.
TEST(release_loader, unmap_drops_the_mappings_and_keeps_the_configuration) {
  release r(release_dir("valid"));
  ASSERT_GT(mappings_under(release_dir("valid")), 0);
  r.unmap();
  EXPECT_EQ(mappings_under(release_dir("valid")), 0);
  EXPECT_EQ(r.text().hidden_size, 32);
  EXPECT_EQ(r.head().width, 16);
  EXPECT_TRUE(r.has_head());
  EXPECT_TRUE(r.vision().has_value());
  EXPECT_THROW((void)r.thinker_tensor("thinker.model.norm.weight"), load_error);
  EXPECT_THROW((void)r.head_tensor("residual_gate"), load_error);
}

// The start-up warning about emulated bf16 rests on this: it must agree with the kernel's flags.
TEST(cpu_features, native_bf16_is_what_proc_cpuinfo_lists) {
  std::ifstream info("/proc/cpuinfo");
  std::string line;
  while (std::getline(info, line) && !line.starts_with("flags")) {
  }
  if (!line.starts_with("flags")) GTEST_SKIP() << "no flags line in /proc/cpuinfo";
  line += " ";
  const bool listed = line.find(" avx512_bf16 ") != std::string::npos || line.find(" amx_bf16 ") != std::string::npos;
  EXPECT_EQ(cpu_has_native_bf16(), listed) << line;
}

// The dtype a model runs when none is configured: the release's, except bf16 on a CPU that would
// emulate it, which runs in f32 while the copy fits in four fifths of the free memory.
TEST(cpu_features, default_dtype_is_f32_only_where_bf16_is_emulated_and_the_copy_fits) {
  const std::int64_t gib = 1ll << 30;
  EXPECT_EQ(choose_dtype(false, false, 0, 0).dtype, compute_dtype::f32);
  EXPECT_EQ(choose_dtype(false, true, 0, 0).dtype, compute_dtype::f32);
  const dtype_choice native = choose_dtype(true, true, 100 * gib, gib);
  EXPECT_EQ(native.dtype, compute_dtype::bf16);
  EXPECT_EQ(native.reason, "the release's dtype");
  const dtype_choice emulated = choose_dtype(true, false, 2 * gib, 10 * gib);
  EXPECT_EQ(emulated.dtype, compute_dtype::f32);
  EXPECT_NE(emulated.reason.find("neither avx512_bf16 nor AMX-BF16"), std::string::npos) << emulated.reason;
  EXPECT_NE(emulated.reason.find("2 GiB"), std::string::npos) << emulated.reason;
  EXPECT_EQ(choose_dtype(true, false, 8 * gib, 10 * gib).dtype, compute_dtype::f32);  // exactly four fifths
  // The full model's experts in f32 (~116 GB) on a 64 GB machine: bf16, and the log says why.
  const dtype_choice big = choose_dtype(true, false, 116 * gib, 64 * gib);
  EXPECT_EQ(big.dtype, compute_dtype::bf16);
  EXPECT_NE(big.reason.find("116 GiB"), std::string::npos) << big.reason;
  EXPECT_NE(big.reason.find("64 GiB available"), std::string::npos) << big.reason;
  EXPECT_EQ(choose_dtype(true, false, gib, 0).dtype, compute_dtype::bf16);  // free memory unknown
  EXPECT_EQ(big.reason.find("int8"), std::string::npos) << "no int8 copy's size given: " << big.reason;
  // An int8 copy's f32 weights (the full model's attention and routers, ~4 GiB) would fit: said.
  const dtype_choice hinted = choose_dtype(true, false, 116 * gib, 64 * gib, 3 * gib + 1);
  EXPECT_EQ(hinted.dtype, compute_dtype::bf16);
  EXPECT_NE(hinted.reason.find("`baton quantize --int8`"), std::string::npos) << hinted.reason;
  EXPECT_NE(hinted.reason.find("taking 4 GiB"), std::string::npos) << "rounded up: " << hinted.reason;
  // … and not where that copy would not fit either, nor where f32 is chosen anyway.
  EXPECT_EQ(choose_dtype(true, false, 116 * gib, 4 * gib, 4 * gib).reason.find("int8"), std::string::npos);
  EXPECT_EQ(choose_dtype(true, false, 2 * gib, 10 * gib, gib).reason.find("int8"), std::string::npos);
}

// The skip test above proves something only if the skipped shard cannot be read.
TEST(release_loader, skipped_shard_of_the_fixture_is_not_a_safetensors_file) {
  EXPECT_THROW(safetensors_file(release_dir("valid") / "model-00003-of-00003.safetensors"), load_error);
}

class valid_model : public testing::TestWithParam<compute_dtype> {};

TEST_P(valid_model, loads_and_scores_a_one_question_record) {
  model_options options;
  options.dtype = GetParam();
  options.threads = 1;
  const auto m = model::load(release_dir("valid"), options);
  const std::vector<std::int32_t> ids = {3, 17, 42, 99, 5, 250, 7, 8, 131, 64, 12, 299};
  const std::vector<question_layout> questions = {{1, {1, 4}, {{5, 7}, {8, 11}}}};
  const record_input record{ids, questions};
  const auto out = m->forward({&record, 1});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].size(), 1u);
  ASSERT_EQ(out[0][0].size(), 2u);
  for (float logit : out[0][0]) EXPECT_TRUE(std::isfinite(logit)) << logit;
  // On the CPU with oneDNN the experts are packed at load (at least their own size in the dtype),
  // unless fp32's timing at load put them on the BLAS, where nothing of theirs is copied.
  const text_config& c = m->files().text();
  const std::int64_t elem = GetParam() == compute_dtype::f32 ? 4 : 2;
  const std::int64_t experts_bytes = c.num_layers * c.num_experts * 3 * c.moe_intermediate_size * c.hidden_size * elem;
  if (!detail::onednn_runs(detail::scalar_type(GetParam()))) {
    EXPECT_EQ(m->packed_bytes(), 0);
  } else if (m->matmul_choice().find("experts on the BLAS") != std::string::npos) {
    EXPECT_LT(m->packed_bytes(), experts_bytes) << m->matmul_choice();
  } else {
    EXPECT_GE(m->packed_bytes(), experts_bytes) << m->matmul_choice();
  }
}

// The grouped expert path (a CUDA bf16 model's on libtorch >= 2.8), run on the CPU with a matmul
// per expert in place of at::_grouped_mm: the same logits as the default path, and its operations
// per MoE layer within the issue's budget of 20 (the per-expert loop took ~13 per active expert).
TEST_P(valid_model, grouped_experts_score_as_the_default_path_in_few_operations) {
  const std::vector<std::int32_t> ids = {3, 17, 42, 99, 5, 250, 7, 8, 131, 64, 12, 299, 18, 77, 201, 9};
  const std::vector<question_layout> questions = {{1, {1, 4}, {{5, 7}, {8, 11}, {12, 15}}}};
  const record_input record{ids, questions};
  std::string choice;
  auto run = [&](bool grouped, std::int64_t& moe_ops, std::int64_t& packed) {
    model_options options;
    options.dtype = GetParam();
    options.threads = 1;
    options.grouped_experts = grouped;
    const auto m = model::load(release_dir("valid"), options);
    m->set_profiling(true);
    auto out = m->forward({&record, 1});
    moe_ops = m->last_profile().moe_ops / m->files().text().num_layers;
    packed = m->packed_bytes();
    if (!grouped) choice = m->matmul_choice();
    return out;
  };
  std::int64_t default_ops = 0, grouped_ops = 0, default_packed = 0, grouped_packed = 0;
  const auto want = run(false, default_ops, default_packed);
  const auto got = run(true, grouped_ops, grouped_packed);
  // The experts are stacked for the grouped matmuls, not packed (fp32 may still pack q/k/v/o).
  const bool fused = detail::onednn_runs(detail::scalar_type(GetParam()));
  if (fused && choice.find("experts on the BLAS") == std::string::npos) {
    EXPECT_LT(grouped_packed, default_packed) << choice;
  }
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].size(), 1u);
  ASSERT_EQ(got[0][0].size(), want[0][0].size());
  // fp32: only the order of each token's sum differs; bf16: the per-expert roundings too.
  const double tolerance = GetParam() == compute_dtype::f32 ? 1e-5 : 0.1;
  for (std::size_t i = 0; i < want[0][0].size(); ++i) EXPECT_NEAR(got[0][0][i], want[0][0][i], tolerance) << i;
  EXPECT_GT(grouped_ops, 10);
  EXPECT_LE(grouped_ops, 20);
  if (fused) {
    EXPECT_LE(default_ops, 20);  // the fused CPU experts
  }
}

// In fp32 the experts' and projections' library is timed at load, every candidate reported (libxsmm
// where this build has it), and kept for the next load; bf16 has no choice (the BLAS has no bf16
// matmul).
TEST(valid_model_matmuls, are_chosen_by_timing_the_libraries_once_per_process) {
  if (!detail::onednn_built() || !detail::packed_linear::blas_available()) {
    GTEST_SKIP() << "no oneDNN build or no cblas_sgemm: nothing to choose between";
  }
  model_options options;
  options.dtype = compute_dtype::f32;
  options.threads = 2;
  const auto first = model::load(release_dir("valid"), options);
  const std::string choice = first->matmul_choice();
  for (const char* part : {"fp32 experts on ", "BLAS ", "oneDNN packed ", "projections on ", "q_proj"}) {
    EXPECT_NE(choice.find(part), std::string::npos) << choice;
  }
  EXPECT_EQ(choice.find("libxsmm packed ") != std::string::npos, detail::packed_linear::xsmm_available()) << choice;
  // Packed bytes only where a packed copy won.
  EXPECT_EQ(first->packed_bytes() > 0, choice.find("on oneDNN, packed") != std::string::npos ||
                                           choice.find("on libxsmm, packed") != std::string::npos)
      << choice;
  const std::string again = model::load(release_dir("valid"), options)->matmul_choice();
  EXPECT_EQ(again.rfind(choice, 0), 0u) << again;
  EXPECT_NE(again.find("kept from an earlier load in this process"), std::string::npos) << again;
  options.dtype = compute_dtype::bf16;
  EXPECT_EQ(model::load(release_dir("valid"), options)->matmul_choice(), "");
}

// With two threads the experts' schedule is timed at the first load (the tiny release's busiest
// expert has hundreds of the 1,024 calibration tokens' rows) and kept for the next load.
TEST(valid_model_schedule, is_measured_once_per_process_and_shape) {
  if (!detail::onednn_built()) GTEST_SKIP() << "built without oneDNN: no packed experts";
  model_options options;
  options.dtype = compute_dtype::f32;
  options.threads = 2;
  const std::string first = model::load(release_dir("valid"), options)->expert_schedule();
  const std::string again = model::load(release_dir("valid"), options)->expert_schedule();
  options.threads = 1;
  const std::string one = model::load(release_dir("valid"), options)->expert_schedule();
  EXPECT_NE(first.find("on 2 threads"), std::string::npos) << first;
  EXPECT_NE(again.find("kept from an earlier load in this process"), std::string::npos) << again;
  EXPECT_EQ(again.rfind(first, 0), 0u) << again;  // the same choice and timings, then the note
  EXPECT_EQ(one, "whole experts per work item on 1 thread");
}

INSTANTIATE_TEST_SUITE_P(dtypes, valid_model, testing::Values(compute_dtype::f32, compute_dtype::bf16),
                         [](const auto& info) {
                           return std::string(info.param == compute_dtype::f32 ? "f32" : "bf16");
                         });

TEST(release_loader, rope_parameters_config_reads_as_the_rope_scaling_one) {
  const text_config want = release(release_dir("valid")).text();
  const text_config got = release(release_dir("rope_parameters")).text();
  EXPECT_EQ(got.vocab_size, want.vocab_size);
  EXPECT_EQ(got.hidden_size, want.hidden_size);
  EXPECT_EQ(got.num_layers, want.num_layers);
  EXPECT_EQ(got.num_heads, want.num_heads);
  EXPECT_EQ(got.num_kv_heads, want.num_kv_heads);
  EXPECT_EQ(got.head_dim, want.head_dim);
  EXPECT_EQ(got.moe_intermediate_size, want.moe_intermediate_size);
  EXPECT_EQ(got.num_experts, want.num_experts);
  EXPECT_EQ(got.experts_per_token, want.experts_per_token);
  EXPECT_EQ(got.norm_topk_prob, want.norm_topk_prob);
  EXPECT_EQ(got.rms_norm_eps, want.rms_norm_eps);
  EXPECT_EQ(got.rope_theta, want.rope_theta);
  EXPECT_EQ(got.mrope_section, want.mrope_section);
  EXPECT_EQ(got.max_position_embeddings, want.max_position_embeddings);
}

struct broken_case {
  const char* name;
  std::vector<std::string> mentions;  // parts the load_error message must contain
  bool head_only = false;             // loads when the head is not asked for
};

void PrintTo(const broken_case& c, std::ostream* os) { *os << c.name; }

const std::vector<broken_case> broken_cases = {
    {"missing_tensor", {"missing tensor thinker.model.layers.1.mlp.experts.3.down_proj.weight"}},
    {"wrong_shape",
     {"model-00002-of-00003.safetensors", "thinker.model.layers.1.self_attn.q_proj.weight",
      "[48, 32]", "expected [64, 32]"}},
    {"truncated_shard", {"model-00002-of-00003.safetensors", "truncated"}},
    {"bad_index", {"model.safetensors.index.json", "not valid JSON"}},
    {"index_missing_shard", {"model-00002-of-00003.safetensors", "missing"}},
    {"bad_config", {"config.json", "`num_experts`"}},
    {"bad_rope", {"mrope_section", "sums to 7", "head_dim / 2 is 8"}},
    {"unexpected_tensor", {"unexpected tensor thinker.model.layers.0.mlp.shared_expert.weight"}},
    {"media_wrong_shape", {"thinker.visual.blocks.1.attn.qkv.weight", "[24, 9]", "[24, 8]"}},
    {"media_missing", {"missing tensor thinker.audio_tower.layers.0.fc2.bias"}},
    {"media_unexpected", {"unexpected tensor thinker.visual.blocks.2.norm1.weight"}},
    {"head_wrong_shape", {"joint_head.safetensors", "layers.0.linear1.weight", "[32, 8]"}, true},
    {"head_missing", {"joint_head.safetensors", "cannot open"}, true},
    {"head_hidden_mismatch", {"joint_head_config.json", "hidden_size 48"}, true},
};

class broken_release : public testing::TestWithParam<broken_case> {};

TEST_P(broken_release, release_throws_load_error_naming_the_fault) {
  const auto dir = release_dir(GetParam().name);
  try {
    const release r(dir);
    FAIL() << dir << " loaded";
  } catch (const load_error& e) {
    expect_mentions(e.what(), GetParam().mentions);
  }
}

TEST_P(broken_release, model_load_throws_the_same_load_error) {
  const auto dir = release_dir(GetParam().name);
  try {
    model_options options;
    options.threads = 1;
    (void)model::load(dir, options);
    FAIL() << dir << " loaded";
  } catch (const load_error& e) {
    expect_mentions(e.what(), GetParam().mentions);
  }
}

TEST_P(broken_release, head_faults_do_not_stop_a_bare_thinker_load) {
  const auto dir = release_dir(GetParam().name);
  if (GetParam().head_only) {
    const release r(dir, /*head=*/false);
    EXPECT_FALSE(r.has_head());
  } else {
    EXPECT_THROW(release(dir, /*head=*/false), load_error);
  }
}

INSTANTIATE_TEST_SUITE_P(variants, broken_release, testing::ValuesIn(broken_cases),
                         [](const auto& info) { return std::string(info.param.name); });

// What a release's files can do to the loader before it refuses them: a million layers of one
// expert each passed the layers x experts bound and built 12.6M tensor names (4 GB); a FIFO for
// config.json blocked the load for good; a config nested a million deep took GBs to parse.
TEST(release_loader, configs_that_would_cost_the_loader_are_refused_first) {
  const test::scratch_dir dir("baton-release-config");
  const auto copy = dir / "release";
  std::filesystem::copy(release_dir("valid"), copy);
  const auto config = copy / "config.json";
  const std::string valid = test::read_file(config);
  const auto load_message = [&] {
    try {
      const release r(copy);
    } catch (const load_error& e) {
      return std::string(e.what());
    }
    return std::string("loaded");
  };
  std::string layers = valid;
  layers.replace(layers.find("\"num_hidden_layers\": 2"), 22, "\"num_hidden_layers\": 1048576");
  layers.replace(layers.find("\"num_experts\": 4"), 16, "\"num_experts\": 1");
  std::ofstream(config, std::ios::trunc) << layers;
  expect_mentions(load_message(), {"config.json", "implausibly many layers"});

  std::ofstream(config, std::ios::trunc) << std::string(1 << 20, '[');
  expect_mentions(load_message(), {"config.json", "nested over 64 levels"});

  std::filesystem::remove(config);
  ASSERT_EQ(::mkfifo(config.c_str(), 0600), 0);
  expect_mentions(load_message(), {"config.json", "is not a regular file"});
}

// Hand-made safetensors files in a fresh temporary directory.
class safetensors_header : public testing::Test {
 protected:
  // 8-byte little-endian header length (`declared`, or the header's own), header, data.
  std::filesystem::path write(const std::string& header, const std::string& data,
                              std::uint64_t declared = UINT64_MAX) {
    const std::uint64_t length = declared == UINT64_MAX ? header.size() : declared;
    const auto path = dir_ / "t.safetensors";
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(&length), 8);
    out << header << data;
    return path;
  }

  std::string load_message(const std::filesystem::path& path) {
    try {
      safetensors_file f(path);
    } catch (const load_error& e) {
      return e.what();
    }
    ADD_FAILURE() << path << " loaded";
    return {};
  }

  const test::scratch_dir dir_{"baton-safetensors"};
};

TEST_F(safetensors_header, header_length_beyond_the_file_is_truncated) {
  const auto path = write(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "abcd", 4096);
  expect_mentions(load_message(path), {"t.safetensors", "truncated", "4096"});
}

TEST_F(safetensors_header, file_shorter_than_the_length_field_is_truncated) {
  const auto path = dir_ / "t.safetensors";
  std::ofstream(path, std::ios::binary) << "abc";
  expect_mentions(load_message(path), {"t.safetensors", "truncated"});
}

TEST_F(safetensors_header, header_that_is_not_json_is_rejected) {
  expect_mentions(load_message(write("{not json", "")), {"t.safetensors", "not valid JSON"});
  expect_mentions(load_message(write("[1]", "")), {"t.safetensors", "not a JSON object"});
}

// 100 MB of "[" (within the header limit) took 8 GB to refuse: the nesting is checked first.
TEST_F(safetensors_header, deeply_nested_header_is_refused_before_it_is_built) {
  expect_mentions(load_message(write(std::string(1 << 20, '['), "")), {"t.safetensors", "nested over 64 levels"});
}

// Tensors whose data ranges overlap would read each other's bytes.
TEST_F(safetensors_header, overlapping_tensors_are_refused) {
  const auto path = write(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                          std::string(12, '\0'));
  expect_mentions(load_message(path), {"t.safetensors", "tensor b", "overlaps tensor a"});
}

// A FIFO would block the load for good: only regular files are mapped.
TEST_F(safetensors_header, a_fifo_is_refused_without_waiting) {
  const auto path = dir_ / "fifo.safetensors";
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  expect_mentions(load_message(path), {"fifo.safetensors", "is not a regular file"});
}

TEST_F(safetensors_header, unknown_dtype_names_the_tensor) {
  const auto path = write(R"({"q":{"dtype":"F8_E5M2","shape":[4],"data_offsets":[0,4]}})", "abcd");
  expect_mentions(load_message(path), {"tensor q", "unsupported dtype F8_E5M2"});
}

TEST_F(safetensors_header, offsets_not_matching_the_shape_name_the_tensor) {
  const auto path =
      write(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", std::string(24, '\0'));
  expect_mentions(load_message(path), {"tensor w", "[0, 20)", "24 bytes"});
}

TEST_F(safetensors_header, data_past_the_end_names_the_tensor) {
  const auto path =
      write(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})", std::string(16, '\0'));
  expect_mentions(load_message(path), {"tensor w", "truncated shard"});
}

TEST_F(safetensors_header, negative_dimension_is_rejected) {
  const auto path = write(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", "");
  expect_mentions(load_message(path), {"tensor w", "non-negative"});
}

// 2^32 * 2^32 * 4 bytes wraps a 64-bit size to 0, which the empty data range would then match.
TEST_F(safetensors_header, shape_whose_size_overflows_is_rejected) {
  const auto path =
      write(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", "");
  expect_mentions(load_message(path), {"tensor w", "too large"});
}

TEST_F(safetensors_header, zero_size_tensor_loads_beside_a_real_one) {
  const float values[2] = {1.5f, -2.0f};
  const std::string data(reinterpret_cast<const char*>(values), sizeof values);
  const auto path = write(R"({"__metadata__":{"format":"pt"},)"
                          R"("empty":{"dtype":"BF16","shape":[0,4],"data_offsets":[0,0]},)"
                          R"("v":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                          data);
  const safetensors_file f(path);
  EXPECT_EQ(f.tensors().size(), 2u);
  const tensor_view* empty = f.find("empty");
  ASSERT_NE(empty, nullptr);
  EXPECT_EQ(empty->numel(), 0);
  EXPECT_EQ(empty->bytes, 0u);
  EXPECT_EQ(empty->shape, (std::vector<std::int64_t>{0, 4}));
  const tensor_view* v = f.find("v");
  ASSERT_NE(v, nullptr);
  float got[2];
  ASSERT_EQ(v->bytes, sizeof got);
  std::memcpy(got, v->data, sizeof got);
  EXPECT_EQ(got[0], 1.5f);
  EXPECT_EQ(got[1], -2.0f);
}

}  // namespace
}  // namespace baton::clef
