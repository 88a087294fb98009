// engine/media against the Clef reference's decodes of tests/data/vectors/clef-omni-tiny/media, and
// damaged copies of those files (in memory) that must give errors, never a crash or a hang.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <numbers>
#include <span>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/crc.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>
}

#include "engine/clef/model/safetensors.hpp"
#include "engine/media/decode.hpp"
#include "support/av_encode.hpp"
#include "support/files.hpp"

namespace baton::media {
namespace {

using clef::dtype;
using clef::safetensors_file;
using clef::tensor_view;

const std::filesystem::path vectors = test::data_dir() / "vectors/clef-omni-tiny";

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

using test::encode;
using test::track;

constexpr int image_width = 48, image_height = 32;

// A red-green gradient with a flat `blue`, RGB24; `inverted` for a GIF's second frame. At most
// 16 levels a pixel, what 4:2:0 chroma and lossy codecs keep at any size.
std::vector<std::uint8_t> gradient(int width, int height, int blue = 128, bool inverted = false) {
  const double red_step = std::min(255.0 / std::max(width - 1, 1), 16.0);
  const double green_step = std::min(255.0 / std::max(height - 1, 1), 16.0);
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(width * height * 3));
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      std::uint8_t* p = &rgb[static_cast<std::size_t>((y * width + x) * 3)];
      p[0] = static_cast<std::uint8_t>(x * red_step);
      p[1] = static_cast<std::uint8_t>(y * green_step);
      p[2] = static_cast<std::uint8_t>(blue);
      if (inverted) std::transform(p, p + 3, p, [](std::uint8_t v) { return static_cast<std::uint8_t>(255 - v); });
    }
  }
  return rgb;
}

// Frame `pts` for encoder c: `rgb` (RGB24 at c's size) in c's pixel format. swscale reads past
// the end of a row (whole SIMD blocks) and, unless asked for full chroma input, averages the pixel
// beyond an odd width into the last chroma sample: it gets a padded copy and SWS_FULL_CHR_H_INP.
void fill_picture(const AVCodecContext* c, AVFrame* f, const std::vector<std::uint8_t>& rgb, std::int64_t pts) {
  test::alloc_video_frame(c, f, pts);
  AVFrame* source = av_frame_alloc();
  source->width = c->width;
  source->height = c->height;
  source->format = AV_PIX_FMT_RGB24;
  av_frame_get_buffer(source, 0);
  for (int y = 0; y < c->height; ++y) {
    std::memcpy(source->data[0] + y * source->linesize[0], &rgb[static_cast<std::size_t>(y * c->width * 3)],
                static_cast<std::size_t>(c->width * 3));
  }
  SwsContext* sws = sws_getContext(c->width, c->height, AV_PIX_FMT_RGB24, c->width, c->height, c->pix_fmt,
                                   SWS_BICUBIC | SWS_FULL_CHR_H_INP, nullptr, nullptr, nullptr);
  sws_scale(sws, source->data, source->linesize, 0, c->height, f->data, f->linesize);
  sws_freeContext(sws);
  av_frame_free(&source);
}

std::vector<std::byte> encode_image(const char* encoder, const char* muxer, AVPixelFormat format, int frames,
                                    int width = image_width, int height = image_height) {
  const auto setup = [=](AVCodecContext* c) {
    c->width = width;
    c->height = height;
    c->pix_fmt = format;
    c->time_base = {1, 10};
    c->color_range = format == AV_PIX_FMT_YUVJ420P ? AVCOL_RANGE_JPEG : AVCOL_RANGE_UNSPECIFIED;
  };
  const auto fill = [=](AVCodecContext* c, AVFrame* f, int i) {
    if (i == frames) return false;
    fill_picture(c, f, gradient(width, height, 128, i > 0), i);
    return true;
  };
  return encode(muxer, {{encoder, setup, fill}});
}

double mean_abs_difference(std::span<const std::uint8_t> got, std::span<const std::uint8_t> want) {
  double sum = 0;
  for (std::size_t i = 0; i < want.size(); ++i) sum += std::abs(int{got[i]} - int{want[i]});
  return sum / static_cast<double>(want.size());
}

// The largest mean |difference| of any one row or column: a few columns left unconverted stand
// out here while they barely move the mean of the whole picture.
double worst_line_difference(std::span<const std::uint8_t> got, std::span<const std::uint8_t> want, int width,
                             int height) {
  std::vector<double> rows(static_cast<std::size_t>(height)), columns(static_cast<std::size_t>(width));
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int ch = 0; ch < 3; ++ch) {
        const auto i = static_cast<std::size_t>((y * width + x) * 3 + ch);
        const int d = std::abs(int{got[i]} - int{want[i]});
        rows[static_cast<std::size_t>(y)] += d / (3.0 * width);
        columns[static_cast<std::size_t>(x)] += d / (3.0 * height);
      }
    }
  }
  return std::max(std::ranges::max(rows), std::ranges::max(columns));
}

