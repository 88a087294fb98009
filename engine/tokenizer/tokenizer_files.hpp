// The files tokenizer::load reads in a directory (tokenizer.json, or the vocab.json + merges.txt
// pair with the added tokens of tokenizer_config.json or added_tokens.json): named once, so that
// `baton pull` fetches what the loader opens.
#pragma once

#include <array>
#include <string_view>

namespace baton::tokenizer_files {

inline constexpr std::string_view tokenizer_json = "tokenizer.json";
inline constexpr std::string_view vocab_json = "vocab.json";
inline constexpr std::string_view merges_txt = "merges.txt";
inline constexpr std::string_view tokenizer_config_json = "tokenizer_config.json";
inline constexpr std::string_view added_tokens_json = "added_tokens.json";

inline constexpr std::array<std::string_view, 5> all = {tokenizer_json, vocab_json, merges_txt,
                                                        tokenizer_config_json, added_tokens_json};

}  // namespace baton::tokenizer_files
