#include "core/request.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <optional>
#include <tuple>
#include <utility>

#include "core/error_codes.hpp"
#include "core/http_url.hpp"
#include "core/sha256.hpp"

namespace baton {

namespace {

const json& null_json() {
  static const json n;
  return n;
}

const json& default_noul_description(bool side) {
  static const json yes = "The proposition is true or the answer is yes.";
  static const json no = "The proposition is false or the answer is no.";
  return side ? yes : no;
}

std::string_view kind_name(const json& v) {
  if (is_big_integer(v)) return "number";
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "boolean";
    case json::value_t::string: return "string";
    case json::value_t::array: return "array";
    case json::value_t::object: return "object";
    default: return "number";
  }
}

json loc_of(std::initializer_list<json> parts) {
  json loc = json::array();
  loc.push_back("body");
  for (const json& p : parts) loc.push_back(p);
  return loc;
}

json extend(const json& loc, json part) {
  json out = loc;
  out.push_back(std::move(part));
  return out;
}

std::size_t code_points(std::string_view s) {
  return static_cast<std::size_t>(
      std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

issue length_issue(json loc, std::string_view field_type, std::size_t min, std::size_t max,
                   std::size_t actual) {
  const bool too_short = actual < min;
  const std::size_t bound = too_short ? min : max;
  issue i;
  i.loc = std::move(loc);
  i.type = too_short ? "too_short" : "too_long";
  i.msg = std::string(field_type) + " should have " + (too_short ? "at least " : "at most ") +
          std::to_string(bound) + (bound == 1 ? " item" : " items") + " after validation, not " +
          std::to_string(actual);
  i.ctx = json::object();
  i.ctx["field_type"] = field_type;
  i.ctx[too_short ? "min_length" : "max_length"] = bound;
  i.ctx["actual_length"] = actual;
  return i;
}

issue simple_issue(json loc, std::string type, std::string msg, json ctx = {}) {
  return issue{std::move(loc), std::move(msg), std::move(type), std::move(ctx)};
}

issue missing(json loc) { return simple_issue(std::move(loc), "missing", "Field required"); }

// Instructions, descriptions and levels: string, object or array (null only where allowed).
bool text_kind(const json& v, bool null_ok) {
  return v.is_string() || v.is_object() || v.is_array() || (null_ok && v.is_null());
}

issue json_type_issue(json loc, const json& v, bool null_ok) {
  return simple_issue(std::move(loc), "json_type",
                      std::string("Input should be a valid string, object or array") +
                          (null_ok ? " or null" : "") + ", not " + std::string(kind_name(v)));
}

struct validator {
  const request_limits& limits;
  std::vector<issue> issues;     // 422
  std::vector<issue> too_large;  // 413 when nothing else is wrong

  // Locations are built only when there is an issue to report: the valid path stays cheap.
  template <class Loc>
  void check_text_value(const json& v, Loc&& loc, bool null_ok) {
    if (!text_kind(v, null_ok)) issues.push_back(json_type_issue(loc(), v, null_ok));
  }

  template <class Loc>
  void check_question_id(const std::string& id, Loc&& loc) {
    if (id.empty()) {
      issues.push_back(simple_issue(loc(), "string_too_short", "question id must not be empty",
                                    json{{"min_length", 1}}));
      return;
    }
    if (code_points(id) > limits.max_question_id_chars)
      issues.push_back(simple_issue(
          loc(), "string_too_long",
          "question id should have at most " + std::to_string(limits.max_question_id_chars) +
              " characters",
          json{{"max_length", limits.max_question_id_chars}}));
    if (std::any_of(id.begin(), id.end(), [](char c) {
          auto u = static_cast<unsigned char>(c);
          return u < 0x20 || u == 0x7f;
        }))
      issues.push_back(simple_issue(loc(), "string_pattern_mismatch",
                                    "question id must not contain control characters"));
  }

  bool check_question(const std::string& id, json& body, question& out) {
    auto qloc = [&] { return loc_of({"questions", id}); };
    const std::size_t before = issues.size();
    check_question_id(id, qloc);
    if (!body.is_object()) {
      issues.push_back(simple_issue(qloc(), "dict_type", "Input should be a valid dictionary"));
      return false;
    }
    const auto type_it = body.find("type");
    if (type_it == body.end()) {
      issues.push_back(simple_issue(qloc(), "union_tag_not_found",
                                    "Unable to extract tag using discriminator 'type'",
                                    json{{"discriminator", "'type'"}}));
      return false;
    }
    const std::string tag = type_it->is_string() ? type_it->get<std::string>() : render_json(*type_it, false);
    if (tag == "noul") {
      out.type = question_type::noul;
    } else if (tag == "choice") {
      out.type = question_type::choice;
    } else if (tag == "score") {
      out.type = question_type::score;
    } else {
      issues.push_back(simple_issue(
          qloc(), "union_tag_invalid",
          "Input tag '" + tag +
              "' found using 'type' does not match any of the expected tags: 'choice', 'score', 'noul'",
          json{{"discriminator", "'type'"}, {"tag", tag}, {"expected_tags", "'choice', 'score', 'noul'"}}));
      return false;
    }
    auto tloc = [&] { return extend(qloc(), tag); };

    if (auto it = body.find("instructions"); it != body.end()) {
      check_text_value(*it, [&] { return extend(tloc(), "instructions"); }, true);
      out.instructions = std::move(*it);
    }

    auto cloc = [&] { return extend(tloc(), "criteria"); };
    auto crit = body.find("criteria");
    const bool absent = crit == body.end() || crit->is_null();
    switch (out.type) {
      case question_type::noul:
        if (absent) break;
        if (!crit->is_object()) {
          issues.push_back(simple_issue(cloc(), "dict_type", "Input should be a valid dictionary or null"));
          break;
        }
        for (const char* side : {"true", "false"})
          if (auto s = crit->find(side); s != crit->end())
            check_text_value(*s, [&] { return extend(cloc(), side); }, true);
        break;
      case question_type::choice:
        if (absent) {
          issues.push_back(missing(cloc()));
          break;
        }
        if (!crit->is_object()) {
          issues.push_back(simple_issue(cloc(), "dict_type", "Input should be a valid dictionary"));
          break;
        }
        if (crit->size() < limits.min_choice_options || crit->size() > limits.max_choice_options) {
          issues.push_back(length_issue(cloc(), "Dictionary", limits.min_choice_options,
                                        limits.max_choice_options, crit->size()));
          if (crit->size() > limits.max_choice_options) break;
        }
        for (const auto& [label, desc] : crit->items()) {
          if (label.empty())
            issues.push_back(simple_issue(extend(cloc(), label), "string_too_short",
                                          "choice label must not be empty", json{{"min_length", 1}}));
          check_text_value(desc, [&] { return extend(cloc(), label); }, true);
        }
        break;
      case question_type::score:
        if (absent) {
          issues.push_back(missing(cloc()));
          break;
        }
        if (!crit->is_array()) {
          issues.push_back(simple_issue(
              cloc(), "list_type", "Input should be a valid list (score criteria are an ordered list of levels)"));
          break;
        }
        if (crit->size() < limits.min_score_levels || crit->size() > limits.max_score_levels) {
          issues.push_back(length_issue(cloc(), "List", limits.min_score_levels, limits.max_score_levels,
                                        crit->size()));
          if (crit->size() > limits.max_score_levels) break;
        }
        for (std::size_t i = 0; i < crit->size(); ++i)
          check_text_value((*crit)[i], [&] { return extend(cloc(), i); }, false);
        break;
    }
    if (!absent) out.criteria = std::move(*crit);
    out.id = id;
    return issues.size() == before;
  }

  void check_media(json& body, const char* field, const media_limits& lim, std::vector<media_item>& out,
                   std::size_t& total_bytes) {
    auto it = body.find(field);
    if (it == body.end() || it->is_null()) return;
    const json loc = loc_of({field});
    if (!it->is_array()) {
      issues.push_back(simple_issue(loc, "list_type", "Input should be a valid list"));
      return;
    }
    if (it->empty() || !count_fits(loc, field, lim, it->size())) return;
    for (std::size_t i = 0; i < it->size(); ++i) {
      media_item item;
      if (read_media((*it)[i], extend(loc, i), field, item)) {
        check_item_size(item, lim, [&] { return extend(loc, i); });
        total_bytes += item.decoded_bytes;
        out.push_back(std::move(item));
      }
    }
  }

  // Whether a model with `lim` takes `count` items of `field` (`count` > 0); the issue otherwise.
  bool count_fits(const json& loc, std::string_view field, const media_limits& lim, std::size_t count) {
    if (lim.max_items == 0) {
      issues.push_back(simple_issue(loc, "media_unsupported", "this model does not read " + std::string(field)));
      return false;
    }
    if (count > lim.max_items) {
      issues.push_back(length_issue(loc, "List", 0, lim.max_items, count));
      return false;
    }
    return true;
  }

  template <class Loc>
  void check_item_size(const media_item& item, const media_limits& lim, Loc&& loc) {
    if (item.decoded_bytes > lim.max_item_bytes)
      too_large.push_back(simple_issue(
          loc(), "media_too_large",
          "decoded size is " + std::to_string(item.decoded_bytes) + " bytes; the limit is " +
              std::to_string(lim.max_item_bytes),
          json{{"max_bytes", lim.max_item_bytes}, {"bytes", item.decoded_bytes}}));
  }

  void check_media_totals(std::size_t image_bytes, std::size_t av_bytes) {
    if (image_bytes > limits.max_image_bytes_total)
      too_large.push_back(simple_issue(loc_of({"images"}), "media_too_large",
                                       "images total " + std::to_string(image_bytes) +
                                           " decoded bytes; the limit is " +
                                           std::to_string(limits.max_image_bytes_total)));
    if (av_bytes > limits.max_audio_video_bytes_total)
      too_large.push_back(simple_issue(loc_of({"audio"}), "media_too_large",
                                       "audio and videos total " + std::to_string(av_bytes) +
                                           " decoded bytes; the limit is " +
                                           std::to_string(limits.max_audio_video_bytes_total)));
  }

  // 422 with every issue (the 413 ones after them), else 413, else none.
  std::optional<error> refusal() {
    if (!issues.empty()) {
      for (issue& i : too_large) issues.push_back(std::move(i));
      return make_error(422, codes::invalid_request, std::move(issues));
    }
    if (!too_large.empty()) return make_error(413, codes::request_too_large, std::move(too_large));
    return std::nullopt;
  }

  static bool mime_allowed(std::string_view field, std::string& mime) {
    std::transform(mime.begin(), mime.end(), mime.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (field == "images") {
      if (mime == "image/jpg") mime = "image/jpeg";
      return mime == "image/png" || mime == "image/jpeg" || mime == "image/webp";
    }
    const std::string_view prefix = field == "audio" ? "audio/" : "video/";
    return mime.size() > prefix.size() && mime.compare(0, prefix.size(), prefix) == 0;
  }

  // Bytes the base64 payload decodes to. The payload itself is checked when the media is decoded:
  // validation only needs its size.
  static std::size_t base64_decoded_size(std::string_view b64) {
    std::size_t pad = 0;
    while (pad < 2 && pad < b64.size() && b64[b64.size() - 1 - pad] == '=') ++pad;
    return (b64.size() - pad) * 3 / 4;
  }

  static constexpr std::size_t max_path_bytes = 4096;  // Linux's PATH_MAX

  // Whether `text` is `lower` (lower case ASCII) in any case.
  static bool equals_nocase(std::string_view lower, std::string_view text) {
    return lower.size() == text.size() && std::equal(lower.begin(), lower.end(), text.begin(), [](char l, char c) {
             return l == std::tolower(static_cast<unsigned char>(c));
           });
  }

  // A string item: a data URL, an http(s) URL or a local path, told apart by their start.
  bool read_media_string(const json& loc, media_item& item) {
    const std::string_view s = item.data;
    auto starts_with_nocase = [&](std::string_view prefix) {
      return s.size() >= prefix.size() && equals_nocase(prefix, s.substr(0, prefix.size()));
    };
    const std::size_t scheme_end = s.find("://");
    const bool has_scheme = scheme_end != std::string_view::npos && scheme_end > 0 &&
                            std::all_of(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(scheme_end), [](char c) {
                              return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.';
                            });
    if (starts_with_nocase("data:")) return read_data_url(loc, item);
    if (has_scheme) {
      if (!starts_with_nocase("http://") && !starts_with_nocase("https://")) {
        issues.push_back(simple_issue(loc, "url_scheme",
                                      "Input should be a data URL, an http:// or https:// URL or a file path; '" +
                                          std::string(s.substr(0, scheme_end)) + "://' is not accepted"));
        return false;
      }
      std::string reason;
      if (!parse_http_url(s, reason, true)) {
        issues.push_back(simple_issue(loc, "url_syntax", "URL " + reason));
        return false;
      }
      item.source = media_source::url;
      return true;
    }
    if (s.empty()) {
      issues.push_back(simple_issue(loc, "string_too_short", "a media item must not be empty"));
      return false;
    }
    if (s.size() > max_path_bytes) {
      issues.push_back(simple_issue(loc, "string_too_long",
                                    "a file path should have at most " + std::to_string(max_path_bytes) + " bytes",
                                    json{{"max_length", max_path_bytes}}));
      return false;
    }
    if (std::any_of(s.begin(), s.end(), [](char c) {
          auto u = static_cast<unsigned char>(c);
          return u < 0x20 || u == 0x7f;
        })) {
      issues.push_back(simple_issue(loc, "string_pattern_mismatch", "a file path must not contain control characters"));
      return false;
    }
    item.source = media_source::path;
    return true;
  }

  bool read_data_url(const json& loc, media_item& item) {
    const std::string_view s = item.data;
    const std::size_t comma = s.find(',');
    if (comma == std::string_view::npos) {
      issues.push_back(simple_issue(loc, "url_syntax", "data URLs are data:<mime>;base64,<payload>"));
      return false;
    }
    std::string_view head = s.substr(5, comma - 5);  // "<mime>[;param]*;base64"
    constexpr std::string_view b64_tag = ";base64";
    // RFC 2397's tokens, like MIME's, are case-insensitive: ";BASE64" is the same tag.
    if (head.size() < b64_tag.size() || !equals_nocase(b64_tag, head.substr(head.size() - b64_tag.size()))) {
      issues.push_back(simple_issue(loc, "url_syntax", "data URLs must be base64-encoded (;base64,)"));
      return false;
    }
    // Forwarded as the contract spells it: another server may not read ";BASE64".
    item.data.replace(5 + head.size() - b64_tag.size(), b64_tag.size(), b64_tag);
    head = std::string_view(item.data).substr(5, comma - 5);
    head.remove_suffix(b64_tag.size());
    item.mime = std::string(head.substr(0, head.find(';')));
    item.payload_offset = comma + 1;
    return true;
  }

  bool read_media(json& v, const json& loc, std::string_view field, media_item& item) {
    if (v.is_string()) {
      item.data = std::move(v.get_ref<std::string&>());
      if (!read_media_string(loc, item)) return false;
      // A path's or URL's content is sniffed when it is decoded: its mime is not known here.
      if (item.source != media_source::inline_base64) return true;
    } else if (v.is_object()) {
      auto ct = v.find("content_type");
      auto b64 = v.find("base64");
      bool ok = true;
      if (ct == v.end() || !ct->is_string()) {
        issues.push_back(ct == v.end() ? missing(extend(loc, "content_type"))
                                       : simple_issue(extend(loc, "content_type"), "string_type",
                                                      "Input should be a valid string"));
        ok = false;
      }
      if (b64 == v.end() || !b64->is_string()) {
        issues.push_back(b64 == v.end() ? missing(extend(loc, "base64"))
                                        : simple_issue(extend(loc, "base64"), "string_type",
                                                       "Input should be a valid string"));
        ok = false;
      }
      if (!ok) return false;
      item.mime = ct->get<std::string>();
      item.data = std::move(b64->get_ref<std::string&>());
    } else {
      issues.push_back(simple_issue(loc, "json_type",
                                    "Input should be a string (a data URL, an http(s) URL or a file path) or an "
                                    "object {content_type, base64}"));
      return false;
    }
    if (!mime_allowed(field, item.mime)) {
      const char* expected = field == "images" ? "image/png, image/jpeg or image/webp"
                             : field == "audio" ? "audio/*"
                                                : "video/*";
      issues.push_back(simple_issue(loc, "media_type",
                                    "unsupported media type '" + item.mime + "' for " +
                                        std::string(field) + "; expected " + expected));
      return false;
    }
    item.decoded_bytes = base64_decoded_size(item.base64());
    return true;
  }
};

}  // namespace

std::string_view to_string(question_type t) noexcept {
  switch (t) {
    case question_type::noul: return "noul";
    case question_type::choice: return "choice";
    case question_type::score: return "score";
  }
  return "noul";
}

std::size_t question::option_count() const noexcept {
  switch (type) {
    case question_type::noul: return 2;
    case question_type::choice:
    case question_type::score: return criteria.size();
  }
  return 0;
}

std::string question::option_id(std::size_t i) const {
  switch (type) {
    case question_type::noul: return i == 0 ? "true" : "false";
    case question_type::choice: return choice_label(i);
    case question_type::score: return std::to_string(i);
  }
  return {};
}

const std::string& question::choice_label(std::size_t i) const {
  return criteria.get_ref<const json::object_t&>().begin()[static_cast<std::ptrdiff_t>(i)].first;
}

const json& question::option_description(std::size_t i) const {
  switch (type) {
    case question_type::noul: {
      const char* side = i == 0 ? "true" : "false";
      if (criteria.is_object())
        if (auto it = criteria.find(side); it != criteria.end()) return *it;
      return default_noul_description(i == 0);
    }
    case question_type::choice:
      return criteria.get_ref<const json::object_t&>().begin()[static_cast<std::ptrdiff_t>(i)].second;
    case question_type::score: return criteria[i];
  }
  return null_json();
}

void append_instruction_text(const question& q, std::string& out) {
  const bool empty = q.instructions.is_null() ||
                     (q.instructions.is_string() && q.instructions.get_ref<const std::string&>().empty());
  if (!empty) {
    render_text(q.instructions, out);
  } else {
    out += q.id;
  }
}

error body_too_large(std::size_t bytes, const request_limits& limits) {
  return make_error(413, codes::request_too_large,
                    "request body is " + std::to_string(bytes) + " bytes; the limit is " +
                        std::to_string(limits.max_body_bytes));
}

namespace {

// Whether the text's value is an object: its first byte after a UTF-8 byte-order mark and
// whitespace (both of which the parser skips) is `{`.
bool opens_object(std::string_view text) {
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  const auto first = text.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && text[first] == '{';
}

// The body as JSON, or the refusal of a body that is too large or not acceptable JSON.
std::optional<error> parse_body(std::string_view body, const request_limits& limits, json& doc) {
  if (body.size() > limits.max_body_bytes) return body_too_large(body.size(), limits);
  json_parse_error err;
  if (parse_json(body, doc, err, json_parse_options{limits.max_json_depth})) return std::nullopt;
  // A value that is not an object (1e999, "\ud800") is refused as that first, as a readable one is.
  if (err.what != json_parse_error::kind::syntax && !opens_object(body)) {
    return make_error(400, codes::invalid_json, "request body must be a JSON object");
  }
  json loc = json::array({"body"});
  for (const json& p : err.path) loc.push_back(p);
  switch (err.what) {
    case json_parse_error::kind::syntax:
      return make_error(400, codes::invalid_json,
                        "request body is not valid JSON: " + err.message + " at byte " + std::to_string(err.byte));
    case json_parse_error::kind::unicode:
      return make_error(422, codes::invalid_request,
                        {simple_issue(loc, "string_unicode", "Input should be a valid string: " + err.message)});
    case json_parse_error::kind::too_deep:
      return make_error(422, codes::invalid_request,
                        {simple_issue(loc, "json_too_deep", err.message, json{{"max_depth", limits.max_json_depth}})});
    case json_parse_error::kind::non_finite:
      return make_error(422, codes::invalid_request,
                        {simple_issue(loc, "finite_number", "Input should be a finite number")});
    case json_parse_error::kind::long_integer:
      return make_error(422, codes::invalid_request, {simple_issue(loc, "int_too_long", err.message)});
  }
  return make_error(400, codes::invalid_json, "request body is not valid JSON");
}

}  // namespace

result<request> parse_request(std::string_view body, const request_limits& limits, std::string_view model_id) {
  json doc;
  if (auto refused = parse_body(body, limits, doc)) return std::move(*refused);
  return request_from_json(std::move(doc), limits, model_id);
}

result<request> parse_request_line(std::string_view body, const request_limits& limits,
                                   std::string_view model_id, request_line& meta) {
  meta = {};
  json doc;
  if (auto refused = parse_body(body, limits, doc)) return std::move(*refused);
  const bool wrapper = doc.is_object() && doc.contains("request") && !doc.contains("questions");
  if (!wrapper) return request_from_json(std::move(doc), limits, model_id);
  if (auto id = doc.find("id"); id != doc.end()) meta.id = *id;
  if (auto m = doc.find("max_length"); m != doc.end() && !m->is_null()) {
    if (!m->is_number_unsigned() || m->get<std::uint64_t>() == 0) {
      return make_error(422, codes::invalid_request,
                        {simple_issue(json::array({"max_length"}), "greater_than",
                                      "Input should be a positive integer", json{{"gt", 0}})});
    }
    meta.max_length = static_cast<std::size_t>(m->get<std::uint64_t>());
  }
  return request_from_json(std::move(doc["request"]), limits, model_id);
}

result<request> request_from_json(json&& body, const request_limits& limits, std::string_view model_id) {
  if (!body.is_object()) return make_error(400, codes::invalid_json, "request body must be a JSON object");
  validator v{limits, {}, {}};
  request r;

  if (auto it = body.find("model"); it != body.end() && !it->is_null()) {
    if (it->is_string() && it->get_ref<const std::string&>().empty()) {
      // Absent means the served model; an empty name is no name.
      v.issues.push_back(simple_issue(loc_of({"model"}), "string_too_short", "model must not be empty",
                                      json{{"min_length", 1}}));
    } else if (it->is_string()) {
      r.model = it->get<std::string>();
    } else {
      v.issues.push_back(simple_issue(loc_of({"model"}), "string_type", "Input should be a valid string"));
    }
  }

  if (auto it = body.find("state"); it == body.end()) {
    v.issues.push_back(missing(loc_of({"state"})));
  } else if (it->is_string() || it->is_object() || it->is_array()) {
    r.state = std::move(*it);
  } else {
    v.issues.push_back(simple_issue(loc_of({"state"}), "state_type",
                                    "Input should be a valid string, object or array, not " +
                                        std::string(kind_name(*it))));
  }

  if (auto it = body.find("questions"); it == body.end()) {
    v.issues.push_back(missing(loc_of({"questions"})));
  } else if (!it->is_object()) {
    v.issues.push_back(simple_issue(loc_of({"questions"}), "dict_type", "Input should be a valid dictionary"));
  } else if (it->size() < limits.min_questions || it->size() > limits.max_questions) {
    // Past the limit the questions themselves are not read: the issue list stays bounded.
    v.issues.push_back(length_issue(loc_of({"questions"}), "Dictionary", limits.min_questions,
                                    limits.max_questions, it->size()));
  } else {
    r.questions.reserve(it->size());
    for (auto& [id, q] : it->get_ref<json::object_t&>()) {
      question out;
      if (v.check_question(id, q, out)) r.questions.push_back(std::move(out));
    }
  }

  std::size_t image_bytes = 0;
  std::size_t av_bytes = 0;
  v.check_media(body, "images", limits.images, r.images, image_bytes);
  v.check_media(body, "audio", limits.audio, r.audio, av_bytes);
  v.check_media(body, "videos", limits.videos, r.videos, av_bytes);
  v.check_media_totals(image_bytes, av_bytes);
  if (auto refused = v.refusal()) return std::move(*refused);

  if (limits.max_total_options > 0) {
    std::size_t total = 0;
    for (const question& q : r.questions) total += q.option_count();
    if (total > limits.max_total_options) {
      issue i = simple_issue(loc_of({"questions"}), "too_many_options",
                             std::to_string(total) + " options do not fit the option budget of " +
                                 std::string(model_id.empty() ? "this model" : model_id) + " (" +
                                 std::to_string(limits.max_total_options) + ")",
                             json{{"options", total}, {"max_options", limits.max_total_options}});
      if (!model_id.empty()) i.ctx["model"] = model_id;
      return make_error(422, codes::too_many_options, {std::move(i)});
    }
  }
  return r;
}

media_read read_media_array(json& items, std::string_view field, const media_limits& limits, const json& loc) {
  static const request_limits unused_limits;
  validator v{unused_limits, {}, {}};
  media_read out;
  if (!items.is_array()) {
    v.issues.push_back(simple_issue(loc, "list_type", "Input should be a valid list"));
  } else {
    for (std::size_t i = 0; i < items.size(); ++i) {
      media_item item;
      if (!v.read_media(items[i], extend(loc, i), field, item)) continue;
      // A kind the model does not read is the request's refusal (media_unsupported), not the item's.
      if (limits.max_items > 0) v.check_item_size(item, limits, [&] { return extend(loc, i); });
      out.items.push_back(std::move(item));
    }
  }
  out.issues = std::move(v.issues);
  out.too_large = std::move(v.too_large);
  return out;
}

result<void> check_media_limits(const request& r, const request_limits& limits) {
  validator v{limits, {}, {}};
  std::size_t image_bytes = 0;
  std::size_t av_bytes = 0;
  for (const auto& [field, items, lim, total] :
       {std::tuple{"images", &r.images, &limits.images, &image_bytes}, std::tuple{"audio", &r.audio, &limits.audio, &av_bytes},
        std::tuple{"videos", &r.videos, &limits.videos, &av_bytes}}) {
    if (items->empty()) continue;
    const json loc = loc_of({field});
    if (!v.count_fits(loc, field, *lim, items->size())) continue;
    for (std::size_t i = 0; i < items->size(); ++i) {
      v.check_item_size((*items)[i], *lim, [&] { return extend(loc, i); });
      *total += (*items)[i].decoded_bytes;
    }
  }
  v.check_media_totals(image_bytes, av_bytes);
  if (auto refused = v.refusal()) return std::move(*refused);
  return {};
}

json media_item_json(const media_item& m) {
  if (m.source == media_source::raw) return nullptr;
  if (m.source != media_source::inline_base64 || m.payload_offset > 0) return m.data;  // a path, URL or data URL
  return json{{"content_type", m.mime}, {"base64", m.data}};
}

media_item raw_item(raw_media m) {
  media_item item;
  item.source = media_source::raw;
  item.raw = std::make_shared<const raw_media>(std::move(m));
  return item;
}

bool request::has_raw_media() const noexcept {
  for (const auto* items : {&images, &audio, &videos})
    for (const media_item& m : *items)
      if (m.source == media_source::raw) return true;
  return false;
}

void render_state(const request& r, std::string& out, bool sort_keys) {
  if (!r.history) return render_json(r.state, out, sort_keys);
  out += '[';
  bool first = true;
  r.history.for_each([&](const json& event) {
    if (!first) out += ',';
    first = false;
    render_json(event, out, sort_keys);
  });
  out += ']';
}

std::string_view state_text(const request& r, std::string& scratch) {
  if (!r.history && r.state.is_string()) return r.state.get_ref<const std::string&>();
  scratch.clear();
  render_state(r, scratch, true);
  return scratch;
}

void render_request(const request& r, std::string& out, std::string_view model) {
  out += '{';
  if (model.empty()) model = r.model;
  if (!model.empty()) {
    out += "\"model\":";
    render_string(model, out);
    out += ',';
  }
  out += "\"state\":";
  render_state(r, out, false);
  out += ",\"questions\":{";
  for (std::size_t i = 0; i < r.questions.size(); ++i) {
    const question& q = r.questions[i];
    if (i > 0) out += ',';
    render_string(q.id, out);
    out += ":{\"type\":";
    render_string(to_string(q.type), out);
    if (!q.instructions.is_null()) {
      out += ",\"instructions\":";
      render_json(q.instructions, out, false);
    }
    if (!q.criteria.is_null()) {
      out += ",\"criteria\":";
      render_json(q.criteria, out, false);
    }
    out += '}';
  }
  out += '}';
  for (const auto& [name, items] : {std::pair<const char*, const std::vector<media_item>*>{"images", &r.images},
                                    {"audio", &r.audio},
                                    {"videos", &r.videos}}) {
    if (items->empty()) continue;
    out += ",\"";
    out += name;
    out += "\":[";
    for (std::size_t i = 0; i < items->size(); ++i) {
      const media_item& m = (*items)[i];
      if (i > 0) out += ',';
      if (m.source == media_source::raw) {
        out += "null";
      } else if (m.source != media_source::inline_base64 || m.payload_offset > 0) {  // a path, URL or data URL
        render_string(m.data, out);
      } else {  // sent as {"content_type", "base64"}
        out += "{\"content_type\":";
        render_string(m.mime, out);
        out += ",\"base64\":";
        render_string(m.data, out);
        out += '}';
      }
    }
    out += ']';
  }
  out += '}';
}

namespace {

// The media pieces of a state hash: each item's field, content type and data, length-prefixed.
class media_hash {
 public:
  explicit media_hash(std::size_t state_bytes) {
    h_.update(std::to_string(state_bytes));
    h_.update(":");
  }
  void state(std::string_view part) { h_.update(part); }
  void piece(std::string_view p) {
    h_.update(std::to_string(p.size()));
    h_.update(":");
    h_.update(p);
  }
  void item(std::string_view field, const media_item& m) {
    piece(field);
    piece(m.mime);
    piece(m.data);
  }
  std::string digest() { return h_.digest(); }

 private:
  sha256 h_;
};

}  // namespace

std::string state_hash(std::string_view rendered_state, const request* media) {
  if (!media || !media->has_media()) return sha256_hex(rendered_state);
  media_hash h(rendered_state.size());
  h.state(rendered_state);
  for (const auto& [field, items] : {std::pair{"images", &media->images}, std::pair{"audio", &media->audio},
                                     std::pair{"videos", &media->videos}}) {
    for (const media_item& m : *items) h.item(field, m);
  }
  return h.digest();
}

std::string state_hash_of_parts(std::initializer_list<std::string_view> rendered_state_pieces,
                                std::span<const media_ref> media) {
  if (media.empty()) {
    sha256 h;
    for (const std::string_view p : rendered_state_pieces) h.update(p);
    return h.digest();
  }
  std::size_t bytes = 0;
  for (const std::string_view p : rendered_state_pieces) bytes += p.size();
  media_hash h(bytes);
  for (const std::string_view p : rendered_state_pieces) h.state(p);
  for (const media_ref& m : media) h.item(m.field, *m.item);
  return h.digest();
}

}  // namespace baton
