#include "engine/clef/media_input.hpp"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "core/error_codes.hpp"
#include "engine/clef/model/json_file.hpp"
#include "engine/clef/model/rope_index.hpp"
#include "engine/clef/release_reads.hpp"

namespace baton::clef {

namespace {

error named(std::string_view where, error e) {
  e.message = std::string(where) + ": " + e.message;
  return e;
}

std::string item_name(const char* field, std::size_t i) { return std::string(field) + "[" + std::to_string(i) + "]"; }

// The item's bytes (never more than the decoder's byte limit) decoded by `decode`.
template <class T, class Decode>
result<T> load(const media_item& item, media::source_policy sources, const media::limits& lim,
               const std::string& where, Decode decode) {
  sources.max_bytes = std::min(sources.max_bytes, lim.max_bytes);
  auto bytes = media::load_bytes(item, sources, where);
  if (!bytes) return std::move(bytes.error());
  auto decoded = decode(std::span<const std::byte>(*bytes));
  if (!decoded) return named(where, std::move(decoded.error()));
  return std::move(*decoded);
}

rgb_frames view_of(const media::rgb_frames& f) { return {f.pixels, f.frames, f.height, f.width}; }
rgb_frames view_of(const raw_media& r) { return {r.pixels, r.frames, r.height, r.width}; }

result<vision_patches> patches(const rgb_frames& frames, const std::string& where, bool video,
                               const pixel_bounds& bounds) {
  auto p = video ? preprocess_video(frames, media::video_sample_fps, bounds) : preprocess_image(frames, bounds);
  if (auto* e = std::get_if<vision_error>(&p)) return make_error(422, codes::invalid_media, where + ": " + e->message);
  return std::move(std::get<vision_patches>(p));
}

}  // namespace

pixel_bounds read_pixel_bounds(const std::filesystem::path& model_dir) {
  pixel_bounds b;
  const auto path = model_dir / preprocessor_config_json;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return b;
  const nlohmann::json j = read_json_file(path);
  auto read = [&](const char* key, std::int64_t& out) {
    const auto it = j.find(key);
    if (it == j.end()) return;
    if (!it->is_number_integer() || it->get<std::int64_t>() <= 0) {
      throw load_error(path.string() + ": `" + key + "` must be a positive integer");
    }
    out = it->get<std::int64_t>();
  };
  read("min_pixels", b.min_pixels);
  read("max_pixels", b.max_pixels);
  if (b.min_pixels > b.max_pixels) throw load_error(path.string() + ": min_pixels is above max_pixels");
  return b;
}

result<prepared_media> prepare_media(const request& r, const media_settings& s) {
  prepared_media out;
  for (std::size_t i = 0; i < r.images.size(); ++i) {
    const std::string where = item_name("images", i);
    const media_item& item = r.images[i];
    media::rgb_frames decoded;
    if (item.source == media_source::raw) {
      if (auto ok = media::check_raw(*item.raw, "images", where); !ok) return std::move(ok.error());
    } else {
      auto d = load<media::rgb_frames>(item, s.sources, s.images, where,
                                       [&](std::span<const std::byte> b) { return media::decode_image(b, s.images); });
      if (!d) return std::move(d.error());
      decoded = std::move(*d);
    }
    auto p = patches(item.source == media_source::raw ? view_of(*item.raw) : view_of(decoded), where, false, s.bounds);
    if (!p) return std::move(p.error());
    out.images.push_back(std::move(*p));
  }

  // Decoded samples are owned here; raw ones are read where the caller holds them. decoded_audio never
  // grows past its reserve, so the spans into it stay valid.
  std::vector<std::vector<float>> decoded_audio;
  decoded_audio.reserve(r.audio.size() + r.videos.size());
  std::vector<std::span<const float>> clips, soundtracks;
  std::vector<std::string> clip_names;  // for errors: the item each clip came from
  for (std::size_t i = 0; i < r.audio.size(); ++i) {
    const std::string where = item_name("audio", i);
    const media_item& item = r.audio[i];
    if (item.source == media_source::raw) {
      if (auto ok = media::check_raw(*item.raw, "audio", where); !ok) return std::move(ok.error());
      clips.emplace_back(item.raw->audio);
    } else {
      auto d = load<std::vector<float>>(item, s.sources, s.audio, where,
                                        [&](std::span<const std::byte> b) { return media::decode_audio(b, s.audio); });
      if (!d) return std::move(d.error());
      clips.emplace_back(decoded_audio.emplace_back(std::move(*d)));
    }
    if (clips.back().empty()) return make_error(422, codes::invalid_media, where + ": the audio has no samples");
    clip_names.push_back(where);
  }

  bool all_sound = !r.videos.empty() && s.soundtracks;
  for (std::size_t i = 0; i < r.videos.size(); ++i) {
    const std::string where = item_name("videos", i);
    const media_item& item = r.videos[i];
    const bool raw = item.source == media_source::raw;
    media::video v;
    if (raw) {
      if (auto ok = media::check_raw(*item.raw, "videos", where); !ok) return std::move(ok.error());
    } else {
      auto d = load<media::video>(item, s.sources, s.videos, where,
                                  [&](std::span<const std::byte> b) { return media::decode_video(b, s.videos); });
      if (!d) return std::move(d.error());
      v = std::move(*d);
    }
    auto p = patches(raw ? view_of(*item.raw) : view_of(v.frames), where, true, s.bounds);
    if (!p) return std::move(p.error());
    out.videos.push_back(std::move(*p));
    soundtracks.emplace_back(raw ? std::span<const float>(item.raw->audio)
                                 : std::span<const float>(decoded_audio.emplace_back(std::move(v.audio))));
    all_sound = all_sound && (raw || v.has_audio) && !soundtracks.back().empty();
  }
  // The reference reads the soundtracks only when every video has one (use_audio_in_video).
  out.audio_in_video = all_sound;
  if (out.audio_in_video) {
    clips.insert(clips.end(), soundtracks.begin(), soundtracks.end());
    for (std::size_t i = 0; i < soundtracks.size(); ++i) clip_names.push_back(item_name("videos", i) + "'s soundtrack");
  }

  // One record's audio streams are one batch: the reference (Cloudflare's encode_record) makes a
  // single processor call with the record's audio items and then, when every video has one, the
  // videos' soundtracks (use_audio_in_video; otherwise no soundtrack is read at all; images have
  // none). Its WhisperFeatureExtractor pads every stream of the call with zeros to the longest
  // before the spectrogram (padding=True), so each stream's features are those of its padded
  // waveform (its last frames see the zeros, the reflect padding is at the padded end, the clamp is
  // over all its padded frames) and the mask keeps ceil(samples / 160) of them: log_mel_features
  // with `longest`. One stream is its own longest: no padding, no extra work.
  std::size_t longest = 0;
  for (const auto& c : clips) longest = std::max(longest, c.size());
  if (!clips.empty() && longest < min_audio_samples) {
    const std::string which = clips.size() == 1 ? clip_names[0] : "every audio of the request";
    return make_error(422, codes::invalid_media, which + ": shorter than " + std::to_string(min_audio_samples) +
                                                " samples at 16 kHz, too short for a spectrogram");
  }
  for (std::size_t i = 0; i < clips.size(); ++i) {
    out.audio.push_back(log_mel_features(clips[i], longest));
    // NaN samples in a float file, or samples so loud (~1e18) that their power overflows float32,
    // would reach the model as NaN: the input's fault, not the engine's.
    const auto& values = out.audio.back().values;
    if (!std::all_of(values.begin(), values.end(), [](float x) { return std::isfinite(x); })) {
      return make_error(422, codes::invalid_media, clip_names[i] + ": its samples are not finite numbers, or so far outside "
                                                              "[-1, 1] that their spectrogram overflows");
    }
  }
  return out;
}

media_block media_block_ids(const prepared_media& m, const media_tokens& t, std::int32_t newline_id) {
  media_block out;
  std::vector<std::int32_t>& ids = out.ids;
  auto id = [](const std::optional<std::int64_t>& v) { return static_cast<std::int32_t>(*v); };
  // Wraps the pads that `body` appends in their start and end tokens, then the item's "\n".
  auto item = [&](const char* kind, std::size_t index, std::initializer_list<std::int32_t> open,
                  std::initializer_list<std::int32_t> close, auto body) {
    media_placeholder p{kind, index, static_cast<std::int32_t>(ids.size()), 0, 0};
    ids.insert(ids.end(), open);
    const std::size_t before = ids.size();
    body();
    p.pads = static_cast<std::int64_t>(ids.size() - before);
    ids.insert(ids.end(), close);
    p.end = static_cast<std::int32_t>(ids.size());
    ids.push_back(newline_id);
    out.placeholders.push_back(std::move(p));
  };
  for (std::size_t i = 0; i < m.images.size(); ++i) {
    item("image", i, {id(t.vision_start)}, {id(t.vision_end)},
         [&] { ids.insert(ids.end(), static_cast<std::size_t>(m.images[i].tokens()), id(t.image)); });
  }
  if (m.audio_in_video && m.audio.size() < m.videos.size()) {
    throw std::logic_error("audio in video without a soundtrack per video");
  }
  const std::size_t clips = m.audio_in_video ? m.audio.size() - m.videos.size() : m.audio.size();
  for (std::size_t i = 0; i < clips; ++i) {
    item("audio", i, {id(t.audio_start)}, {id(t.audio_end)}, [&] {
      ids.insert(ids.end(), static_cast<std::size_t>(audio_token_count(m.audio[i].marked_frames())), id(t.audio));
    });
  }
  for (std::size_t v = 0; v < m.videos.size(); ++v) {
    const vision_patches& p = m.videos[v];
    if (!m.audio_in_video) {
      item("video", v, {id(t.vision_start)}, {id(t.vision_end)},
           [&] { ids.insert(ids.end(), static_cast<std::size_t>(p.tokens()), id(t.video)); });
      continue;
    }
    item("video+audio", v, {id(t.vision_start), id(t.audio_start)}, {id(t.audio_end), id(t.vision_end)}, [&] {
      const vision_grid grid{p.grid_t, p.grid_h, p.grid_w, p.second_per_grid};
      const auto audio_tokens = audio_token_count(m.audio[clips + v].marked_frames());
      for (const bool is_video : interleave_video_audio(grid, vision_merge_size, audio_tokens, t.position_id_per_seconds)) {
        ids.push_back(is_video ? id(t.video) : id(t.audio));
      }
    });
  }
  return out;
}

result<void> check_media_prompt(std::span<const std::int32_t> ids, const prepared_media& m, const media_tokens& t) {
  const media_shape shape = shape_of(m.view());
  std::int64_t image_pads = 0, video_pads = 0, audio_pads = 0;
  for (const auto& p : m.images) image_pads += p.tokens();
  for (const auto& p : m.videos) video_pads += p.tokens();
  for (const auto n : shape.audio_tokens) audio_pads += n;
  auto count = [&](const std::optional<std::int64_t>& token) {
    return token ? std::count(ids.begin(), ids.end(), static_cast<std::int32_t>(*token)) : 0;
  };
  const bool pads_match = count(t.image) == image_pads && count(t.video) == video_pads && count(t.audio) == audio_pads;
  if (!pads_match || std::holds_alternative<rope_error>(
                         rope_positions(ids, t, vision_merge_size, shape.view()))) {
    return make_error(422, codes::invalid_request,
                      "the state or the questions hold media control tokens (such as <|image_pad|>, "
                      "<|vision_start|> or <|audio_start|>), which a request with media cannot carry: they "
                      "would be read as media");
  }
  return {};
}

}  // namespace baton::clef
