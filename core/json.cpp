#include "core/json.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstring>
#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

namespace baton {

bool is_big_integer(const json& v) noexcept {
  return v.is_binary() && v.get_binary().has_subtype() &&
         v.get_binary().subtype() == big_integer_subtype;
}

bool is_number(const json& v) noexcept { return v.is_number() || is_big_integer(v); }

namespace {

bool is_integer_literal(const std::string& s) {
  std::size_t i = (!s.empty() && s[0] == '-') ? 1 : 0;
  if (i == s.size()) return false;
  for (; i < s.size(); ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

// Builds the DOM through nlohmann's SAX interface so that we can keep big integer literals, bound
// the depth, make duplicate keys behave as in Python, and say where in the document an error is.
//
// An object's members are gathered on a stack first and moved into the object, at its final size,
// when it closes: ordered_json's members are pair<const string, json>, which a growing vector
// would copy (deeply) rather than move.
class dom_builder {
 public:
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  dom_builder(json& root, json_parse_error& err, std::size_t max_depth)
      : root_(root), err_(err), max_depth_(max_depth) {
    frames_.reserve(std::min<std::size_t>(max_depth, 32));
  }

  bool null() { return put(json(nullptr)) != nullptr; }
  bool boolean(bool b) { return put(json(b)) != nullptr; }
  bool number_integer(number_integer_t v) { return put(json(v)) != nullptr; }
  bool number_unsigned(number_unsigned_t v) { return put(json(v)) != nullptr; }
  bool number_float(number_float_t v, const string_t& text) {
    if (is_integer_literal(text)) {
      // The lexer only hands an integer literal over as a float when it overflows 64 bits.
      return put(json::binary(std::vector<std::uint8_t>(text.begin(), text.end()),
                              big_integer_subtype)) != nullptr;
    }
    return put(json(v)) != nullptr;
  }
  bool string(string_t& s) { return put(json(std::move(s))) != nullptr; }
  bool binary(binary_t& b) { return put(json::binary(std::move(b))) != nullptr; }

  bool start_object(std::size_t) { return open(json::value_t::object); }
  bool start_array(std::size_t) { return open(json::value_t::array); }
  bool key(string_t& k) {
    key_ = std::move(k);
    key_pending_ = true;
    return true;
  }
  bool end_object() {
    frame& f = frames_.back();
    auto& obj = f.value->get_ref<json::object_t&>();
    obj.reserve(members_.size() - f.start);
    for (std::size_t i = f.start; i < members_.size(); ++i)
      obj.emplace_back(std::move(members_[i].first), std::move(members_[i].second));
    members_.resize(f.start);
    frames_.pop_back();
    return true;
  }
  bool end_array() {
    frames_.pop_back();
    return true;
  }

  bool parse_error(std::size_t position, const std::string& last_token,
                   const nlohmann::detail::exception& ex) {
    err_.byte = position;
    err_.path = current_path();
    // Classify on nlohmann's description only: the raw token it quotes after it is the caller's text.
    const std::string what = describe_syntax_error(ex.what());
    if (ex.id == 406 && is_integer_literal(last_token)) {
      // nlohmann reads an integer beyond 64 bits as a double first; past DBL_MAX that is
      // infinite and it stops before baton can keep the digits (from 309 digits on).
      err_.what = json_parse_error::kind::long_integer;
      err_.message = "integer has " + std::to_string(last_token.size() - (last_token[0] == '-')) +
                     " digits; integers are kept exactly up to 308 digits";
    } else if (ex.id == 406) {
      err_.what = json_parse_error::kind::non_finite;
      err_.message = "number is too large for a finite double";
    } else if (what.find("ill-formed UTF-8") != std::string::npos) {
      err_.what = json_parse_error::kind::unicode;
      err_.message = "string is not valid UTF-8";
    } else if (what.find("surrogate") != std::string::npos) {
      err_.what = json_parse_error::kind::unicode;
      err_.message = "string has a lone UTF-16 surrogate escape";
    } else {
      err_.what = json_parse_error::kind::syntax;
      err_.message = what;
      err_.truncated = what.find("unexpected end of input") != std::string::npos;
    }
    return false;
  }

 private:
  struct frame {
    json* value = nullptr;
    std::size_t start = 0;  // objects: where this object's members begin in members_
    std::unique_ptr<std::unordered_map<std::string_view, std::size_t>> index;  // large objects only
  };

  static constexpr std::size_t linear_scan_limit = 16;

  // nlohmann's message names line and column and quotes the raw bytes last read, which may not be
  // UTF-8; keep only the description between them.
  static std::string describe_syntax_error(const std::string& what) {
    std::string text = what;
    if (auto p = text.find(": "); p != std::string::npos) text = text.substr(p + 2);
    if (auto p = text.find("; last read"); p != std::string::npos) text.resize(p);
    for (char& c : text)
      if (static_cast<unsigned char>(c) >= 0x80 || static_cast<unsigned char>(c) < 0x20) c = '?';
    return text;
  }

  // Where the parser is: each enclosing container's last value (the open one), then what is being
  // read in the innermost container (the next array index, or the key just read).
  json current_path() const {
    json path = json::array();
    for (std::size_t i = 0; i < frames_.size(); ++i) {
      const frame& f = frames_[i];
      const bool innermost = i + 1 == frames_.size();
      if (f.value->is_array()) {
        path.push_back(f.value->size() - (innermost ? 0 : 1));
      } else if (!innermost) {
        path.push_back(open_member_key(i));
      } else if (key_pending_) {
        path.push_back(key_);
      }
    }
    return path;
  }

  // The key of the member of object frame i that holds frame i + 1.
  const std::string& open_member_key(std::size_t i) const {
    const json* child = frames_[i + 1].value;
    for (std::size_t m = frames_[i].start; m < members_.size(); ++m)
      if (&members_[m].second == child) return members_[m].first;
    return key_;
  }

  bool open(json::value_t kind) {
    if (frames_.size() >= max_depth_) {
      err_.what = json_parse_error::kind::too_deep;
      err_.path = current_path();
      err_.message = "JSON nesting is deeper than " + std::to_string(max_depth_) + " levels";
      return false;
    }
    json* v = put(json(kind));
    frames_.push_back(frame{v, members_.size(), nullptr});
    return true;
  }

  json* put(json&& v) {
    if (frames_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    frame& f = frames_.back();
    if (f.value->is_array()) {
      auto& arr = f.value->get_ref<json::array_t&>();
      arr.push_back(std::move(v));
      return &arr.back();
    }
    key_pending_ = false;
    const std::size_t count = members_.size() - f.start;
    if (count >= linear_scan_limit && !f.index) {
      f.index = std::make_unique<std::unordered_map<std::string_view, std::size_t>>();
      for (std::size_t m = f.start; m < members_.size(); ++m) f.index->emplace(members_[m].first, m);
    }
    if (f.index) {
      if (auto it = f.index->find(key_); it != f.index->end()) return &(members_[it->second].second = std::move(v));
    } else {
      for (std::size_t m = f.start; m < members_.size(); ++m)
        if (members_[m].first == key_) return &(members_[m].second = std::move(v));
    }
    members_.emplace_back(std::move(key_), std::move(v));
    if (f.index) f.index->emplace(members_.back().first, members_.size() - 1);
    return &members_.back().second;
  }

  json& root_;
  json_parse_error& err_;
  std::size_t max_depth_;
  std::vector<frame> frames_;
  // Members of the open objects, innermost last. A deque keeps the addresses of the values that
  // open containers were put in while more members are pushed behind them.
  std::deque<std::pair<std::string, json>> members_;
  std::string key_;
  bool key_pending_ = false;
};

}  // namespace

bool parse_json(std::string_view text, json& out, json_parse_error& err,
                const json_parse_options& options) {
  out = nullptr;
  dom_builder builder(out, err, options.max_depth);
  // nlohmann's lexer reads a NUL byte as the end of the input (for C strings), so whatever
  // follows one would be dropped unread. Outside a string a NUL is never JSON (inside one the
  // lexer refuses it as an unescaped control character), so the first one is where the text stops
  // being JSON.
  const std::size_t nul = text.find('\0');
  if (json::sax_parse(text.begin(), text.end(), &builder)) {
    if (nul == std::string_view::npos) return true;
    err = json_parse_error{};
    err.byte = nul + 1;  // as nlohmann counts: the bytes read up to the offending one
    err.message = "unexpected NUL byte after the JSON value; only whitespace may follow it";
  } else if (nul != std::string_view::npos && err.truncated) {
    // The NUL stopped the value, not the end of the text.
    err.truncated = false;
    err.byte = nul + 1;
    err.message = "unexpected NUL byte; expected more of the JSON value";
  }
  out = nullptr;
  return false;
}

json parse_json_or_null(std::string_view text) {
  json out;
  json_parse_error err;
  return parse_json(text, out, err) ? out : json();
}

void render_string(std::string_view s, std::string& out) {
  static constexpr char hex[] = "0123456789abcdef";
  out.push_back('"');
  std::size_t run = 0;  // start of the pending run of bytes copied as they are
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(s.data() + run, i - run);
    run = i + 1;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default: {
        const char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
        out.append(esc, 6);
      }
    }
  }
  out.append(s.data() + run, s.size() - run);
  out.push_back('"');
}

void render_double(double v, std::string& out) {
  if (std::isnan(v)) {
    out += "NaN";
    return;
  }
  if (std::isinf(v)) {
    out += v < 0 ? "-Infinity" : "Infinity";
    return;
  }
  // Shortest round-trip digits, as Python's repr, then Python's choice of layout.
  std::array<char, 64> buf{};
  auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), v, std::chars_format::scientific);
  std::string_view sci(buf.data(), static_cast<std::size_t>(end - buf.data()));
  const bool negative = sci.front() == '-';
  if (negative) sci.remove_prefix(1);
  const std::size_t e = sci.find('e');
  std::string digits;
  digits.reserve(20);
  for (char c : sci.substr(0, e))
    if (c != '.') digits.push_back(c);
  int exponent = 0;
  std::string_view exp_text = sci.substr(e + 1);
  if (exp_text.front() == '+') exp_text.remove_prefix(1);
  std::from_chars(exp_text.data(), exp_text.data() + exp_text.size(), exponent);
  const int decpt = exponent + 1;  // value = 0.DIGITS x 10^decpt
  const int n = static_cast<int>(digits.size());

