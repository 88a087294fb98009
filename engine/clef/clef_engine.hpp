// The clef decision engine: SystemOne requests -> record encoding -> Clef-Omni model -> answers.
// Text and JSON states, and the images, audio and videos the release's towers read.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "engine/clef/media_input.hpp"
#include "engine/clef/model/model.hpp"
#include "engine/clef/record_encoder.hpp"
#include "engine/decision_engine.hpp"
#include "engine/tokenizer/tokenizer.hpp"

namespace baton::clef {

struct clef_engine_options {
  std::filesystem::path model_dir;
  model_options model;
  std::size_t max_length = 64000;    // tokens per record (REF-omni DEFAULT_MAX_LENGTH)
  std::size_t batch_tokens = 16384;  // records are packed into one forward up to this many tokens
  std::string model_id;              // what responses and the log name; empty: served_model_id(model_dir)
  // Where media may come from and the decode limits; the pixel bounds are read from the release.
  media_settings media;
};

// What one record went through, for `baton decide --dump` and the parity tests.
struct clef_trace {
  encoded_record encoded;
  std::vector<media_placeholder> media;  // offsets from the record's first id
  bool audio_in_video = false;
  record_logits logits;  // per question, encoded option order
};

// The release's tokenizer and prompt encoding alone: no weights are read (`baton encode`).
class clef_encoder {
 public:
  explicit clef_encoder(const std::filesystem::path& model_dir);  // throws load_error

  // Refusals as the reference makes them (422), or 500 INFERENCE_FAILED when tokenizing fails.
  // `media_ids`: the media block, placed after the prompt prefix.
  result<encoded_record> encode(const request& r, std::size_t max_length,
                                std::span<const std::int32_t> media_ids = {}) const;
  const tokenizer& text_tokenizer() const noexcept { return *tokenizer_; }

 private:
  class pieces final : public piece_tokenizer {
   public:
    explicit pieces(const tokenizer& t) : tokenizer_(t) {}
    void encode(std::string_view text, std::vector<std::int32_t>& out) const override {
      tokenizer_.encode(text, out);
    }

   private:
    const tokenizer& tokenizer_;
  };

  std::unique_ptr<tokenizer> tokenizer_;
  pieces pieces_;
};

// One caller at a time: a forward already uses every core, and the model keeps per-forward state
// (its profile). The tokenizer alone is safe to share.
class clef_engine final : public decision_engine {
 public:
  explicit clef_engine(const clef_engine_options& options);  // throws load_error

  const engine_description& describe() const noexcept override { return description_; }
  std::vector<result<decision>> decide(std::span<const request> batch) override;
  result<std::size_t> state_overflow(const request& r) override;
  std::optional<prefix_cache_stats> cache_stats() const override;

  // decide() with a context window per request (empty: the engine's) and, when `traces` is
  // given, what each record went through (nullopt for a refused one).
  std::vector<result<decision>> decide(std::span<const request> batch,
                                       std::span<const std::size_t> max_lengths,
                                       std::vector<std::optional<clef_trace>>* traces);

 private:
  // One record with media: prepared, encoded, checked and run on its own.
  result<decision> decide_media(const request& r, std::size_t max_length, std::optional<clef_trace>* trace);

  clef_engine_options options_;
  clef_encoder encoder_;
  std::unique_ptr<model> model_;
  engine_description description_;
  std::int32_t newline_id_ = 0;  // "\n" ends each media item's block
};

// The name a release is served under when none is configured: ORG/NAME for a Hugging Face cache
// snapshot (…/models--ORG--NAME/snapshots/REV, whose own name is only the revision), else the
// directory's name.
std::string served_model_id(const std::filesystem::path& model_dir);

// sha256 ("sha256:<hex>") over the release's index, config and head files, and the size, header
// and 16 sampled windows of each shard the loader reads (talker-only shards are not): identifies
// the weights without reading tens of GB.
std::string release_fingerprint(const std::filesystem::path& model_dir);

// What a clef_engine checks of a release's tokenizer when it loads (the prompt's control tokens
// read as one token each, config.json's ids for them, no id past the thinker's vocabulary),
// without its weights; throws load_error. `baton quantize` copies the tokenizer as it is.
void check_release_tokenizer(const std::filesystem::path& dir);

}  // namespace baton::clef
