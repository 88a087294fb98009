// The MRoPE position index against transformers' get_rope_index outputs (tests/data/vectors).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "engine/clef/model/audio_features.hpp"
#include "engine/clef/model/release.hpp"
#include "engine/clef/model/rope_index.hpp"
#include "support/files.hpp"
#include "support/tensor_values.hpp"

namespace baton::clef {
namespace {

std::filesystem::path thinker_dir() { return test::data_dir() / "vectors/qwen3-omni-thinker-tiny"; }


media_tokens tiny_tokens() {
  return parse_media_tokens(nlohmann::json::parse(std::ifstream(thinker_dir() / "model/config.json")),
                            thinker_dir() / "model/config.json");
}

TEST(rope_index, matches_the_reference_for_every_media_case) {
  const media_tokens tokens = tiny_tokens();
  for (const char* name : {"text", "image", "video", "audio", "image_audio", "video_audio"}) {
    SCOPED_TRACE(name);
    const safetensors_file ref(thinker_dir() / (std::string("tiny_ref_") + name + ".safetensors"));
    const auto ids64 = test::tensor_values<std::int64_t>(ref, "in.input_ids");
    const std::vector<std::int32_t> ids(ids64.begin(), ids64.end());
    std::vector<vision_grid> images, videos;
    std::vector<std::int64_t> audio;
    if (const auto g = test::tensor_values<std::int64_t>(ref, "in.image_grid_thw"); !g.empty()) images.push_back({g[0], g[1], g[2], 0});
    if (const auto g = test::tensor_values<std::int64_t>(ref, "in.video_grid_thw"); !g.empty()) {
      videos.push_back({g[0], g[1], g[2], test::tensor_values<float>(ref, "in.video_second_per_grid").at(0)});
    }
    if (const auto mask = test::tensor_values<std::int64_t>(ref, "in.feature_attention_mask"); !mask.empty()) {
      std::int64_t frames = 0;
      for (const auto v : mask) frames += v;
      audio.push_back(audio_token_count(frames));
    }
    const auto got = rope_positions(ids, tokens, 2, {images, videos, audio, false});
    ASSERT_TRUE(std::holds_alternative<std::vector<float>>(got)) << std::get<rope_error>(got).message;
    EXPECT_EQ(std::get<std::vector<float>>(got), test::tensor_values<float>(ref, "out.position_ids"));
  }
}

TEST(rope_index, pads_that_do_not_match_the_media_are_an_error) {
  const media_tokens tokens = tiny_tokens();
  const std::vector<vision_grid> image = {{1, 4, 6, 0}};
  // 6 image tokens expected; only 5 pads, then text.
  const std::vector<std::int32_t> short_ids = {300, 315, 311, 311, 311, 311, 311, 316, 7, 8};
  EXPECT_TRUE(std::holds_alternative<rope_error>(rope_positions(short_ids, tokens, 2, {image, {}, {}, false})));
  // Media declared but no vision start at all.
  const std::vector<std::int32_t> text = {300, 7, 8, 9};
  EXPECT_TRUE(std::holds_alternative<rope_error>(rope_positions(text, tokens, 2, {image, {}, {}, false})));
  // A stray vision start followed by text.
  const std::vector<std::int32_t> stray = {300, 315, 7, 316, 311};
  EXPECT_TRUE(std::holds_alternative<rope_error>(rope_positions(stray, tokens, 2, {image, {}, {}, false})));
  const std::vector<std::int64_t> audio = {3};
  EXPECT_TRUE(std::holds_alternative<rope_error>(rope_positions(text, tokens, 2, {{}, {}, audio, false})));
}

// A video of 2 grids (1 s each at 13 positions per second), 2 x 2 merged tokens per grid, with 20
// audio tokens: video grid 0 (time 0) comes first, then audio 0..12, then grid 1 (time 13) before
// audio 13, as the processor writes the pads and get_rope_index positions them.
TEST(rope_index, audio_in_video_interleaves_by_time) {
  const vision_grid video{2, 4, 4, 1.0};
  const std::vector<bool> order = interleave_video_audio(video, 2, 20, 13);
  std::vector<bool> want(4, true);
  want.insert(want.end(), 13, false);
  want.insert(want.end(), 4, true);
  want.insert(want.end(), 7, false);
  EXPECT_EQ(order, want);

  const media_tokens tokens = tiny_tokens();
  std::vector<std::int32_t> ids = {300, 315, 313};
  for (const bool v : order) ids.push_back(v ? 312 : 310);
  ids.insert(ids.end(), {314, 316, 7});
  const std::vector<vision_grid> videos = {video};
  const std::vector<std::int64_t> audio = {20};
  const auto got = rope_positions(ids, tokens, 2, {{}, videos, audio, true});
  ASSERT_TRUE(std::holds_alternative<std::vector<float>>(got)) << std::get<rope_error>(got).message;
  const auto& p = std::get<std::vector<float>>(got);
  const std::size_t n = ids.size();
  auto t = [&](std::size_t i) { return p[i]; };
  auto h = [&](std::size_t i) { return p[n + i]; };
  EXPECT_EQ(t(0), 0);
  EXPECT_EQ(t(1), 1);  // vision start
  EXPECT_EQ(t(2), 2);  // audio start
  for (std::size_t i = 3; i < 7; ++i) EXPECT_EQ(t(i), 3) << i;  // grid 0 at time 0
  EXPECT_EQ(h(5), 4);                                            // second row of grid 0
  for (std::size_t i = 7; i < 20; ++i) EXPECT_EQ(t(i), static_cast<float>(3 + (i - 7))) << i;  // audio 0..12
  for (std::size_t i = 20; i < 24; ++i) EXPECT_EQ(t(i), 16) << i;  // grid 1 at time 13
  for (std::size_t i = 24; i < 31; ++i) EXPECT_EQ(t(i), static_cast<float>(16 + (i - 24))) << i;  // audio 13..19
  // The end tokens follow the last chunk (audio 19 at 22), as transformers continues.
  EXPECT_EQ(t(31), 23);
  EXPECT_EQ(t(32), 24);
  EXPECT_EQ(t(33), 25);
}

}  // namespace
}  // namespace baton::clef