  if (negative) out.push_back('-');
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0.";
      out.append(static_cast<std::size_t>(-decpt), '0');
      out += digits;
    } else if (decpt >= n) {
      out += digits;
      out.append(static_cast<std::size_t>(decpt - n), '0');
      out += ".0";
    } else {
      out.append(digits, 0, static_cast<std::size_t>(decpt));
      out.push_back('.');
      out.append(digits, static_cast<std::size_t>(decpt));
    }
    return;
  }
  out.push_back(digits[0]);
  if (n > 1) {
    out.push_back('.');
    out.append(digits, 1);
  }
  const int x = decpt - 1;
  out.push_back('e');
  out.push_back(x < 0 ? '-' : '+');
  const int ax = x < 0 ? -x : x;
  if (ax < 10) out.push_back('0');
  out += std::to_string(ax);
}

double round_decimals(double v, int decimals) {
  if (!std::isfinite(v)) return v;
  // Correctly rounded fixed-point text, read back: the same value Python's round() returns.
  std::array<char, 400> buf{};
  auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), v, std::chars_format::fixed, decimals);
  if (ec != std::errc()) return v;
  double r = 0;
  std::from_chars(buf.data(), end, r);
  if (r == 0 && std::signbit(v)) r = -0.0;
  return r;
}