struct image_format {
  const char* encoder;
  const char* muxer;
  AVPixelFormat pixels;
  int frames;
  double tolerance;  // mean |difference| in levels: lossy, or GIF's 3-3-2 bit rgb8 palette
};

const image_format image_formats[] = {{"png", "image2pipe", AV_PIX_FMT_RGB24, 1, 0},
                                      {"mjpeg", "image2pipe", AV_PIX_FMT_YUVJ420P, 1, 5},
                                      {"libwebp", "webp", AV_PIX_FMT_YUV420P, 1, 6},
                                      {"gif", "gif", AV_PIX_FMT_RGB8, 2, 32}};

TEST(media_decode, jpeg_webp_gif_and_png_made_by_ffmpeg) {
  for (const image_format& f : image_formats) {
    const auto got = get(decode_image(encode_image(f.encoder, f.muxer, f.pixels, f.frames)));
    ASSERT_EQ(got.height, image_height) << f.encoder;
    ASSERT_EQ(got.width, image_width) << f.encoder;
    const double diff = mean_abs_difference(got.pixels, gradient(image_width, image_height));
    EXPECT_LE(diff, f.tolerance) << f.encoder;
    if (f.frames > 1) {
      EXPECT_LT(diff * 3, mean_abs_difference(got.pixels, gradient(image_width, image_height, 128, true)))
          << "not the first frame";
    }
  }
}

// Sample i of channel ch in a frame of any packed or planar format the sources use.
void put_sample(AVFrame* f, int i, int ch, float v) {
  const auto format = static_cast<AVSampleFormat>(f->format);
  const bool planar = av_sample_fmt_is_planar(format) != 0;
  std::uint8_t* data = f->data[planar ? ch : 0];
  const int at = planar ? i : i * f->ch_layout.nb_channels + ch;
  switch (av_get_packed_sample_fmt(format)) {
    case AV_SAMPLE_FMT_U8: data[at] = static_cast<std::uint8_t>(std::lround(128 + v * 127)); break;
    case AV_SAMPLE_FMT_S16: reinterpret_cast<std::int16_t*>(data)[at] = static_cast<std::int16_t>(std::lround(v * 32767)); break;
    case AV_SAMPLE_FMT_S32: reinterpret_cast<std::int32_t*>(data)[at] = static_cast<std::int32_t>(std::lround(v * 2147483647.0)); break;
    case AV_SAMPLE_FMT_FLT: reinterpret_cast<float*>(data)[at] = v; break;
    default: throw std::runtime_error("sample format");
  }
}

// `seconds` of a `frequency` Hz sine at `rate`, one channel per gain (its amplitude).
track sine_track(const char* encoder, AVSampleFormat format, int rate, double seconds, double frequency,
                 std::vector<float> gains) {
  const auto total = static_cast<int>(std::lround(seconds * rate));
  const auto setup = [=](AVCodecContext* c) {
    c->sample_rate = rate;
    c->sample_fmt = format;
    av_channel_layout_default(&c->ch_layout, static_cast<int>(gains.size()));
    c->time_base = {1, rate};
    c->bit_rate = 128000;
  };
  const auto fill = [=](AVCodecContext* c, AVFrame* f, int index) {
    const int size = c->frame_size > 0 ? c->frame_size : 1024;
    const int start = index * size;
    if (start >= total) return false;
    f->nb_samples = std::min(size, total - start);  // a short last frame: the encoder pads or trims
    f->format = c->sample_fmt;
    f->sample_rate = rate;
    av_channel_layout_copy(&f->ch_layout, &c->ch_layout);
    f->pts = start;
    av_frame_get_buffer(f, 0);
    for (int i = 0; i < f->nb_samples; ++i) {
      const double v = std::sin(2 * std::numbers::pi * frequency * (start + i) / rate);
      for (std::size_t ch = 0; ch < gains.size(); ++ch) put_sample(f, i, static_cast<int>(ch), gains[ch] * static_cast<float>(v));
    }
    return true;
  };
  return {encoder, setup, fill};
}

// A tone's frequency from the rising zero crossings of audio[from, to) (16 kHz), interpolated.
double tone_frequency(const std::vector<float>& audio, std::size_t from, std::size_t to) {
  double first = -1, last = -1;
  int periods = 0;
  for (std::size_t i = from + 1; i < to; ++i) {
    if (audio[i - 1] < 0 && audio[i] >= 0) {
      last = static_cast<double>(i - 1) + audio[i - 1] / (audio[i - 1] - audio[i]);
      if (first < 0) {
        first = last;
      } else {
        ++periods;
      }
    }
  }
  return periods > 0 ? periods * audio_sample_rate / (last - first) : 0;
}

