// JSON values as callers send them: key order kept, integers beyond 64 bits kept exactly, and a
// renderer that writes what Python's json.dumps writes (the Clef reference renders with it).
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace baton {

using json = nlohmann::ordered_json;

// Integer literals that do not fit int64/uint64 are kept as their source text in a binary value with
// this subtype; JSON text never produces binary values, so the marker is unambiguous.
inline constexpr std::uint64_t big_integer_subtype = 0x6269;  // "bi"

bool is_big_integer(const json& v) noexcept;
// Any JSON number, including big integers.
bool is_number(const json& v) noexcept;

struct json_parse_options {
  std::size_t max_depth = 64;  // nesting levels of objects and arrays
};

struct json_parse_error {
  enum class kind {
    syntax,      // not JSON
    unicode,     // invalid UTF-8 or a lone surrogate inside a string
    too_deep,    // nesting beyond max_depth
    non_finite,  // a number that overflows a double (e.g. 1e400)
    long_integer,  // an integer literal beyond DBL_MAX (309 digits or more): nlohmann cannot read it
  };
  kind what = kind::syntax;
  std::size_t byte = 0;  // offset in the input where the parser stopped
  bool truncated = false;  // the text ended before the value did (e.g. the first line of a document)
  json path = json::array();  // keys and indices to the value being read
  std::string message;
};

// Parses one JSON document. Duplicate keys keep the last value at the first key's position, as
// Python's json.loads does.
bool parse_json(std::string_view text, json& out, json_parse_error& err,
                const json_parse_options& options = {});
// The value of a JSON text baton wrote itself (a log cell): null when it does not parse (a row
// written by hand), so that a reader shows what it can.
json parse_json_or_null(std::string_view text);

// Python json.dumps(v, ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys).
void render_json(const json& v, std::string& out, bool sort_keys);
std::string render_json(const json& v, bool sort_keys);
// The state/instruction rendering of the Clef reference: a string verbatim, anything else as
// render_json(v, sort_keys=true).
void render_text(const json& v, std::string& out);

// A JSON string literal with Python's escapes (\" \\ \n \r \t \b \f, other controls as \u00xx).
void render_string(std::string_view s, std::string& out);
// Python repr(float): shortest round-trip digits, "1250.0", "1e-05", "1e+16", "-0.0".
void render_double(double v, std::string& out);
// Python repr(round(v, decimals)).
void render_rounded(double v, int decimals, std::string& out);
// Python round(v, decimals) as a double.
double round_decimals(double v, int decimals);

// `s` with each invalid UTF-8 sequence replaced by U+FFFD, as Python's errors="replace" does: what
// goes into JSON (a tool's output, a log cell) must be valid UTF-8.
std::string replace_invalid_utf8(std::string_view s);

}  // namespace baton
