// What a model accepts. Defaults are baton's wire defaults (docs/systemone.md) and
// Cloudflare's documented media limits; engines report their own through describe().
#pragma once

#include <cstddef>

namespace baton {

struct media_limits {
  std::size_t max_items = 0;           // 0: the model does not read this kind of media
  std::size_t max_item_bytes = 0;      // decoded bytes per item
};

struct request_limits {
  std::size_t max_body_bytes = 32u << 20;
  std::size_t max_json_depth = 64;
  std::size_t min_questions = 1;
  std::size_t max_questions = 64;
  std::size_t min_choice_options = 2;
  std::size_t max_choice_options = 255;
  std::size_t min_score_levels = 2;
  std::size_t max_score_levels = 10;
  std::size_t max_question_id_chars = 100;
  std::size_t max_total_options = 0;  // the model's option budget over all questions; 0: none

  media_limits images{4, 4u << 20};
  media_limits audio{4, 8u << 20};
  media_limits videos{2, 16u << 20};
  std::size_t max_image_bytes_total = 8u << 20;
  std::size_t max_audio_video_bytes_total = 16u << 20;

  // A model that reads no media at all.
  static request_limits text_only() {
    request_limits l;
    l.images = {};
    l.audio = {};
    l.videos = {};
    return l;
  }
};

}  // namespace baton
