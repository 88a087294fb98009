// Qwen3-Omni's multimodal rotary positions: three position ids (time, height, width) per token,
// from the prompt's media blocks. A port of transformers v4.57.6 get_rope_index for one unpadded
// sequence, including its audio-in-video interleaving.
// This header is torch-free so that the rest of baton compiles without ATen.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "engine/clef/model/model_types.hpp"
#include "engine/clef/model/release.hpp"

namespace baton::clef {

struct vision_grid {
  std::int64_t t = 0, h = 0, w = 0;  // in patches (h, w before the 2 x 2 merge)
  double second_per_grid = 0;        // videos: seconds per temporal grid step
};

// What the prompt's pads stand for, in prompt order per kind. `audio_tokens` lists the clips and,
// with audio_in_video, the videos' soundtracks after them (the prompt's order of audio blocks).
struct rope_media {
  std::span<const vision_grid> images;
  std::span<const vision_grid> videos;
  std::span<const std::int64_t> audio_tokens;
  bool audio_in_video = false;
};

// The grids and audio token counts of one record's media, held for a rope_media view.
struct media_shape {
  std::vector<vision_grid> images, videos;
  std::vector<std::int64_t> audio_tokens;
  bool audio_in_video = false;

  rope_media view() const { return {images, videos, audio_tokens, audio_in_video}; }
};
media_shape shape_of(const record_media& m);

struct rope_error {
  std::string message;
};

// Positions [3][ids.size()] (row-major: all time positions, then height, then width), as floats
// since video time steps may be fractional. Text-only input gives 0..n-1 on every axis. An error
// when the pads do not match `media` (a prompt the encoder did not build).
std::variant<std::vector<float>, rope_error> rope_positions(std::span<const std::int32_t> ids,
                                                            const media_tokens& tokens,
                                                            std::int64_t merge_size,
                                                            const rope_media& media);

// Pads of one video with its soundtrack, interleaved as the Qwen3-Omni processor writes them
// (true = video pad, false = audio pad): video tokens by their time position, each before any
// audio token at or after it.
std::vector<bool> interleave_video_audio(const vision_grid& video, std::int64_t merge_size,
                                         std::int64_t audio_tokens, double position_id_per_seconds);

}  // namespace baton::clef