void render_rounded(double v, int decimals, std::string& out) {
  // Fast path for the wire's probabilities: with 4 decimals and 0 <= v < 1e6, Python's result is
  // k / 10^4 for the integer k nearest v·10^4, and its repr is that decimal with trailing zeros
  // cut. Near a tie the product's own rounding could matter, so those go the exact way.
  if (decimals == 4 && !std::signbit(v) && v < 1e6) {
    const double scaled = v * 10000.0;
    const double floor = std::floor(scaled);
    if (std::abs(scaled - floor - 0.5) > 1e-6) {
      const auto k = static_cast<std::uint64_t>(scaled - floor > 0.5 ? floor + 1 : floor);
      out += std::to_string(k / 10000);
      out.push_back('.');
      std::uint64_t frac = k % 10000;
      if (frac == 0) {
        out.push_back('0');
        return;
      }
      char digits[4];
      for (int i = 3; i >= 0; --i, frac /= 10) digits[i] = static_cast<char>('0' + frac % 10);
      int n = 4;
      while (digits[n - 1] == '0') --n;
      out.append(digits, static_cast<std::size_t>(n));
      return;
    }
  }
  render_double(round_decimals(v, decimals), out);
}

void render_json(const json& v, std::string& out, bool sort_keys) {
  using t = json::value_t;
  switch (v.type()) {
    case t::null:
    case t::discarded:
      out += "null";
      return;
    case t::boolean:
      out += v.get<bool>() ? "true" : "false";
      return;
    case t::number_integer: {
      std::array<char, 24> buf{};
      auto r = std::to_chars(buf.data(), buf.data() + buf.size(), v.get<std::int64_t>());
      out.append(buf.data(), r.ptr);
      return;
    }
    case t::number_unsigned: {
      std::array<char, 24> buf{};
      auto r = std::to_chars(buf.data(), buf.data() + buf.size(), v.get<std::uint64_t>());
      out.append(buf.data(), r.ptr);
      return;
    }
    case t::number_float:
      render_double(v.get<double>(), out);
      return;
    case t::string:
      render_string(v.get_ref<const std::string&>(), out);
      return;
    case t::binary: {
      // Only big integer literals are stored as binary; their digits go out as they came in.
      const auto& bytes = v.get_binary();
      out.append(bytes.begin(), bytes.end());
      return;
    }
    case t::array: {
      out.push_back('[');
      bool first = true;
      for (const json& e : v) {
        if (!first) out.push_back(',');
        first = false;
        render_json(e, out, sort_keys);
      }
      out.push_back(']');
      return;
    }
    case t::object: {
      const auto& obj = v.get_ref<const json::object_t&>();
      out.push_back('{');
      if (!sort_keys) {
        bool first = true;
        for (const auto& [k, e] : obj) {
          if (!first) out.push_back(',');
          first = false;
          render_string(k, out);
          out.push_back(':');
          render_json(e, out, false);
        }
      } else {
        // std::string compares bytes as unsigned char, and UTF-8 byte order is code-point order,
        // which is how Python sorts str keys.
        // Small objects are sorted in place on the stack: no allocation per object.
        using item_ptr = const json::object_t::value_type*;
        std::array<item_ptr, 16> small;
        std::vector<item_ptr> large;
        item_ptr* begin = small.data();
        if (obj.size() > small.size()) {
          large.resize(obj.size());
          begin = large.data();
        }
        item_ptr* end = begin;
        for (const auto& item : obj) *end++ = &item;
        std::sort(begin, end, [](item_ptr a, item_ptr b) { return a->first < b->first; });
        bool first = true;
        for (const item_ptr* it = begin; it != end; ++it) {
          const item_ptr item = *it;
          if (!first) out.push_back(',');
          first = false;
          render_string(item->first, out);
          out.push_back(':');
          render_json(item->second, out, true);
        }
      }
      out.push_back('}');
      return;
    }
  }
}

