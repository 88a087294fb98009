// The thinker and the joint head against reference tensors (tests/data/vectors).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>

#include "engine/clef/model/cpu_kernels.hpp"
#include "engine/clef/model/model.hpp"
#include "engine/clef/model/packed_linear.hpp"
#include "support/files.hpp"
#include "support/tensor_values.hpp"

namespace baton::clef {
namespace {

std::filesystem::path thinker_dir() { return test::data_dir() / "vectors/qwen3-omni-thinker-tiny"; }

std::vector<float> floats(const tensor_view& v) {
  EXPECT_EQ(v.type, dtype::f32);
  std::vector<float> out(static_cast<std::size_t>(v.numel()));
  std::memcpy(out.data(), v.data, v.bytes);
  return out;
}

// Largest |a - b| / max(|b|, floor) over the tensor: relative error that ignores near-zero values.
double relative_error(std::span<const float> got, std::span<const float> want, double floor) {
  double worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double d = std::abs(static_cast<double>(got[i]) - want[i]);
    worst = std::max(worst, d / std::max<double>(std::abs(want[i]), floor));
  }
  return worst;
}

// The expert paths: the default one (the library timed at load), the grouped one (a GPU's, on the
// CPU with a matmul per expert standing in for at::_grouped_mm), and each library the CPU's packed
// experts can run on, asked for by name, where this build and CPU have it.
enum class expert_path { measured, grouped, onednn, xsmm, blas };

class thinker_paths : public testing::TestWithParam<expert_path> {};

TEST_P(thinker_paths, text_case_matches_the_reference_stage_by_stage) {
  const expert_path path = GetParam();
  if ((path == expert_path::onednn && !detail::onednn_built()) ||
      (path == expert_path::xsmm && !detail::packed_linear::xsmm_available()) ||
      (path == expert_path::blas && (!detail::onednn_built() || !detail::packed_linear::blas_available()))) {
    GTEST_SKIP() << "this build or CPU lacks that library";
  }
  const safetensors_file ref(thinker_dir() / "tiny_ref_text.safetensors");
  const tensor_view* ids_view = ref.find("in.input_ids");
  ASSERT_NE(ids_view, nullptr);
  std::vector<std::int64_t> ids64(static_cast<std::size_t>(ids_view->numel()));
  std::memcpy(ids64.data(), ids_view->data, ids_view->bytes);
  const std::vector<std::int32_t> ids(ids64.begin(), ids64.end());

  model_options options;
  options.head = false;
  options.threads = 1;  // see clef_engine_test.cpp
  options.grouped_experts = path == expert_path::grouped;
  options.experts = path == expert_path::onednn ? expert_library::onednn
                    : path == expert_path::xsmm ? expert_library::xsmm
                    : path == expert_path::blas ? expert_library::blas
                                                : expert_library::measured;
  const auto m = model::load(thinker_dir() / "model", options);
  if (options.experts != expert_library::measured) {
    EXPECT_NE(m->matmul_choice().find("(asked for)"), std::string::npos) << m->matmul_choice();
  }
  std::map<std::string, std::vector<float>, std::less<>> stages;
  m->trace(ids, nullptr, [&](std::string_view stage, std::span<const float> values, std::int64_t rows) {
    EXPECT_EQ(rows, static_cast<std::int64_t>(ids.size()));
    stages.emplace(std::string(stage), std::vector<float>(values.begin(), values.end()));
  });

  std::vector<std::pair<std::string, std::string>> pairs = {{"inputs_embeds", "out.inputs_embeds"},
                                                            {"final_hidden", "out.final_hidden"}};
  for (int l = 0; l < m->files().text().num_layers; ++l) {
    pairs.emplace_back("layer_out." + std::to_string(l), "out.layer_out." + std::to_string(l));
  }
  for (const auto& [stage, key] : pairs) {
    const tensor_view* want = ref.find(key);
    ASSERT_NE(want, nullptr) << key;
    ASSERT_TRUE(stages.contains(stage)) << stage;
    const auto expected = floats(*want);
    ASSERT_EQ(stages[stage].size(), expected.size()) << stage;
    // Hidden values are O(1): relative error, with values below 1 compared absolutely.
    EXPECT_LT(relative_error(stages[stage], expected, 1.0), 1e-5) << stage;
  }
}

std::string path_name(const testing::TestParamInfo<expert_path>& info) {
  static constexpr const char* names[] = {"default", "grouped", "onednn", "xsmm", "blas"};
  return names[static_cast<int>(info.param)];
}

INSTANTIATE_TEST_SUITE_P(experts, thinker_paths,
                         testing::Values(expert_path::measured, expert_path::grouped, expert_path::onednn,
                                         expert_path::xsmm, expert_path::blas),
                         path_name);

// A library that cannot run the experts it is asked for fails the load, saying why: bf16 on the
// BLAS (fp32 only; where oneDNN has no bf16 kernels the bf16 experts are not packed at all), and
// any library for experts that are not packed (the grouped path).
TEST(thinker_paths_asked, a_library_that_cannot_run_the_experts_is_a_load_error) {
  model_options options;
  options.head = false;
  options.threads = 1;
  auto load_error = [&] {
    try {
      (void)model::load(thinker_dir() / "model", options);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(loaded)");
  };
  options.dtype = compute_dtype::bf16;
  options.experts = expert_library::blas;
  const std::string blas = load_error();
  EXPECT_NE(blas.find("experts on the BLAS were asked for, but"), std::string::npos) << blas;
  EXPECT_NE(blas.find(detail::onednn_runs(at::kBFloat16) ? "fp32 only" : "not packed"), std::string::npos) << blas;
  options.dtype = compute_dtype::f32;
  options.grouped_experts = true;
  options.experts = expert_library::onednn;
  const std::string grouped = load_error();
  EXPECT_NE(grouped.find("experts on oneDNN, packed were asked for, but"), std::string::npos) << grouped;
  EXPECT_NE(grouped.find("not packed"), std::string::npos) << grouped;
}

// The processor outputs of a case (pixel values, grids, mel features) as the model's media input.
struct case_media {
  std::vector<vision_patches> images, videos;
  std::vector<log_mel> audio;
  record_media view() const { return {images, audio, videos, false}; }
};

case_media media_of(const safetensors_file& ref) {
  case_media m;
  auto patches = [&](const char* values, const char* grid, float second_per_grid) {
    vision_patches p;
    p.pixel_values = test::tensor_values<float>(ref, values);
    const auto g = test::tensor_values<std::int64_t>(ref, grid);
    p.grid_t = g.at(0);
    p.grid_h = g.at(1);
    p.grid_w = g.at(2);
    p.second_per_grid = second_per_grid;
    return p;
  };
  if (ref.find("in.pixel_values")) m.images.push_back(patches("in.pixel_values", "in.image_grid_thw", 0));
  if (ref.find("in.pixel_values_videos")) {
    m.videos.push_back(patches("in.pixel_values_videos", "in.video_grid_thw",
                               test::tensor_values<float>(ref, "in.video_second_per_grid").at(0)));
  }
  if (ref.find("in.input_features")) {
    log_mel a;
    a.values = test::tensor_values<float>(ref, "in.input_features");
    const auto mask = test::tensor_values<std::int64_t>(ref, "in.feature_attention_mask");
    a.frames = static_cast<std::int64_t>(mask.size());
    a.frame_mask.assign(mask.begin(), mask.end());
    m.audio.push_back(std::move(a));
  }
  return m;
}

// Every stage of the tiny thinker on its image, video and audio cases: the towers' outputs and
// deepstack features, the MRoPE ids, the embeddings with the media rows placed, every layer.
TEST(thinker, media_cases_match_the_reference_stage_by_stage) {
  model_options options;
  options.head = false;
  options.threads = 1;
  const auto m = model::load(thinker_dir() / "model", options);
  ASSERT_TRUE(m->reads_images());
  ASSERT_TRUE(m->reads_audio());
  double worst = 0;
  for (const char* name : {"image", "video", "audio", "image_audio", "video_audio"}) {
    SCOPED_TRACE(name);
    const safetensors_file ref(thinker_dir() / (std::string("tiny_ref_") + name + ".safetensors"));
    const auto ids64 = test::tensor_values<std::int64_t>(ref, "in.input_ids");
    const std::vector<std::int32_t> ids(ids64.begin(), ids64.end());
    const case_media media = media_of(ref);
    const record_media view = media.view();
    std::map<std::string, std::vector<float>, std::less<>> stages;
    m->trace(ids, &view, [&](std::string_view stage, std::span<const float> values, std::int64_t) {
      stages.emplace(std::string(stage), std::vector<float>(values.begin(), values.end()));
    });
    std::size_t compared = 0;
    for (const auto& [name_view, view_] : ref.tensors()) {
      const std::string key(name_view);
      if (!key.starts_with("out.") || key == "out.logits" || key == "out.rope_deltas") continue;
      const std::string stage = key.substr(4);
      ASSERT_TRUE(stages.contains(stage)) << stage;
      const auto expected = floats(view_);
      ASSERT_EQ(stages[stage].size(), expected.size()) << stage;
      const double e = relative_error(stages[stage], expected, 1.0);
      worst = std::max(worst, e);
      EXPECT_LT(e, 1e-5) << stage;
      ++compared;
    }
    EXPECT_GE(compared, 7u);  // positions, embeddings, 3 layers, final, and the media features
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.2e", worst);
  RecordProperty("worst_relative_error", text);
}

TEST(release, loads_the_tiny_clef_release_and_skips_talker_and_code2wav) {
  const release r(test::data_dir() / "vectors/clef-omni-tiny/release");
  EXPECT_EQ(r.text().hidden_size, 64);
  EXPECT_EQ(r.text().mrope_section[0], 8);
  EXPECT_EQ(r.head().width, 32);
  EXPECT_TRUE(r.has_head());
  EXPECT_NO_THROW((void)r.thinker_tensor("thinker.lm_head.weight"));
  EXPECT_THROW((void)r.thinker_tensor("talker.model.norm.weight"), load_error);
}

}  // namespace
}  // namespace baton::clef
