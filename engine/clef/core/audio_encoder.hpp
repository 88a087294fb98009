// Qwen3-Omni's audio tower (qwen3-omni-thinker.md §6.2, §6.3): 100-frame chunks through three
// stride-2 convolutions, sinusoidal positions per chunk, encoder layers with windowed attention
// (n_window_infer mel frames per window), and the output projection to the text width.
// Engine-internal (ATen): only engine/clef/core .cpp files include it.
#pragma once

#include "engine/clef/core/audio_features.hpp"
#include "engine/clef/core/tensors.hpp"

namespace baton::clef::detail {

class audio_encoder {
 public:
  // Requires files.audio().
  audio_encoder(const release& files, at::ScalarType type, at::Device device);

  // One audio's features: the frames its frame_mask marks (the processor's batch padding is not
  // part of the audio). [audio_token_count(frames), output_dim] in the compute dtype on the device.
  at::Tensor encode(const log_mel& features) const;
};

}  // namespace baton::clef::detail