std::string render_json(const json& v, bool sort_keys) {
  std::string out;
  render_json(v, out, sort_keys);
  return out;
}

void render_text(const json& v, std::string& out) {
  if (v.is_string()) {
    out += v.get_ref<const std::string&>();
  } else {
    render_json(v, out, true);
  }
}

std::string replace_invalid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    // The length of the sequence b starts and the allowed range of its second byte (RFC 3629).
    std::size_t len = 0;
    unsigned char lo = 0x80, hi = 0xbf;
    if (b < 0x80) len = 1;
    else if (b >= 0xc2 && b <= 0xdf) len = 2;
    else if (b == 0xe0) len = 3, lo = 0xa0;
    else if (b == 0xed) len = 3, hi = 0x9f;
    else if (b >= 0xe1 && b <= 0xef) len = 3;
    else if (b == 0xf0) len = 4, lo = 0x90;
    else if (b >= 0xf1 && b <= 0xf3) len = 4;
    else if (b == 0xf4) len = 4, hi = 0x8f;
    std::size_t good = len ? 1 : 0;  // bytes of a well-formed prefix
    while (good && good < len && i + good < s.size()) {
      const auto c = static_cast<unsigned char>(s[i + good]);
      if (c < (good == 1 ? lo : 0x80) || c > (good == 1 ? hi : 0xbf)) break;
      ++good;
    }
    if (len && good == len) {
      out.append(s.data() + i, len);
      i += len;
    } else {
      // One replacement per maximal ill-formed prefix, as Python and the Unicode standard do.
      out += "\xef\xbf\xbd";
      i += std::max<std::size_t>(good, 1);
    }
  }
  return out;
}

}  // namespace baton