double rms(const std::vector<float>& audio, std::size_t from, std::size_t to) {
  double energy = 0;
  for (std::size_t i = from; i < to; ++i) energy += double{audio[i]} * audio[i];
  return std::sqrt(energy / static_cast<double>(to - from));
}

// A decoded sine_track: `seconds` at 16 kHz give or take `slack` samples (codecs' priming and
// padding to whole frames), its frequency, and the RMS of `amplitude` away from the edges.
void expect_tone(const std::vector<float>& got, double seconds, double frequency, double amplitude, double slack,
                 const std::string& what) {
  const double want = seconds * audio_sample_rate;
  EXPECT_NEAR(static_cast<double>(got.size()), want, slack) << what;
  const std::size_t from = audio_sample_rate / 4;
  const std::size_t to = std::min(got.size(), static_cast<std::size_t>(want)) - audio_sample_rate / 4;
  ASSERT_LT(from, to) << what;
  EXPECT_NEAR(tone_frequency(got, from, to), frequency, 0.5) << what;
  EXPECT_NEAR(rms(got, from, to), amplitude / std::numbers::sqrt2, 0.02) << what;
}

struct audio_format {
  const char* encoder;
  const char* muxer;
  AVSampleFormat samples;
  int rate;
  double frequency;
  double slack;  // samples at 16 kHz
};

// Stereo at 44.1 or 48 kHz, in every codec decode_audio accepts.
const audio_format audio_formats[] = {
    {"pcm_s16le", "wav", AV_SAMPLE_FMT_S16, 44100, 440, 1},
    {"pcm_s24le", "wav", AV_SAMPLE_FMT_S32, 48000, 1000, 1},
    {"pcm_s32le", "wav", AV_SAMPLE_FMT_S32, 44100, 3000, 1},
    {"pcm_f32le", "wav", AV_SAMPLE_FMT_FLT, 48000, 5000, 1},
    {"pcm_u8", "wav", AV_SAMPLE_FMT_U8, 44100, 440, 1},
    {"flac", "flac", AV_SAMPLE_FMT_S16, 44100, 1000, 1},
    {"libmp3lame", "mp3", AV_SAMPLE_FMT_FLTP, 44100, 3000, 100},
    {"libopus", "ogg", AV_SAMPLE_FMT_FLT, 48000, 440, 100},
    {"libvorbis", "ogg", AV_SAMPLE_FMT_FLTP, 44100, 1000, 100},
    // AAC pads its last frame of 1024 samples, and ADTS cannot say to skip the first (priming).
    {"aac", "adts", AV_SAMPLE_FMT_FLTP, 48000, 3000, 800},
    {"aac", "ipod", AV_SAMPLE_FMT_FLTP, 44100, 5000, 400},
};

std::string name(const audio_format& f) { return std::string(f.encoder) + " in " + f.muxer; }

TEST(media_decode, audio_of_every_codec_becomes_16k_mono_keeping_its_length_and_tone) {
  for (const audio_format& f : audio_formats) {
    // Two equal channels of 0.5 * sqrt(1/2) mix to sqrt(1/2) * (L + R) = 0.5.
    const float gain = 0.5f / std::numbers::sqrt2_v<float>;
    const auto bytes = encode(f.muxer, {sine_track(f.encoder, f.samples, f.rate, 1, f.frequency, {gain, gain})});
    expect_tone(get(decode_audio(bytes)), 1, f.frequency, 0.5, f.slack, name(f));
  }
  // Mixed as the Clef reference's PyAV mixes (swresample's default, sqrt(1/2) * (L + R)), not to the
  // mean of the channels (librosa's to_mono, 0.25 here); resample_test checks it sample for sample.
  const auto left = encode("wav", {sine_track("pcm_s16le", AV_SAMPLE_FMT_S16, 48000, 1, 440, {0.5f, 0})});
  expect_tone(get(decode_audio(left)), 1, 440, 0.5 / std::numbers::sqrt2, 1, "left channel only");
}

// `seconds` of MPEG-4 video in MP4 at `fps`, frame i a flat grey of luma base + i * step.
std::vector<std::byte> encode_greys(int fps, int seconds, int step, int width = image_width,
                                    int height = image_height, int base = 16) {
  const auto setup = [&](AVCodecContext* c) {
    c->width = width;
    c->height = height;
    c->pix_fmt = AV_PIX_FMT_YUV420P;
    c->time_base = {1, fps};
    c->gop_size = 1;  // intra only: every grey exact to the quantiser
  };
  const auto fill = [&](AVCodecContext* c, AVFrame* f, int i) {
    if (i == fps * seconds) return false;
    test::alloc_video_frame(c, f, i);
    for (int plane = 0; plane < 3; ++plane) {
      const int rows = plane == 0 ? c->height : c->height / 2;
      std::memset(f->data[plane], plane == 0 ? base + i * step : 128, static_cast<std::size_t>(f->linesize[plane] * rows));
    }
    return true;
  };
  return encode("mp4", {{"mpeg4", setup, fill}});
}

