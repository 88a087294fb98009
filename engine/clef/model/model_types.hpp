// The torch-free types the model's parts share with its public API: the options' enums, a record's
// questions and media, its logits, the forward's observer and profile, the prefix cache's counters.
// model.hpp re-exports them; the parts below it (the thinker, the head, the kernels) include this
// instead, so that nothing in this folder includes a file above it (docs/architecture.md, Layers).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "engine/clef/model/audio_features.hpp"
#include "engine/clef/model/vision_preprocess.hpp"

namespace baton::clef {

enum class compute_dtype { f32, bf16 };

// Which library multiplies the CPU's packed experts (fp32, and bf16 with oneDNN; int8 ones computed
// in fp32: libxsmm or the BLAS).
enum class expert_library {
  measured,  // fp32: the fastest on layer 0, timed at load (where the process has the BLAS); bf16: oneDNN
  onednn,    // oneDNN's matmul on weights packed at load into its blocked layout (fp32, bf16)
  xsmm,      // libxsmm's kernels on weights packed at load in blocks of 32 outputs (fp32; int8
             // ones widened a block at a time)
  blas,      // the BLAS libtorch runs at::mm on, over the weights as they are (fp32; int8 ones
             // widened per matmul by ATen)
};

struct token_span {
  std::int32_t begin = 0;
  std::int32_t end = 0;
};

struct question_layout {
  std::uint8_t type = 0;  // 0 noul, 1 choice, 2 score (the head's type embedding rows)
  token_span question;
  std::vector<token_span> options;
};

// Logits per question, per option, in the encoded option order.
using record_logits = std::vector<std::vector<float>>;

// One record's media, preprocessed, each kind in prompt order (docs/media.md). The ids hold their
// pads: the model puts the encoders' rows there and positions them with the MRoPE index.
struct record_media {
  std::span<const vision_patches> images;
  // The clips, then (with audio_in_video) each video's soundtrack, as the prompt's audio blocks.
  std::span<const log_mel> audio;
  std::span<const vision_patches> videos;
  bool audio_in_video = false;  // each video's pads interleave with its soundtrack's

  bool empty() const noexcept { return images.empty() && audio.empty() && videos.empty(); }
};

// Wall time per part of the last forward, when profiling is on (bench/).
struct forward_profile {
  double media_ms = 0;  // the vision and audio towers, and placing their rows
  double embed_ms = 0, attention_ms = 0, moe_ms = 0, norms_ms = 0, head_ms = 0, total_ms = 0;
  std::int64_t tokens = 0;
  // ATen operations started in attention and in the MoE, all layers (views included; an
  // operation's own inner calls are not counted): what a GPU pays a launch for.
  std::int64_t attention_ops = 0, moe_ops = 0;
};

// Observes the model's intermediate results (tests), fp32 on the CPU, row-major [rows, width]:
// "audio_features", "image_embeds", "image_deepstack.<i>", "video_embeds", "video_deepstack.<i>"
// (every item of the kind, concatenated), "position_ids" ([3, tokens], only with media),
// "inputs_embeds", "layer_out.<l>" (before any deepstack add) and "final_hidden".
using stage_observer =
    std::function<void(std::string_view stage, std::span<const float> values, std::int64_t rows)>;

// The prefix cache's counters (baton's prefix_cache_stats, which this folder cannot include: it
// builds on its own).
struct prefix_cache_counters {
  std::int64_t hits = 0, misses = 0;  // records that reused a cached prefix, records that did not
  std::int64_t evictions = 0;         // entries dropped to stay within max_bytes
  std::int64_t cached_tokens = 0;     // tokens served from the cache instead of recomputed, in all
  std::int64_t entries = 0, bytes = 0, max_bytes = 0;
};

}  // namespace baton::clef
