#include "engine/words.hpp"

#include <algorithm>
#include <array>
#include <functional>

namespace baton::words {

namespace {

// Sorted, for binary search. Function words that carry no topic.
constexpr std::array<std::string_view, 127> stop_words = {
    "a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are",
    "as", "at", "be", "because", "been", "before", "being", "below", "between", "both", "but", "by",
    "can", "could", "did", "do", "does", "doing", "down", "during", "each", "few", "for", "from",
    "further", "had", "has", "have", "having", "he", "her", "here", "hers", "herself", "him",
    "himself", "his", "how", "i", "if", "in", "into", "is", "it", "its", "itself", "just", "me",
    "more", "most", "my", "myself", "no", "nor", "not", "now", "of", "off", "on", "once", "only",
    "or", "other", "our", "ours", "ourselves", "out", "over", "own", "s", "same", "she", "should",
    "so", "some", "such", "than", "that", "the", "their", "theirs", "them", "themselves", "then",
    "there", "these", "they", "this", "those", "through", "to", "too", "under", "until", "up",
    "very", "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom", "why",
    "will", "with", "would", "you", "your", "yours", "yourself", "yourselves",
};

bool word_byte(unsigned char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c >= 0x80;
}

bool is_vowel(char c) noexcept { return c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u' || c == 'y'; }

bool ends_with(const std::string& w, std::string_view s) noexcept {
  return w.size() >= s.size() && std::string_view(w).substr(w.size() - s.size()) == s;
}

bool has_vowel(std::string_view s) noexcept { return std::any_of(s.begin(), s.end(), is_vowel); }

bool ascii_word(const std::string& w) noexcept {
  return std::all_of(w.begin(), w.end(), [](char c) { return c >= 'a' && c <= 'z'; });
}

// Strips `suffix` when what remains is at least `keep` letters long and has a vowel.
bool strip(std::string& w, std::string_view suffix, std::size_t keep) {
  if (!ends_with(w, suffix) || w.size() - suffix.size() < keep) return false;
  if (!has_vowel(std::string_view(w).substr(0, w.size() - suffix.size()))) return false;
  w.resize(w.size() - suffix.size());
  return true;
}

template <class F>
void for_each_word(std::string_view text, F&& emit) {
  std::string word;
  std::size_t i = 0;
  const std::size_t n = text.size();
  while (i < n) {
    while (i < n && !word_byte(static_cast<unsigned char>(text[i]))) ++i;
    if (i == n) break;
    word.clear();
    bool prev_lower = false;
    for (; i < n; ++i) {
      const auto c = static_cast<unsigned char>(text[i]);
      if (!word_byte(c)) break;
      const bool upper = c >= 'A' && c <= 'Z';
      if (upper && prev_lower) break;  // camelCase: "searchWeb" reads as "search", "web"
      prev_lower = c >= 'a' && c <= 'z';
      word.push_back(upper ? static_cast<char>(c + ('a' - 'A')) : static_cast<char>(c));
    }
    if (is_stop_word(word)) continue;
    stem(word);
    emit(std::string_view(word));
  }
}

}  // namespace

bool is_stop_word(std::string_view word) noexcept {
  return std::binary_search(stop_words.begin(), stop_words.end(), word);
}

void stem(std::string& w) {
  if (w.size() <= 3 || !ascii_word(w)) return;
  // Plurals.
  if (ends_with(w, "sses")) {
    w.resize(w.size() - 2);
  } else if (ends_with(w, "ies") && w.size() > 4) {
    w.replace(w.size() - 3, 3, "y");
  } else if (ends_with(w, "s") && !ends_with(w, "ss") && !ends_with(w, "us") && !ends_with(w, "is")) {
    w.pop_back();
  }
  // Verb and adverb endings; a doubled final consonant left behind is undoubled ("shipped").
  if (strip(w, "ing", 3) || strip(w, "ed", 3)) {
    const std::size_t n = w.size();
    if (n >= 2 && w[n - 1] == w[n - 2] && !is_vowel(w[n - 1]) && w[n - 1] != 'l' && w[n - 1] != 's' &&
        w[n - 1] != 'z')
      w.pop_back();
  } else {
    strip(w, "ly", 4);
  }
  if (w.size() > 3 && w.back() == 'e') w.pop_back();
}

std::vector<std::string> normalised(std::string_view text) {
  std::vector<std::string> out;
  for_each_word(text, [&](std::string_view w) { out.emplace_back(w); });
  return out;
}

std::size_t append_hashes(std::string_view text, std::vector<std::uint64_t>& out) {
  const std::size_t before = out.size();
  for_each_word(text, [&](std::string_view w) { out.push_back(std::hash<std::string_view>{}(w)); });
  return out.size() - before;
}

}  // namespace baton::words
