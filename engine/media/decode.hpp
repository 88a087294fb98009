// Media decoding with FFmpeg's libraries, from bytes in memory (no temporary files): images to RGB,
// audio to 16 kHz mono float, videos to RGB frames sampled at 2 per second plus their soundtrack.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/error.hpp"

namespace baton::media {

// Bounds on untrusted input; each breach is an error naming the limit (413), never a crash.
struct limits {
  std::size_t max_bytes = 64u << 20;
  std::int64_t max_pixels = 3840 * 2160;  // per frame, before any resize
  // A video's sampled frames together (what decode_video holds in memory: 3 bytes each).
  std::int64_t max_video_pixels = std::int64_t{1} << 28;
  double max_seconds = 600;               // audio and video duration
  // Wall time for one decode, checked between packets and inside FFmpeg's blocking calls (504).
  std::chrono::milliseconds time_budget{30000};
};

inline constexpr int audio_sample_rate = 16000;
// Qwen3-Omni's video frame rate (qwen_omni_utils' FPS); the Clef reference samples at it.
inline constexpr int video_sample_fps = 2;
// The Clef reference scales larger video frames down to this many pixels (256 x 32 x 32), to even
// sides, before its processor sees them.
inline constexpr std::int64_t video_max_frame_pixels = 256 * 32 * 32;

// Row-major [frames, height, width, 3] uint8 RGB.
struct rgb_frames {
  std::vector<std::uint8_t> pixels;
  std::int64_t frames = 0;
  std::int64_t height = 0;
  std::int64_t width = 0;
};

struct video {
  rgb_frames frames;         // video_sample_fps frames per second of the source
  bool has_audio = false;
  std::vector<float> audio;  // 16 kHz mono when has_audio
};

// PNG, JPEG, WebP or GIF (its first frame) to [1, H, W, 3], alpha dropped. 422 INVALID_MEDIA when
// not decodable.
result<rgb_frames> decode_image(std::span<const std::byte> bytes, const limits& lim = {});

// WAV, MP3, FLAC, Ogg (Opus, Vorbis) or AAC to 16 kHz mono float, sample for sample what the Clef
// reference's PyAV AudioResampler gives: swresample's defaults, so stereo is mixed to
// sqrt(1/2) * (L + R), which can exceed 1 for loud in-phase channels (nothing is clipped).
result<std::vector<float>> decode_audio(std::span<const std::byte> bytes, const limits& lim = {});

// Samples frames as the Clef reference does: the first frame whose timestamp (from 0) is at or
// after k / 2 s, k = 0, 1, …, each decoded frame kept at most once (a 10 fps clip gives frames 0,
// 5, 10, …; a 1 fps clip every frame; frames without a timestamp are skipped). Frames larger than
// video_max_frame_pixels are scaled down (bilinear, sides rounded to even numbers, as the
// reference asks PyAV for them); the pixel limit applies to the frame as decoded.
result<video> decode_video(std::span<const std::byte> bytes, const limits& lim = {});

}  // namespace baton::media
