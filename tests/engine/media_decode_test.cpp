// engine/media against the Clef reference's decodes of ../shared/vectors/clef-omni-tiny/media, and
// damaged copies of those files (in memory) that must give errors, never a crash or a hang.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <numbers>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libswscale/swscale.h>
}

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

// The formats the shared vectors lack, made by FFmpeg's own encoders and muxers in memory.
// `fill` writes frame i into an allocated frame; returns false when there are no more.
std::vector<std::byte> encode(const char* encoder, const char* muxer, const std::function<void(AVCodecContext*)>& setup,
                              const std::function<bool(AVCodecContext*, AVFrame*, int)>& fill) {
  const AVCodec* codec = avcodec_find_encoder_by_name(encoder);
  if (codec == nullptr) throw std::runtime_error(std::string("no encoder ") + encoder);
  AVCodecContext* ctx = avcodec_alloc_context3(codec);
  setup(ctx);
  if (avcodec_open2(ctx, codec, nullptr) < 0) throw std::runtime_error(std::string("cannot open ") + encoder);
  AVFormatContext* out = nullptr;
  avformat_alloc_output_context2(&out, nullptr, muxer, nullptr);
  AVStream* stream = avformat_new_stream(out, nullptr);
  avcodec_parameters_from_context(stream->codecpar, ctx);
  stream->time_base = ctx->time_base;
  avio_open_dyn_buf(&out->pb);
  if (avformat_write_header(out, nullptr) < 0) throw std::runtime_error(std::string("cannot mux ") + muxer);
  AVPacket* packet = av_packet_alloc();
  const auto drain = [&] {
    while (avcodec_receive_packet(ctx, packet) == 0) {
      // Video frames last one tick of the codec's time base; MP4 drops a last sample of length 0.
      if (ctx->codec_type == AVMEDIA_TYPE_VIDEO && packet->duration == 0) packet->duration = 1;
      av_packet_rescale_ts(packet, ctx->time_base, stream->time_base);
      packet->stream_index = 0;
      av_interleaved_write_frame(out, packet);
    }
  };
  for (int i = 0;; ++i) {
    AVFrame* frame = av_frame_alloc();
    if (!fill(ctx, frame, i)) {
      av_frame_free(&frame);
      break;
    }
    avcodec_send_frame(ctx, frame);
    av_frame_free(&frame);
    drain();
  }
  avcodec_send_frame(ctx, nullptr);
  drain();
  av_write_trailer(out);
  std::uint8_t* data = nullptr;
  const int size = avio_close_dyn_buf(out->pb, &data);
  std::vector<std::byte> bytes(reinterpret_cast<std::byte*>(data), reinterpret_cast<std::byte*>(data) + size);
  av_free(data);
  av_packet_free(&packet);
  avformat_free_context(out);
  avcodec_free_context(&ctx);
  return bytes;
}

constexpr int image_width = 48, image_height = 32;

// A colour gradient (`inverted` for a GIF's second frame), RGB24.
std::vector<std::uint8_t> gradient(bool inverted) {
  std::vector<std::uint8_t> rgb(image_width * image_height * 3);
  for (int y = 0; y < image_height; ++y) {
    for (int x = 0; x < image_width; ++x) {
      std::uint8_t* p = &rgb[(y * image_width + x) * 3];
      p[0] = static_cast<std::uint8_t>(x * 5);
      p[1] = static_cast<std::uint8_t>(y * 7);
      p[2] = 128;
      if (inverted) std::transform(p, p + 3, p, [](std::uint8_t v) { return static_cast<std::uint8_t>(255 - v); });
    }
  }
  return rgb;
}

std::vector<std::byte> encode_image(const char* encoder, const char* muxer, AVPixelFormat format, int frames) {
  const auto setup = [&](AVCodecContext* c) {
    c->width = image_width;
    c->height = image_height;
    c->pix_fmt = format;
    c->time_base = {1, 10};
    c->color_range = format == AV_PIX_FMT_YUVJ420P ? AVCOL_RANGE_JPEG : AVCOL_RANGE_UNSPECIFIED;
  };
  const auto fill = [&](AVCodecContext* c, AVFrame* f, int i) {
    if (i == frames) return false;
    f->width = c->width;
    f->height = c->height;
    f->format = c->pix_fmt;
    f->pts = i;
    av_frame_get_buffer(f, 0);
    const auto rgb = gradient(i > 0);
    SwsContext* sws = sws_getContext(c->width, c->height, AV_PIX_FMT_RGB24, c->width, c->height, c->pix_fmt,
                                     SWS_BICUBIC, nullptr, nullptr, nullptr);
    const std::uint8_t* planes[1] = {rgb.data()};
    const int strides[1] = {image_width * 3};
    sws_scale(sws, planes, strides, 0, c->height, f->data, f->linesize);
    sws_freeContext(sws);
    return true;
  };
  return encode(encoder, muxer, setup, fill);
}

double mean_abs_difference(const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& want) {
  double sum = 0;
  for (std::size_t i = 0; i < want.size(); ++i) sum += std::abs(int{got[i]} - int{want[i]});
  return sum / static_cast<double>(want.size());
}

