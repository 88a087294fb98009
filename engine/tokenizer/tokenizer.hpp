// Byte-level BPE tokenizer with the ids of Hugging Face `tokenizers` for the Qwen2 / Qwen3 /
// Qwen3-Omni vocabulary: added tokens split out of the raw text, NFC, the Split regex, GPT-2
// bytes_to_unicode, BPE by merge rank. Depends on PCRE2, utf8proc and nlohmann_json only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

namespace baton {

// true when `text` is well-formed UTF-8 (no surrogates, no overlongs).
bool valid_utf8(std::string_view text) noexcept;

class tokenizer {
 public:
  // `path`: a tokenizer.json file, or a directory holding tokenizer.json, or (when the directory
  // has no tokenizer.json) vocab.json + merges.txt + the added tokens from tokenizer_config.json's
  // `added_tokens_decoder` (or added_tokens.json), with NFC and the Qwen2 split regex. Throws
  // std::runtime_error naming the file and the problem; settings that would change the ids and
  // are not supported are refused rather than ignored.
  static std::unique_ptr<tokenizer> load(const std::filesystem::path& path);

  ~tokenizer();
  tokenizer(const tokenizer&) = delete;
  tokenizer& operator=(const tokenizer&) = delete;

  // Appends the ids of `text`, as HF `tokenizer(text, add_special_tokens=False)`. `text` must be
  // valid UTF-8; where it is not, each byte outside a well-formed sequence becomes its own
  // byte-level token and the well-formed stretches around it are encoded as usual (HF would
  // refuse such input). Safe to call from several threads at once. Throws std::runtime_error only
  // if PCRE2 exceeds its match limits, which the Qwen regex does not do even on megabyte-long runs.
  void encode(std::string_view text, std::vector<std::int32_t>& out) const;
  std::vector<std::int32_t> encode(std::string_view text) const;

  // Id of a vocabulary or added token string (byte-level form for vocab entries), if any.
  std::optional<std::int32_t> token_to_id(std::string_view token) const;

  // One past the largest id (vocab and added tokens).
  std::size_t size() const noexcept;

  // Forgets the cached BPE results of pieces: ids never change, only the speed of the next calls.
  void clear_cache() const;

 private:
  struct model;
  explicit tokenizer(std::unique_ptr<model> m);
  std::unique_ptr<model> model_;
};

}  // namespace baton
