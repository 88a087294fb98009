#include "engine/tokenizer/tokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <new>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>

#include "core/files.hpp"
#include "engine/tokenizer/tokenizer_files.hpp"

namespace baton {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// What the loaders throw; load() adds the file name.
struct bad_input : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The Qwen2 pre-tokenizer regex, for directories without tokenizer.json.
constexpr std::string_view qwen2_pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Pieces at most this long have their BPE result cached.
constexpr std::size_t max_cached_piece = 64;
constexpr std::size_t cache_shards = 32;
constexpr std::size_t cache_shard_entries = 1024;

// ---- UTF-8 --------------------------------------------------------------------------------------

// Length of the longest well-formed UTF-8 prefix of `s`.
std::size_t valid_prefix(std::string_view s) noexcept {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    if (i + 8 <= n) {
      std::uint64_t w;
      std::memcpy(&w, p + i, 8);
      if ((w & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;       // overlong
      else if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;       // overlong
      else if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      return i;
    }
    if (n - i < len || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (std::size_t k = 2; k < len; ++k)
      if ((p[i + k] & 0xC0) != 0x80) return i;
    i += len;
  }
  return n;
}

std::string to_utf8(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// The code point that `s` starts with, or nullopt when `s` is empty or starts ill-formed.
std::optional<char32_t> first_code_point(std::string_view s) noexcept {
  const std::size_t len = valid_prefix(s.substr(0, std::min<std::size_t>(s.size(), 4)));
  if (len == 0) return std::nullopt;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  if (p[0] < 0x80) return p[0];
  if (p[0] < 0xE0) return ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu);
  if (p[0] < 0xF0) return ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
  return ((p[0] & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
}

std::size_t code_point_length(unsigned char lead) noexcept {
  return lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

// The last code point of `s` and its length in bytes, or nullopt when `s` ends ill-formed.
std::optional<std::pair<char32_t, std::size_t>> last_code_point(std::string_view s) noexcept {
  std::size_t len = 1;
  while (len < 4 && len < s.size() && (static_cast<unsigned char>(s[s.size() - len]) & 0xC0) == 0x80) ++len;
  if (len > s.size()) return std::nullopt;
  const std::string_view tail = s.substr(s.size() - len);
  if (valid_prefix(tail) != len) return std::nullopt;
  return std::pair{*first_code_point(tail), len};
}

// Unicode White_Space, which is what `\s` means to the HF regex engines.
bool is_white_space(char32_t c) noexcept {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// NFC of the well-formed `s`, appended to `out`. An ASCII character never composes with what
// precedes it, so only the non-ASCII runs, each with the character before it, go through utf8proc.
void append_nfc(std::string_view s, std::string& out) {
  const auto is_ascii = [](char c) { return static_cast<unsigned char>(c) < 0x80; };
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t j = i;
    while (j < s.size() && is_ascii(s[j])) ++j;
    if (j == s.size()) {
      out.append(s.substr(i));
      return;
    }
    const std::size_t run = j > i ? j - 1 : j;
    out.append(s.substr(i, run - i));
    std::size_t end = j;
    while (end < s.size() && !is_ascii(s[end])) ++end;
    utf8proc_uint8_t* nfc = nullptr;
    const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + run),
                                static_cast<utf8proc_ssize_t>(end - run), &nfc,
                                static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    if (n < 0) {
      if (n == UTF8PROC_ERROR_NOMEM) throw std::bad_alloc();
      throw std::runtime_error(std::string("tokenizer: NFC failed: ") + utf8proc_errmsg(n));
    }
    out.append(reinterpret_cast<const char*>(nfc), static_cast<std::size_t>(n));
    std::free(nfc);
    i = end;
  }
}

std::string nfc(std::string_view s) {
  std::string out;
  append_nfc(s, out);
  return out;
}

// ---- PCRE2 --------------------------------------------------------------------------------------

struct code_deleter {
  void operator()(pcre2_code* c) const noexcept { pcre2_code_free(c); }
};
using regex = std::unique_ptr<pcre2_code, code_deleter>;

regex compile(std::string_view pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  regex re(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                         &error, &offset, nullptr));
  if (!re) {
    std::array<PCRE2_UCHAR, 256> message{};
    pcre2_get_error_message(error, message.data(), message.size());
    throw bad_input("the split regex does not compile at offset " + std::to_string(offset) + ": " +
                    reinterpret_cast<const char*>(message.data()));
  }
  return re;
}

// HF's regex engine reads `\s` as Unicode White_Space; PCRE2's `\s` with UCP also takes U+180E.
std::string with_white_space_property(std::string_view pattern) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '\\' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    const char next = pattern[++i];
    if (next == 's') out += R"(\p{White_Space})";
    else if (next == 'S') out += R"(\P{White_Space})";
    else (out += '\\') += next;
  }
  return out;
}

// pcre2_match needs match data that no other thread uses at the same time.
struct thread_scratch {
  pcre2_match_data* match = pcre2_match_data_create(1, nullptr);
  thread_scratch() {
    if (!match) throw std::bad_alloc();
  }
  ~thread_scratch() { pcre2_match_data_free(match); }
  thread_scratch(const thread_scratch&) = delete;
  thread_scratch& operator=(const thread_scratch&) = delete;
};

thread_scratch& scratch() {
  thread_local thread_scratch s;
  return s;
}

// Rust regex `\w` (HF's test for single_word tokens): Alphabetic, marks, decimal digits,
// connector punctuation and joiners.
bool is_word_char(char32_t cp) {
  static const regex word = compile(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}])");
  const std::string s = to_utf8(cp);
  return pcre2_match(word.get(), reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, PCRE2_ANCHORED,
                     scratch().match, nullptr) >= 0;
}