// Which source frames were sampled, from the grey of each (BT.601 limited range to full).
std::vector<int> grey_indices(const rgb_frames& got, int step) {
  std::vector<int> out;
  const std::size_t frame = static_cast<std::size_t>(got.height * got.width * 3);
  for (std::int64_t t = 0; t < got.frames; ++t) {
    const double luma = got.pixels[static_cast<std::size_t>(t) * frame + frame / 2] * 219.0 / 255.0;
    out.push_back(static_cast<int>(std::lround(luma / step)));
  }
  return out;
}

// The source frames the Clef reference keeps of `frames` at `fps`: frame i (at i / fps s) when
// i / fps >= n / 2, n the frames kept before it (in integers: 2i >= n * fps).
std::vector<int> reference_samples(int fps, int frames) {
  std::vector<int> kept;
  for (int i = 0; i < frames; ++i) {
    if (2 * i >= static_cast<int>(kept.size()) * fps) kept.push_back(i);
  }
  return kept;
}

TEST(media_decode, video_is_sampled_as_the_reference_samples_it) {
  const auto fast = get(decode_video(encode_greys(25, 3, 2)));
  EXPECT_FALSE(fast.has_audio);
  // The first frame at or after each k / 2 s: 0.52 s for 0.5 s, 1.52 s for 1.5 s.
  EXPECT_EQ(grey_indices(fast.frames, 2), (std::vector<int>{0, 13, 25, 38, 50, 63}));
  EXPECT_EQ(grey_indices(fast.frames, 2), reference_samples(25, 75));
  // Under 2 fps no frame is kept twice: 1 fps stays 1 fps.
  const auto slow = get(decode_video(encode_greys(1, 3, 40)));
  EXPECT_EQ(grey_indices(slow.frames, 40), (std::vector<int>{0, 1, 2}));
}

// Frames above 256 x 32 x 32 pixels are scaled down to that budget, to even sides, as the Clef
// reference asks PyAV for them: 1280 x 720 becomes 682 x 384, still a flat grey. (swscale's
// scaling path lands 2 levels below its unscaled YUV to RGB path on this grey.)
TEST(media_decode, large_video_frames_are_scaled_to_the_references_budget) {
  // Two frames of luma 126 at 2 fps.
  const auto grey_video = [](int width, int height) { return get(decode_video(encode_greys(2, 1, 0, width, height, 126))); };
  const auto small = grey_video(640, 360);  // 230,400 pixels: kept as it is
  EXPECT_EQ(small.frames.width, 640);
  EXPECT_EQ(small.frames.height, 360);
  const auto large = grey_video(1280, 720);
  EXPECT_EQ(large.frames.frames, 2);
  EXPECT_EQ(large.frames.width, 682);
  EXPECT_EQ(large.frames.height, 384);
  EXPECT_LE(large.frames.width * large.frames.height, video_max_frame_pixels);
  const int grey = small.frames.pixels[small.frames.pixels.size() / 2];
  EXPECT_NEAR(grey, (126 - 16) * 255.0 / 219.0, 1.0);
  for (const std::size_t at : {std::size_t{0}, large.frames.pixels.size() / 2, large.frames.pixels.size() - 1}) {
    EXPECT_NEAR(large.frames.pixels[at], grey, 3) << at;
  }
}

// Frame i of a test video is gradient() with blue 16 * i (mod 256): its blue says which it is.
constexpr int blue_step = 16;

track picture_track(const char* encoder, const char* options, AVPixelFormat format, int width, int height, int fps,
                    int frames) {
  const auto setup = [=](AVCodecContext* c) {
    c->width = width;
    c->height = height;
    c->pix_fmt = format;
    c->time_base = {1, fps};
    c->framerate = {fps, 1};
    if (av_set_options_string(c->priv_data, options, "=", ":") < 0) {
      throw std::runtime_error(std::string("bad options for ") + encoder + ": " + options);
    }
  };
  const auto fill = [=](AVCodecContext* c, AVFrame* f, int i) {
    if (i == frames) return false;
    fill_picture(c, f, gradient(width, height, i * blue_step % 256), i);
    return true;
  };
  return {encoder, setup, fill};
}

