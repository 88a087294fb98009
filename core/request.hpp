// The SystemOne request: state, ordered typed questions and media, parsed and validated as
// docs/systemone.md says. Question order and choice key order are kept exactly as sent.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "core/json.hpp"
#include "core/limits.hpp"

namespace baton {

enum class question_type { noul, choice, score };

std::string_view to_string(question_type t) noexcept;

struct question {
  std::string id;
  question_type type = question_type::noul;
  json instructions;  // as sent (string, object or array); null when absent
  json criteria;      // choice: object; score: array; noul: object or null

  // Options in request order: noul "true", "false"; choice the criteria keys; score "0".."n-1".
  std::size_t option_count() const noexcept;
  std::string option_id(std::size_t i) const;
  // The i-th criteria key of a choice question.
  const std::string& choice_label(std::size_t i) const;
  // The option's description, or null when it has none (noul sides the caller did not give).
  const json& option_description(std::size_t i) const;
};

// What the reference reads as a question's instruction: the instructions rendered as text, or the
// question id when they are null or "" (REF-omni `encode_record`; not Python truthiness).
void append_instruction_text(const question& q, std::string& out);

// Where a media item's bytes come from. Parsing reads no file and calls no server: a path or URL
// is checked for syntax only, loaded when the engine reads it (engine/media/source.hpp).
enum class media_source {
  inline_base64,  // a data URL or {"content_type", "base64"}
  path,           // a local file, relative paths resolved against the configured roots
  url,            // http:// or https://
  raw,            // decoded pixels or samples, from the C++ API only
};

// Decoded media handed over through the C++ API (never parsed from JSON).
struct raw_media {
  // Row-major [frames, height, width, 3] uint8 RGB: an image (1 frame) or a video's frames; empty
  // for audio.
  std::vector<std::uint8_t> pixels;
  std::int64_t frames = 0;
  std::int64_t height = 0;
  std::int64_t width = 0;
  // 16 kHz mono PCM in [-1, 1]: an audio clip, or a video's soundtrack (empty: none).
  std::vector<float> audio;
};

struct media_item {
  media_source source = media_source::inline_base64;
  std::string mime;             // inline: normalised ("image/jpg" reads as "image/jpeg"); else empty
  std::string data;             // the caller's string: a data URL, bare base64, a path or a URL
  std::size_t payload_offset = 0;  // inline: where the base64 payload starts in `data`
  std::size_t decoded_bytes = 0;   // inline: the payload's size; others: unknown (0) until loaded
  std::shared_ptr<const raw_media> raw;  // source raw only

  std::string_view base64() const { return std::string_view(data).substr(payload_offset); }
};

media_item raw_item(raw_media m);

// A state a request refers to rather than holds: an agent session's history, an array of events
// its holder keeps alive and unchanged until the engine has answered (no copy per turn). The engine
// reads it without the run of `dropped` events at `dropped_at`: the oldest that a context window
// left out (tools::drop_oldest_events).
struct history_view {
  const json* events = nullptr;  // an array; null: the request holds its state
  std::size_t dropped_at = 0;
  std::size_t dropped = 0;

  explicit operator bool() const noexcept { return events != nullptr; }
  std::size_t size() const noexcept { return events ? events->size() - dropped : 0; }  // the events read
  // Each event read, in order.
  template <class F>
  void for_each(F&& f) const {
    if (!events) return;
    for (std::size_t i = 0; i < events->size(); ++i) {
      if (i < dropped_at || i >= dropped_at + dropped) f((*events)[i]);
    }
  }
};

struct request {
  std::string model;  // empty when absent
  json state;         // string, object or array; null when `history` holds it
  history_view history;  // an agent turn's state, referred to
  std::vector<question> questions;
  std::vector<media_item> images;
  std::vector<media_item> audio;
  std::vector<media_item> videos;
  // Who asked, for the engine's prefix cache, which never serves one scope what another's requests
  // computed (a timing side channel): the API key's name, set by the server; never parsed from or
  // written to the wire.
  std::string cache_scope;