// ---- byte level ---------------------------------------------------------------------------------

// GPT-2 `bytes_to_unicode`: printable bytes stand for themselves, the other 68 for U+0100 on, in
// byte order.
const std::array<std::string, 256>& byte_symbols() {
  static const std::array<std::string, 256> symbols = [] {
    std::array<std::string, 256> s;
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      s[b] = to_utf8(printable ? static_cast<char32_t>(b) : next++);
    }
    return s;
  }();
  return symbols;
}

std::string byte_level(std::string_view text) {
  std::string out;
  for (char c : text) out += byte_symbols()[static_cast<unsigned char>(c)];
  return out;
}

// ---- tables -------------------------------------------------------------------------------------

struct string_hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
template <class T>
using string_map = std::unordered_map<std::string, T, string_hash, std::equal_to<>>;

// (left id, right id) -> (rank, merged id), open addressing: the hot lookup of BPE.
class merge_table {
 public:
  struct merge {
    std::int32_t rank;
    std::int32_t id;
  };

  merge_table() { rehash(16); }

  void reserve(std::size_t n) {
    std::size_t capacity = keys_.size();
    while (capacity < 2 * n) capacity *= 2;
    if (capacity != keys_.size()) rehash(capacity);
  }

  // A pair listed twice keeps its last rank, as HF's map does.
  void insert(std::int32_t a, std::int32_t b, merge m) {
    if (2 * (size_ + 1) > keys_.size()) rehash(2 * keys_.size());
    const std::size_t i = slot(key(a, b));
    if (keys_[i] == empty) ++size_;
    keys_[i] = key(a, b);
    values_[i] = m;
  }

  const merge* find(std::int32_t a, std::int32_t b) const noexcept {
    const std::size_t i = slot(key(a, b));
    return keys_[i] == empty ? nullptr : &values_[i];
  }

