// Media on the Clef path: decode (FFmpeg), preprocess (patches, log-mel) and the towers' encode
// (a forward on a record with just that media) for a 1 MP image, 30 s of audio and a 20 s video
// with sound, on the random mid-size release. The inputs are made at start with FFmpeg's own
// encoders, in memory: nothing is read from disk but the release.
//
//   media_bench [--dtype f32|bf16] [--threads N] [--runs 5] [--forward-runs 2] [--warmup 1]
//               [--dir build/bench-release-<dtype>]
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <numbers>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/opt.h>
}

#include "bench/random_release.hpp"
#include "engine/clef/media_input.hpp"
#include "engine/clef/model/blas_cpu.hpp"
#include "engine/clef/model/model.hpp"
#include "engine/media/decode.hpp"
#include "support/av_encode.hpp"

namespace {

namespace fs = std::filesystem;
using namespace baton::clef;
using namespace baton::clef::bench;
using clock_type = std::chrono::steady_clock;

// ---- inputs, made by FFmpeg's encoders ------------------------------------------------------

using baton::test::encode;
using baton::test::track;

// Uniform noise in [-amplitude, amplitude], the same on every run.
struct noise {
  xorshift rng{0x9E3779B97F4A7C15ull};
  double operator()(double amplitude) {
    return (static_cast<double>(rng.next() >> 11) * 0x1.0p-53 * 2 - 1) * amplitude;
  }
};

std::uint8_t clamp_level(double v) { return static_cast<std::uint8_t>(std::clamp(std::lround(v), 0l, 255l)); }

// Frame i: diagonal gradients that drift with i, plus ±12 levels of noise per sample (a camera's
// grain: it keeps the lossless and lossy codecs from finding flat areas). RGB24 or 4:2:0 YUV.
track picture_track(const char* encoder, AVPixelFormat format, int width, int height, int fps, int frames,
                    const char* options = "") {
  const auto setup = [=](AVCodecContext* c) {
    c->width = width;
    c->height = height;
    c->pix_fmt = format;
    c->time_base = {1, fps};
    c->framerate = {fps, 1};
    c->color_range = format == AV_PIX_FMT_YUVJ420P ? AVCOL_RANGE_JPEG : AVCOL_RANGE_UNSPECIFIED;
    if (av_set_options_string(c->priv_data, options, "=", ":") < 0) {
      throw std::runtime_error(std::string("bad options for ") + encoder);
    }
  };
  auto grain = std::make_shared<noise>();
  const auto fill = [=](AVCodecContext* c, AVFrame* f, int i) {
    if (i == frames) return false;
    baton::test::alloc_video_frame(c, f, i);
    auto level = [&](int channel, int x, int y, double scale) {
      const double base = channel == 0   ? 255.0 * (x + y) / (width + height)
                          : channel == 1 ? 255.0 * y / height
                                         : 255.0 * x / width;
      return clamp_level(std::fmod(base + 2.0 * i, 256.0) * scale + 128 * (1 - scale) + (*grain)(12));
    };
    if (format == AV_PIX_FMT_RGB24) {
      for (int y = 0; y < height; ++y) {
        std::uint8_t* row = f->data[0] + static_cast<std::ptrdiff_t>(y) * f->linesize[0];
        for (int x = 0; x < width; ++x) {
          for (int ch = 0; ch < 3; ++ch) row[3 * x + ch] = level(ch, x, y, 1);
        }
      }
      return true;
    }
    for (int plane = 0; plane < 3; ++plane) {
      const int shift = plane == 0 ? 0 : 1;
      for (int y = 0; y < height >> shift; ++y) {
        std::uint8_t* row = f->data[plane] + static_cast<std::ptrdiff_t>(y) * f->linesize[plane];
        for (int x = 0; x < width >> shift; ++x) row[x] = level(plane, x << shift, y << shift, plane == 0 ? 1 : 0.5);
      }
    }
    return true;
  };
  return {encoder, setup, fill};
}

// `seconds` of a 440 Hz tone at 0.3 with noise at 0.05, at `rate`, on `channels` channels (packed
// s16 or planar float, what the encoders below take).
track tone_track(const char* encoder, AVSampleFormat format, int rate, int channels, double seconds) {
  const auto total = static_cast<int>(std::lround(seconds * rate));
  const auto setup = [=](AVCodecContext* c) {
    c->sample_rate = rate;
    c->sample_fmt = format;
    av_channel_layout_default(&c->ch_layout, channels);
    c->time_base = {1, rate};
    c->bit_rate = 128000;
  };
  auto hiss = std::make_shared<noise>();
  const auto fill = [=](AVCodecContext* c, AVFrame* f, int index) {
    const int size = c->frame_size > 0 ? c->frame_size : 1024;
    const int start = index * size;
    if (start >= total) return false;
    f->nb_samples = std::min(size, total - start);
    f->format = c->sample_fmt;
    f->sample_rate = rate;
    av_channel_layout_copy(&f->ch_layout, &c->ch_layout);
    f->pts = start;
    av_frame_get_buffer(f, 0);
    for (int i = 0; i < f->nb_samples; ++i) {
      const double tone = 0.3 * std::sin(2 * std::numbers::pi * 440 * (start + i) / rate);
      for (int ch = 0; ch < channels; ++ch) {
        const double v = tone + (*hiss)(0.05);
        if (format == AV_SAMPLE_FMT_S16) {
          reinterpret_cast<std::int16_t*>(f->data[0])[i * channels + ch] = static_cast<std::int16_t>(std::lround(v * 32767));
        } else {
          reinterpret_cast<float*>(f->data[ch])[i] = static_cast<float>(v);
        }
      }
    }
    return true;
  };
  return {encoder, setup, fill};
}

// ---- counters -------------------------------------------------------------------------------

struct faults {
  long minor = 0, major = 0;
};

faults read_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return {u.ru_minflt, u.ru_majflt};
}

