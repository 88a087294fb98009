// A request's media made ready for the Clef model: loaded (inline, local file or URL), decoded with
// FFmpeg, preprocessed as the Qwen3-Omni processor does (smart_resize and patches for images and
// video frames, log-mel features for audio), and the media block of token ids that stands for them
// in the prompt (Cloudflare's reference encode_record).
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.hpp"
#include "core/request.hpp"
#include "engine/clef/model/model.hpp"
#include "engine/media/decode.hpp"
#include "engine/media/source.hpp"

namespace baton::clef {

struct media_settings {
  // Items per request (Workers AI's limits); the engine advertises them in describe().limits.
  std::size_t max_images = 4, max_audio = 4, max_videos = 2;
  media::source_policy sources;
  // Decode limits per kind (Workers AI's defaults: audio clips up to 300 s, videos up to 60 s).
  media::limits images;
  media::limits audio{.max_seconds = 300};
  media::limits videos{.max_seconds = 60};
  pixel_bounds bounds;  // the release's preprocessor_config.json
  // Whether the model reads videos' soundtracks (it has an audio tower); without, videos are
  // read as pictures only.
  bool soundtracks = true;
};

// Reads min_pixels / max_pixels from `<release>/preprocessor_config.json` when present (the bounds
// the reference's processors obey); the real Qwen3-Omni values otherwise. Throws load_error.
pixel_bounds read_pixel_bounds(const std::filesystem::path& model_dir);

struct prepared_media {
  std::vector<vision_patches> images, videos;
  std::vector<log_mel> audio;  // the clips, then the videos' soundtracks when audio_in_video
  bool audio_in_video = false;

  bool empty() const noexcept { return images.empty() && audio.empty() && videos.empty(); }
  record_media view() const { return {images, audio, videos, audio_in_video}; }
};

// Loads, decodes and preprocesses every item of `r`. Errors name the item ("images[1]: …"): 413
// for a limit, 422 for media that cannot be read, 504 when decoding runs out of time.
result<prepared_media> prepare_media(const request& r, const media_settings& settings);

// One item's place in the media block: [begin, end) from its start token to its end token
// inclusive, relative to the block's first id.
struct media_placeholder {
  std::string kind;   // "image", "audio", "video", or "video+audio" (a video with its soundtrack)
  std::size_t index = 0;  // in the request's array of that kind
  std::int32_t begin = 0, end = 0;
  std::int64_t pads = 0;  // the pad tokens inside
};

struct media_block {
  std::vector<std::int32_t> ids;
  std::vector<media_placeholder> placeholders;
};

// The ids of the media block: per image `<|vision_start|>` pads `<|vision_end|>` "\n", per audio
// clip `<|audio_start|>` pads `<|audio_end|>` "\n", per video `<|vision_start|>` pads
// `<|vision_end|>` "\n" — or, with audio in video, `<|vision_start|><|audio_start|>`, the video's
// and its soundtrack's pads interleaved by time, `<|audio_end|><|vision_end|>` "\n".
media_block media_block_ids(const prepared_media& m, const media_tokens& tokens, std::int32_t newline_id);

// 422 INVALID_REQUEST when the encoded record's pads and start tokens are not exactly its media
// block's: the request's own text held media control tokens (`<|image_pad|>`, `<|vision_start|>`,
// …), which would be read as media.
result<void> check_media_prompt(std::span<const std::int32_t> ids, const prepared_media& m,
                                const media_tokens& tokens);

}  // namespace baton::clef
