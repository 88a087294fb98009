// Qwen3-Omni's audio tower (transformers' Qwen3OmniMoeAudioEncoder): 100-frame chunks through three
// stride-2 convolutions, sinusoidal positions per chunk, encoder layers with windowed attention
// (n_window_infer mel frames per window), and the output projection to the text width.
// Engine-internal (ATen): only engine/clef/model .cpp files include it.
#pragma once

#include <vector>

#include "engine/clef/model/audio_features.hpp"
#include "engine/clef/model/release.hpp"
#include "engine/clef/model/tensors.hpp"

namespace baton::clef::detail {

class audio_encoder {
 public:
  // Requires files.audio() with 100-frame chunks (n_window 50: audio_token_count, the processor's
  // placeholder count, assumes them) and 128 mel bins; throws load_error otherwise.
  // `budget_bytes` bounds the first convolution's output per batch of chunks and the attention
  // scores per batch of windows (the model's score budget), so memory does not grow with length.
  audio_encoder(const release& files, at::ScalarType type, at::Device device, std::int64_t budget_bytes);

  // One audio's features: the frames its frame_mask marks (the processor's batch padding is not
  // part of the audio). [audio_token_count(frames), output_dim] in the compute dtype on the device.
  // `batch_frames`: the most frames any stream encoded in one batch with this one marks (the
  // reference encodes a record's streams together and zero-pads every chunk to the batch's
  // longest, min(100, batch_frames) frames; a stream under one chunk sees that padding through
  // GELU(bias) in its last tokens). 0, or at most the audio's own frames: the audio alone.
  // Throws std::runtime_error when the features do not fit (mel bins, mask) or mark no frame.
  at::Tensor encode(const log_mel& features, std::int64_t batch_frames = 0) const;

 private:
  struct layer {
    at::Tensor attn_norm_w, attn_norm_b, q_w, q_b, k_w, k_b, v_w, v_b, out_w, out_b;
    at::Tensor mlp_norm_w, mlp_norm_b, fc1_w, fc1_b, fc2_w, fc2_b;
  };

  // [tokens, d_model] after the convolutions, conv_out and the per-chunk positions; every chunk
  // zero-padded to `width` frames (>= the longest chunk of `frames`, at most chunk_frames_).
  at::Tensor embed(const at::Tensor& mel, std::int64_t frames, std::int64_t width) const;
  at::Tensor attention(const layer& w, const at::Tensor& a) const;

  audio_config config_;
  at::ScalarType type_;
  at::Device device_;
  std::int64_t budget_bytes_;
  std::int64_t chunk_frames_;   // 2 * n_window mel frames per convolution chunk
  std::int64_t chunk_tokens_;   // tokens a full chunk leaves after the three halvings
  std::int64_t window_tokens_;  // attention window, chunk_tokens_ * n_window_infer / chunk_frames_
  at::Tensor conv1_w_, conv1_b_, conv2_w_, conv2_b_, conv3_w_, conv3_b_, conv_out_w_;
  at::Tensor positions_;        // [chunk_tokens_, d_model] sinusoids, in the compute dtype
  std::vector<layer> layers_;
  at::Tensor post_norm_w_, post_norm_b_, proj1_w_, proj1_b_, proj2_w_, proj2_b_;
};

}  // namespace baton::clef::detail
