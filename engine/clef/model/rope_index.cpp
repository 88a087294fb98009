#include "engine/clef/model/rope_index.hpp"

#include <algorithm>
#include <array>
#include <optional>

namespace baton::clef {

namespace {

// The positions as transformers builds them: a list of chunks (text runs, start / end tokens, media
// blocks, single interleaved tokens); each new run starts after the largest value of the *last*
// chunk, not of everything so far (it matters after an interleaved video whose last chunk is audio).
class position_list {
 public:
  explicit position_list(std::size_t n) {
    for (auto& a : axes_) a.reserve(n);
  }

  float next_start() const { return empty() ? 0.0f : last_max_ + 1; }
  bool empty() const { return axes_[0].empty(); }
  std::size_t size() const { return axes_[0].size(); }

  void text(std::int64_t n, float start) {
    for (std::int64_t i = 0; i < n; ++i) push(start + static_cast<float>(i), start + static_cast<float>(i),
                                              start + static_cast<float>(i));
    if (n > 0) last_max_ = start + static_cast<float>(n - 1);
  }

  // One chunk of explicit positions.
  void chunk(std::span<const float> t, std::span<const float> h, std::span<const float> w) {
    float m = -1e30f;
    for (std::size_t i = 0; i < t.size(); ++i) {
      push(t[i], h[i], w[i]);
      m = std::max({m, t[i], h[i], w[i]});
    }
    if (!t.empty()) last_max_ = m;
  }

  std::vector<float> flatten() const {
    std::vector<float> out;
    out.reserve(3 * size());
    for (const auto& a : axes_) out.insert(out.end(), a.begin(), a.end());
    return out;
  }

 private:
  void push(float t, float h, float w) {
    axes_[0].push_back(t);
    axes_[1].push_back(h);
    axes_[2].push_back(w);
  }