// CPU time, ms: the whole machine's busy time (/proc/stat) and this process's (all threads). What
// the other processes took during a stage tells whether its figures were measured on a quiet VM.
struct cpu_times {
  double machine_ms = 0, own_ms = 0;
};

cpu_times read_cpu() {
  cpu_times t;
  std::ifstream in("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
  const double tick_ms = 1000.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
  t.machine_ms = (user + nice + system + irq + softirq + steal) * tick_ms;
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto ms = [](const timeval& v) { return static_cast<double>(v.tv_sec) * 1e3 + static_cast<double>(v.tv_usec) / 1e3; };
  t.own_ms = ms(u.ru_utime) + ms(u.ru_stime);
  return t;
}

// VmRSS and VmHWM (the peak so far), MiB.
std::pair<double, double> read_rss() {
  std::ifstream in("/proc/self/status");
  double rss = 0, peak = 0;
  auto mib = [](const std::string& l) { return std::stod(l.substr(l.find(':') + 1)) / 1024.0; };
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("VmRSS:")) rss = mib(line);
    if (line.starts_with("VmHWM:")) peak = mib(line);
  }
  return {rss, peak};
}

double ms_since(clock_type::time_point start) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - start).count();
}

struct stats {
  double median = 0, min = 0, max = 0;
};

stats summarise(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return {n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2, v.front(), v.back()};
}

// One stage over its runs: wall time, minor faults per run (the first apart: it touches fresh
// memory the later runs may find in the allocator), major faults in all, RSS after the last run.
struct stage {
  std::vector<double> ms, minor;
  long first_minor = 0, major = 0;
  double rss_mib = 0, peak_mib = 0;
  double others_percent = 0;  // of all cores, over the stage's runs
};

