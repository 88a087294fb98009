// Word normalisation for the keyword engine: ASCII case folding, splitting on punctuation, `_`
// and camelCase, English stop words dropped, and a light suffix-stripping stemmer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace baton::words {

// Light English stemmer on a lower-case ASCII word: plural -s, -ed, -ing, -ly and a final -e are
// stripped so that "charges", "charged", "charging" and "charge" meet.
void stem(std::string& word);

bool is_stop_word(std::string_view word) noexcept;

// The normalised words of `text`. Bytes >= 0x80 (non-ASCII UTF-8) are word characters, kept as
// they are.
std::vector<std::string> normalised(std::string_view text);

// 64-bit hashes of the normalised words of `text`, appended to `out`; returns how many.
std::size_t append_hashes(std::string_view text, std::vector<std::uint64_t>& out);

}  // namespace baton::words