  std::array<std::vector<float>, 3> axes_;
  float last_max_ = 0;
};

// get_llm_pos_ids_for_vision: merged-grid tokens ordered (frame, row, column).
struct block {
  std::vector<float> t, h, w;
};

block vision_block(const vision_grid& g, std::int64_t merge, float start, float time_step) {
  block b;
  const std::int64_t gh = g.h / merge, gw = g.w / merge;
  const auto n = static_cast<std::size_t>(g.t * gh * gw);
  b.t.reserve(n);
  b.h.reserve(n);
  b.w.reserve(n);
  for (std::int64_t k = 0; k < g.t; ++k) {
    // float32 as the reference multiplies: arange * second_per_grid * position_id_per_seconds.
    const float t = static_cast<float>(k) * time_step;
    for (std::int64_t r = 0; r < gh; ++r) {
      for (std::int64_t c = 0; c < gw; ++c) {
        b.t.push_back(t + start);
        b.h.push_back(static_cast<float>(r) + start);
        b.w.push_back(static_cast<float>(c) + start);
      }
    }
  }
  return b;
}

std::int64_t tokens_of(const vision_grid& g, std::int64_t merge) { return g.t * g.h * g.w / (merge * merge); }

}  // namespace

media_shape shape_of(const record_media& m) {
  media_shape s;
  s.audio_in_video = m.audio_in_video;
  for (const auto& p : m.images) s.images.push_back({p.grid_t, p.grid_h, p.grid_w, 0});
  for (const auto& p : m.videos) s.videos.push_back({p.grid_t, p.grid_h, p.grid_w, p.second_per_grid});
  for (const auto& a : m.audio) s.audio_tokens.push_back(audio_token_count(a.marked_frames()));
  return s;
}

std::variant<std::vector<float>, rope_error> rope_positions(std::span<const std::int32_t> ids,
                                                            const media_tokens& tokens,
                                                            std::int64_t merge_size,
                                                            const rope_media& media) {
  const auto n = ids.size();
  position_list out(n);
  if (media.images.empty() && media.videos.empty() && media.audio_tokens.empty()) {
    out.text(static_cast<std::int64_t>(n), 0);
    return out.flatten();
  }
  auto id = [](const std::optional<std::int64_t>& v) { return v ? *v : std::int64_t{-1}; };
  const std::int64_t vision_start = id(tokens.vision_start), audio_start = id(tokens.audio_start),
                     image = id(tokens.image), video = id(tokens.video), audio = id(tokens.audio);
  auto at = [&](std::size_t i) -> std::int64_t { return i < n ? ids[i] : -1; };
  auto find = [&](std::int64_t token, std::size_t from) {
    for (std::size_t i = from; i < n; ++i) {
      if (ids[i] == token) return i;
    }
    return n + 1;
  };

  std::size_t image_nums = 0, video_nums = 0, audio_nums = 0;
  bool has_vision_pad = false, has_audio_pad = false;
  for (std::size_t i = 0; i < n; ++i) {
    if (ids[i] == vision_start) {
      const auto next = at(i + 1);
      if (next == image) ++image_nums;
      if (next == (media.audio_in_video ? audio_start : video)) ++video_nums;
    }
    if (ids[i] == audio_start) ++audio_nums;
    has_vision_pad = has_vision_pad || ids[i] == image || ids[i] == video;
    has_audio_pad = has_audio_pad || ids[i] == audio;
  }
  const std::size_t blocks = media.audio_in_video ? image_nums + audio_nums : image_nums + video_nums + audio_nums;
  std::size_t remain_images = image_nums, remain_videos = video_nums, remain_audio = audio_nums;
  std::size_t image_idx = 0, video_idx = 0, audio_idx = 0, st = 0;
  const auto pps = static_cast<float>(tokens.position_id_per_seconds);
  const rope_error mismatch{"the prompt's media placeholders do not match its media"};

  for (std::size_t b = 0; b < blocks; ++b) {
    float st_idx = out.next_start();
    const std::size_t ed_vision = has_vision_pad && (remain_videos > 0 || remain_images > 0) ? find(vision_start, st) : n + 1;
    const std::size_t ed_audio = has_audio_pad && remain_audio > 0 ? find(audio_start, st) : n + 1;
    const std::size_t min_ed = std::min(ed_vision, ed_audio);
    if (min_ed > n) return mismatch;
    const auto text_len = static_cast<std::int64_t>(min_ed - st);
    out.text(text_len, st_idx);
    st_idx += static_cast<float>(text_len);
    const bool interleaved = min_ed == ed_vision && ed_vision + 1 == ed_audio;
    const std::int64_t bos = interleaved ? 2 : 1, eos = bos;
    out.text(bos, st_idx);
    st_idx += static_cast<float>(bos);
    std::int64_t body = 0;
    std::vector<bool> order;  // audio in video: true = video pad
    std::int64_t pad = -1;
    auto pad_at = [&](std::size_t i) -> std::int64_t { return order.empty() ? pad : (order[i] ? video : audio); };
    if (min_ed == ed_audio) {
      pad = audio;
      if (audio_idx >= media.audio_tokens.size()) return mismatch;
      body = media.audio_tokens[audio_idx++];
      out.text(body, st_idx);
      --remain_audio;
    } else if (at(ed_vision + 1) == image) {
      if (image_idx >= media.images.size()) return mismatch;
      const vision_grid& g = media.images[image_idx++];
      pad = image;
      const block v = vision_block(g, merge_size, st_idx, pps);  // an image's time step: 1 s
      out.chunk(v.t, v.h, v.w);
      body = tokens_of(g, merge_size);
      --remain_images;
    } else if (at(ed_vision + 1) == video && !interleaved) {
      if (video_idx >= media.videos.size()) return mismatch;
      const vision_grid& g = media.videos[video_idx++];
      pad = video;
      const block v = vision_block(g, merge_size, st_idx, static_cast<float>(g.second_per_grid) * pps);
      out.chunk(v.t, v.h, v.w);
      body = tokens_of(g, merge_size);
      --remain_videos;
    } else if (interleaved) {
      if (video_idx >= media.videos.size() || audio_idx >= media.audio_tokens.size()) return mismatch;
      const vision_grid& g = media.videos[video_idx++];
      const std::int64_t audio_len = media.audio_tokens[audio_idx++];
      const block v = vision_block(g, merge_size, st_idx, static_cast<float>(g.second_per_grid) * pps);
      // The pads in the order the processor wrote them, each its own chunk: transformers appends
      // the leftover video or audio as one slice, whose largest value is its last token's anyway.
      order = interleave_video_audio(g, merge_size, audio_len, tokens.position_id_per_seconds);
      std::size_t vi = 0, ai = 0;
      for (const bool is_video : order) {
        if (is_video) {
          out.chunk(std::span(v.t).subspan(vi, 1), std::span(v.h).subspan(vi, 1), std::span(v.w).subspan(vi, 1));
          ++vi;
        } else {
          out.text(1, st_idx + static_cast<float>(ai++));
        }
      }
      body = audio_len + static_cast<std::int64_t>(v.t.size());
      --remain_videos;
      --remain_audio;
    } else {
      return mismatch;
    }
    // The block's pads must be exactly what its media stands for, or the rows would be misplaced.
    const std::size_t first = min_ed + static_cast<std::size_t>(bos);
    if (first + static_cast<std::size_t>(body) > n) return mismatch;
    for (std::size_t i = first; i < first + static_cast<std::size_t>(body); ++i) {
      if (ids[i] != pad_at(i - first)) return mismatch;
    }
    st += static_cast<std::size_t>(text_len + bos + body + eos);
    if (st > n) return mismatch;
    out.text(eos, out.next_start());
  }
  if (st < n) out.text(static_cast<std::int64_t>(n - st), out.next_start());
  if (out.size() != n || image_idx != media.images.size() || video_idx != media.videos.size() ||
      audio_idx != media.audio_tokens.size()) {
    return mismatch;
  }
  return out.flatten();
}

std::vector<bool> interleave_video_audio(const vision_grid& video, std::int64_t merge_size,
                                         std::int64_t audio_tokens, double position_id_per_seconds) {
  const std::int64_t per_frame = (video.h / merge_size) * (video.w / merge_size);
  std::vector<bool> out;
  out.reserve(static_cast<std::size_t>(video.t * per_frame + audio_tokens));
  std::int64_t vi = 0, ai = 0;
  const std::int64_t video_tokens = video.t * per_frame;
  while (vi < video_tokens && ai < audio_tokens) {
    // The processor compares in float64: frame index x seconds per grid x positions per second.
    const double time = static_cast<double>(vi / per_frame) * video.second_per_grid * position_id_per_seconds;
    if (time <= static_cast<double>(ai)) {
      out.push_back(true);
      ++vi;
    } else {
      out.push_back(false);
      ++ai;
    }
  }
  out.insert(out.end(), static_cast<std::size_t>(video_tokens - vi), true);
  out.insert(out.end(), static_cast<std::size_t>(audio_tokens - ai), false);
  return out;
}

}  // namespace baton::clef
