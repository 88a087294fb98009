// Reading an object baton rendered back, field by field (protocol_readback.hpp): the first field
// that is not as rendered is named.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/error.hpp"
#include "core/json.hpp"

namespace baton::protocol {

// The fields of one JSON object. The first problem is kept (502 BAD_UPSTREAM_RESPONSE, as
// response_from_json answers a body it cannot read); reads after it return empty values. Unknown
// keys are ignored, as response_from_json ignores them.
class fields {
 public:
  fields(const json& object, std::string what);

  bool ok() const { return problem_.empty(); }
  error failure() const;

  const json* find(const char* key) const;
  std::string text(const char* key);                     // a string
  std::string text_or_null(const char* key);             // a string, or null for ""
  std::optional<std::string> optional_text(const char* key);  // a string, or null or absent
  std::int64_t integer(const char* key);
  double number(const char* key);
  bool boolean(const char* key);
  json value(const char* key);  // any JSON value, present
  // `ms_key`, unix ms, and `at_key`, that time as iso_utc writes it.
  std::int64_t time(const char* ms_key, const char* at_key);
  // An iso_utc time alone (no `_ms` beside it), as unix ms.
  std::int64_t iso_time(const char* key);

  void fail(std::string problem);

 private:
  const json* required(const char* key, bool ok_type(const json&), const char* kind);

  const json& object_;
  std::string what_;
  std::string problem_;
};

// A field's name as messages quote it: `key`.
std::string ticked(std::string_view key);

// The unix ms of an iso_utc text ("2024-05-01T12:34:56.789Z"); nullopt for any other spelling.
std::optional<std::int64_t> iso_utc_ms(std::string_view text);

}  // namespace baton::protocol
