#include "engine/clef/model/vision_preprocess.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace baton::clef {
namespace {

// Python's round() on a float: ties go to the even neighbour (round(2.5) == 2), unlike std::round.
double round_half_even(double x) {
  const double lower = std::floor(x);
  const double rest = x - lower;
  if (rest > 0.5) return lower + 1;
  if (rest < 0.5) return lower;
  return std::fmod(lower, 2.0) == 0 ? lower : lower + 1;
}

// Frames [T, 3, H, W] float32 in 0..255 resized to `size` as the reference does. The reference
// (Clef's, with torchvision installed) runs the *fast* processors: torchvision's resize on the uint8
// tensor with BICUBIC and antialias, which casts to float32, calls torch's antialiased bicubic
// interpolation (align_corners false, scale = in / out), clamps to 0..255 and rounds half to even
// back to uint8. The slow processor would use PIL's BICUBIC instead (fixed-point, may differ by a
// pixel level); we implement the torchvision path with the same ATen kernel (_upsample_bicubic2d_aa).
// Unverified: no reference vector resizes, and libtorch 1.13's kernel may round differently from
// the torch 2.x that produced the references.
at::Tensor resize_bicubic(const at::Tensor& frames, frame_size size) {
  return at::_upsample_bicubic2d_aa(frames.contiguous(), {size.height, size.width},
                                    /*align_corners=*/false)
      .clamp_(0, 255)
      .round_();  // integral values: the uint8 cast that follows in the reference changes nothing
}

vision_result<vision_patches> patchify(const rgb_frames& in, const pixel_bounds& bounds) {
  if (in.frames < 1 || in.height < 1 || in.width < 1) {
    return vision_error{"frames must have at least one frame and one pixel"};
  }
  const auto limit = std::numeric_limits<std::int64_t>::max() / 3;
  if (in.height > limit / in.width || in.frames > limit / (in.height * in.width) ||
      static_cast<std::uint64_t>(in.pixels.size()) !=
          static_cast<std::uint64_t>(in.frames * in.height * in.width * 3)) {
    return vision_error{"frame data does not match frames x height x width x 3"};
  }
  auto size = smart_resize(in.height, in.width, vision_resize_factor, bounds.min_pixels, bounds.max_pixels);
  if (auto* e = std::get_if<vision_error>(&size)) return std::move(*e);
  const frame_size target = std::get<frame_size>(size);

  // The input is only read: .to() copies before anything writes.
  auto* data = const_cast<std::uint8_t*>(in.pixels.data());
  at::Tensor x = at::from_blob(data, {in.frames, in.height, in.width, 3}, at::kByte)
                     .permute({0, 3, 1, 2})
                     .to(at::kFloat);
  if (target != frame_size{in.height, in.width}) x = resize_bicubic(x, target);

  // Rescale 1/255 and normalise with mean = std = 0.5, fused as the fast processors do: mean and
  // std are scaled by 255 (127.5 in float32) and applied as (x - 127.5) / 127.5. Not bit-identical
  // to (x / 255 - 0.5) / 0.5.
  x.sub_(127.5f).div_(127.5f);

  // temporal_patch_size frames per grid step: an image is its frame twice, an odd video repeats its
  // last frame.
  if (x.size(0) % vision_temporal_patch_size != 0) x = at::cat({x, x.narrow(0, x.size(0) - 1, 1)});

  vision_patches out;
  out.grid_t = x.size(0) / vision_temporal_patch_size;
  out.grid_h = target.height / vision_patch_size;
  out.grid_w = target.width / vision_patch_size;
  // [t, T2, C, h/2, 2, 16, w/2, 2, 16] -> [t, h/2, w/2, 2, 2, C, T2, 16, 16]: rows in merge-window
  // order (every 4 consecutive rows one 2 x 2 block, row-major inside it), columns in the Conv3d
  // weight order (channel, temporal, y, x).
  const std::int64_t m = vision_merge_size;
  const std::int64_t p = vision_patch_size;
  at::Tensor patches = x.contiguous()
                           .view({out.grid_t, vision_temporal_patch_size, 3, out.grid_h / m, m, p,
                                  out.grid_w / m, m, p})
                           .permute({0, 3, 6, 4, 7, 2, 1, 5, 8})
                           .contiguous();
  out.pixel_values.resize(static_cast<std::size_t>(patches.numel()));
  std::memcpy(out.pixel_values.data(), patches.data_ptr<float>(), out.pixel_values.size() * sizeof(float));
  return out;
}

}  // namespace

vision_result<frame_size> smart_resize(std::int64_t height, std::int64_t width,
                                       std::int64_t factor, std::int64_t min_pixels,
                                       std::int64_t max_pixels) {
  if (height < 1 || width < 1 || factor < 1) {
    return vision_error{"image sides and factor must be positive, got " + std::to_string(height) + "x" +
                        std::to_string(width)};
  }
  const double h = static_cast<double>(height);
  const double w = static_cast<double>(width);
  const double f = static_cast<double>(factor);
  const double ratio = std::max(h, w) / std::min(h, w);
  if (ratio > 200) {
    return vision_error{"absolute aspect ratio must be smaller than 200, got " + std::to_string(height) +
                        "x" + std::to_string(width)};
  }
  // The same double operations in the same order as the Python reference.
  double hb = round_half_even(h / f) * f;
  double wb = round_half_even(w / f) * f;
  if (hb * wb > static_cast<double>(max_pixels)) {
    const double beta = std::sqrt(h * w / static_cast<double>(max_pixels));
    hb = std::max(f, std::floor(h / beta / f) * f);
    wb = std::max(f, std::floor(w / beta / f) * f);
  } else if (hb * wb < static_cast<double>(min_pixels)) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / (h * w));
    hb = std::ceil(h * beta / f) * f;
    wb = std::ceil(w * beta / f) * f;
  }
  if (hb < f || wb < f) {
    return vision_error{"image of " + std::to_string(height) + "x" + std::to_string(width) +
                        " is too small for the pixel bounds"};
  }
  return frame_size{static_cast<std::int64_t>(hb), static_cast<std::int64_t>(wb)};
}

vision_result<vision_patches> preprocess_image(const rgb_frames& image, const pixel_bounds& bounds) {
  if (image.frames != 1) return vision_error{"an image has exactly one frame"};
  return patchify(image, bounds);
}

vision_result<vision_patches> preprocess_video(const rgb_frames& video, double fps,
                                               const pixel_bounds& bounds) {
  if (!(fps > 0) || !std::isfinite(fps)) return vision_error{"video fps must be positive"};
  auto out = patchify(video, bounds);
  if (auto* p = std::get_if<vision_patches>(&out)) {
    p->second_per_grid = static_cast<float>(static_cast<double>(vision_temporal_patch_size) / fps);
  }
  return out;
}

}  // namespace baton::clef
