// decode_audio and decode_video's soundtrack against the Clef reference's PyAV decode
// (AudioResampler(format="flt", layout="mono", rate=16000)) of the clips the make_audio_vectors
// fixture writes: 8 to 48 kHz, mono and stereo (and one 5.1), MP3, AAC and WAV, sample for sample.
// Before baton used swresample's defaults, stereo (mixed to the channels' mean) was 0.15-0.18 off.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "engine/media/decode.hpp"
#include "support/files.hpp"

namespace baton::media {
namespace {

const std::filesystem::path vectors = BATON_AUDIO_VECTORS;

// Issue 15's bound; with the same swresample code and settings the samples are in fact identical.
constexpr double tolerance = 1e-6;

std::vector<std::byte> bytes_of(const std::filesystem::path& p) {
  const std::string text = test::read_file(p);
  std::vector<std::byte> out(text.size());
  std::memcpy(out.data(), text.data(), text.size());
  return out;
}

// OUTDIR/<name>.f32: raw little-endian float32 (x86-64's own order).
std::vector<float> reference_samples(const std::filesystem::path& clip) {
  const std::string text = test::read_file(clip.string() + ".f32");
  std::vector<float> out(text.size() / sizeof(float));
  std::memcpy(out.data(), text.data(), out.size() * sizeof(float));
  return out;
}

double max_abs_difference(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0;
  for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
  }
  return worst;
}

void expect_reference(const std::vector<float>& got, const std::filesystem::path& clip) {
  const std::vector<float> want = reference_samples(clip);
  ASSERT_FALSE(want.empty()) << clip << ": no reference samples (the make_audio_vectors fixture writes them)";
  EXPECT_EQ(got.size(), want.size()) << clip.filename();
  const double diff = max_abs_difference(got, want);
  EXPECT_LE(diff, tolerance) << clip.filename();
  std::cout << clip.filename().string() << ": " << got.size() << " samples (reference " << want.size()
            << "), max |difference| " << diff << "\n";
}

TEST(resample, audio_at_every_rate_mono_and_stereo_matches_pyav) {
  for (const int rate : {8000, 16000, 22050, 44100, 48000}) {
    for (const char* layout : {"mono", "stereo"}) {
      for (const char* ext : {"mp3", "m4a", "wav"}) {
        const auto clip = vectors / ("tone_" + std::to_string(rate) + "_" + layout + "." + ext);
        const auto got = decode_audio(bytes_of(clip));
        ASSERT_TRUE(got) << clip << ": " << got.error().message;
        expect_reference(*got, clip);
      }
    }
  }
}

// PyAV hands 16 kHz mono float back untouched; 5.1 goes through the default matrix's centre and
// surround levels (the channels' mean was 1.26 off).
TEST(resample, passthrough_and_5_1_match_pyav) {
  for (const char* name : {"passthrough_16000_mono.wav", "tone_48000_5.1.m4a"}) {
    const auto clip = vectors / name;
    const auto got = decode_audio(bytes_of(clip));
    ASSERT_TRUE(got) << clip << ": " << got.error().message;
    expect_reference(*got, clip);
  }
}

TEST(resample, a_videos_44k_stereo_soundtrack_matches_pyav) {
  const auto clip = vectors / "video_44100_stereo.mp4";
  const auto got = decode_video(bytes_of(clip));
  ASSERT_TRUE(got) << got.error().message;
  ASSERT_TRUE(got->has_audio);
  expect_reference(got->audio, clip);
}

}  // namespace
}  // namespace baton::media
