// The agent protocol's frames (docs/protocol.md): client frames parsed and checked into plain
// structs, server frames rendered. No I/O here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "core/error.hpp"
#include "core/json.hpp"

namespace baton::tools {
struct tool_outcome;
}  // namespace baton::tools

namespace baton::protocol {

struct decide_frame {
  std::string session;
  std::optional<std::int64_t> turn;
  bool append = false;  // `events` are the new events (append) or the whole history
  json events;          // an array of event objects
  json proposal;        // {"tool": …, "arguments": {…}} or null
  json questions;       // extra SystemOne questions (object) or null
};

struct tool_result_frame {
  std::string decision;
  bool ok = false;
  json output;
};

// This connection takes the session's resolutions (docs/escalations.md).
struct resume_frame {
  std::string session;
};

// The agent has a resolution: it is not sent again.
struct ack_frame {
  std::string resolution;
};

using frame = std::variant<decide_frame, tool_result_frame, resume_frame, ack_frame>;

// The largest turn number: 2^53, the largest integer every JSON client (a JavaScript number)
// reads exactly.
inline constexpr std::int64_t max_turn = std::int64_t(1) << 53;

// 422 INVALID_FRAME at `turn` for a turn beyond max_turn; `context` (may be empty) says which
// turn that was when the frame named none.
error turn_too_large(std::string_view context);

// What a client frame gets: its content, or the error to answer it with. `id` is the frame's `id`
// (null when absent or unreadable), set as soon as the frame is a JSON object.
result<frame> parse_frame(std::string_view text, std::size_t max_json_depth, json& id);

// {"type":"error","ref":…,"error":…,"code":…,"detail":[…]}, plus "retry_after_ms" for a 429 (1000)
// or a 503 (100) other than SHUTTING_DOWN: rate limited, overloaded, log backlog, too many sessions.
std::string render_error_frame(const json& ref, const error& e);

// {"type":"tool_result","decision","tool","ok",["error_code","detail"],"attempts","output"} of a tool
// baton ran (docs/protocol.md); the caller adds "event" where it appended one to the history.
json render_tool_result(const std::string& decision, const std::string& tool, tools::tool_outcome&& o);

// A session id: 1–128 characters of A-Za-z0-9_.:@-
bool valid_session_id(std::string_view s) noexcept;

}  // namespace baton::protocol
