// The reviewer protocol's client frame (`resolve` on /v1/review, docs/escalations.md): parsed and
// checked into a plain struct, errors as values, as agent frames are (agent_protocol.hpp). No I/O.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/error.hpp"
#include "core/json.hpp"

namespace baton::protocol {

// What a reviewer asks for (POST /v1/escalations/{id}/resolve, or a `resolve` frame).
struct resolve_input {
  bool execute = false;
  std::optional<std::string> tool;
  std::optional<json> arguments;
  std::string reason;
  bool force = false;
};

// 422 INVALID_RESOLUTION naming the first problem of the body.
result<resolve_input> parse_resolve_input(const json& body);

struct resolve_frame {
  std::string escalation;
  resolve_input input;
};

// A reviewer's frame, or the error to answer it with: 400 INVALID_JSON (not JSON, or not an
// object), 422 UNKNOWN_TYPE (`type` missing, not a string or not `resolve`), 422 INVALID_FRAME
// (`escalation` missing or not a string, with its `loc`), or parse_resolve_input's 422
// INVALID_RESOLUTION. `id` is the frame's `id` (null when absent or unreadable), set as soon as
// the frame is a JSON object.
result<resolve_frame> parse_review_frame(std::string_view text, json& id);

}  // namespace baton::protocol