 private:
  static constexpr std::uint64_t empty = ~0ull;  // ids are below 2^31
  static std::uint64_t key(std::int32_t a, std::int32_t b) noexcept {
    return (std::uint64_t{static_cast<std::uint32_t>(a)} << 32) | static_cast<std::uint32_t>(b);
  }
  // Linear probing; the table is at most half full.
  std::size_t slot(std::uint64_t k) const noexcept {
    std::size_t i = static_cast<std::size_t>((k * 0x9E3779B97F4A7C15ull) >> 32) & mask_;
    while (keys_[i] != empty && keys_[i] != k) i = (i + 1) & mask_;
    return i;
  }
  void rehash(std::size_t capacity) {  // a power of two
    std::vector<std::uint64_t> keys = std::exchange(keys_, std::vector<std::uint64_t>(capacity, empty));
    std::vector<merge> values = std::exchange(values_, std::vector<merge>(capacity));
    mask_ = capacity - 1;
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (keys[i] != empty) {
        const std::size_t j = slot(keys[i]);
        keys_[j] = keys[i];
        values_[j] = values[i];
      }
  }

  std::vector<std::uint64_t> keys_;
  std::vector<merge> values_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

struct added_token {
  std::string content;
  std::int32_t id = 0;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

// Leftmost-longest search for a set of strings, as the Aho-Corasick automaton HF builds for its
// added tokens: the match that starts first, and the longest of those.
class token_matcher {
 public:
  struct match {
    std::size_t start;
    std::size_t end;
    std::size_t token;  // index into the token list
  };

  void add(std::string_view content, std::size_t token) {
    std::size_t n = 0;
    for (char c : content) {
      const auto b = static_cast<unsigned char>(c);
      auto& edges = nodes_[n].edges;
      auto it = std::find_if(edges.begin(), edges.end(), [b](const auto& e) { return e.first == b; });
      if (it == edges.end()) {
        edges.emplace_back(b, nodes_.size());
        n = nodes_.size();
        nodes_.emplace_back();
      } else {
        n = it->second;
      }
    }
    nodes_[n].token = token;
    first_byte_[static_cast<unsigned char>(content.front())] = true;
  }

  bool empty() const noexcept { return nodes_.size() == 1; }

  std::optional<match> find(std::string_view text, std::size_t from) const noexcept {
    for (std::size_t start = from; start < text.size(); ++start) {
      if (!first_byte_[static_cast<unsigned char>(text[start])]) continue;
      std::optional<match> best;
      std::size_t n = 0;
      for (std::size_t i = start; i < text.size(); ++i) {
        const auto b = static_cast<unsigned char>(text[i]);
        const auto& edges = nodes_[n].edges;
        auto it = std::find_if(edges.begin(), edges.end(), [b](const auto& e) { return e.first == b; });
        if (it == edges.end()) break;
        n = it->second;
        if (nodes_[n].token != npos) best = match{start, i + 1, nodes_[n].token};
      }
      if (best) return best;
    }
    return std::nullopt;
  }

