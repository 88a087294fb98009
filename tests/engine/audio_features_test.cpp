// The log-mel features against the processor outputs of transformers v4.57.6 (tests/data/vectors).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

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

}  // namespace
}  // namespace baton::clef
