// Image and video preprocessing against the reference processors' outputs (tests/data/vectors).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <variant>

#include "engine/clef/model/safetensors.hpp"
#include "engine/clef/model/vision_preprocess.hpp"
#include "support/files.hpp"

namespace baton::clef {
namespace {

std::filesystem::path vectors_dir() { return test::data_dir() / "vectors"; }

const tensor_view& tensor(const safetensors_file& file, std::string_view name) {
  const tensor_view* v = file.find(name);
  if (v == nullptr) throw std::runtime_error("missing tensor " + std::string(name));
  return *v;
}

rgb_frames frames_of(const tensor_view& v) {
  EXPECT_EQ(v.type, dtype::u8);
  rgb_frames out;
  out.pixels = {reinterpret_cast<const std::uint8_t*>(v.data), v.bytes};
  // [H, W, 3] (one image) or [T, H, W, 3]
  const std::size_t d = v.shape.size();
  out.frames = d == 4 ? v.shape[0] : 1;
  out.height = v.shape[d - 3];
  out.width = v.shape[d - 2];
  return out;
}

template <class T>
std::vector<T> values(const tensor_view& v) {
  std::vector<T> out(static_cast<std::size_t>(v.numel()));
  EXPECT_EQ(out.size() * sizeof(T), v.bytes);
  std::memcpy(out.data(), v.data, v.bytes);
  return out;
}

vision_patches get(vision_result<vision_patches> r) {
  if (auto* e = std::get_if<vision_error>(&r)) throw std::runtime_error(e->message);
  return std::get<vision_patches>(std::move(r));
}

double max_abs_difference(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
  }
  return worst;
}

// Compares patches and grid with a reference; `max_diff` receives the largest |difference|.
// Every input value is one of 256 levels: a wrong patch order or normalisation moves values by at
// least 1/255 (tried: merge windows dropped, channel and temporal swapped, mean off by 0.5 level).
void expect_matches(const vision_patches& got, const tensor_view& pixel_values, const tensor_view& grid,
                    double tolerance, double& max_diff) {
  const auto want_grid = values<std::int64_t>(grid);
  ASSERT_EQ(want_grid.size(), 3u);
  EXPECT_EQ(got.grid_t, want_grid[0]);
  EXPECT_EQ(got.grid_h, want_grid[1]);
  EXPECT_EQ(got.grid_w, want_grid[2]);
  ASSERT_EQ(pixel_values.shape, (std::vector<std::int64_t>{got.rows(), vision_patch_values}));
  const auto want = values<float>(pixel_values);
  ASSERT_EQ(got.pixel_values.size(), want.size());
  max_diff = max_abs_difference(got.pixel_values, want);
  EXPECT_LE(max_diff, tolerance);
}

TEST(vision_preprocess, image_matches_the_clef_reference_processor) {
  const safetensors_file ref(vectors_dir() / "clef-omni-tiny/media_tensors/image_basic.safetensors");
  const auto got = get(preprocess_image(frames_of(tensor(ref, "decoded.image.0"))));
  double diff = 1;
  expect_matches(got, tensor(ref, "processor.pixel_values"), tensor(ref, "processor.image_grid_thw"), 0, diff);
  EXPECT_EQ(got.tokens(), 6);
  EXPECT_EQ(got.second_per_grid, 0.0f);
  std::cout << "image_basic: max |difference| " << diff << "\n";
}

TEST(vision_preprocess, video_matches_the_clef_reference_processor) {
  const safetensors_file ref(vectors_dir() / "clef-omni-tiny/media_tensors/video_with_sound.safetensors");
  const auto got = get(preprocess_video(frames_of(tensor(ref, "decoded.video.0")), 2.0));
  double diff = 1;
  expect_matches(got, tensor(ref, "processor.pixel_values_videos"), tensor(ref, "processor.video_grid_thw"), 0,
                 diff);
  EXPECT_EQ(got.second_per_grid, values<float>(tensor(ref, "processor.video_second_per_grid")).at(0));
  std::cout << "video_with_sound: max |difference| " << diff << "\n";
}

// These vectors come from the slow (numpy) processor, which rescales and normalises in two steps:
// (x / 255 - 0.5) / 0.5 differs from the fused (x - 127.5) / 127.5 of the fast processors (what the
// Clef reference runs, matched exactly above) in the last bit of some values.
TEST(vision_preprocess, thinker_reference_frames_give_its_patches) {
  const auto dir = vectors_dir() / "qwen3-omni-thinker-tiny";
  for (const char* name : {"tiny_ref_image.safetensors", "tiny_ref_image_audio.safetensors"}) {
    const safetensors_file ref(dir / name);
    const auto& frames = tensor(ref, "in.image_uint8");  // [1, H, W, 3]
    auto image = frames_of(frames);
    const auto got = get(preprocess_image(image));
    double diff = 1;
    expect_matches(got, tensor(ref, "in.pixel_values"), tensor(ref, "in.image_grid_thw"), 1e-7, diff);
    std::cout << name << ": max |difference| " << diff << "\n";
  }
  for (const char* name : {"tiny_ref_video.safetensors", "tiny_ref_video_audio.safetensors"}) {
    const safetensors_file ref(dir / name);
    const float second_per_grid = values<float>(tensor(ref, "in.video_second_per_grid")).at(0);
    // The vectors record seconds per grid, not fps: 2 frames per grid.
    const auto got = get(preprocess_video(frames_of(tensor(ref, "in.video_uint8")), 2.0 / second_per_grid));
    double diff = 1;
    expect_matches(got, tensor(ref, "in.pixel_values_videos"), tensor(ref, "in.video_grid_thw"), 1e-7, diff);
    EXPECT_EQ(got.second_per_grid, second_per_grid);
    std::cout << name << ": max |difference| " << diff << "\n";
  }
}

TEST(vision_preprocess, an_odd_frame_count_repeats_the_last_frame) {
  const safetensors_file ref(vectors_dir() / "clef-omni-tiny/media_tensors/video_with_sound.safetensors");
  rgb_frames video = frames_of(tensor(ref, "decoded.video.0"));
  const auto four = get(preprocess_video(video, 2.0));
  video.frames = 3;
  video.pixels = video.pixels.first(video.pixels.size() / 4 * 3);
  const auto three = get(preprocess_video(video, 2.0));
  ASSERT_EQ(three.grid_t, 2);
  ASSERT_EQ(three.pixel_values.size(), four.pixel_values.size());
  // Grid step 0 (frames 0, 1) is unchanged; in step 1 both temporal halves are frame 2.
  const std::size_t step = four.pixel_values.size() / 2;
  EXPECT_TRUE(std::equal(three.pixel_values.begin(), three.pixel_values.begin() + step, four.pixel_values.begin()));
  const std::size_t half = vision_patch_size * vision_patch_size;  // one (channel, temporal) slice
  for (std::size_t row = step; row < three.pixel_values.size(); row += 2 * half) {
    ASSERT_TRUE(std::equal(three.pixel_values.begin() + row, three.pixel_values.begin() + row + half,
                           three.pixel_values.begin() + row + half));
    ASSERT_TRUE(std::equal(three.pixel_values.begin() + row, three.pixel_values.begin() + row + half,
                           four.pixel_values.begin() + row));
  }
}

// Resize numerics are not verified against torchvision (no reference vector needs a resize); this
// checks the shape and that the normalised bicubic weights keep a flat image flat.
TEST(vision_preprocess, resizes_to_the_smart_resize_size) {
  std::vector<std::uint8_t> pixels(20 * 30 * 3, 200);
  const auto got = get(preprocess_image({pixels, 1, 20, 30}));
  EXPECT_EQ(got.grid_h, 4);  // 20 x 30 rounds to 0 x 32, under 3136 pixels: grown to 64 x 96
  EXPECT_EQ(got.grid_w, 6);
  const float level = (200.0f - 127.5f) / 127.5f;
  EXPECT_TRUE(std::all_of(got.pixel_values.begin(), got.pixel_values.end(), [&](float v) { return v == level; }));
}

TEST(vision_preprocess, rejects_bad_input_as_values) {
  std::vector<std::uint8_t> pixels(2 * 64 * 64 * 3, 0);
  EXPECT_TRUE(std::holds_alternative<vision_error>(preprocess_image({pixels, 2, 64, 64})));
  EXPECT_TRUE(std::holds_alternative<vision_error>(preprocess_image({pixels, 1, 64, 65})));
  EXPECT_TRUE(std::holds_alternative<vision_error>(preprocess_video({pixels, 2, 64, 64}, 0.0)));
  EXPECT_TRUE(std::holds_alternative<vision_error>(preprocess_video({pixels, 0, 64, 64}, 2.0)));
  EXPECT_TRUE(std::holds_alternative<vision_patches>(preprocess_video({pixels, 2, 64, 64}, 2.0)));
}

frame_size resized(std::int64_t h, std::int64_t w, std::int64_t lo, std::int64_t hi) {
  auto r = smart_resize(h, w, 32, lo, hi);
  if (std::holds_alternative<vision_error>(r)) return {-1, -1};
  return std::get<frame_size>(r);
}

TEST(smart_resize, examples_including_half_to_even_rounding) {
  EXPECT_EQ(resized(480, 640, 3136, 12845056), (frame_size{480, 640}));
  EXPECT_EQ(resized(80, 80, 3136, 12845056), (frame_size{64, 64}));      // round(2.5) = 2
  EXPECT_EQ(resized(48, 80, 3136, 12845056), (frame_size{64, 64}));      // round(1.5) = 2
  EXPECT_EQ(resized(112, 144, 3136, 12845056), (frame_size{128, 128}));  // 3.5 -> 4, 4.5 -> 4
  EXPECT_EQ(resized(64, 96, 65536, 1048576), (frame_size{224, 320}));    // grown to min_pixels
  EXPECT_EQ(resized(1080, 1920, 65536, 1048576), (frame_size{768, 1344}));
  EXPECT_EQ(resized(4000, 3000, 3136, 12845056), (frame_size{4000, 3008}));
  EXPECT_EQ(resized(10, 2000, 3136, 12845056), (frame_size{32, 800}));   // ratio 200 is allowed
  EXPECT_EQ(resized(10, 2001, 3136, 12845056), (frame_size{-1, -1}));
  EXPECT_EQ(resized(1, 1, 3136, 12845056), (frame_size{64, 64}));
  EXPECT_EQ(resized(10, 10, 0, 12845056), (frame_size{-1, -1}));  // rounds to 0 x 0
  EXPECT_EQ(resized(0, 10, 3136, 12845056), (frame_size{-1, -1}));
}

// Every size on a grid (1..600 and larger sides up to 20,000) against Python's smart_resize:
// tests/engine/data/smart_resize_digest.py prints these digests.
TEST(smart_resize, matches_python_on_a_grid_of_sizes) {
  std::vector<std::int64_t> sides;
  for (std::int64_t s = 1; s <= 600; ++s) sides.push_back(s);
  for (std::int64_t s = 601; s <= 20000; s += 97) sides.push_back(s);
  struct expected {
    std::int64_t lo, hi;
    std::uint64_t digest;
  };
  for (const auto& [lo, hi, want] : {expected{3136, 12845056, 0x6ce391b970b67625ull},
                                     expected{65536, 1048576, 0x1b477c8e8b1e30e5ull},
                                     expected{131072, 786432, 0xb0af2b43d9ff7fc5ull}}) {
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (const std::int64_t height : sides) {
      for (const std::int64_t width : sides) {
        const frame_size r = resized(height, width, lo, hi);
        for (const std::int64_t v : {r.height, r.width}) {
          for (int b = 0; b < 8; ++b) {
            h = (h ^ ((static_cast<std::uint64_t>(v) >> (8 * b)) & 0xff)) * 0x100000001b3ull;
          }
        }
      }
    }
    EXPECT_EQ(h, want) << "bounds " << lo << ".." << hi;
  }
}

}  // namespace
}  // namespace baton::clef