// A decoded picture_track of `frames` at `fps`: the frames the reference keeps, each within
// `tolerance` mean levels of its source, no row or column far off.
void expect_pictures(const rgb_frames& got, int width, int height, int fps, int frames, double tolerance,
                     const std::string& what) {
  ASSERT_EQ(got.width, width) << what;
  ASSERT_EQ(got.height, height) << what;
  const std::vector<int> sources = reference_samples(fps, frames);
  const auto samples = static_cast<int>(sources.size());
  ASSERT_EQ(got.frames, samples) << what;
  const auto size = static_cast<std::size_t>(width * height * 3);
  for (int k = 0; k < samples; ++k) {
    const int source = sources[static_cast<std::size_t>(k)];
    const auto frame = std::span(got.pixels).subspan(static_cast<std::size_t>(k) * size, size);
    double blue = 0;
    for (std::size_t i = 2; i < size; i += 3) blue += frame[i];
    EXPECT_EQ(std::lround(blue / (width * height) / blue_step), source % (256 / blue_step)) << what << " frame " << k;
    const auto want = gradient(width, height, source * blue_step % 256);
    EXPECT_LE(mean_abs_difference(frame, want), tolerance) << what << " frame " << k;
    EXPECT_LE(worst_line_difference(frame, want, width, height), 3 * tolerance) << what << " frame " << k;
  }
}

struct container {
  const char* name;
  const char* muxer;
  const char* video_encoder;
  const char* video_options;  // speed: these clips are tiny
  double tolerance;           // mean |difference| in levels
  const char* audio_encoder;
  AVSampleFormat audio_samples;
  int audio_rate;
};

const container containers[] = {
    {"MP4 H.264", "mp4", "libx264", "preset=veryfast", 3, "aac", AV_SAMPLE_FMT_FLTP, 44100},
    {"WebM VP9", "webm", "libvpx-vp9", "deadline=realtime:cpu-used=8", 3, "libopus", AV_SAMPLE_FMT_FLT, 48000},
    {"MOV MPEG-4", "mov", "mpeg4", "", 3, "aac", AV_SAMPLE_FMT_FLTP, 48000},
};

// 3 s at 5 fps (samples 0, 2, 5, 7, 10, 12: the 2 fps times fall between frames), a 440 Hz
// soundtrack when `sound`.
constexpr int clip_width = 64, clip_height = 48, clip_fps = 5, clip_frames = 15;

std::vector<std::byte> encode_clip(const container& c, bool sound) {
  std::vector<track> tracks{picture_track(c.video_encoder, c.video_options, AV_PIX_FMT_YUV420P, clip_width,
                                          clip_height, clip_fps, clip_frames)};
  if (sound) tracks.push_back(sine_track(c.audio_encoder, c.audio_samples, c.audio_rate, 3, 440, {0.5f, 0.5f}));
  return encode(c.muxer, tracks);
}

TEST(media_decode, mp4_webm_and_mov_with_and_without_a_soundtrack) {
  for (const container& c : containers) {
    for (const bool sound : {false, true}) {
      const std::string what = std::string(c.name) + (sound ? " with sound" : " silent");
      const video got = get(decode_video(encode_clip(c, sound)));
      expect_pictures(got.frames, clip_width, clip_height, clip_fps, clip_frames, c.tolerance, what);
      EXPECT_EQ(got.has_audio, sound) << what;
      if (sound) {
        expect_tone(got.audio, 3, 440, 0.5 * std::numbers::sqrt2, 400, what);  // stereo: sqrt(1/2) * (L + R)
      } else {
        EXPECT_TRUE(got.audio.empty()) << what;
      }
    }
  }
}

using decoder = std::function<result<void>(std::span<const std::byte>, const limits&)>;

const decoder image_decoder = [](auto b, const limits& l) -> result<void> {
  if (auto r = decode_image(b, l); !r) return r.error();
  return {};
};
const decoder audio_decoder = [](auto b, const limits& l) -> result<void> {
  if (auto r = decode_audio(b, l); !r) return r.error();
  return {};
};
const decoder video_decoder = [](auto b, const limits& l) -> result<void> {
  if (auto r = decode_video(b, l); !r) return r.error();
  return {};
};

struct sample {
  const char* file;
  decoder decode;
};

const sample samples[] = {
    {"grad_64x96.png", image_decoder},
    {"tone_16k_mono_2p5s.wav", audio_decoder},
    {"clip_sound_2s.mp4", video_decoder},
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
  EXPECT_EQ(wav.error().message, "audio is longer than 2 s");
  const auto many = decode_video(file_bytes("clip_sound_2s.mp4"), {.max_video_pixels = 3 * 352 * 384});
  ASSERT_FALSE(many);
  EXPECT_EQ(many.error().status, 413);
  EXPECT_EQ(many.error().message, "video has more than 405504 pixels in its 4 sampled frames");
  const auto mp4 = decode_video(file_bytes("clip_sound_2s.mp4"), {.time_budget = std::chrono::milliseconds(0)});
  ASSERT_FALSE(mp4);
  EXPECT_EQ(mp4.error().status, 504);
  EXPECT_EQ(mp4.error().code, "MEDIA_TIMEOUT");
}

