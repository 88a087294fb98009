// Media files made in memory by FFmpeg's own encoders and muxers, for the media tests and the
// media bench (nothing committed, nothing downloaded). A missing encoder throws: Debian 12's
// libavcodec59 has every one they use.
#pragma once

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/log.h>
#include <libavutil/opt.h>
}

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace baton::test {

// One stream of such a file: `fill` writes frame i into an allocated frame, false when no more.
struct track {
  const char* encoder;
  std::function<void(AVCodecContext*)> setup;
  std::function<bool(AVCodecContext*, AVFrame*, int)> fill;
};

inline std::vector<std::byte> encode(const char* muxer, const std::vector<track>& tracks, const char* muxer_options = "") {
  av_log_set_level(AV_LOG_QUIET);  // the encoders' statistics, when no decode has silenced FFmpeg yet
  AVFormatContext* out = nullptr;
  if (avformat_alloc_output_context2(&out, nullptr, muxer, nullptr) < 0 ||
      av_set_options_string(out->priv_data, muxer_options, "=", ":") < 0) {
    throw std::runtime_error(std::string("no muxer ") + muxer + " with " + muxer_options);
  }
  // No random Matroska UIDs: the same WebM on every run (libx264's output still varies slightly).
  out->flags |= AVFMT_FLAG_BITEXACT;
  struct stream_state {
    const track* source;
    AVCodecContext* ctx;
    AVStream* stream;
    AVFrame* next = nullptr;
    int index = 0;
  };
  std::vector<stream_state> streams;
  for (const track& t : tracks) {
    const AVCodec* codec = avcodec_find_encoder_by_name(t.encoder);
    if (codec == nullptr) throw std::runtime_error(std::string("no encoder ") + t.encoder);
    AVCodecContext* ctx = avcodec_alloc_context3(codec);
    t.setup(ctx);
    // MP4, MOV and WebM keep the codec's headers (H.264's SPS and PPS) out of band.
    if ((out->oformat->flags & AVFMT_GLOBALHEADER) != 0) ctx->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    if (avcodec_open2(ctx, codec, nullptr) < 0) throw std::runtime_error(std::string("cannot open ") + t.encoder);
    AVStream* stream = avformat_new_stream(out, nullptr);
    avcodec_parameters_from_context(stream->codecpar, ctx);
    stream->time_base = ctx->time_base;
    streams.push_back({&t, ctx, stream});
  }
  avio_open_dyn_buf(&out->pb);
  if (avformat_write_header(out, nullptr) < 0) throw std::runtime_error(std::string("cannot mux ") + muxer);
  AVPacket* packet = av_packet_alloc();
  const auto drain = [&](stream_state& s) {
    while (avcodec_receive_packet(s.ctx, packet) == 0) {
      // Video frames last one tick of the codec's time base; MP4 drops a last sample of length 0.
      if (s.ctx->codec_type == AVMEDIA_TYPE_VIDEO && packet->duration == 0) packet->duration = 1;
      av_packet_rescale_ts(packet, s.ctx->time_base, s.stream->time_base);
      packet->stream_index = s.stream->index;
      if (av_interleaved_write_frame(out, packet) < 0) throw std::runtime_error(std::string("cannot mux ") + muxer);
    }
  };
  const auto next = [](stream_state& s) {
    s.next = av_frame_alloc();
    if (!s.source->fill(s.ctx, s.next, s.index++)) av_frame_free(&s.next);
  };
  for (stream_state& s : streams) next(s);
  // The encoders get their frames in time order across the streams, as from a camera.
  for (;;) {
    stream_state* first = nullptr;
    for (stream_state& s : streams) {
      if (s.next != nullptr && (first == nullptr || av_compare_ts(s.next->pts, s.ctx->time_base, first->next->pts,
                                                                  first->ctx->time_base) < 0)) {
        first = &s;
      }
    }
    if (first == nullptr) break;
    if (avcodec_send_frame(first->ctx, first->next) < 0) {
      throw std::runtime_error(std::string("cannot encode with ") + first->source->encoder);
    }
    av_frame_free(&first->next);
    drain(*first);
    next(*first);
  }
  for (stream_state& s : streams) {
    avcodec_send_frame(s.ctx, nullptr);
    drain(s);
  }
  av_write_trailer(out);
  std::uint8_t* data = nullptr;
  const int size = avio_close_dyn_buf(out->pb, &data);
  std::vector<std::byte> bytes(reinterpret_cast<std::byte*>(data), reinterpret_cast<std::byte*>(data) + size);
  av_free(data);
  av_packet_free(&packet);
  avformat_free_context(out);
  for (stream_state& s : streams) avcodec_free_context(&s.ctx);
  return bytes;
}

// `f` allocated as frame `pts` of video encoder `c`: its size and pixel format, buffers to fill.
inline void alloc_video_frame(const AVCodecContext* c, AVFrame* f, std::int64_t pts) {
  f->width = c->width;
  f->height = c->height;
  f->format = c->pix_fmt;
  f->pts = pts;
  if (av_frame_get_buffer(f, 0) < 0) throw std::runtime_error("cannot allocate a video frame");
}

}  // namespace baton::test
