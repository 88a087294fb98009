// The log-mel features against the processor outputs of transformers v4.57.6 (tests/data/vectors),
// and a record's several audio streams against the processor's padded batch (make_audio_vectors).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "engine/clef/media_input.hpp"
#include "engine/clef/model/audio_features.hpp"
#include "engine/clef/model/safetensors.hpp"
#include "support/files.hpp"

namespace baton::clef {
namespace {

std::filesystem::path vectors_dir() { return test::data_dir() / "vectors"; }

template <class T>
std::vector<T> values_of(const safetensors_file& file, std::string_view name, dtype type) {
  const tensor_view* v = file.find(name);
  EXPECT_NE(v, nullptr) << name;
  if (v == nullptr) return {};
  EXPECT_EQ(v->type, type) << name;
  std::vector<T> out(static_cast<std::size_t>(v->numel()));
  std::memcpy(out.data(), v->data, v->bytes);
  return out;
}

double max_abs_difference(std::span<const float> got, std::span<const float> want) {
  double worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
  }
  return worst;
}

struct reference_case {
  std::string file;
  std::string waveform;
  std::string features;
  std::string mask;
  dtype mask_type;
  std::int64_t frames;
};

void check(const reference_case& c) {
  SCOPED_TRACE(c.file);
  const safetensors_file ref(vectors_dir() / c.file);
  const auto wave = values_of<float>(ref, c.waveform, dtype::f32);
  const auto want = values_of<float>(ref, c.features, dtype::f32);
  const log_mel got = log_mel_features(wave);
  ASSERT_EQ(got.frames, c.frames);
  ASSERT_EQ(got.values.size(), want.size());
  // Measured 1.2e-7 (float32 rounding). The processor's float64 numpy path is 1e-5 to 6e-5 away, a
  // symmetric window or a wrong filter bank far more.
  const double diff = max_abs_difference(got.values, want);
  std::printf("%s %s: max |difference| %.3g\n", c.file.c_str(), c.features.c_str(), diff);
  EXPECT_LT(diff, 5e-6);
  if (c.mask_type == dtype::i32) {
    const auto mask = values_of<std::int32_t>(ref, c.mask, dtype::i32);
    EXPECT_EQ(got.frame_mask, mask);
  } else {
    const auto mask = values_of<std::int64_t>(ref, c.mask, dtype::i64);
    EXPECT_EQ(got.frame_mask, std::vector<std::int32_t>(mask.begin(), mask.end()));
  }
}

TEST(audio_features, match_the_processor_outputs) {
  const std::vector<reference_case> cases = {
      {"clef-omni-tiny/media_tensors/audio_16k.safetensors", "decoded.audio.0", "processor.input_features",
       "processor.feature_attention_mask", dtype::i32, 250},
      {"clef-omni-tiny/media_tensors/video_with_sound.safetensors", "decoded.video_audio.0",
       "processor.input_features", "processor.feature_attention_mask", dtype::i32, 204},
      {"qwen3-omni-thinker-tiny/tiny_ref_audio.safetensors", "in.waveform", "in.input_features",
       "in.feature_attention_mask", dtype::i64, 250},
      {"qwen3-omni-thinker-tiny/tiny_ref_image_audio.safetensors", "in.waveform", "in.input_features",
       "in.feature_attention_mask", dtype::i64, 250},
      {"qwen3-omni-thinker-tiny/tiny_ref_video_audio.safetensors", "in.waveform", "in.input_features",
       "in.feature_attention_mask", dtype::i64, 250},
  };
  for (const auto& c : cases) check(c);
}

TEST(audio_features, filter_bank_matches_transformers_bit_for_bit) {
  const safetensors_file ref(vectors_dir() / "qwen3-omni-thinker-tiny/tiny_ref_audio.safetensors");
  EXPECT_EQ(mel_filter_bank(), values_of<float>(ref, "aux.mel_filters", dtype::f32));
}

// Several audios in one processor call are zero-padded to the longest: the values are those of the
// padded waveform, and the mask marks ceil(samples / 160) frames.
TEST(audio_features, padding_to_the_longest_audio) {
  const safetensors_file ref(vectors_dir() / "clef-omni-tiny/media_tensors/video_with_sound.safetensors");
  const auto wave = values_of<float>(ref, "decoded.video_audio.0", dtype::f32);
  ASSERT_EQ(wave.size(), 32768u);

  const log_mel same = log_mel_features(wave, wave.size());
  const log_mel plain = log_mel_features(wave);
  EXPECT_EQ(same.values, plain.values);
  EXPECT_EQ(same.frame_mask, plain.frame_mask);

  const log_mel padded = log_mel_features(wave, 40000);
  ASSERT_EQ(padded.frames, 250);
  std::vector<float> extended = wave;
  extended.resize(40000, 0.0f);
  EXPECT_EQ(padded.values, log_mel_features(extended).values);
  std::vector<std::int32_t> mask(250, 0);
  std::fill_n(mask.begin(), 205, 1);  // 204.8 steps of 160 samples: one more than the unpadded 204
  EXPECT_EQ(padded.frame_mask, mask);
}

// --- Several streams in one record: the processor's padded batch -------------------------------
// The make_audio_vectors fixture computes what the Qwen3-Omni processor makes of a record's audio
// streams in one WhisperFeatureExtractor call (padding=True: zeros after each shorter stream up to
// the longest, before the spectrogram) with numpy, as the extractor's numpy path does.

const std::filesystem::path audio_vectors = BATON_AUDIO_VECTORS;

// The numpy path is float64 up to the log, baton float32 as the processor's torch path: the
// processor's two paths are up to 5.5e-5 apart on the clef-omni-tiny soundtrack (1e-5 on its clip),
// so the bound here is wider than the 5e-6 against the torch path's own outputs above. A stream
// computed alone is 2e-2 off in its last frame, and has one valid frame fewer.
constexpr double batch_tolerance = 1e-4;

struct batch_reference {
  std::vector<float> mel;  // [mel_bins, frames]
  std::vector<std::int32_t> mask;
};

batch_reference batch_stream(const std::string& which, std::size_t i) {
  const std::string stem = "batch_" + which + "." + std::to_string(i);
  batch_reference r{test::raw_values<float>(audio_vectors / (stem + ".mel")),
                    test::raw_values<std::int32_t>(audio_vectors / (stem + ".mask"))};
  EXPECT_FALSE(r.mask.empty()) << stem << ": no reference (the make_audio_vectors fixture writes it)";
  EXPECT_EQ(r.mel.size(), r.mask.size() * mel_bins) << stem;
  return r;
}

std::int64_t marked(const std::vector<std::int32_t>& mask) { return std::count(mask.begin(), mask.end(), 1); }

// The largest difference over the frames both mark (a [mel_bins, frames] layout each).
double valid_frames_difference(const log_mel& got, const batch_reference& want) {
  const std::int64_t frames = std::min(got.marked_frames(), marked(want.mask));
  const auto want_frames = static_cast<std::int64_t>(want.mask.size());
  double worst = 0;
  for (std::int64_t b = 0; b < mel_bins; ++b) {
    for (std::int64_t t = 0; t < frames; ++t) {
      worst = std::max(worst, std::abs(static_cast<double>(got.values[b * got.frames + t]) - want.mel[b * want_frames + t]));
    }
  }
  return worst;
}

// Each of `got` is the padded batch's stream, all its frames; `samples` are the streams, for what
// each computed alone (the old behaviour) would have been.
void expect_padded_batch(const std::string& which, const std::vector<log_mel>& got,
                         const std::vector<std::span<const float>>& samples) {
  ASSERT_EQ(got.size(), samples.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(which + " stream " + std::to_string(i));
    const batch_reference want = batch_stream(which, i);
    EXPECT_EQ(got[i].frames, static_cast<std::int64_t>(want.mask.size()));
    EXPECT_EQ(got[i].frame_mask, want.mask);
    // The frames the model reads, then (when the shapes agree) the padding frames too.
    EXPECT_EQ(got[i].marked_frames(), marked(want.mask));
    const double valid = valid_frames_difference(got[i], want);
    EXPECT_LT(valid, batch_tolerance);
    const double diff = got[i].values.size() == want.mel.size() ? max_abs_difference(got[i].values, want.mel) : valid;
    EXPECT_LT(diff, batch_tolerance);
    const log_mel alone = log_mel_features(samples[i]);
    std::printf("%s stream %zu (%zu samples): %lld valid frames of %lld, max |difference| %.3g; computed "
                "alone %lld valid frames, max |difference| %.3g over them\n",
                which.c_str(), i, samples[i].size(), static_cast<long long>(marked(want.mask)),
                static_cast<long long>(want.mask.size()), diff, static_cast<long long>(alone.marked_frames()),
                valid_frames_difference(alone, want));
  }
}

// Three raw streams (2.26 s, 2.048 s, 1.001 s) through prepare_media, as one record's audio items.
TEST(audio_features, a_records_streams_are_computed_as_the_processors_padded_batch) {
  request r;
  std::vector<std::vector<float>> waves;
  for (std::size_t i = 0; i < 3; ++i) {
    waves.push_back(test::raw_values<float>(audio_vectors / ("batch_synthetic." + std::to_string(i) + ".f32")));
    raw_media m;
    m.audio = waves.back();
    r.audio.push_back(raw_item(std::move(m)));
  }
  ASSERT_EQ(waves[0].size(), 36123u);
  ASSERT_EQ(waves[2].size(), 16020u);
  auto prepared = prepare_media(r, media_settings{});
  ASSERT_TRUE(prepared) << prepared.error().message;
  expect_padded_batch("synthetic", prepared->audio, {waves[0], waves[1], waves[2]});

  // Computed alone (the old behaviour), the 16020-sample stream's last frame reaches 20 reflected
  // samples where the batch has zeros, and its 101st frame (ceil(16020 / 160)) is missing.
  const batch_reference want = batch_stream("synthetic", 2);
  ASSERT_EQ(marked(want.mask), 101);
  const log_mel alone = log_mel_features(waves[2]);
  EXPECT_EQ(alone.marked_frames(), 100);
  EXPECT_GT(valid_frames_difference(alone, want), 100 * batch_tolerance);
}

// The case: the clef-omni-tiny clip (2.5 s) and the 2 s video's soundtrack (2.048 s) in one
// request, from their files: the soundtrack is padded to the clip, so it has 205 valid frames (the
// last seeing the zeros) where alone it had 204.
TEST(audio_features, a_clip_and_a_videos_soundtrack_are_one_padded_batch) {
  media_settings settings;
  const auto media = test::data_dir() / "vectors" / "clef-omni-tiny" / "media";
  settings.sources.roots = {media};
  auto path_item = [](const char* name) {
    media_item item;
    item.source = media_source::path;
    item.data = name;
    return item;
  };
  request r;
  r.audio.push_back(path_item("tone_16k_mono_2p5s.wav"));
  r.videos.push_back(path_item("clip_sound_2s.mp4"));
  auto prepared = prepare_media(r, settings);
  ASSERT_TRUE(prepared) << prepared.error().message;
  ASSERT_TRUE(prepared->audio_in_video);
  ASSERT_EQ(prepared->audio.size(), 2u);

  const safetensors_file clip(vectors_dir() / "clef-omni-tiny/media_tensors/audio_16k.safetensors");
  const safetensors_file video(vectors_dir() / "clef-omni-tiny/media_tensors/video_with_sound.safetensors");
  const auto clip_wave = values_of<float>(clip, "decoded.audio.0", dtype::f32);
  const auto soundtrack = values_of<float>(video, "decoded.video_audio.0", dtype::f32);
  expect_padded_batch("clip_and_soundtrack", prepared->audio, {clip_wave, soundtrack});
  EXPECT_EQ(prepared->audio[1].marked_frames(), 205);
  EXPECT_EQ(log_mel_features(soundtrack).marked_frames(), 204);
}

}  // namespace
}  // namespace baton::clef