// Each picture format over max_pixels is 413 naming its size, whether its container states the
// size (GIF) or only its decoder finds it, and refuses it unallocated (JPEG, WebP, PNG).
TEST(media_decode, every_image_format_over_the_pixel_limit_is_413_with_its_size) {
  for (const image_format& f : image_formats) {
    SCOPED_TRACE(f.encoder);
    const auto r = decode_image(encode_image(f.encoder, f.muxer, f.pixels, f.frames, 100, 60), {.max_pixels = 5999});
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().status, 413);
    EXPECT_EQ(r.error().message, "image is 100x60, more than 5999 pixels");
  }
}

// A PNG chunk: length, type, data, CRC-32 (the IEEE polynomial, as zlib computes it).
void png_chunk(std::vector<std::byte>& out, const char* type, const std::vector<std::uint8_t>& data) {
  const auto put32 = [&](std::uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<std::byte>(v >> shift & 0xff));
  };
  put32(static_cast<std::uint32_t>(data.size()));
  std::vector<std::uint8_t> typed(type, type + 4);
  typed.insert(typed.end(), data.begin(), data.end());
  for (const std::uint8_t b : typed) out.push_back(static_cast<std::byte>(b));
  put32(~av_crc(av_crc_get_table(AV_CRC_32_IEEE_LE), UINT32_MAX, typed.data(), typed.size()));
}

long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// 74 bytes of PNG can declare 16000 x 16000 RGBA at 16 bits: 2 GB that FFmpeg allocated (and
// touched) while finding the streams, before the size was checked. It is refused from its header.
TEST(media_decode, a_picture_declared_over_the_limit_is_refused_before_it_is_allocated) {
  std::vector<std::byte> png;
  for (const int b : {0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a}) png.push_back(static_cast<std::byte>(b));
  png_chunk(png, "IHDR", {0, 0, 0x3e, 0x80, 0, 0, 0x3e, 0x80, 16, 6, 0, 0, 0});  // 16000 x 16000, 16-bit RGBA
  png_chunk(png, "IDAT", {0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01});
  png_chunk(png, "IEND", {});
  const long before = minor_faults();
  const auto r = decode_image(png, {});
  const long faults = minor_faults() - before;
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().status, 413);
  EXPECT_EQ(r.error().message, "image is 16000x16000, more than 8294400 pixels");
  EXPECT_LT(faults, 25'000) << "pages touched: " << faults;  // 100 MB; the picture is 2 GB
}