template <class F>
stage measure(int runs, F&& body) {
  stage s;
  const cpu_times cpu_before = read_cpu();
  const auto stage_start = clock_type::now();
  for (int i = 0; i < runs; ++i) {
    const faults before = read_faults();
    const auto start = clock_type::now();
    body();
    s.ms.push_back(ms_since(start));
    const faults after = read_faults();
    if (i == 0) s.first_minor = after.minor - before.minor;
    s.minor.push_back(static_cast<double>(after.minor - before.minor));
    s.major += after.major - before.major;
  }
  std::tie(s.rss_mib, s.peak_mib) = read_rss();
  const cpu_times cpu_after = read_cpu();
  const double capacity_ms = ms_since(stage_start) * std::thread::hardware_concurrency();
  s.others_percent = std::max(0.0, (cpu_after.machine_ms - cpu_before.machine_ms) -
                                       (cpu_after.own_ms - cpu_before.own_ms)) /
                     capacity_ms * 100;
  return s;
}

void print_header() {
  std::printf("  %-40s %9s %9s %9s %9s %9s %8s %8s %7s\n", "stage", "median ms", "min", "max", "1st flt",
              "flt/run", "RSS MiB", "peak", "others");
}

void print_stage(const std::string& name, const stage& s) {
  const stats t = summarise(s.ms);
  std::printf("  %-40s %9.1f %9.1f %9.1f %9ld %9.0f %8.0f %8.0f %6.0f%%%s\n", name.c_str(), t.median, t.min,
              t.max, s.first_minor, summarise(s.minor).median, s.rss_mib, s.peak_mib, s.others_percent,
              s.major ? (" major " + std::to_string(s.major)).c_str() : "");
}

// ---- the record -----------------------------------------------------------------------------

constexpr std::int32_t newline_id = 198;

// 16 random text ids, the media block, one choice question of 4 options, 4 closing ids: the
// shape of a prompt whose media come before the schema.
struct record {
  std::vector<std::int32_t> ids;
  std::vector<question_layout> questions;
};

record make_record(const prepared_media& media, const media_tokens& tokens) {
  record r;
  xorshift rng{12345};
  auto text = [&](int n) {
    for (int i = 0; i < n; ++i) r.ids.push_back(static_cast<std::int32_t>(rng.next() % bench_first_media_token));
  };
  text(16);
  const media_block block = media_block_ids(media, tokens, newline_id);
  r.ids.insert(r.ids.end(), block.ids.begin(), block.ids.end());
  question_layout q;
  q.type = 1;
  auto at = static_cast<std::int32_t>(r.ids.size());
  q.question = {at, at + 12};
  text(12);
  for (int o = 0; o < 4; ++o) {
    at = static_cast<std::int32_t>(r.ids.size());
    q.options.push_back({at, at + 8});
    text(8);
  }
  text(4);
  r.questions.push_back(std::move(q));
  return r;
}

struct forward_figures {
  std::vector<double> media_ms, total_ms;
  std::int64_t tokens = 0;
  stage timing;
};

forward_figures time_forward(model& m, const prepared_media& media, int warmup, int runs) {
  const record r = make_record(media, m.files().tokens());
  const record_media view = media.view();
  const record_input input{r.ids, r.questions, &view};
  forward_figures f;
  for (int i = 0; i < warmup; ++i) m.forward({&input, 1});
  f.timing = measure(runs, [&] {
    m.forward({&input, 1});
    f.media_ms.push_back(m.last_profile().media_ms);
    f.total_ms.push_back(m.last_profile().total_ms);
  });
  f.tokens = m.last_profile().tokens;
  return f;
}

void print_forward(const std::string& name, const forward_figures& f) {
  const stats media = summarise(f.media_ms), total = summarise(f.total_ms);
  std::printf("  %-40s %9.1f %9.1f %9.1f\n", (name + ": towers (media_ms)").c_str(), media.median, media.min,
              media.max);
  print_stage(name + ": whole forward", f.timing);
  std::printf("  %-40s %lld tokens; the text model and head %.1f ms of the %.1f\n", "",
              static_cast<long long>(f.tokens), total.median - media.median, total.median);
}

