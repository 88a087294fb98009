#include "support/protocol_fields.hpp"

#include <chrono>
#include <cstdio>

#include "core/ids.hpp"

namespace baton::protocol {

namespace {

bool is_string(const json& v) { return v.is_string(); }
bool is_integer(const json& v) { return v.is_number_integer(); }
bool is_number(const json& v) { return v.is_number(); }
bool is_boolean(const json& v) { return v.is_boolean(); }

}  // namespace

fields::fields(const json& object, std::string what) : object_(object), what_(std::move(what)) {
  if (!object_.is_object()) fail("not a JSON object");
}

error fields::failure() const { return make_error(502, "BAD_UPSTREAM_RESPONSE", what_ + ": " + problem_); }

void fields::fail(std::string problem) {
  if (problem_.empty()) problem_ = std::move(problem);
}

const json* fields::find(const char* key) const {
  if (!object_.is_object()) return nullptr;
  const auto it = object_.find(key);
  return it == object_.end() ? nullptr : &*it;
}

const json* fields::required(const char* key, bool ok_type(const json&), const char* kind) {
  if (!ok()) return nullptr;
  const json* v = find(key);
  if (!v || !ok_type(*v)) {
    fail(ticked(key) + " is missing or not " + kind);
    return nullptr;
  }
  return v;
}

std::string fields::text(const char* key) {
  const json* v = required(key, is_string, "a string");
  return v ? v->get<std::string>() : std::string();
}

std::string fields::text_or_null(const char* key) {
  const json* v = find(key);
  if (v && v->is_null()) return {};
  return text(key);
}

std::optional<std::string> fields::optional_text(const char* key) {
  const json* v = find(key);
  if (!v || v->is_null()) return std::nullopt;
  return text(key);
}

std::int64_t fields::integer(const char* key) {
  const json* v = required(key, is_integer, "an integer");
  return v ? v->get<std::int64_t>() : 0;
}

double fields::number(const char* key) {
  const json* v = required(key, is_number, "a number");
  return v ? v->get<double>() : 0;
}

bool fields::boolean(const char* key) {
  const json* v = required(key, is_boolean, "true or false");
  return v && v->get<bool>();
}

json fields::value(const char* key) {
  const json* v = required(key, [](const json&) { return true; }, "present");
  return v ? *v : json();
}

std::int64_t fields::time(const char* ms_key, const char* at_key) {
  const std::int64_t ms = integer(ms_key);
  const std::string at = text(at_key);
  if (ok() && at != iso_utc(ms)) fail(ticked(at_key) + " is not " + ticked(ms_key) + " in UTC (" + iso_utc(ms) + ")");
  return ms;
}

std::int64_t fields::iso_time(const char* key) {
  const std::string at = text(key);
  if (!ok()) return 0;
  const auto ms = iso_utc_ms(at);
  if (!ms) fail(ticked(key) + " is not a UTC time such as 2024-05-01T12:34:56.789Z");
  return ms.value_or(0);
}

std::string ticked(std::string_view key) {
  std::string out(1, '`');
  out.append(key);
  out += '`';
  return out;
}

std::optional<std::int64_t> iso_utc_ms(std::string_view text) {
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0, milli = 0;
  const std::string s(text);
  if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ", &year, &month, &day, &hour, &minute, &second, &milli) != 7) {
    return std::nullopt;
  }
  using namespace std::chrono;
  const year_month_day ymd{std::chrono::year(year), std::chrono::month(static_cast<unsigned>(month)),
                           std::chrono::day(static_cast<unsigned>(day))};
  if (!ymd.ok()) return std::nullopt;
  const sys_days date{ymd};
  const std::int64_t ms = duration_cast<milliseconds>(date.time_since_epoch()).count() +
                          ((hour * 60 + minute) * 60 + second) * std::int64_t(1000) + milli;
  // Only iso_utc's own spelling of a real time: the text it writes for the result.
  if (iso_utc(ms) != text) return std::nullopt;
  return ms;
}

}  // namespace baton::protocol
