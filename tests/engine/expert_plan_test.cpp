// The expert plan (engine/clef/model/expert_plan.hpp) is what the thinker follows: a plan made for
// the release, dtype, threads and library a model was loaded with chooses as that model reports,
// loads the experts in the form it chose, and refuses what the load refuses, in the same words.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "engine/clef/model/cpu_kernels.hpp"
#include "engine/clef/model/expert_plan.hpp"
#include "engine/clef/model/model.hpp"
#include "engine/clef/model/packed_linear.hpp"
#include "support/files.hpp"

namespace baton::clef {
namespace {

std::filesystem::path thinker_model() { return test::data_dir() / "vectors/qwen3-omni-thinker-tiny/model"; }

model_options options_for(expert_library library) {
  model_options options;
  options.head = false;
  options.threads = 2;
  options.dtype = compute_dtype::f32;
  options.experts = library;
  return options;
}

// A choice as first made: without the note a later load of the same shape adds.
std::string first_made(std::string choice) {
  constexpr std::string_view kept = ", kept from an earlier load in this process";
  if (choice.ends_with(kept)) choice.resize(choice.size() - kept.size());
  return choice;
}

TEST(expert_plan, a_named_library_is_chosen_and_loaded_as_the_model_reports) {
  if (!detail::onednn_built() || !detail::packed_linear::blas_available()) {
    GTEST_SKIP() << "no oneDNN build or no cblas_sgemm: the experts are not packed";
  }
  for (const expert_library library : {expert_library::onednn, expert_library::xsmm, expert_library::blas}) {
    if (library == expert_library::xsmm && !detail::packed_linear::xsmm_available()) continue;
    const auto m = model::load(thinker_model(), options_for(library));  // libtorch's threads set as the plan wants
    detail::expert_plan plan(m->files(), at::kFloat, at::kCPU, /*grouped_experts=*/false, library, 0);
    const std::string choice = plan.matmul_choice();
    EXPECT_EQ(choice, first_made(m->matmul_choice()) + ", kept from an earlier load in this process");
    EXPECT_NE(choice.find("(asked for)"), std::string::npos) << choice;
    EXPECT_FALSE(plan.grouped());
    EXPECT_EQ(plan.packed_projections(), choice.find("projections on oneDNN, packed") != std::string::npos) << choice;
    EXPECT_TRUE(plan.expert_schedule().empty());  // timed once the experts are loaded

    const std::vector<detail::expert_weights> experts = plan.load_experts(m->files());
    ASSERT_EQ(experts.size(), static_cast<std::size_t>(m->files().text().num_layers));
    for (const auto& layer : experts) {
      EXPECT_EQ(layer.gate_up_packed.size(), static_cast<std::size_t>(m->files().text().num_experts));
      EXPECT_TRUE(layer.gate.empty());
      EXPECT_EQ(layer.packed_bytes > 0, library != expert_library::blas);  // the BLAS multiplies the mapping
    }
    EXPECT_EQ(first_made(plan.expert_schedule()), first_made(m->expert_schedule()));
  }
}

TEST(expert_plan, the_grouped_path_keeps_its_stacks) {
  const auto m = model::load(thinker_model(), [] {
    model_options options = options_for(expert_library::measured);
    options.grouped_experts = true;
    return options;
  }());
  detail::expert_plan plan(m->files(), at::kFloat, at::kCPU, /*grouped_experts=*/true, expert_library::measured, 0);
  EXPECT_TRUE(plan.grouped());
  EXPECT_FALSE(plan.native_grouped());  // at::_grouped_mm is a GPU's
  const std::vector<detail::expert_weights> experts = plan.load_experts(m->files());
  ASSERT_FALSE(experts.empty());
  EXPECT_TRUE(experts[0].gate_up_all.defined());
  EXPECT_TRUE(experts[0].gate_up_packed.empty());
  EXPECT_EQ(plan.expert_schedule(), "");
  EXPECT_EQ(m->expert_schedule(), "");
}

TEST(expert_plan, refuses_a_library_in_the_words_of_the_load) {
  model_options options = options_for(expert_library::onednn);
  options.grouped_experts = true;
  std::string load, plan;
  try {
    (void)model::load(thinker_model(), options);
  } catch (const std::invalid_argument& e) {
    load = e.what();
  }
  try {
    const release files(thinker_model(), /*head=*/false);
    detail::expert_plan refused(files, at::kFloat, at::kCPU, /*grouped_experts=*/true, expert_library::onednn, 0);
  } catch (const std::invalid_argument& e) {
    plan = e.what();
  }
  EXPECT_NE(load.find("experts on oneDNN, packed were asked for, but"), std::string::npos) << load;
  EXPECT_EQ(plan, load);
}

}  // namespace
}  // namespace baton::clef