// ---- driver ---------------------------------------------------------------------------------

struct arguments {
  fs::path dir;
  std::string dtype = "f32";
  int threads = 0;
  int runs = 5, forward_runs = 2, warmup = 1;
};

arguments parse_arguments(int argc, char** argv) {
  arguments a;
  for (int i = 1; i < argc; ++i) {
    const std::string key = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(key + " needs a value");
      return argv[++i];
    };
    if (key == "--dir") {
      a.dir = value();
    } else if (key == "--dtype") {
      a.dtype = value();
    } else if (key == "--threads") {
      a.threads = std::stoi(value());
    } else if (key == "--runs") {
      a.runs = std::stoi(value());
    } else if (key == "--forward-runs") {
      a.forward_runs = std::stoi(value());
    } else if (key == "--warmup") {
      a.warmup = std::stoi(value());
    } else {
      throw std::runtime_error(
          "usage: media_bench [--dtype f32|bf16] [--threads N] [--runs N] [--forward-runs N] [--warmup N] "
          "[--dir PATH]");
    }
  }
  if (a.dtype != "f32" && a.dtype != "bf16") throw std::runtime_error("--dtype is f32 or bf16");
  if (a.runs < 1 || a.forward_runs < 1 || a.warmup < 0 || a.threads < 0) {
    throw std::runtime_error("--runs and --forward-runs must be positive, --warmup and --threads non-negative");
  }
  if (a.dir.empty()) a.dir = "build/bench-release-" + a.dtype;
  return a;
}

vision_patches take(vision_result<vision_patches> r) {
  if (const auto* e = std::get_if<vision_error>(&r)) throw std::runtime_error(e->message);
  return std::move(std::get<vision_patches>(r));
}

rgb_frames view_of(const baton::media::rgb_frames& f) { return {f.pixels, f.frames, f.height, f.width}; }

