// Qwen3-Omni's audio features: the Whisper log-mel spectrogram (128 mel bins, 25 ms window, 10 ms
// hop) of 16 kHz mono PCM, as transformers' WhisperFeatureExtractor computes it when called by the
// Qwen3-Omni processor (padding to the longest audio of the call, no truncation to 30 s).
// This header is torch-free so that the rest of baton compiles without ATen.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace baton::clef {

inline constexpr int audio_sample_rate = 16000;
inline constexpr int mel_bins = 128;
inline constexpr int mel_hop_samples = 160;
inline constexpr int mel_window_samples = 400;
// The reference's centred STFT reflect-pads 200 samples on each side, which needs more samples than
// that (torch.stft fails on shorter audio): callers reject shorter (padded) audio before calling.
inline constexpr std::size_t min_audio_samples = mel_window_samples / 2 + 1;

struct log_mel {
  std::int64_t frames = 0;                 // L: one per 160 samples (the STFT's last frame dropped)
  std::vector<float> values;               // input_features, row-major [mel_bins, frames]
  std::vector<std::int32_t> frame_mask;    // feature_attention_mask, [frames]: 1 = audio, 0 = padding

  // The frames the mask marks: the audio's own, without the call's padding.
  std::int64_t marked_frames() const noexcept {
    std::int64_t n = 0;
    for (const auto m : frame_mask) n += m != 0;
    return n;
  }
};

// The log-mel features of `samples` (16 kHz mono, float PCM in [-1, 1]), zero-padded at the end to
// `padded_samples` first when that is larger: the processor pads every audio of one call to the
// longest, and the padding changes the last frames and the clamp (max − 8 over the padded audio).
// frames = padded length / 160, rounded down; the mask marks ceil(samples / 160) of them (one more
// than the unpadded frame count when the audio was padded and is not a multiple of 160, as in the
// reference). Requires max(samples.size(), padded_samples) >= min_audio_samples. Runs on the CPU in
// float32, as the processor's torch path does.
log_mel log_mel_features(std::span<const float> samples, std::size_t padded_samples = 0);

// Tokens the audio encoder makes of `mel_frames` frames: 13 per full 100-frame chunk plus three
// stride-2 halvings of the rest, with floor division (a rest of 0 adds none), as transformers'
// _get_feat_extract_output_lengths computes the processor's placeholder count.
constexpr std::int64_t audio_token_count(std::int64_t mel_frames) {
  const std::int64_t rest = mel_frames % 100;
  auto halve = [](std::int64_t n) { return (n - 1) / 2 + 1; };  // n >= 1 here: no negative division
  return mel_frames / 100 * 13 + (rest == 0 ? 0 : halve(halve(halve(rest))));
}

// The Slaney-style mel filter bank [201 frequency bins, 128 mel bins], row-major, in float32:
// transformers' mel_filter_bank(201, 128, 0, 8000, 16000, "slaney", "slaney").
std::vector<float> mel_filter_bank();

}  // namespace baton::clef