// FFmpeg's concat demuxer reads the files its playlist names: a request's bytes must not make baton
// open anything. So are HLS and the other demuxers that open further inputs.
TEST(media_decode, a_playlist_is_not_followed) {
  const std::string playlist = "ffconcat version 1.0\nfile clip_sound_2s.mp4\n";
  const auto r = decode_video(std::as_bytes(std::span(playlist)), {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().status, 422);
  EXPECT_EQ(r.error().message, "not a decodable video: its container (concat) is not read: only plain media files are");
  const std::string hls = "#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1,\nclip_sound_2s.mp4\n#EXT-X-ENDLIST\n";
  const auto h = decode_video(std::as_bytes(std::span(hls)), {});
  ASSERT_FALSE(h);
  EXPECT_EQ(h.error().status, 422);
  EXPECT_NE(h.error().message.find(") is not read: only plain media files are"), std::string::npos) << h.error().message;
}

// Odd widths and heights, 4:2:0 chroma (planes of half the size, rounded up) included, come back
// at their own size, every pixel roughly right. 33x18 and 1000x6: even heights take swscale's SIMD
// path, which skipped the last 33 % 8 columns and wrote past a frame's end.
// Images keep their own size; video frames come back with even sides, as the Clef reference asks
// PyAV for them (round(side / 2) * 2 with Python's rounding, at least 2).
TEST(media_decode, odd_sizes_come_back_at_their_own_or_the_references_size) {
  struct size {
    int width, height;
  };
  for (const image_format& f : image_formats) {
    for (const size s : {size{33, 17}, size{33, 18}, size{1, 1}, size{1000, 5}, size{3, 501}}) {
      const std::string what = std::string(f.encoder) + " " + std::to_string(s.width) + "x" + std::to_string(s.height);
      const auto got = get(decode_image(encode_image(f.encoder, f.muxer, f.pixels, f.frames, s.width, s.height)));
      ASSERT_EQ(got.width, s.width) << what;
      ASSERT_EQ(got.height, s.height) << what;
      const auto want = gradient(s.width, s.height);
      EXPECT_LE(mean_abs_difference(got.pixels, want), f.tolerance) << what;
      EXPECT_LE(worst_line_difference(got.pixels, want, s.width, s.height), 3 * f.tolerance) << what;
    }
  }
  for (const container& c : containers) {
    for (const size s : {size{33, 17}, size{33, 18}, size{1, 1}, size{1000, 6}, size{5, 7}}) {
      const std::string what = std::string(c.name) + " " + std::to_string(s.width) + "x" + std::to_string(s.height);
      // libx264 refuses odd sizes in 4:2:0; H.264 carries them in 4:4:4 (High 4:4:4 Predictive).
      const AVPixelFormat pixels = std::string_view(c.video_encoder) == "libx264" ? AV_PIX_FMT_YUV444P : AV_PIX_FMT_YUV420P;
      const auto bytes =
          encode(c.muxer, {picture_track(c.video_encoder, c.video_options, pixels, s.width, s.height, 2, 4)});
      const auto even = [](int side) {
        const int half = side / 2;  // round(side / 2), halves to even
        return std::max(2, (side % 2 == 0 ? half : half % 2 == 0 ? half : half + 1) * 2);
      };
      const auto got = get(decode_video(bytes)).frames;
      if (even(s.width) == s.width && even(s.height) == s.height) {
        // Tiny pictures are mostly the edges of blocks, where lossy codecs err most.
        expect_pictures(got, s.width, s.height, 2, 4, 2 * c.tolerance, what);
        continue;
      }
      EXPECT_EQ(got.width, even(s.width)) << what;
      EXPECT_EQ(got.height, even(s.height)) << what;
      EXPECT_EQ(got.frames, 4) << what;
      // Scaled, each frame still says which it is by its blue.
      const auto frame = static_cast<std::size_t>(got.width * got.height * 3);
      for (std::int64_t k = 0; k < got.frames; ++k) {
        double blue = 0;
        for (std::size_t i = 2; i < frame; i += 3) blue += got.pixels[static_cast<std::size_t>(k) * frame + i];
        EXPECT_NEAR(blue / (got.width * got.height), static_cast<double>(k * blue_step), 3 * c.tolerance) << what << " frame " << k;
      }
    }
  }
}

// Two minutes of a tone, mono: exact in length, the tone throughout, quick; and 413 naming the
// limit when the limit is a second shorter.
TEST(media_decode, two_minutes_of_flac_and_opus) {
  for (const audio_format& f : {audio_format{"flac", "flac", AV_SAMPLE_FMT_S16, 44100, 440, 1},
                                audio_format{"libopus", "ogg", AV_SAMPLE_FMT_FLT, 48000, 1000, 1}}) {
    track tone = sine_track(f.encoder, f.samples, f.rate, 120, f.frequency, {0.5f});
    // Their fastest setting: at the default, two minutes of Opus take a second to make.
    tone.setup = [setup = tone.setup](AVCodecContext* c) {
      setup(c);
      c->compression_level = 0;
    };
    const auto bytes = encode(f.muxer, {tone});
    const auto start = std::chrono::steady_clock::now();
    const auto got = get(decode_audio(bytes));
    const auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    expect_tone(got, 120, f.frequency, 0.5, f.slack, name(f));
    EXPECT_LT(ms, 2000) << name(f);
    std::cout << name(f) << ": 120 s decoded in " << ms << " ms\n";
    const auto r = decode_audio(bytes, {.max_seconds = 119});
    ASSERT_FALSE(r) << name(f);
    EXPECT_EQ(r.error().status, 413);
    EXPECT_EQ(r.error().message, "audio is longer than 119 s");
  }
}

// Just under the default 600 s at 1 fps and 32x24: 1198 sampled frames, each source frame twice.
TEST(media_decode, a_video_of_almost_ten_minutes) {
  constexpr int seconds = 599;
  const auto bytes =
      encode("mp4", {picture_track("libx264", "preset=veryfast", AV_PIX_FMT_YUV420P, 32, 24, 1, seconds)});
  const auto start = std::chrono::steady_clock::now();
  const video got = get(decode_video(bytes));
  const auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  expect_pictures(got.frames, 32, 24, 1, seconds, 5, "599 s");
  EXPECT_LT(ms, 3000);
  std::cout << "599 s of video decoded in " << ms << " ms\n";
  const auto r = decode_video(bytes, {.max_seconds = seconds - 1});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().status, 413);
  EXPECT_EQ(r.error().message, "video is longer than 598 s");
}