double mib(std::size_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

int run(const arguments& args) {
  av_log_set_level(AV_LOG_QUIET);
  if (!release_is_current(args.dir)) {
    std::printf("writing a random %s release to %s ...\n", args.dtype.c_str(), args.dir.c_str());
    write_release(args.dir, args.dtype == "bf16");
  }
  model_options options;
  compute_dtype dtype = compute_dtype::f32;
  parse_compute_dtype(args.dtype, dtype);
  options.dtype = dtype;
  options.head_dtype = dtype;
  options.threads = args.threads;  // 0: every core; also the preprocessors' ATen threads
  const auto m = model::load(args.dir, options);
  if (!m->reads_images() || !m->reads_audio()) throw std::runtime_error(args.dir.string() + ": no towers");
  m->set_profiling(true);
  const std::string blas = blas_core_name();
  std::printf("media bench, %s, %d threads (%u cores), release %s, BLAS %s\n", args.dtype.c_str(),
              args.threads > 0 ? args.threads : static_cast<int>(std::thread::hardware_concurrency()),
              std::thread::hardware_concurrency(), args.dir.c_str(), blas.empty() ? "not OpenBLAS" : blas.c_str());
  std::printf("%d runs of decode and preprocess, %d warm-up + %d timed forwards\n", args.runs, args.warmup,
              args.forward_runs);

  const auto made = clock_type::now();
  const auto png = encode("image2pipe", {picture_track("png", AV_PIX_FMT_RGB24, 1024, 1024, 1, 1)});
  const auto jpeg = encode("image2pipe", {picture_track("mjpeg", AV_PIX_FMT_YUVJ420P, 1024, 1024, 1, 1)});
  const auto wav = encode("wav", {tone_track("pcm_s16le", AV_SAMPLE_FMT_S16, 16000, 1, 30)});
  const auto mp3 = encode("mp3", {tone_track("libmp3lame", AV_SAMPLE_FMT_FLTP, 44100, 2, 30)});
  const auto mp4 = encode("mp4", {picture_track("libx264", AV_PIX_FMT_YUV420P, 640, 360, 25, 500, "preset=veryfast"),
                                  tone_track("aac", AV_SAMPLE_FMT_FLTP, 44100, 2, 20)});
  std::printf("inputs made in %.1f s: PNG 1024x1024 %.2f MiB, JPEG %.2f MiB, WAV 16 kHz mono 30 s %.2f MiB, "
              "MP3 44.1 kHz stereo 30 s %.2f MiB, MP4 H.264 640x360 25 fps + AAC 44.1 kHz stereo 20 s %.2f MiB\n\n",
              ms_since(made) / 1e3, mib(png.size()), mib(jpeg.size()), mib(wav.size()), mib(mp3.size()),
              mib(mp4.size()));
  print_header();

  // Image: decode both formats, preprocess and encode the PNG's pixels.
  baton::media::rgb_frames image;
  print_stage("image PNG: decode", measure(args.runs, [&] { image = baton::media::decode_image(png).value(); }));
  print_stage("image JPEG: decode", measure(args.runs, [&] { baton::media::decode_image(jpeg).value(); }));
  prepared_media image_media;
  image_media.images.resize(1);
  print_stage("image: preprocess (patches)",
              measure(args.runs, [&] { image_media.images[0] = take(preprocess_image(view_of(image))); }));
  std::printf("  %-40s %lld patches, %lld tokens\n", "", static_cast<long long>(image_media.images[0].rows()),
              static_cast<long long>(image_media.images[0].tokens()));
  print_forward("image", time_forward(*m, image_media, args.warmup, args.forward_runs));

  // Audio: decode both formats, log-mel and encode the WAV's samples.
  std::vector<float> samples;
  print_stage("audio WAV: decode", measure(args.runs, [&] { samples = baton::media::decode_audio(wav).value(); }));
  print_stage("audio MP3: decode", measure(args.runs, [&] { baton::media::decode_audio(mp3).value(); }));
  prepared_media audio_media;
  audio_media.audio.resize(1);
  print_stage("audio: preprocess (log-mel)",
              measure(args.runs, [&] { audio_media.audio[0] = log_mel_features(samples); }));
  std::printf("  %-40s %lld mel frames, %lld tokens\n", "", static_cast<long long>(audio_media.audio[0].frames),
              static_cast<long long>(audio_token_count(audio_media.audio[0].frames)));
  print_forward("audio", time_forward(*m, audio_media, args.warmup, args.forward_runs));

  // Video with sound: frames sampled at 2 fps and the soundtrack, read together as the engine
  // does when every video has sound (the pads interleaved by time).
  baton::media::video clip;
  print_stage("video MP4: decode", measure(args.runs, [&] { clip = baton::media::decode_video(mp4).value(); }));
  prepared_media video_media;
  video_media.videos.resize(1);
  video_media.audio.resize(1);
  video_media.audio_in_video = true;
  print_stage("video: preprocess frames (patches)", measure(args.runs, [&] {
                video_media.videos[0] = take(preprocess_video(view_of(clip.frames), baton::media::video_sample_fps));
              }));
  print_stage("video: preprocess sound (log-mel)",
              measure(args.runs, [&] { video_media.audio[0] = log_mel_features(clip.audio); }));
  const vision_patches& v = video_media.videos[0];
  std::printf("  %-40s %lld frames of %lldx%lld, %lld patches, %lld + %lld tokens\n", "",
              static_cast<long long>(clip.frames.frames), static_cast<long long>(clip.frames.width),
              static_cast<long long>(clip.frames.height), static_cast<long long>(v.rows()),
              static_cast<long long>(v.tokens()),
              static_cast<long long>(audio_token_count(video_media.audio[0].frames)));
  print_forward("video+sound", time_forward(*m, video_media, args.warmup, args.forward_runs));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  baton::clef::reexec_with_better_blas_core(argv);
  try {
    return run(parse_arguments(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "media_bench: %s\n", e.what());
    return 1;
  }
}