  bool has_media() const noexcept { return !images.empty() || !audio.empty() || !videos.empty(); }
  bool has_raw_media() const noexcept;
};

// The state as JSON text, render_json's with `sort_keys`: `state`, or the history's events read, as
// one array.
void render_state(const request& r, std::string& out, bool sort_keys);
// The state as the Clef reference reads it (render_text): a string state itself, anything else
// rendered with sorted keys into `scratch`.
std::string_view state_text(const request& r, std::string& scratch);

// The decision log's `state_hash` of what was decided on: "sha256:…" of the rendered state and,
// when `media` has any, each of its items as sent (field, content type, data; two requests that
// differ only in their image must not share a hash), every piece length-prefixed so that no state
// can spell another request's media.
std::string state_hash(std::string_view rendered_state, const request* media = nullptr);
// A media item of a state hash held outside a request (an agent session's), with its field.
struct media_ref {
  std::string_view field;  // images, audio or videos
  const media_item* item;
};
// The same hash of a state given as consecutive pieces, so that a caller holding it in parts does
// not join them first, and of media items given apart, in the order a request would hold them
// (every image, then every audio clip, then every video).
std::string state_hash_of_parts(std::initializer_list<std::string_view> rendered_state_pieces,
                                std::span<const media_ref> media = {});

// 413 REQUEST_TOO_LARGE for a body of `bytes` over the limit.
error body_too_large(std::size_t bytes, const request_limits& limits);

// One media array read on its own as request_from_json reads a request's `field` (images, audio
// or videos): the same item forms, issues and messages, each at `loc` and its index (an agent
// event's array: ["append", 0, "images"]). The items' strings are moved out of `items`. An item
// over `limits.max_item_bytes` is a 413 issue, checked only when the model reads the kind
// (`max_items` > 0): one that does not refuses the whole request instead (check_media_limits).
struct media_read {
  std::vector<media_item> items;  // those that read, in order
  std::vector<issue> issues;      // request_from_json's 422 INVALID_REQUEST issues
  std::vector<issue> too_large;   // its 413 REQUEST_TOO_LARGE issues
};
media_read read_media_array(json& items, std::string_view field, const media_limits& limits, const json& loc);

// request_from_json's media checks on a request built from items read apart (an agent turn's):
// kinds the model does not read, items per kind, decoded bytes per item and in total. The errors
// are the ones a SystemOne body with the same arrays gets: 422 INVALID_REQUEST, 413
// REQUEST_TOO_LARGE, at ["body", field(, index)].
result<void> check_media_limits(const request& r, const request_limits& limits);

// An item's wire form: its string (data URL, path or URL) or {"content_type", "base64"}; null for
// a raw item.
json media_item_json(const media_item& m);

// Parses and validates a request body. Failures: 413 REQUEST_TOO_LARGE (body, or inline media's
// decoded size; a path's or URL's bytes are counted when loaded),
// 400 INVALID_JSON (not JSON, or not an object), 422 INVALID_REQUEST (every field issue at once),
// 422 TOO_MANY_OPTIONS (the model's option budget). `model_id` names the model in messages.
result<request> parse_request(std::string_view body, const request_limits& limits,
                              std::string_view model_id = {});
// A line of a record file (as tests/data/vectors/clef-omni-tiny/records.jsonl): a bare request, or
// a wrapper {"id": …, "request": {…}, "max_length": N} around one, whose id and context window
// land in `meta`.
struct request_line {
  json id;                                // null when absent
  std::optional<std::size_t> max_length;  // the record's own context window
};
result<request> parse_request_line(std::string_view body, const request_limits& limits,
                                   std::string_view model_id, request_line& meta);

// The request's wire form, for another SystemOne server: `model` (when not empty), `state`,
// `questions` in order with their type, instructions and criteria as sent, and the media arrays
// (each item as the caller's string: a path or URL is the other server's to load). A raw item has
// no wire form and renders as null, which a server refuses: check has_raw_media first. A non-empty
// `model` replaces the request's own.
void render_request(const request& r, std::string& out, std::string_view model = {});

// The same on an already parsed body.
result<request> request_from_json(json&& body, const request_limits& limits,
                                  std::string_view model_id = {});

}  // namespace baton