// A live WebM states no duration: the decoders hold what they produce to the limit themselves.
TEST(media_decode, a_stream_without_a_stated_duration_is_held_to_the_limit) {
  const container& webm = containers[1];
  const auto live = encode(webm.muxer,
                           {picture_track(webm.video_encoder, webm.video_options, AV_PIX_FMT_YUV420P, clip_width,
                                          clip_height, clip_fps, clip_frames),
                            sine_track(webm.audio_encoder, webm.audio_samples, webm.audio_rate, 3, 440, {0.5f})},
                           "live=1");
  const auto video_result = decode_video(live, {.max_seconds = 2});
  ASSERT_FALSE(video_result);
  EXPECT_EQ(video_result.error().status, 413);
  EXPECT_EQ(video_result.error().message, "video is longer than 2 s");
  const auto audio_result = decode_audio(live, {.max_seconds = 2});
  ASSERT_FALSE(audio_result);
  EXPECT_EQ(audio_result.error().status, 413);
  EXPECT_EQ(audio_result.error().message, "audio is longer than 2 s");
  // Within the limit the same stream decodes whole.
  EXPECT_EQ(get(decode_video(live)).frames.frames, 6);
}

void expect_unsupported(const result<void>& r, const std::string& message) {
  ASSERT_FALSE(r) << message;
  EXPECT_EQ(r.error().status, 422);
  EXPECT_EQ(r.error().message, message);
}

// Codecs FFmpeg decodes but the media kinds do not accept are refused by name.
TEST(media_decode, unsupported_codecs_are_refused_by_name) {
  const auto wma = encode("asf", {sine_track("wmav1", AV_SAMPLE_FMT_FLTP, 44100, 0.5, 440, {0.5f, 0.5f})});
  expect_unsupported(audio_decoder(wma, {}), "not a decodable audio: unsupported codec wmav1");
  // Motion JPEG, as some cameras record: decode_image accepts the codec, decode_video does not.
  const auto mjpeg = encode("mov", {picture_track("mjpeg", "", AV_PIX_FMT_YUVJ420P, 32, 24, 2, 2)});
  expect_unsupported(video_decoder(mjpeg, {}), "not a decodable video: unsupported codec mjpeg");
  expect_unsupported(image_decoder(encode_clip(containers[1], false), {}), "not a decodable image: unsupported codec vp9");
  const auto wma_soundtrack = encode(
      "matroska", {picture_track("libvpx-vp9", containers[1].video_options, AV_PIX_FMT_YUV420P, 32, 24, 2, 2),
                   sine_track("wmav1", AV_SAMPLE_FMT_FLTP, 44100, 1, 440, {0.5f, 0.5f})});
  expect_unsupported(video_decoder(wma_soundtrack, {}), "not a decodable video: unsupported codec wmav1");
}

// Every generated format, cut short or with one bit flipped, decodes or fails as a value (422, or
// 413 when a flip enlarges a declared size), never a crash, and quickly; some copies are refused.
TEST(media_decode, damaged_copies_of_every_generated_format_fail_as_values) {
  struct generated {
    std::string name;
    std::vector<std::byte> bytes;
    decoder decode;
  };
  std::vector<generated> files;
  for (const image_format& f : image_formats) {
    files.push_back({f.encoder, encode_image(f.encoder, f.muxer, f.pixels, f.frames), image_decoder});
  }
  for (const audio_format& f : audio_formats) {
    files.push_back({name(f), encode(f.muxer, {sine_track(f.encoder, f.samples, f.rate, 0.5, 440, {0.5f, 0.5f})}),
                     audio_decoder});
  }
  for (const container& c : containers) files.push_back({c.name, encode_clip(c, true), video_decoder});
  for (const generated& g : files) {
    int refused = 0, copies = 0;
    double slowest_ms = 0;
    const auto check = [&](std::span<const std::byte> bytes, const std::string& what) {
      const auto start = std::chrono::steady_clock::now();
      const auto r = g.decode(bytes, {});
      slowest_ms = std::max(slowest_ms, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
      ++copies;
      if (r) return;
      ++refused;
      EXPECT_TRUE(r.error().status == 422 || r.error().status == 413) << g.name << " " << what << ": " << r.error().message;
    };
    for (const double keep : {0.001, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99}) {
      const auto n = static_cast<std::size_t>(static_cast<double>(g.bytes.size()) * keep);
      check(std::span(g.bytes).first(n), "cut to " + std::to_string(n) + " bytes");
    }
    for (std::size_t at = 0; at < g.bytes.size(); at += g.bytes.size() / 40 + 1) {
      auto bytes = g.bytes;
      bytes[at] ^= std::byte{static_cast<unsigned char>(1u << (at % 8))};
      check(bytes, "flipped at " + std::to_string(at));
    }
    EXPECT_GT(refused, 0) << g.name;
    EXPECT_LT(slowest_ms, 1000) << g.name;
    std::cout << g.name << ": " << refused << " of " << copies << " damaged copies refused, slowest " << slowest_ms << " ms\n";
  }
}

}  // namespace
}  // namespace baton::media