 private:
  static constexpr std::size_t npos = ~std::size_t{0};
  struct node {
    std::vector<std::pair<unsigned char, std::size_t>> edges;
    std::size_t token = npos;
  };
  std::vector<node> nodes_{1};
  std::array<bool, 256> first_byte_{};
};

// BPE results of short pieces, shared by all threads: one mutex per shard keeps contention low,
// and a shard that fills up is emptied, which bounds the memory.
class piece_cache {
 public:
  bool append(std::string_view piece, std::vector<std::int32_t>& out) const {
    auto& s = shard_of(piece);
    std::lock_guard lock(s.mutex);
    const auto it = s.entries.find(piece);
    if (it == s.entries.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }

  void insert(std::string_view piece, const std::int32_t* ids, std::size_t n) const {
    auto& s = shard_of(piece);
    std::lock_guard lock(s.mutex);
    if (s.entries.size() >= cache_shard_entries) s.entries.clear();
    s.entries.try_emplace(std::string(piece), ids, ids + n);
  }

  void clear() const {
    for (auto& s : shards_) {
      std::lock_guard lock(s.mutex);
      s.entries.clear();
    }
  }

 private:
  struct shard {
    std::mutex mutex;
    string_map<std::vector<std::int32_t>> entries;
  };
  // A few bytes suffice to spread the pieces; the map hashes them in full anyway.
  shard& shard_of(std::string_view piece) const noexcept {
    const auto byte = [&](std::size_t i) { return static_cast<std::size_t>(static_cast<unsigned char>(piece[i])); };
    return shards_[(piece.size() + 31 * byte(0) + 17 * byte(piece.size() / 2) + byte(piece.size() - 1)) % cache_shards];
  }
  mutable std::array<shard, cache_shards> shards_;
};

// ---- reading files ------------------------------------------------------------------------------

// Qwen's tokenizer.json is ~11 MB; a FIFO or a device in its place is refused, not waited on.
constexpr std::size_t max_tokenizer_file_bytes = std::size_t(256) << 20;

std::string read_file(const fs::path& path) {
  if (!fs::exists(path)) throw bad_input("does not exist");
  std::string why;
  auto text = read_regular_file(path, max_tokenizer_file_bytes, why);
  if (!text) throw bad_input(why);  // about_file names the file
  return std::move(*text);
}

json parse_json(const std::string& text) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    throw bad_input(std::string("is not valid JSON: ") + e.what());
  }
}

// Runs `f` with errors about the content of `path` reported as "tokenizer <path>: <problem>".
template <class F>
auto about_file(const fs::path& path, F&& f) {
  try {
    return f();
  } catch (const bad_input& e) {
    throw std::runtime_error("tokenizer " + path.string() + ": " + e.what());
  } catch (const json::exception& e) {
    throw std::runtime_error("tokenizer " + path.string() + ": unexpected JSON: " + e.what());
  }
}

std::string type_of(const json& j) {
  if (!j.is_object()) return j.is_null() ? "null" : j.dump();
  const auto it = j.find("type");
  return it == j.end() ? "(no type)" : it->is_string() ? it->get<std::string>() : it->dump();
}

bool flag(const json& j, const char* key, bool otherwise) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? otherwise : it->get<bool>();
}

std::int32_t to_id(const json& j, std::string_view what) {
  if (!j.is_number_integer() || j.get<std::int64_t>() < 0 || j.get<std::int64_t>() > INT32_MAX)
    throw bad_input(std::string(what) + " has id " + j.dump() + ", not an integer in [0, 2^31)");
  return static_cast<std::int32_t>(j.get<std::int64_t>());
}

// An id written as a JSON object key.
std::int32_t id_from_key(std::string_view text, std::string_view what) {
  std::int64_t v = 0;
  if (text.empty() || text.size() > 10) throw bad_input(std::string(what) + " has id \"" + std::string(text) + "\"");
  for (char c : text) {
    if (c < '0' || c > '9') throw bad_input(std::string(what) + " has id \"" + std::string(text) + "\"");
    v = v * 10 + (c - '0');
  }
  if (v > INT32_MAX) throw bad_input(std::string(what) + " has id " + std::string(text) + ", above 2^31");
  return static_cast<std::int32_t>(v);
}

// An entry of tokenizer.json `added_tokens` or of tokenizer_config.json `added_tokens_decoder`.
added_token read_added_token(const json& j, std::int32_t id) {
  added_token t;
  t.content = j.at("content").get<std::string>();
  t.id = id;
  t.single_word = flag(j, "single_word", false);
  t.lstrip = flag(j, "lstrip", false);
  t.rstrip = flag(j, "rstrip", false);
  t.normalized = flag(j, "normalized", !flag(j, "special", false));  // HF's default
  return t;
}

}  // namespace

bool valid_utf8(std::string_view text) noexcept { return valid_prefix(text) == text.size(); }

// ---- the model ----------------------------------------------------------------------------------

struct tokenizer::model {
  string_map<std::int32_t> vocab;
  merge_table merges;
  std::array<std::int32_t, 256> byte_ids{};
  bool ignore_merges = false;
  bool nfc = false;
  regex split;
  bool split_jit = false;

  std::vector<added_token> added;
  string_map<std::int32_t> added_ids;
  token_matcher raw_tokens;         // matched in the text as given
  token_matcher normalized_tokens;  // matched after NFC
  std::size_t size = 0;

  piece_cache cache;

