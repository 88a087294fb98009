// The one way the wire's texts are opened: an agent's or a reviewer's frame, a reviewer's resolve
// body. JSON within the engine's nesting limit, or 400 INVALID_JSON saying where it stopped being
// JSON; a frame must be an object, whose `id` an error frame then names.
#pragma once

#include <cstddef>
#include <string_view>

#include "core/error.hpp"
#include "core/json.hpp"

namespace baton::protocol {

// The text's JSON value, or 400 INVALID_JSON "the WHAT is not JSON: … at byte N".
result<json> read_json(std::string_view text, std::string_view what, std::size_t max_depth = 64);

// A frame's JSON object, or 400 INVALID_JSON (read_json's, or "a frame must be a JSON object").
// `id` is the frame's `id` as soon as the text is an object with one, null otherwise, so that the
// error frame of a frame refused for its fields still names it.
result<json> open_frame(std::string_view text, std::size_t max_depth, json& id);

// The `id` of a frame refused before it is read (its rate), so that the client knows which request
// to send again: null when the text is not a JSON object with one.
json frame_id(std::string_view text, std::size_t max_depth);

}  // namespace baton::protocol
