// Media in an agent's history (docs/protocol.md, "Media in events"): the items an event carries in
// its `images`, `audio` and `videos`, which the history the session keeps (and the state the
// engine reads) names by a placeholder, "image 3", while the items go into the request's arrays.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "core/json.hpp"
#include "core/request.hpp"

namespace baton::tools {

enum class media_kind { image, audio, video };

inline constexpr std::array<media_kind, 3> media_kinds = {media_kind::image, media_kind::audio, media_kind::video};

// The event's (and the request's) field: images, audio, videos.
std::string_view field_name(media_kind k) noexcept;
// The field's kind; none for any other key.
std::optional<media_kind> kind_of_field(std::string_view field) noexcept;
// What the history holds in the item's place: "image 3", "audio 1", "video 2".
std::string placeholder(media_kind k, std::size_t number);

// One item of an event, in the order the history holds them: by event, then images, audio,
// videos, each in its array's order.
struct history_item {
  media_kind kind = media_kind::image;
  std::size_t event = 0;   // the event's index in the history (in a decide frame: in its events)
  std::size_t slot = 0;    // its index in the event's array
  std::size_t number = 0;  // N of its placeholder, counted per kind across the history from 1
  media_item item;
  // "sha256:…" of the decoded payload of an inline item (what `sha256sum` of the file gives);
  // empty for a path or URL, or a payload that is not valid base64 (the engine refuses it).
  std::string payload_sha256;
};

// An item as read from an event: its payload's digest taken once, here, not on every turn.
history_item make_history_item(media_kind kind, std::size_t event, std::size_t slot, media_item item);

// The bytes a session holds for the item (its string: the base64 text, path or URL).
std::size_t held_bytes(const history_item& m) noexcept;

// What the decision log records of an item a turn sent (its `media` column): field, number
// (the N of its placeholder), event, source (inline, path or url), then for inline data its
// content type, decoded bytes and payload digest, for a path or URL the string.
json logged_item(const history_item& m);

}  // namespace baton::tools
