// Qwen3-Omni's vision tower (transformers' Qwen3OmniMoeVisionEncoder): Conv3d patch embedding,
// the learned position table interpolated to the grid, 2-D rotary attention blocks confined to
// each frame pair, the 2 x 2 merger, and the deepstack mergers fed by intermediate blocks.
// Engine-internal (ATen): only engine/clef/model .cpp files include it.
#pragma once

#include <vector>

#include "engine/clef/model/release.hpp"
#include "engine/clef/model/tensors.hpp"
#include "engine/clef/model/vision_preprocess.hpp"

namespace baton::clef::detail {

struct vision_features {
  at::Tensor embeds;                   // [tokens, out_hidden]: the <|image_pad|> / <|video_pad|> rows
  std::vector<at::Tensor> deepstack;   // per deepstack layer, [tokens, out_hidden]
};

class vision_encoder {
 public:
  // Requires files.vision(); throws load_error when the tensors do not fit the preprocessor's
  // patch layout (vision_patch_values per row). `score_budget_bytes` bounds one chunk of fp32
  // attention scores (the model's: cache-sized on the CPU, so chunks reuse memory).
  vision_encoder(const release& files, at::ScalarType type, at::Device device, std::int64_t score_budget_bytes);

  // One image or video (encoded on its own: attention never crosses frame pairs, let alone items).
  // Results in the compute dtype on the device.
  vision_features encode(const vision_patches& patches) const;

 private:
  struct linear {
    at::Tensor weight, bias;
  };
  struct norm {
    at::Tensor weight, bias;
  };
  struct block {
    norm norm1, norm2;
    linear qkv, proj, fc1, fc2;
  };
  struct merger {
    norm ln_q;
    linear fc1, fc2;
  };

  at::Tensor position_embedding(std::int64_t h, std::int64_t w) const;
  at::Tensor attention(const block& b, const at::Tensor& a, const at::Tensor& cos,
                       const at::Tensor& sin, std::int64_t frames) const;
  at::Tensor merge(const merger& m, const at::Tensor& x, bool norm_after_merge) const;

  vision_config config_;
  at::ScalarType type_;
  at::Device device_;
  std::int64_t score_budget_bytes_;
  linear patch_embed_;  // the Conv3d weight viewed as [hidden, vision_patch_values]
  at::Tensor pos_embed_;
  at::Tensor inv_freq_;  // [head_dim / 4] fp32
  std::vector<block> blocks_;
  merger merger_;
  std::vector<merger> deepstack_;  // merger_list, in config order
};

}  // namespace baton::clef::detail
