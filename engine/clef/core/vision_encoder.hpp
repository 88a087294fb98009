// Qwen3-Omni's vision tower (qwen3-omni-thinker.md §5.3): Conv3d patch embedding, the learned
// position table interpolated to the grid, 2-D rotary attention blocks confined to each frame
// pair, the 2 x 2 merger, and the deepstack mergers fed by intermediate blocks (§5.4).
// Engine-internal (ATen): only engine/clef/core .cpp files include it.
#pragma once

#include <vector>

#include "engine/clef/core/tensors.hpp"
#include "engine/clef/core/vision_preprocess.hpp"

namespace baton::clef::detail {

struct vision_features {
  at::Tensor embeds;                   // [tokens, out_hidden]: the <|image_pad|> / <|video_pad|> rows
  std::vector<at::Tensor> deepstack;   // per deepstack layer, [tokens, out_hidden]
};

class vision_encoder {
 public:
  // Requires files.vision(); throws load_error when the tensors do not fit the preprocessor's
  // patch layout (vision_patch_values per row).
  vision_encoder(const release& files, at::ScalarType type, at::Device device);

  // One image or video (encoded on its own: attention never crosses frame pairs, let alone items).
  // Results in the compute dtype on the device.
  vision_features encode(const vision_patches& patches) const;
};

}  // namespace baton::clef::detail
