// engine/media against the Clef reference's decodes of ../shared/vectors/clef-omni-tiny/media, and
// damaged copies of those files (in memory) that must give errors, never a crash or a hang.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>

#include "engine/clef/core/safetensors.hpp"
#include "engine/media/decode.hpp"
#include "support/files.hpp"

namespace baton::media {
namespace {

using clef::dtype;
using clef::safetensors_file;
using clef::tensor_view;

const std::filesystem::path vectors = test::shared_dir() / "vectors/clef-omni-tiny";

std::vector<std::byte> file_bytes(const std::string& name) {
  const std::string text = test::read_file(vectors / "media" / name);
  std::vector<std::byte> out(text.size());
  std::memcpy(out.data(), text.data(), text.size());
  return out;
}

const tensor_view& tensor(const safetensors_file& file, std::string_view name) {
  const tensor_view* v = file.find(name);
  if (v == nullptr) throw std::runtime_error("missing tensor " + std::string(name));
  return *v;
}

std::span<const std::uint8_t> u8(const tensor_view& v) {
  EXPECT_EQ(v.type, dtype::u8);
  return {reinterpret_cast<const std::uint8_t*>(v.data), v.bytes};
}

std::vector<float> f32(const tensor_view& v) {
  EXPECT_EQ(v.type, dtype::f32);
  std::vector<float> out(v.bytes / sizeof(float));
  std::memcpy(out.data(), v.data, v.bytes);
  return out;
}

template <class T>
T get(result<T> r) {
  if (!r) throw std::runtime_error(r.error().message);
  return std::move(*r);
}

double max_abs_difference(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0;
  for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
  }
  return worst;
}

TEST(media_decode, png_matches_the_reference_exactly) {
  const safetensors_file ref(vectors / "media_tensors/image_basic.safetensors");
  const tensor_view& want = tensor(ref, "decoded.image.0");
  const rgb_frames got = get(decode_image(file_bytes("grad_64x96.png")));
  ASSERT_EQ(want.shape, (std::vector<std::int64_t>{got.height, got.width, 3}));
  EXPECT_EQ(got.frames, 1);
  EXPECT_TRUE(std::ranges::equal(got.pixels, u8(want)));
}

TEST(media_decode, wav_matches_the_reference_exactly) {
  const safetensors_file ref(vectors / "media_tensors/audio_16k.safetensors");
  EXPECT_EQ(get(decode_audio(file_bytes("tone_16k_mono_2p5s.wav"))), f32(tensor(ref, "decoded.audio.0")));
}

// The reference's four frames are the source's 0, 5, 10 and 15 (10 fps): the frame on screen at
// 0, 0.5, 1 and 1.5 s. swscale's default conversion (BT.601, limited range, as the stream says
// nothing) matches to the bit; BT.709, accurate_rnd or full_chroma_int differ by up to 18-136 levels.
TEST(media_decode, mp4_matches_the_reference) {
  const safetensors_file ref(vectors / "media_tensors/video_with_sound.safetensors");
  const tensor_view& want = tensor(ref, "decoded.video.0");
  const auto start = std::chrono::steady_clock::now();
  const video got = get(decode_video(file_bytes("clip_sound_2s.mp4")));
  const auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(want.shape, (std::vector<std::int64_t>{got.frames.frames, got.frames.height, got.frames.width, 3}));
  const auto pixels = u8(want);
  ASSERT_EQ(got.frames.pixels.size(), pixels.size());
  int worst[3] = {0, 0, 0};
  for (std::size_t i = 0; i < pixels.size(); ++i) {
    worst[i % 3] = std::max(worst[i % 3], std::abs(int{got.frames.pixels[i]} - int{pixels[i]}));
  }
  EXPECT_EQ(worst[0] + worst[1] + worst[2], 0);
  const auto audio = f32(tensor(ref, "decoded.video_audio.0"));
  ASSERT_TRUE(got.has_audio);
  EXPECT_EQ(got.audio.size(), audio.size());
  const double audio_diff = max_abs_difference(got.audio, audio);
  EXPECT_LE(audio_diff, 0.0);
  std::cout << "clip_sound_2s.mp4: max |difference| R " << worst[0] << " G " << worst[1] << " B " << worst[2]
            << ", soundtrack " << audio_diff << " (" << got.audio.size() << " samples), " << ms << " ms\n";
}

TEST(media_decode, an_audio_file_is_not_a_video) {
  const auto r = decode_video(file_bytes("tone_16k_mono_2p5s.wav"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().status, 422);
  EXPECT_NE(r.error().message.find("not a decodable video: no video stream"), std::string::npos) << r.error().message;
}

using decoder = std::function<result<void>(std::span<const std::byte>, const limits&)>;

struct sample {
  const char* file;
  decoder decode;
};

const sample samples[] = {
    {"grad_64x96.png", [](auto b, const limits& l) -> result<void> {
       if (auto r = decode_image(b, l); !r) return r.error();
       return {};
     }},
    {"tone_16k_mono_2p5s.wav", [](auto b, const limits& l) -> result<void> {
       if (auto r = decode_audio(b, l); !r) return r.error();
       return {};
     }},
    {"clip_sound_2s.mp4", [](auto b, const limits& l) -> result<void> {
       if (auto r = decode_video(b, l); !r) return r.error();
       return {};
     }},
};

void expect_invalid(const sample& s, std::span<const std::byte> bytes, const std::string& what) {
  const auto r = s.decode(bytes, {});
  ASSERT_FALSE(r) << s.file << " " << what << " decoded";
  EXPECT_EQ(r.error().status, 422) << s.file << " " << what << ": " << r.error().message;
  EXPECT_EQ(r.error().code, "INVALID_MEDIA");
  EXPECT_EQ(r.error().message.rfind("not a decodable ", 0), 0u) << r.error().message;
}

TEST(media_decode, empty_and_text_inputs_are_refused) {
  const std::string text = "just some text, not media at all\n";
  for (const sample& s : samples) {
    expect_invalid(s, {}, "empty");
    expect_invalid(s, std::as_bytes(std::span(text)), "text");
  }
}

TEST(media_decode, truncated_copies_are_refused) {
  for (const sample& s : samples) {
    const auto bytes = file_bytes(s.file);
    for (const double keep : {0.001, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99}) {
      const auto n = static_cast<std::size_t>(static_cast<double>(bytes.size()) * keep);
      expect_invalid(s, std::span(bytes).first(n), "cut to " + std::to_string(n) + " bytes");
    }
  }
}

// A flipped bit in a PCM sample is still a valid WAV, and some flips in compressed payloads leave
// a stream decodable: those must decode or fail as values. Flips in the headers must fail.
TEST(media_decode, bit_flipped_copies_fail_as_values) {
  for (const sample& s : samples) {
    const auto original = file_bytes(s.file);
    int refused = 0, tries = 0;
    for (std::size_t at = 3; at < original.size(); at += original.size() / 41 + 1, ++tries) {
      auto bytes = original;
      bytes[at] ^= std::byte{0x10};
      if (const auto r = s.decode(bytes, {}); !r) {
        ++refused;
        EXPECT_TRUE(r.error().status == 422 || r.error().status == 413) << s.file << ": " << r.error().message;
      }
    }
    auto bytes = original;
    bytes[1] ^= std::byte{0x01};  // in every magic number
    expect_invalid(s, bytes, "with its magic number damaged");
    std::cout << s.file << ": " << refused << " of " << tries << " bit flips refused\n";
  }
}

TEST(media_decode, limits_give_413_naming_the_limit) {
  const auto png = file_bytes("grad_64x96.png");
  auto r = decode_image(png, {.max_bytes = 100});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().status, 413);
  EXPECT_EQ(r.error().message, "image is " + std::to_string(png.size()) + " bytes, more than 100");
  r = decode_image(png, {.max_pixels = 64 * 95});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().status, 413);
  EXPECT_EQ(r.error().message, "image is 96x64, more than 6080 pixels");
  const auto wav = decode_audio(file_bytes("tone_16k_mono_2p5s.wav"), {.max_seconds = 2});
  ASSERT_FALSE(wav);
  EXPECT_EQ(wav.error().status, 413);
  EXPECT_NE(wav.error().message.find("audio is longer than 2"), std::string::npos) << wav.error().message;
  const auto mp4 = decode_video(file_bytes("clip_sound_2s.mp4"), {.time_budget = std::chrono::milliseconds(0)});
  ASSERT_FALSE(mp4);
  EXPECT_EQ(mp4.error().status, 504);
  EXPECT_EQ(mp4.error().code, "MEDIA_TIMEOUT");
}

}  // namespace
}  // namespace baton::media