  void set_vocab(const json& j) {
    if (!j.is_object()) throw bad_input("model.vocab is not an object");
    vocab.reserve(j.size());
    for (const auto& [token, id] : j.items()) vocab.insert_or_assign(token, to_id(id, "vocab entry \"" + token + "\""));
    for (int b = 0; b < 256; ++b) {
      const auto it = vocab.find(byte_symbols()[b]);
      if (it == vocab.end()) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02X", b);
        throw bad_input("the vocabulary has no token for byte " + std::string(hex) + " (\"" + byte_symbols()[b] +
                        "\"); byte-level BPE needs all 256");
      }
      byte_ids[b] = it->second;
    }
    for (const auto& [token, id] : vocab) size = std::max(size, static_cast<std::size_t>(id) + 1);
  }

  void add_merge(std::string_view a, std::string_view b, std::int32_t rank) {
    const auto describe = [&] { return "merge " + std::to_string(rank + 1) + " (\"" + std::string(a) + "\", \"" + std::string(b) + "\")"; };
    const auto left = vocab.find(a), right = vocab.find(b);
    if (left == vocab.end() || right == vocab.end())
      throw bad_input(describe() + ": \"" + std::string(left == vocab.end() ? a : b) + "\" is not in the vocabulary");
    const auto merged = vocab.find(std::string(a) + std::string(b));
    if (merged == vocab.end()) throw bad_input(describe() + ": the merged token is not in the vocabulary");
    merges.insert(left->second, right->second, {rank, merged->second});
  }

  // "a b" as in merges.txt and older tokenizer.json files.
  void add_merge(std::string_view line, std::int32_t rank) {
    const std::size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos)
      throw bad_input("merge " + std::to_string(rank + 1) + " \"" + std::string(line) + "\" is not two tokens split by a space");
    add_merge(line.substr(0, space), line.substr(space + 1), rank);
  }

  void set_split(std::string_view pattern) {
    split = compile(with_white_space_property(pattern));
    split_jit = pcre2_jit_compile(split.get(), PCRE2_JIT_COMPLETE) == 0;
  }

  void add_token(added_token t) {
    if (t.content.empty()) return;  // HF ignores them
    if (t.normalized && nfc) t.content = baton::nfc(t.content);
    size = std::max(size, static_cast<std::size_t>(t.id) + 1);
    added_ids.insert_or_assign(t.content, t.id);
    (t.normalized ? normalized_tokens : raw_tokens).add(t.content, added.size());
    added.push_back(std::move(t));
  }

  // ---- encoding ----

  void encode(std::string_view text, std::vector<std::int32_t>& out) const {
    split_added(text, raw_tokens, out, [&](std::string_view span) { encode_raw(span, out); });
  }

  // Splits `text` on the tokens of `matcher` as HF's AddedVocabulary::find_matches: the ids of the
  // tokens go to `out`, the text between them to `on_text`.
  template <class F>
  void split_added(std::string_view text, const token_matcher& matcher, std::vector<std::int32_t>& out,
                   F&& on_text) const {
    if (matcher.empty()) {
      on_text(text);
      return;
    }
    std::size_t done = 0, from = 0;
    while (const auto m = matcher.find(text, from)) {
      from = m->end;  // the search goes on after the match even when it is discarded
      const added_token& t = added[m->token];
      std::size_t start = m->start, stop = m->end;
      if (t.single_word && (ends_with_word(text.substr(0, start)) || starts_with_word(text.substr(stop)))) continue;
      if (t.lstrip) start = std::max(start - white_space_suffix(text.substr(0, start)), done);
      if (t.rstrip) stop += white_space_prefix(text.substr(stop));
      if (done < start) on_text(text.substr(done, start - done));
      out.push_back(t.id);
      done = stop;
    }
    if (done < text.size()) on_text(text.substr(done));
  }

  static bool ends_with_word(std::string_view s) {
    const auto last = last_code_point(s);
    return last && is_word_char(last->first);
  }
  static bool starts_with_word(std::string_view s) {
    const auto first = first_code_point(s);
    return first && is_word_char(*first);
  }
  static std::size_t white_space_suffix(std::string_view s) noexcept {
    std::size_t n = 0;
    while (const auto last = last_code_point(s.substr(0, s.size() - n))) {
      if (!is_white_space(last->first)) break;
      n += last->second;
    }
    return n;
  }
  static std::size_t white_space_prefix(std::string_view s) noexcept {
    std::size_t n = 0;
    while (const auto first = first_code_point(s.substr(n))) {
      if (!is_white_space(*first)) break;
      n += code_point_length(static_cast<unsigned char>(s[n]));
    }
    return n;
  }

  // Text between raw-matched added tokens: well-formed stretches are normalised and split, any
  // other byte is its own byte-level token.
  void encode_raw(std::string_view span, std::vector<std::int32_t>& out) const {
    while (!span.empty()) {
      const std::size_t valid = valid_prefix(span);
      if (valid > 0) encode_normalized(span.substr(0, valid), out);
      if (valid == span.size()) return;
      out.push_back(byte_ids[static_cast<unsigned char>(span[valid])]);
      span.remove_prefix(valid + 1);
    }
  }

  void encode_normalized(std::string_view span, std::vector<std::int32_t>& out) const {
    std::string normalized;
    if (nfc && !std::all_of(span.begin(), span.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) {
      normalized.reserve(span.size() + span.size() / 8);
      append_nfc(span, normalized);
      span = normalized;
    }
    split_added(span, normalized_tokens, out, [&](std::string_view text) { pre_tokenize(text, out); });
  }

  // Split(behavior=Isolated): every match and every gap between matches is a piece.
  void pre_tokenize(std::string_view text, std::vector<std::int32_t>& out) const {
    pcre2_match_data* match = scratch().match;
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    std::size_t done = 0, from = 0;
    while (from < text.size()) {
      int rc = split_jit ? pcre2_jit_match(split.get(), subject, text.size(), from, 0, match, nullptr)
                         : PCRE2_ERROR_JIT_STACKLIMIT;
      // The interpreter keeps its backtracking on the heap: it goes on where the JIT stack ends.
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(split.get(), subject, text.size(), from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, match, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        std::array<PCRE2_UCHAR, 256> message{};
        pcre2_get_error_message(rc, message.data(), message.size());
        throw std::runtime_error(std::string("tokenizer: the split regex failed: ") +
                                 reinterpret_cast<const char*>(message.data()));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match);
      const std::size_t start = ov[0], end = ov[1];
      if (end == start) {  // an empty match is no piece; look again one character on
        if (start >= text.size()) break;
        from = start + code_point_length(static_cast<unsigned char>(text[start]));
        continue;
      }
      if (done < start) bpe(text.substr(done, start - done), out);
      bpe(text.substr(start, end - start), out);
      done = from = end;
    }
    if (done < text.size()) bpe(text.substr(done), out);
  }

  void bpe(std::string_view piece, std::vector<std::int32_t>& out) const {
    if (piece.empty()) return;
    if (piece.size() == 1) {
      out.push_back(byte_ids[static_cast<unsigned char>(piece[0])]);
      return;
    }
    if (ignore_merges) {
      if (const auto it = vocab.find(byte_level(piece)); it != vocab.end()) {
        out.push_back(it->second);
        return;
      }
    }
    const bool cached = piece.size() <= max_cached_piece;
    if (cached && cache.append(piece, out)) return;
    const std::size_t first = out.size();
    merge(piece, out);
    if (cached) cache.insert(piece, out.data() + first, out.size() - first);
  }

  // HF's BPE::merge_word: the pair of lowest rank merges first, the leftmost on ties; a heap of
  // candidate pairs over a linked list of symbols, stale candidates skipped when popped.
  void merge(std::string_view piece, std::vector<std::int32_t>& out) const {
    struct symbol {
      std::int32_t id;  // -1 once merged into its left neighbour
      std::int32_t prev;
      std::int32_t next;
    };
    struct candidate {
      std::int32_t rank;
      std::int32_t pos;
      std::int32_t id;
      bool operator>(const candidate& o) const noexcept { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    thread_local std::vector<symbol> symbols;
    thread_local std::vector<candidate> heap;
    const auto n = static_cast<std::int32_t>(piece.size());
    symbols.resize(piece.size());
    heap.clear();
    const auto push = [&](std::int32_t pos) {
      const symbol& s = symbols[pos];
      if (s.next < 0) return;
      if (const auto* m = merges.find(s.id, symbols[s.next].id)) {
        heap.push_back({m->rank, pos, m->id});
        std::push_heap(heap.begin(), heap.end(), std::greater<>{});
      }
    };
    for (std::int32_t i = 0; i < n; ++i)
      symbols[i] = {byte_ids[static_cast<unsigned char>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1};
    for (std::int32_t i = 0; i + 1 < n; ++i) push(i);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
      const candidate top = heap.back();
      heap.pop_back();
      symbol& s = symbols[top.pos];
      if (s.id < 0 || s.next < 0) continue;
      symbol& right = symbols[s.next];
      const auto* m = merges.find(s.id, right.id);
      if (!m || m->id != top.id) continue;
      s.id = top.id;
      right.id = -1;
      s.next = right.next;
      if (s.next >= 0) symbols[s.next].prev = top.pos;
      if (s.prev >= 0) push(s.prev);
      push(top.pos);
    }
    for (std::int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
    // Keep the scratch of one long piece from staying with the thread.
    if (symbols.capacity() > 4096) {
      symbols = {};
      heap = {};
    }
  }
};

// ---- loading ------------------------------------------------------------------------------------

namespace {

// Refuses what would change the ids and is not supported. truncation, padding, post_processor and
// decoder are not read: transformers resets the first two per call, the post-processor only adds
// tokens with add_special_tokens=True, and nothing here decodes.
void check_tokenizer_json(const json& j) {
  if (!j.is_object()) throw bad_input("is not a JSON object");
  const json& model = j.at("model");
  if (type_of(model) != "BPE") throw bad_input("model type " + type_of(model) + " is not supported (only BPE)");
  if (const auto d = model.find("dropout"); d != model.end() && !d->is_null() && d->get<double>() != 0.0)
    throw bad_input("model.dropout " + d->dump() + " is not supported (BPE dropout is random)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (const auto p = model.find(key); p != model.end() && !p->is_null() && !p->get<std::string>().empty())
      throw bad_input(std::string("model.") + key + " \"" + p->get<std::string>() + "\" is not supported");

  if (const auto n = j.find("normalizer"); n != j.end() && !n->is_null() && type_of(*n) != "NFC")
    throw bad_input("normalizer " + type_of(*n) + " is not supported (only NFC or none)");

  const auto unsupported_pre = [](const std::string& why) {
    return bad_input("pre_tokenizer is not supported: " + why +
                     " (only Sequence[Split(Regex, Isolated), ByteLevel(add_prefix_space=false, use_regex=false)])");
  };
  const json& pre = j.at("pre_tokenizer");
  if (type_of(pre) != "Sequence") throw unsupported_pre("type " + type_of(pre));
  const json& steps = pre.at("pretokenizers");
  if (!steps.is_array() || steps.size() != 2) throw unsupported_pre("it does not have two steps");
  const json& split = steps[0];
  const json& byte_level = steps[1];
  if (type_of(split) != "Split") throw unsupported_pre("first step " + type_of(split));
  if (!split.at("pattern").contains("Regex")) throw unsupported_pre("Split pattern " + split.at("pattern").dump());
  if (split.at("behavior") != "Isolated") throw unsupported_pre("Split behavior " + split.at("behavior").dump());
  if (flag(split, "invert", false)) throw unsupported_pre("Split invert=true");
  if (type_of(byte_level) != "ByteLevel") throw unsupported_pre("second step " + type_of(byte_level));
  if (flag(byte_level, "add_prefix_space", false)) throw unsupported_pre("ByteLevel add_prefix_space=true");
  if (flag(byte_level, "use_regex", true)) throw unsupported_pre("ByteLevel use_regex=true");
}

}  // namespace

std::unique_ptr<tokenizer> tokenizer::load(const fs::path& path) {
  auto m = std::make_unique<model>();
  const bool directory = fs::is_directory(path);
  const fs::path file = directory ? path / tokenizer_files::tokenizer_json : path;
  if (!directory || fs::exists(file)) {
    about_file(file, [&] {
      const json j = parse_json(read_file(file));
      check_tokenizer_json(j);
      const json& bpe = j.at("model");
      m->set_vocab(bpe.at("vocab"));
      const json& merges = bpe.at("merges");
      m->merges.reserve(merges.size());
      std::int32_t rank = 0;
      for (const json& merge : merges) {
        if (merge.is_string()) m->add_merge(merge.get<std::string>(), rank);
        else if (merge.is_array() && merge.size() == 2)
          m->add_merge(merge[0].get<std::string>(), merge[1].get<std::string>(), rank);
        else throw bad_input("merge " + std::to_string(rank + 1) + " is " + merge.dump() + ", not \"a b\" or [a, b]");
        ++rank;
      }
      m->ignore_merges = flag(bpe, "ignore_merges", false);
      m->nfc = type_of(j.value("normalizer", json())) == "NFC";
      m->set_split(j.at("pre_tokenizer").at("pretokenizers")[0].at("pattern").at("Regex").get<std::string>());
      for (const json& t : j.value("added_tokens", json::array())) m->add_token(read_added_token(t, to_id(t.at("id"), "added token")));
    });
    return std::unique_ptr<tokenizer>(new tokenizer(std::move(m)));
  }

  // vocab.json + merges.txt, as Qwen2Tokenizer reads them.
  m->nfc = true;
  m->set_split(qwen2_pattern);
  const fs::path vocab = path / tokenizer_files::vocab_json, merges = path / tokenizer_files::merges_txt;
  about_file(vocab, [&] { m->set_vocab(parse_json(read_file(vocab))); });
  about_file(merges, [&] {
    const std::string text = read_file(merges);
    std::string_view rest = text;
    std::int32_t rank = 0;
    for (bool first = true; !rest.empty(); first = false) {
      const std::size_t eol = rest.find('\n');
      std::string_view line = rest.substr(0, eol);
      rest.remove_prefix(eol == std::string_view::npos ? rest.size() : eol + 1);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty() || (first && line.starts_with("#version"))) continue;
      m->add_merge(line, rank++);
    }
  });
  const fs::path config = path / tokenizer_files::tokenizer_config_json;
  const fs::path added = path / tokenizer_files::added_tokens_json;
  const bool from_config = fs::exists(config) && about_file(config, [&] {
    const json j = parse_json(read_file(config));
    const auto decoder = j.find("added_tokens_decoder");
    if (decoder == j.end()) return false;
    for (const auto& [id, t] : decoder->items()) m->add_token(read_added_token(t, id_from_key(id, "added token")));
    return true;
  });
  if (!from_config && fs::exists(added)) {
    about_file(added, [&] {
      // A plain content -> id map: the tokens match the raw text, like the Qwen added tokens.
      const json tokens = parse_json(read_file(added));
      for (const auto& [content, id] : tokens.items())
        m->add_token({content, to_id(id, "added token \"" + content + "\""), false, false, false, false});
    });
  }
  return std::unique_ptr<tokenizer>(new tokenizer(std::move(m)));
}

tokenizer::tokenizer(std::unique_ptr<model> m) : model_(std::move(m)) {}
tokenizer::~tokenizer() = default;

void tokenizer::encode(std::string_view text, std::vector<std::int32_t>& out) const { model_->encode(text, out); }

std::vector<std::int32_t> tokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> out;
  out.reserve(text.size() / 3 + 4);
  encode(text, out);
  return out;
}

std::optional<std::int32_t> tokenizer::token_to_id(std::string_view token) const {
  if (const auto it = model_->added_ids.find(token); it != model_->added_ids.end()) return it->second;
  if (const auto it = model_->vocab.find(token); it != model_->vocab.end()) return it->second;
  return std::nullopt;
}

std::size_t tokenizer::size() const noexcept { return model_->size; }

void tokenizer::clear_cache() const { model_->cache.clear(); }

}  // namespace baton
