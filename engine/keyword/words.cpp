#include "engine/keyword/words.hpp"

#include <algorithm>
#include <array>

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

// Byte classes: 0 separates words, 1 is a word byte kept as it is, 2 an upper-case ASCII letter.
constexpr auto byte_class = [] {
  std::array<std::uint8_t, 256> t{};
  for (int c = 0; c < 256; ++c)
    t[c] = (c >= 'A' && c <= 'Z') ? 2 : ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c >= 0x80) ? 1 : 0;
  return t;
}();

constexpr std::size_t longest_stop_word = [] {
  std::size_t n = 0;
  for (std::string_view w : stop_words) n = std::max(n, w.size());
  return n;
}();

bool is_vowel(char c) noexcept { return c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u' || c == 'y'; }

// FNV-1a: words are short, and this runs inline on the hot path.
constexpr std::uint64_t hash_word(std::string_view w) noexcept {
  std::uint64_t h = 14695981039346656037ull;
  for (char c : w) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

constexpr auto stop_word_hashes = [] {
  std::array<std::uint64_t, stop_words.size()> h{};
  for (std::size_t i = 0; i < stop_words.size(); ++i) h[i] = hash_word(stop_words[i]);
  std::sort(h.begin(), h.end());
  return h;
}();

// A word being normalised, in a fixed buffer: no allocation per word.
struct word_buffer {
  static constexpr std::size_t capacity = 64;  // longer words are cut; they still hash consistently
  char data[capacity];
  std::size_t size = 0;

  std::string_view view() const noexcept { return {data, size}; }
  bool ends_with(std::string_view s) const noexcept {
    return size >= s.size() && view().substr(size - s.size()) == s;
  }
  bool has_vowel_before(std::size_t end) const noexcept {
    for (std::size_t i = 0; i < end; ++i)
      if (is_vowel(data[i])) return true;
    return false;
  }
  // Strips `suffix` when what remains is at least `keep` letters long and has a vowel.
  bool strip(std::string_view suffix, std::size_t keep) noexcept {
    if (!ends_with(suffix) || size - suffix.size() < keep || !has_vowel_before(size - suffix.size())) return false;
    size -= suffix.size();
    return true;
  }
};

void stem_buffer(word_buffer& w) noexcept {
  if (w.size <= 3) return;
  for (std::size_t i = 0; i < w.size; ++i)
    if (w.data[i] < 'a' || w.data[i] > 'z') return;
  // Plurals.
  if (w.ends_with("sses")) {
    w.size -= 2;
  } else if (w.ends_with("ies") && w.size > 4) {
    w.size -= 2;
    w.data[w.size - 1] = 'y';
  } else if (w.ends_with("s") && !w.ends_with("ss") && !w.ends_with("us") && !w.ends_with("is")) {
    --w.size;
  }
  // Verb and adverb endings; a doubled final consonant left behind is undoubled ("shipped").
  if (w.strip("ing", 3) || w.strip("ed", 3)) {
    const std::size_t n = w.size;
    const char last = w.data[n - 1];
    if (n >= 2 && last == w.data[n - 2] && !is_vowel(last) && last != 'l' && last != 's' && last != 'z') --w.size;
  } else {
    w.strip("ly", 4);
  }
  if (w.size > 3 && w.data[w.size - 1] == 'e') --w.size;
}

template <class F>
void for_each_word(std::string_view text, F&& emit) {
  word_buffer word;
  std::size_t i = 0;
  const std::size_t n = text.size();
  while (i < n) {
    while (i < n && byte_class[static_cast<unsigned char>(text[i])] == 0) ++i;
    if (i == n) break;
    word.size = 0;
    bool prev_lower = false;
    for (; i < n; ++i) {
      const auto c = static_cast<unsigned char>(text[i]);
      const std::uint8_t kind = byte_class[c];
      if (kind == 0) break;
      if (kind == 2 && prev_lower) break;  // camelCase: "searchWeb" reads as "search", "web"
      prev_lower = c >= 'a' && c <= 'z';
      if (word.size < word_buffer::capacity)
        word.data[word.size++] = kind == 2 ? static_cast<char>(c + ('a' - 'A')) : static_cast<char>(c);
    }
    if (word.size <= longest_stop_word &&
        std::binary_search(stop_word_hashes.begin(), stop_word_hashes.end(), hash_word(word.view())) &&
        is_stop_word(word.view()))
      continue;
    stem_buffer(word);
    emit(word.view());
  }
}

}  // namespace

bool is_stop_word(std::string_view word) noexcept {
  return std::binary_search(stop_words.begin(), stop_words.end(), word);
}

void stem(std::string& w) {
  word_buffer b;
  if (w.size() > word_buffer::capacity) return;
  b.size = w.size();
  std::copy(w.begin(), w.end(), b.data);
  stem_buffer(b);
  w.assign(b.data, b.size);
}

std::vector<std::string> normalised(std::string_view text) {
  std::vector<std::string> out;
  for_each_word(text, [&](std::string_view w) { out.emplace_back(w); });
  return out;
}

std::size_t append_hashes(std::string_view text, std::vector<std::uint64_t>& out) {
  const std::size_t before = out.size();
  for_each_word(text, [&](std::string_view w) { out.push_back(hash_word(w)); });
  return out.size() - before;
}

}  // namespace baton::words