TEST(media_decode, jpeg_webp_gif_and_png_made_by_ffmpeg) {
  struct format {
    const char* encoder;
    const char* muxer;
    AVPixelFormat pixels;
    int frames;
    double tolerance;  // mean |difference| in levels: lossy, or GIF's 3-3-2 bit rgb8 palette
  };
  for (const format& f : {format{"png", "image2pipe", AV_PIX_FMT_RGB24, 1, 0},
                          format{"mjpeg", "image2pipe", AV_PIX_FMT_YUVJ420P, 1, 4},
                          format{"libwebp", "webp", AV_PIX_FMT_YUV420P, 1, 6},
                          format{"gif", "gif", AV_PIX_FMT_RGB8, 2, 32}}) {
    const auto got = get(decode_image(encode_image(f.encoder, f.muxer, f.pixels, f.frames)));
    ASSERT_EQ(got.height, image_height) << f.encoder;
    ASSERT_EQ(got.width, image_width) << f.encoder;
    const double diff = mean_abs_difference(got.pixels, gradient(false));
    EXPECT_LE(diff, f.tolerance) << f.encoder;
    if (f.frames > 1) {
      EXPECT_LT(diff * 3, mean_abs_difference(got.pixels, gradient(true))) << "not the first frame";
    }
  }
}

// One second of a 440 Hz sine at half scale in both channels of a stereo file.
std::vector<std::byte> encode_sine(const char* encoder, const char* muxer, AVSampleFormat format, int rate) {
  const auto setup = [&](AVCodecContext* c) {
    c->sample_rate = rate;
    c->sample_fmt = format;
    c->ch_layout = AV_CHANNEL_LAYOUT_STEREO;
    c->time_base = {1, rate};
    c->bit_rate = 128000;
  };
  int done = 0;
  const auto fill = [&](AVCodecContext* c, AVFrame* f, int) {
    if (done >= rate) return false;
    f->nb_samples = c->frame_size > 0 ? c->frame_size : 1024;
    f->format = c->sample_fmt;
    f->sample_rate = rate;
    av_channel_layout_copy(&f->ch_layout, &c->ch_layout);
    f->pts = done;
    av_frame_get_buffer(f, 0);
    for (int i = 0; i < f->nb_samples; ++i, ++done) {
      const float v = done < rate ? 0.5f * std::sin(2 * std::numbers::pi_v<float> * 440 * done / rate) : 0.0f;
      for (int ch = 0; ch < 2; ++ch) {
        switch (format) {
          case AV_SAMPLE_FMT_S16: reinterpret_cast<std::int16_t*>(f->data[0])[i * 2 + ch] = static_cast<std::int16_t>(v * 32767); break;
          case AV_SAMPLE_FMT_FLT: reinterpret_cast<float*>(f->data[0])[i * 2 + ch] = v; break;
          case AV_SAMPLE_FMT_FLTP: reinterpret_cast<float*>(f->data[ch])[i] = v; break;
          default: throw std::runtime_error("sample format");
        }
      }
    }
    return true;
  };
  return encode(encoder, muxer, setup, fill);
}

TEST(media_decode, mp3_flac_opus_and_vorbis_made_by_ffmpeg_to_16k_mono) {
  struct format {
    const char* encoder;
    const char* muxer;
    AVSampleFormat samples;
    int rate;
  };
  for (const format& f : {format{"flac", "flac", AV_SAMPLE_FMT_S16, 44100},
                          format{"libmp3lame", "mp3", AV_SAMPLE_FMT_FLTP, 44100},
                          format{"libopus", "ogg", AV_SAMPLE_FMT_FLT, 48000},
                          format{"libvorbis", "ogg", AV_SAMPLE_FMT_FLTP, 44100}}) {
    const auto got = get(decode_audio(encode_sine(f.encoder, f.muxer, f.samples, f.rate)));
    // One second at 16 kHz, give or take the codec's padding to whole frames.
    EXPECT_NEAR(static_cast<double>(got.size()), 16000, 1200) << f.encoder;
    // The mean of two equal channels is the sine itself: RMS 0.5 / sqrt(2) away from the edges.
    double energy = 0;
    for (std::size_t i = 4000; i < 12000; ++i) energy += double{got[i]} * got[i];
    EXPECT_NEAR(std::sqrt(energy / 8000), 0.5 / std::numbers::sqrt2, 0.02) << f.encoder;
  }
}

// `seconds` of MPEG-4 video in MP4 at `fps`, frame i a flat grey of luma 16 + i * step.
std::vector<std::byte> encode_greys(int fps, int seconds, int step) {
  const auto setup = [&](AVCodecContext* c) {
    c->width = image_width;
    c->height = image_height;
    c->pix_fmt = AV_PIX_FMT_YUV420P;
    c->time_base = {1, fps};
    c->gop_size = 1;  // intra only: every grey exact to the quantiser
  };
  const auto fill = [&](AVCodecContext* c, AVFrame* f, int i) {
    if (i == fps * seconds) return false;
    f->width = c->width;
    f->height = c->height;
    f->format = c->pix_fmt;
    f->pts = i;
    av_frame_get_buffer(f, 0);
    for (int plane = 0; plane < 3; ++plane) {
      const int rows = plane == 0 ? c->height : c->height / 2;
      std::memset(f->data[plane], plane == 0 ? 16 + i * step : 128, static_cast<std::size_t>(f->linesize[plane] * rows));
    }
    return true;
  };
  return encode("mpeg4", "mp4", setup, fill);
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

TEST(media_decode, video_is_sampled_at_2_frames_per_second_whatever_its_rate) {
  const auto fast = get(decode_video(encode_greys(25, 3, 2)));
  EXPECT_FALSE(fast.has_audio);
  EXPECT_EQ(grey_indices(fast.frames, 2), (std::vector<int>{0, 12, 25, 37, 50, 62}));
  // Under 2 fps each frame is on screen at two sample times.
  const auto slow = get(decode_video(encode_greys(1, 3, 40)));
  EXPECT_EQ(grey_indices(slow.frames, 40), (std::vector<int>{0, 0, 1, 1, 2, 2}));
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

}  // namespace
}  // namespace baton::media
