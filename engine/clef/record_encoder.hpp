// The Clef record encoder (Cloudflare's reference encode_record): the reference's hand-written ChatML prompt,
// each piece tokenized on its own, the question and option spans the joint head pools, and the
// state cut from its end to fit the window.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "core/request.hpp"

namespace baton::clef {

// Tokenizes one prompt piece on its own (HF `tokenizer(text, add_special_tokens=False)`) and
// appends its ids to `out`.
class piece_tokenizer {
 public:
  virtual ~piece_tokenizer() = default;
  virtual void encode(std::string_view text, std::vector<std::int32_t>& out) const = 0;
};

// Every UTF-8 byte is one id, its value (JUDGE's byte mode: tokenizer-independent vectors, tests).
class byte_tokenizer final : public piece_tokenizer {
 public:
  void encode(std::string_view text, std::vector<std::int32_t>& out) const override;
};

struct span {
  std::int32_t begin = 0, end = 0;  // half-open token indices

  std::int32_t size() const noexcept { return end - begin; }
  friend bool operator==(const span&, const span&) = default;
};

struct encoded_question {
  std::string id;
  question_type type = question_type::noul;
  span question;                  // instruction span
  std::vector<span> options;      // encoded order: noul true, false; choice keys by code point; score 0..n-1
  std::vector<std::string> option_ids;        // encoded order
  std::vector<std::uint32_t> request_option;  // encoded option k -> its index i in question::option_id(i)
};

struct encoded_record {
  std::vector<std::int32_t> ids;
  std::vector<encoded_question> questions;  // request order
  std::size_t prefix_tokens = 0;            // len(P + MED): where the state starts
  std::size_t state_kept = 0, state_dropped = 0;
};

struct encode_options {
  std::size_t max_length = 64000;                // Clef-Omni default (Clef / Clef-Flash: 16384)
  std::span<const std::int32_t> media_ids = {};  // MED: the expanded media block, placed after P
};

// P and X of §2.1, verbatim (P embeds the system prompt).
inline constexpr std::string_view prompt_prefix =
    "<|im_start|>system\nRead the complete state and schema. Decide every field jointly. Each answer "
    "must be exactly one of that field's allowed options.<|im_end|>\n<|im_start|>user\nSTATE:\n";
inline constexpr std::string_view prompt_suffix =
    "\n<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nJOINT SCHEMA DECISIONS:";

// Encodes one record as the reference's encode_record does. Failures (all 422): INVALID_REQUEST
// for no questions, choice/score criteria that are not a non-empty object/list, or a question
// whose instruction text has no tokens (the reference would pool an empty span into NaN);
// INPUT_TOO_LONG when prefix, media, schema and suffix alone exceed max_length.
result<encoded_record> encode_record(const request& r, const piece_tokenizer& tok,
                                     const encode_options& options = {});

}  // namespace baton::clef
