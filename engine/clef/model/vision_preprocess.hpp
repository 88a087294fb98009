// Qwen3-Omni's image and video preprocessing: decoded RGB frames to the vision tower's input
// (pixel_values [patches, 1536] and grid_thw), as transformers v4.57's fast Qwen2VL image and
// video processors compute it with the checkpoint's preprocessor_config.json (patch 16, temporal
// patch 2, merge 2, mean = std = 0.5, rescale 1/255, bicubic resize).
// This header is torch-free so that the rest of baton compiles without ATen.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

namespace baton::clef {

inline constexpr std::int64_t vision_patch_size = 16;
inline constexpr std::int64_t vision_temporal_patch_size = 2;
inline constexpr std::int64_t vision_merge_size = 2;
// smart_resize rounds both sides to this: one merged 2 x 2 block of 16-pixel patches.
inline constexpr std::int64_t vision_resize_factor = vision_patch_size * vision_merge_size;
// Values per patch row: (channel 3, temporal 2, y 16, x 16), the Conv3d weight layout.
inline constexpr std::int64_t vision_patch_values =
    3 * vision_temporal_patch_size * vision_patch_size * vision_patch_size;

// Why a frame cannot be preprocessed (engine/clef turns it into a 422). A plain value rather than
// baton::result because this library builds without baton's core (standalone, see CMakeLists.txt).
struct vision_error {
  std::string message;
};

template <class T>
using vision_result = std::variant<T, vision_error>;

// The pixel budget of smart_resize. The reference obeys the release's preprocessor_config.json
// (min_pixels / max_pixels) for images *and* videos: the fast image processor ignores the Clef
// reference's own IMAGE_SIZE option, and the video processor passes these two keys to smart_resize
// instead of its `size`. The defaults are the real Qwen3-Omni values.
struct pixel_bounds {
  std::int64_t min_pixels = 3136;
  std::int64_t max_pixels = 12845056;
};

struct frame_size {
  std::int64_t height = 0;
  std::int64_t width = 0;
  friend bool operator==(const frame_size&, const frame_size&) = default;
};

// transformers' smart_resize: both sides rounded to multiples of `factor` (Python's round, half to
// even), then scaled to keep the area within [min_pixels, max_pixels] at the same aspect ratio.
// Errors for an aspect ratio above 200, a non-positive side or factor, and a result with a zero
// side (only possible with min_pixels 0).
vision_result<frame_size> smart_resize(std::int64_t height, std::int64_t width,
                                       std::int64_t factor, std::int64_t min_pixels,
                                       std::int64_t max_pixels);

// Decoded RGB frames, row-major [frames, height, width, 3] uint8 (one frame for an image).
struct rgb_frames {
  std::span<const std::uint8_t> pixels;
  std::int64_t frames = 0;
  std::int64_t height = 0;
  std::int64_t width = 0;
};

struct vision_patches {
  std::vector<float> pixel_values;  // row-major [grid_t * grid_h * grid_w, vision_patch_values]
  std::int64_t grid_t = 0;
  std::int64_t grid_h = 0;          // in 16-pixel patches
  std::int64_t grid_w = 0;
  float second_per_grid = 0;        // videos: seconds per temporal grid; images: 0

  std::int64_t rows() const noexcept { return grid_t * grid_h * grid_w; }
  // Tokens in the prompt: one per merged 2 x 2 block of patches.
  std::int64_t tokens() const noexcept { return rows() / (vision_merge_size * vision_merge_size); }
};

// One image (frames == 1): resized, normalised and patchified as a frame shown twice, grid_t 1.
vision_result<vision_patches> preprocess_image(const rgb_frames& image, const pixel_bounds& bounds = {});

// Already sampled video frames (all of one size) at `fps` frames per second: an odd frame count
// is padded by repeating the last frame; second_per_grid = temporal patch 2 / fps (the Clef
// reference passes its sampling rate, 2 fps, so 1.0 s).
vision_result<vision_patches> preprocess_video(const rgb_frames& video, double fps,
                                               const pixel_bounds& bounds = {});

}  // namespace baton::clef
