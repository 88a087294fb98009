#include "engine/media/decode.hpp"

#include "core/error_codes.hpp"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/avstring.h>
#include <libavutil/dict.h>
#include <libavutil/error.h>
#include <libavutil/log.h>
#include <libswresample/swresample.h>
#include <libswscale/swscale.h>
}

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace baton::media {
namespace {

using clock = std::chrono::steady_clock;

constexpr int io_buffer_size = 64 * 1024;
// Damage is an error, not something to conceal: CRCs checked, and decoders stop at the first
// inconsistency instead of guessing the missing picture or sound.
constexpr int strict = AV_EF_CRCCHECK | AV_EF_BITSTREAM | AV_EF_BUFFER | AV_EF_EXPLODE;

// Which codecs each kind accepts: everything else FFmpeg could open is refused rather than trusted.
constexpr AVCodecID image_codecs[] = {AV_CODEC_ID_PNG, AV_CODEC_ID_MJPEG, AV_CODEC_ID_WEBP, AV_CODEC_ID_GIF};
constexpr AVCodecID audio_codecs[] = {
    AV_CODEC_ID_PCM_S16LE, AV_CODEC_ID_PCM_S24LE, AV_CODEC_ID_PCM_S32LE, AV_CODEC_ID_PCM_F32LE,
    AV_CODEC_ID_PCM_U8,    AV_CODEC_ID_MP3,       AV_CODEC_ID_FLAC,      AV_CODEC_ID_OPUS,
    AV_CODEC_ID_VORBIS,    AV_CODEC_ID_AAC};
constexpr AVCodecID video_codecs[] = {AV_CODEC_ID_H264, AV_CODEC_ID_HEVC, AV_CODEC_ID_VP8,
                                      AV_CODEC_ID_VP9,  AV_CODEC_ID_AV1,  AV_CODEC_ID_MPEG4};

// The containers media is read from (FFmpeg's demuxer names): single files of pictures or
// sound, whose codec is checked next. Others are refused before their demuxer runs: some open
// further files or URLs (concat, HLS, DASH, SDP), which a request's bytes must never make baton do.
constexpr const char* containers =
    "png_pipe,jpeg_pipe,mjpeg,webp_pipe,gif,gif_pipe,wav,mp3,flac,ogg,aac,mov,matroska,mpegts,avi,asf,h264,hevc,ivf,"
    "m4v,obu";

template <std::size_t N>
bool accepted(const AVCodecID (&codecs)[N], AVCodecID id) {
  return std::find(std::begin(codecs), std::end(codecs), id) != std::end(codecs);
}

std::string av_message(int code) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(code, text, sizeof text);
  return text;
}

struct format_closer {
  void operator()(AVFormatContext* f) const { avformat_close_input(&f); }
};
struct io_closer {
  void operator()(AVIOContext* io) const {
    av_freep(&io->buffer);
    avio_context_free(&io);
  }
};
struct codec_closer {
  void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
};
struct packet_closer {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};
struct frame_closer {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct sws_closer {
  void operator()(SwsContext* s) const { sws_freeContext(s); }
};
struct swr_closer {
  void operator()(SwrContext* s) const { swr_free(&s); }
};

// Reads and seeks over the caller's bytes for an AVIOContext.
struct memory_source {
  std::span<const std::byte> bytes;
  std::size_t pos = 0;

  static int read(void* opaque, std::uint8_t* buf, int size) {
    auto* self = static_cast<memory_source*>(opaque);
    const std::size_t n = std::min<std::size_t>(static_cast<std::size_t>(size), self->bytes.size() - self->pos);
    if (n == 0) return AVERROR_EOF;
    std::memcpy(buf, self->bytes.data() + self->pos, n);
    self->pos += n;
    return static_cast<int>(n);
  }

  static std::int64_t seek(void* opaque, std::int64_t offset, int whence) {
    auto* self = static_cast<memory_source*>(opaque);
    const auto size = static_cast<std::int64_t>(self->bytes.size());
    std::int64_t base = 0;
    switch (whence & ~AVSEEK_FORCE) {
      case AVSEEK_SIZE: return size;
      case SEEK_SET: base = 0; break;
      case SEEK_CUR: base = static_cast<std::int64_t>(self->pos); break;
      case SEEK_END: base = size; break;
      default: return AVERROR(EINVAL);
    }
    const std::int64_t target = base + offset;
    if (target < 0 || target > size) return AVERROR(EINVAL);
    self->pos = static_cast<std::size_t>(target);
    return target;
  }
};

// One decode's context: what kind of media it expects (for messages), its limits and deadline.
struct job {
  const char* kind;  // "image", "audio", "video"
  const limits& lim;
  clock::time_point deadline;
  // The picture size a decoder refused for being over lim.max_pixels (see ffmpeg_log), or 0.
  std::int64_t refused_width = 0, refused_height = 0;

  bool late() const { return clock::now() > deadline; }
  error invalid(const std::string& why) const {
    return make_error(422, codes::invalid_media, std::string("not a decodable ") + kind + ": " + why);
  }
  error too_large(const std::string& what) const {
    return make_error(413, codes::media_too_large, std::string(kind) + " " + what);
  }
  error too_large_picture(std::int64_t width, std::int64_t height) const {
    return too_large("is " + std::to_string(width) + "x" + std::to_string(height) + ", more than " +
                     std::to_string(lim.max_pixels) + " pixels");
  }
  error too_long() const {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%g", lim.max_seconds);
    return too_large(std::string("is longer than ") + seconds + " s");
  }
  error timed_out() const {
    return make_error(504, codes::media_timeout, std::string(kind) + " took longer than " +
                                                std::to_string(lim.time_budget.count()) + " ms to decode");
  }
  // An FFmpeg failure: the deadline (our interrupt callback aborts FFmpeg with AVERROR_EXIT) or
  // the input itself.
  error failed(const char* step, int code) const {
    if (late()) return timed_out();
    if (refused_width > 0) return too_large_picture(refused_width, refused_height);
    return invalid(std::string(step) + ": " + av_message(code));
  }
};

int interrupt(void* opaque) { return static_cast<const job*>(opaque)->late() ? 1 : 0; }

// The job decoding on this thread (decoders run with one thread, on the caller's).
thread_local job* current_job = nullptr;

// FFmpeg's log, otherwise silent, read for one message: a decoder given max_pixels refuses a
// bigger picture before allocating it, saying "Picture size WxH ..." (av_image_check_size2), and
// leaves the stream with no size at all. That message is the only place the declared size is.
void ffmpeg_log(void*, int, const char* format, va_list args) {
  constexpr std::string_view refusal = "Picture size %ux%u";
  if (current_job == nullptr || current_job->refused_width > 0 || std::string_view(format).substr(0, refusal.size()) != refusal) {
    return;
  }
  va_list copy;
  va_copy(copy, args);
  const std::uint64_t width = va_arg(copy, unsigned), height = va_arg(copy, unsigned);
  va_end(copy);
  // The same message refuses a size of 0 or one past FFmpeg's own bounds: that is damage, not size.
  if (width == 0 || height == 0 || width * height <= static_cast<std::uint64_t>(current_job->lim.max_pixels)) return;
  current_job->refused_width = static_cast<std::int64_t>(width);
  current_job->refused_height = static_cast<std::int64_t>(height);
}

// Makes `j` the thread's job while it decodes.
struct decoding {
  explicit decoding(job& j) { current_job = &j; }
  ~decoding() { current_job = nullptr; }
  decoding(const decoding&) = delete;
  decoding& operator=(const decoding&) = delete;
};

// A demuxer's request to open another file or URL: always refused (the input is the bytes given).
int refuse_open(AVFormatContext*, AVIOContext**, const char*, int, AVDictionary**) { return AVERROR(EPERM); }

void silence_ffmpeg() {
  static std::once_flag once;
  std::call_once(once, [] {
    av_log_set_level(AV_LOG_QUIET);
    av_log_set_callback(&ffmpeg_log);
  });
}

struct input {
  memory_source source;
  std::unique_ptr<AVIOContext, io_closer> io;
  std::unique_ptr<AVFormatContext, format_closer> format;
};

// Opens the container over `bytes`; `in` must stay where it is (FFmpeg keeps pointers into it).
result<void> open_input(input& in, std::span<const std::byte> bytes, const job& j) {
  in.source.bytes = bytes;
  auto* buffer = static_cast<std::uint8_t*>(av_malloc(io_buffer_size));
  if (buffer == nullptr) return make_error(500, codes::out_of_memory, "cannot allocate a decode buffer");
  in.io.reset(avio_alloc_context(buffer, io_buffer_size, 0, &in.source, &memory_source::read, nullptr,
                                 &memory_source::seek));
  if (!in.io) {
    av_free(buffer);
    return make_error(500, codes::out_of_memory, "cannot allocate a decode context");
  }
  // The container is named first, and one this kind is not read from is refused unopened.
  const AVInputFormat* container = nullptr;
  if (const int rc = av_probe_input_buffer2(in.io.get(), &container, "", nullptr, 0, 0); rc < 0) {
    return j.failed("open", rc);
  }
  if (av_match_list(container->name, containers, ',') <= 0) {
    return j.invalid(std::string("its container (") + container->name + ") is not read: only plain media files are");
  }
  AVFormatContext* f = avformat_alloc_context();
  if (f == nullptr) return make_error(500, codes::out_of_memory, "cannot allocate a decode context");
  f->pb = in.io.get();
  f->flags |= AVFMT_FLAG_CUSTOM_IO;
  f->error_recognition = strict;
  f->interrupt_callback = {&interrupt, const_cast<job*>(&j)};
  f->io_open = &refuse_open;
  AVDictionary* options = nullptr;
  av_dict_set(&options, "protocol_whitelist", "none", 0);
  // avformat_open_input frees f when it fails.
  const int opened = avformat_open_input(&f, nullptr, container, &options);
  av_dict_free(&options);
  if (opened < 0) return j.failed("open", opened);
  in.format.reset(f);
  // Finding the streams decodes a first frame: its decoder refuses a picture over the limit before
  // allocating it (a few bytes of PNG can declare 16000 x 16000).
  std::vector<AVDictionary*> stream_options(f->nb_streams, nullptr);
  for (AVDictionary*& d : stream_options) av_dict_set_int(&d, "max_pixels", j.lim.max_pixels, 0);
  const int found = avformat_find_stream_info(f, stream_options.data());
  for (AVDictionary*& d : stream_options) av_dict_free(&d);
  if (found < 0) return j.failed("stream info", found);
  // The container's own claim refuses a long input early; the decoders check what they produce.
  if (f->duration != AV_NOPTS_VALUE && static_cast<double>(f->duration) / AV_TIME_BASE > j.lim.max_seconds) {
    return j.too_long();
  }
  return {};
}

result<std::unique_ptr<AVCodecContext, codec_closer>> open_decoder(const AVStream* stream, const job& j) {
  const AVCodec* codec = avcodec_find_decoder(stream->codecpar->codec_id);
  if (codec == nullptr) return j.invalid("no decoder for " + std::string(avcodec_get_name(stream->codecpar->codec_id)));
  std::unique_ptr<AVCodecContext, codec_closer> ctx(avcodec_alloc_context3(codec));
  if (!ctx) return make_error(500, codes::out_of_memory, "cannot allocate a decoder");
  if (const int rc = avcodec_parameters_to_context(ctx.get(), stream->codecpar); rc < 0) return j.failed("decoder", rc);
  ctx->err_recognition = strict;
  ctx->max_pixels = j.lim.max_pixels;
  ctx->thread_count = 1;  // the request path's threads are baton's to schedule
  if (const int rc = avcodec_open2(ctx.get(), codec, nullptr); rc < 0) return j.failed("decoder", rc);
  return ctx;
}

// A stream or frame's size; one a decoder refused for max_pixels has none, and is too large.
result<void> check_pixels(std::int64_t width, std::int64_t height, const job& j) {
  if (j.refused_width > 0) return j.too_large_picture(j.refused_width, j.refused_height);
  if (width <= 0 || height <= 0) return j.invalid("no frame size");
  if (width > j.lim.max_pixels / height) return j.too_large_picture(width, height);  // no product to overflow
  return {};
}

// One stream being decoded: its decoder and what to do with each frame (an error stops the decode).
struct stream_decoder {
  int index = -1;
  std::unique_ptr<AVCodecContext, codec_closer> codec;
  std::function<result<void>(AVFrame*)> on_frame;
  bool done = false;  // on_frame wants no more
};

// Drains what the decoder has ready. `done` ends the stream early (the image's first frame).
result<void> receive(stream_decoder& d, AVFrame* frame, const job& j) {
  while (!d.done) {
    const int rc = avcodec_receive_frame(d.codec.get(), frame);
    if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return {};
    if (rc < 0) return j.failed("decode", rc);
    auto r = d.on_frame(frame);
    av_frame_unref(frame);
    if (!r) return r;
  }
  return {};
}

// Demuxes the whole input, feeding the decoders, checking the deadline between packets, then
// flushes them. A decoder that never produced a frame is the caller's to notice.
result<void> run_decoders(input& in, std::span<stream_decoder*> decoders, const job& j) {
  std::unique_ptr<AVPacket, packet_closer> packet(av_packet_alloc());
  std::unique_ptr<AVFrame, frame_closer> frame(av_frame_alloc());
  if (!packet || !frame) return make_error(500, codes::out_of_memory, "cannot allocate a frame");
  const auto all_done = [&] { return std::all_of(decoders.begin(), decoders.end(), [](auto* d) { return d->done; }); };
  while (!all_done()) {
    if (j.late()) return j.timed_out();
    const int rc = av_read_frame(in.format.get(), packet.get());
    if (rc == AVERROR_EOF) break;
    if (rc < 0) return j.failed("read", rc);
    // A demuxer marks a packet cut short by the end of the input (a truncated WAV) but returns it.
    if ((packet->flags & AV_PKT_FLAG_CORRUPT) != 0) {
      av_packet_unref(packet.get());
      return j.invalid("truncated or damaged data");
    }
    for (stream_decoder* d : decoders) {
      if (d->done || packet->stream_index != d->index) continue;
      const int sent = avcodec_send_packet(d->codec.get(), packet.get());
      if (sent < 0 && sent != AVERROR(EAGAIN)) {
        av_packet_unref(packet.get());
        return j.failed("decode", sent);
      }
      if (auto r = receive(*d, frame.get(), j); !r) {
        av_packet_unref(packet.get());
        return r;
      }
    }
    av_packet_unref(packet.get());
  }
  for (stream_decoder* d : decoders) {
    if (d->done) continue;
    avcodec_send_packet(d->codec.get(), nullptr);
    if (auto r = receive(*d, frame.get(), j); !r) return r;
  }
  return {};
}

// Converts decoded frames to packed RGB24 with the frame's colour matrix and range; unstated,
// swscale's defaults: BT.601, and the range the pixel format implies (full for JPEG's yuvj, limited
// for other YUV). At the frame's own size the interpolation flag only picks chroma upsampling, and
// a plain one (no accurate_rnd or full_chroma_int, which differ by up to 136 levels) keeps
// swscale's unscaled YUV to RGB path, which the Clef reference's decodes match to the bit. A
// smaller size is scaled bilinearly, PyAV's default for to_ndarray(width=, height=).
class rgb_converter {
 public:
  result<void> convert(const AVFrame* f, std::uint8_t* out, const job& j) { return convert(f, f->width, f->height, out, j); }

  result<void> convert(const AVFrame* f, int width, int height, std::uint8_t* out, const job& j) {
    ctx_.reset(sws_getCachedContext(ctx_.release(), f->width, f->height, static_cast<AVPixelFormat>(f->format),
                                    width, height, AV_PIX_FMT_RGB24, SWS_BILINEAR, nullptr, nullptr, nullptr));
    if (!ctx_) return j.invalid("unsupported pixel format");
    int* inv_table = nullptr;
    int* table = nullptr;
    int src_range = 0, dst_range = 0, brightness = 0, contrast = 0, saturation = 0;
    if (sws_getColorspaceDetails(ctx_.get(), &inv_table, &src_range, &table, &dst_range, &brightness, &contrast,
                                 &saturation) < 0) {
      return j.invalid("unsupported pixel format");
    }
    const int space = f->colorspace == AVCOL_SPC_UNSPECIFIED ? SWS_CS_DEFAULT : f->colorspace;
    if (f->color_range != AVCOL_RANGE_UNSPECIFIED) src_range = f->color_range == AVCOL_RANGE_JPEG ? 1 : 0;
    sws_setColorspaceDetails(ctx_.get(), sws_getCoefficients(space), src_range, table, dst_range, brightness,
                             contrast, saturation);
    // swscale's SIMD YUV to RGB (even heights) works in blocks of 8 pixels and stores past them:
    // into rows of exactly width * 3 it wrote past the end of the last one (heap corruption), and
    // it left the last width % 8 pixels of every row unconverted where the block did not fit. So
    // it converts into rows with room to spare, copied out.
    const auto row = static_cast<std::size_t>(width) * 3;
    const std::size_t stride = (static_cast<std::size_t>(width) + 7) / 8 * 8 * 3 + 64;
    scratch_.resize(stride * static_cast<std::size_t>(height));
    std::uint8_t* planes[1] = {scratch_.data()};
    const int strides[1] = {static_cast<int>(stride)};
    if (sws_scale(ctx_.get(), f->data, f->linesize, 0, f->height, planes, strides) != height) {
      return j.invalid("colour conversion failed");
    }
    for (std::size_t y = 0; y < static_cast<std::size_t>(height); ++y) {
      std::memcpy(out + y * row, scratch_.data() + y * stride, row);
    }
    return {};
  }

 private:
  std::unique_ptr<SwsContext, sws_closer> ctx_;
  std::vector<std::uint8_t> scratch_;
};

// Python's round (half to even), as the reference rounds sizes.
double python_round(double x) {
  const double lower = std::floor(x), rest = x - lower;
  if (rest != 0.5) return rest < 0.5 ? lower : lower + 1;
  return std::fmod(lower, 2.0) == 0 ? lower : lower + 1;
}

// Resamples decoded audio to 16 kHz mono float, appended to `out`, bounded by max_seconds.
class mono_resampler {
 public:
  explicit mono_resampler(std::vector<float>& out) : out_(out) {}

  result<void> push(const AVFrame* f, const job& j) {
    if (!ctx_) {
      if (auto r = open(f, j); !r) return r;
    } else if (f->sample_rate != in_rate_ || f->format != in_format_ ||
               av_channel_layout_compare(&f->ch_layout, &in_layout_) != 0) {
      return j.invalid("the audio format changes mid-stream");
    }
    return convert(const_cast<const std::uint8_t**>(f->extended_data), f->nb_samples, j);
  }

  // Emits what the resampler still holds.
  result<void> flush(const job& j) { return ctx_ ? convert(nullptr, 0, j) : result<void>{}; }

  ~mono_resampler() { av_channel_layout_uninit(&in_layout_); }

 private:
  result<void> open(const AVFrame* f, const job& j) {
    if (f->sample_rate <= 0 || f->ch_layout.nb_channels <= 0) return j.invalid("no sample rate or channels");
    if (av_channel_layout_copy(&in_layout_, &f->ch_layout) < 0) return j.invalid("bad channel layout");
    AVChannelLayout mono = AV_CHANNEL_LAYOUT_MONO;
    SwrContext* s = nullptr;
    if (swr_alloc_set_opts2(&s, &mono, AV_SAMPLE_FMT_FLT, audio_sample_rate, &in_layout_,
                            static_cast<AVSampleFormat>(f->format), f->sample_rate, 0, nullptr) < 0) {
      return j.invalid("unsupported audio format");
    }
    ctx_.reset(s);
    // swresample's defaults, as the Clef reference's PyAV AudioResampler gets them: its filter graph
    // (abuffer -> aformat -> abuffersink) inserts an aresample with no options, so stereo is mixed
    // to sqrt(1/2) * (L + R) (float output: no normalisation), not to the mean of the channels.
    if (const int rc = swr_init(s); rc < 0) return j.failed("resampler", rc);
    in_rate_ = f->sample_rate;
    in_format_ = f->format;
    return {};
  }

  result<void> convert(const std::uint8_t** in, int samples, const job& j) {
    const int room = swr_get_out_samples(ctx_.get(), samples);
    if (room < 0) return j.failed("resample", room);
    const std::size_t old = out_.size();
    out_.resize(old + static_cast<std::size_t>(room));
    auto* dst = reinterpret_cast<std::uint8_t*>(out_.data() + old);
    const int got = swr_convert(ctx_.get(), &dst, room, in, samples);
    if (got < 0) {
      out_.resize(old);
      return j.failed("resample", got);
    }
    out_.resize(old + static_cast<std::size_t>(got));
    if (static_cast<double>(out_.size()) / audio_sample_rate > j.lim.max_seconds) return j.too_long();
    return {};
  }

  std::vector<float>& out_;
  std::unique_ptr<SwrContext, swr_closer> ctx_;
  int in_rate_ = 0;
  int in_format_ = -1;
  AVChannelLayout in_layout_{};
};

result<void> check_size(std::span<const std::byte> bytes, const job& j) {
  if (bytes.empty()) return j.invalid("empty input");
  if (bytes.size() > j.lim.max_bytes) {
    return j.too_large("is " + std::to_string(bytes.size()) + " bytes, more than " + std::to_string(j.lim.max_bytes));
  }
  return {};
}

// The stream of `type` FFmpeg would pick, if its codec is one of `codecs`.
template <std::size_t N>
result<int> find_stream(const input& in, AVMediaType type, const AVCodecID (&codecs)[N], const job& j) {
  const int index = av_find_best_stream(in.format.get(), type, -1, -1, nullptr, 0);
  if (index < 0) return j.invalid(std::string("no ") + av_get_media_type_string(type) + " stream");
  const AVCodecID id = in.format->streams[index]->codecpar->codec_id;
  if (!accepted(codecs, id)) return j.invalid(std::string("unsupported codec ") + avcodec_get_name(id));
  return result<int>(boost::system::in_place_value, index);
}

// The decoder of the stream of `type` in `bytes` (opened into `in`), after the checks every kind
// shares: size, container, codec and, for pictures, the declared frame size.
template <std::size_t N>
result<stream_decoder> open_stream(input& in, std::span<const std::byte> bytes, AVMediaType type,
                                   const AVCodecID (&codecs)[N], const job& j) {
  if (auto r = check_size(bytes, j); !r) return r.error();
  if (auto r = open_input(in, bytes, j); !r) return r.error();
  auto index = find_stream(in, type, codecs, j);
  if (!index) return index.error();
  const AVStream* stream = in.format->streams[*index];
  if (type == AVMEDIA_TYPE_VIDEO) {
    if (auto r = check_pixels(stream->codecpar->width, stream->codecpar->height, j); !r) return r.error();
  }
  auto codec = open_decoder(stream, j);
  if (!codec) return codec.error();
  return stream_decoder{*index, std::move(*codec), {}};
}

job make_job(const char* kind, const limits& lim) {
  silence_ffmpeg();
  return {kind, lim, clock::now() + lim.time_budget};
}

}  // namespace

result<rgb_frames> decode_image(std::span<const std::byte> bytes, const limits& lim) {
  job j = make_job("image", lim);
  const decoding on_this_thread(j);
  input in;
  auto opened = open_stream(in, bytes, AVMEDIA_TYPE_VIDEO, image_codecs, j);
  if (!opened) return opened.error();
  stream_decoder& d = *opened;

  rgb_frames out;
  rgb_converter rgb;
  d.on_frame = [&](AVFrame* f) -> result<void> {
    if (auto r = check_pixels(f->width, f->height, j); !r) return r;
    out.frames = 1;
    out.height = f->height;
    out.width = f->width;
    out.pixels.resize(static_cast<std::size_t>(f->width) * static_cast<std::size_t>(f->height) * 3);
    d.done = true;
    return rgb.convert(f, out.pixels.data(), j);
  };
  stream_decoder* decoders[] = {&d};
  if (auto r = run_decoders(in, decoders, j); !r) return r.error();
  if (out.frames == 0) return j.invalid("no frame decoded");
  return out;
}

result<std::vector<float>> decode_audio(std::span<const std::byte> bytes, const limits& lim) {
  job j = make_job("audio", lim);
  const decoding on_this_thread(j);
  input in;
  auto opened = open_stream(in, bytes, AVMEDIA_TYPE_AUDIO, audio_codecs, j);
  if (!opened) return opened.error();
  stream_decoder& d = *opened;

  std::vector<float> out;
  mono_resampler resampler(out);
  d.on_frame = [&](AVFrame* f) { return resampler.push(f, j); };
  stream_decoder* decoders[] = {&d};
  if (auto r = run_decoders(in, decoders, j); !r) return r.error();
  if (auto r = resampler.flush(j); !r) return r.error();
  if (out.empty()) return j.invalid("no samples decoded");
  return out;
}

result<video> decode_video(std::span<const std::byte> bytes, const limits& lim) {
  job j = make_job("video", lim);
  const decoding on_this_thread(j);
  input in;
  auto opened = open_stream(in, bytes, AVMEDIA_TYPE_VIDEO, video_codecs, j);
  if (!opened) return opened.error();
  stream_decoder& picture = *opened;
  const AVStream* stream = in.format->streams[picture.index];

  // The Clef reference's sampling (PyAV): a decoded frame is kept when its time (pts x time base)
  // is at least n / 2 s less 1 µs, n the frames kept so far; so each kept frame is the first at or
  // after its sample time, no frame is kept twice (a 1 fps clip gives 1 frame per second), and
  // frames without a timestamp are skipped.
  const double time_base = av_q2d(stream->time_base);
  const auto max_frames = static_cast<std::int64_t>(lim.max_seconds * video_sample_fps) + 1;
  video out;
  rgb_converter rgb;
  picture.on_frame = [&](AVFrame* f) -> result<void> {
    if (f->pts == AV_NOPTS_VALUE) return {};
    const double time = static_cast<double>(f->pts) * time_base;
    if (time + 1e-6 < static_cast<double>(out.frames.frames) / video_sample_fps) return {};
    if (time > lim.max_seconds) return j.too_long();
    if (out.frames.frames == max_frames) return j.too_long();
    if (auto r = check_pixels(f->width, f->height, j); !r) return r;
    // Frames above video_max_frame_pixels are scaled down to it, to even sides.
    const double scale = std::min(1.0, std::sqrt(static_cast<double>(video_max_frame_pixels) /
                                                 (static_cast<double>(f->width) * f->height)));
    const int width = std::max(2, static_cast<int>(python_round(f->width * scale / 2) * 2));
    const int height = std::max(2, static_cast<int>(python_round(f->height * scale / 2) * 2));
    if (out.frames.frames == 0) {
      out.frames.height = height;
      out.frames.width = width;
    } else if (width != out.frames.width || height != out.frames.height) {
      return j.invalid("the frame size changes mid-stream");
    }
    if ((out.frames.frames + 1) * width * height > lim.max_video_pixels) {
      return j.too_large("has more than " + std::to_string(lim.max_video_pixels) + " pixels in its " +
                         std::to_string(out.frames.frames + 1) + " sampled frames");
    }
    const std::size_t frame_bytes = static_cast<std::size_t>(width) * static_cast<std::size_t>(height) * 3;
    out.frames.pixels.resize(out.frames.pixels.size() + frame_bytes);
    if (auto r = rgb.convert(f, width, height, out.frames.pixels.data() + out.frames.pixels.size() - frame_bytes, j); !r) {
      return r;
    }
    ++out.frames.frames;
    return {};
  };

  mono_resampler resampler(out.audio);
  stream_decoder sound;
  stream_decoder* decoders[2] = {&picture, nullptr};
  std::size_t count = 1;
  if (auto audio_index = find_stream(in, AVMEDIA_TYPE_AUDIO, audio_codecs, j)) {
    auto audio_codec = open_decoder(in.format->streams[*audio_index], j);
    if (!audio_codec) return audio_codec.error();
    sound = {*audio_index, std::move(*audio_codec), [&](AVFrame* f) { return resampler.push(f, j); }};
    decoders[count++] = &sound;
    out.has_audio = true;
  } else if (av_find_best_stream(in.format.get(), AVMEDIA_TYPE_AUDIO, -1, -1, nullptr, 0) >= 0) {
    return audio_index.error();  // a soundtrack in a codec we refuse
  }
  if (auto r = run_decoders(in, std::span(decoders, count), j); !r) return r.error();
  if (out.frames.frames == 0) return j.invalid("no frame decoded");
  if (out.has_audio) {
    if (auto r = resampler.flush(j); !r) return r.error();
  }
  return out;
}

}  // namespace baton::media
