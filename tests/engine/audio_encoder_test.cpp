// The audio tower on a record's streams of different lengths against the reference's padded batch
// (make_audio_tower_vectors: transformers v4.57's Qwen3OmniMoeAudioEncoder.forward, written out
// in python3-torch, on the clef-omni-tiny release's audio tower).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "engine/clef/model/audio_encoder.hpp"
#include "engine/clef/model/model.hpp"
#include "support/files.hpp"

namespace baton::clef {
namespace {

const std::filesystem::path tower_vectors = BATON_AUDIO_TOWER_VECTORS;
std::filesystem::path release_dir() { return test::data_dir() / "vectors/clef-omni-tiny/release"; }

// Both sides are float32 on the CPU with the same weights; the convolutions and attention run in
// different libraries (oneDNN, baton's kernels, torch 1.13's). Measured at most 1.2e-6 on these
// outputs (values up to 4.4); a stream under one chunk encoded alone is 1.7e-2 off (GELU of the
// convolutions' biases over the batch padding, in its last token, spread by attention).
constexpr double tolerance = 2e-5;

struct stream {
  log_mel features;  // the processor's, padded to the case's longest stream
  // The tower's output [tokens, output_dim]: in the case's call, and in a call of its own.
  std::vector<float> batch, alone;
};

std::vector<stream> case_streams(const std::string& which, std::size_t count) {
  std::vector<stream> out;
  for (std::size_t i = 0; i < count; ++i) {
    const std::string stem = which + "." + std::to_string(i);
    stream s;
    s.features.values = test::raw_values<float>(tower_vectors / (stem + ".mel"));
    s.features.frame_mask = test::raw_values<std::int32_t>(tower_vectors / (stem + ".mask"));
    s.features.frames = static_cast<std::int64_t>(s.features.frame_mask.size());
    EXPECT_GT(s.features.frames, 0) << stem << ": no reference (the make_audio_tower_vectors fixture writes it)";
    EXPECT_EQ(s.features.values.size(), s.features.frame_mask.size() * mel_bins) << stem;
    s.batch = test::raw_values<float>(tower_vectors / (stem + ".batch"));
    s.alone = test::raw_values<float>(tower_vectors / (stem + ".alone"));
    out.push_back(std::move(s));
  }
  return out;
}

double max_abs_difference(std::span<const float> got, std::span<const float> want) {
  EXPECT_EQ(got.size(), want.size());
  double worst = 0;
  for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
  }
  return worst;
}

std::vector<float> floats(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kFloat).contiguous();
  return {c.data_ptr<float>(), c.data_ptr<float>() + c.numel()};
}

struct tower_case {
  const char* name;
  std::int64_t long_frames, short_frames;  // the short stream is under one 100-frame chunk
};
// A stream of three chunks with one of 62 frames (padded to 100 by the batch); two streams under
// one chunk (the 62-frame one padded to 82, the longest chunk, not to 100).
constexpr tower_case cases[] = {{"long_and_short", 237, 62}, {"two_short", 82, 62}};

// The encoder, alone and with the batch's longest frame count, against the reference's two calls.
TEST(audio_encoder, each_stream_is_encoded_as_the_references_padded_batch_encodes_it) {
  const release files(release_dir());
  const detail::audio_encoder tower(files, at::kFloat, at::kCPU, std::int64_t{64} << 20);
  for (const tower_case& c : cases) {
    SCOPED_TRACE(c.name);
    const auto streams = case_streams(c.name, 2);
    ASSERT_EQ(streams[0].features.marked_frames(), c.long_frames);
    ASSERT_EQ(streams[1].features.marked_frames(), c.short_frames);
    for (std::size_t i = 0; i < streams.size(); ++i) {
      SCOPED_TRACE("stream " + std::to_string(i));
      const stream& s = streams[i];
      const double batch = max_abs_difference(floats(tower.encode(s.features, c.long_frames)), s.batch);
      const double alone = max_abs_difference(floats(tower.encode(s.features)), s.alone);
      const double old = max_abs_difference(floats(tower.encode(s.features)), s.batch);
      std::printf("%s stream %zu (%lld frames): against the batch %.3g, alone against a call of its own %.3g; "
                  "alone against the batch %.3g\n",
                  c.name, i, static_cast<long long>(s.features.marked_frames()), batch, alone, old);
      EXPECT_LT(batch, tolerance);
      EXPECT_LT(alone, tolerance);  // one stream: its own longest chunk, as before
      // The short stream encoded alone (the old behaviour) is not what the batch computes.
      if (i == 1) {
        EXPECT_GT(old, 100 * tolerance);
      }
      // Two streams under one chunk pad to the longer one, not to a full chunk: the 82-frame
      // stream padded to 100 frames is off too.
      if (c.long_frames < 100 && i == 0) {
        const double full = max_abs_difference(floats(tower.encode(s.features, 100)), s.batch);
        std::printf("%s stream 0 padded to 100 frames against the batch %.3g\n", c.name, full);
        EXPECT_GT(full, 100 * tolerance);
      }
    }
  }
}

// Through the model: a record's two audio items reach the tower as one batch (model.cpp passes the
// record's longest stream), and their rows are the reference's.
TEST(audio_encoder, a_records_audio_items_are_one_batch_in_the_model) {
  model_options options;
  options.head = false;
  options.threads = 1;  // see clef_engine_test.cpp
  const auto m = model::load(release_dir(), options);
  ASSERT_TRUE(m->reads_audio());
  const media_tokens& tok = m->files().tokens();
  for (const tower_case& c : cases) {
    SCOPED_TRACE(c.name);
    const auto streams = case_streams(c.name, 2);
    std::vector<log_mel> audio;
    std::vector<std::int32_t> ids;
    std::vector<float> want;
    for (const stream& s : streams) {
      audio.push_back(s.features);
      ids.push_back(static_cast<std::int32_t>(*tok.audio_start));
      ids.insert(ids.end(), static_cast<std::size_t>(audio_token_count(s.features.marked_frames())),
                 static_cast<std::int32_t>(*tok.audio));
      ids.push_back(static_cast<std::int32_t>(*tok.audio_end));
      want.insert(want.end(), s.batch.begin(), s.batch.end());
    }
    const record_media media{{}, audio, {}, false};
    std::vector<float> got;
    m->trace(ids, &media, [&](std::string_view stage, std::span<const float> values, std::int64_t) {
      if (stage == "audio_features") got.assign(values.begin(), values.end());
    });
    ASSERT_EQ(got.size(), want.size());
    EXPECT_LT(max_abs_difference(got, want), tolerance);
  }
}

}  // namespace
}  // namespace baton::clef
