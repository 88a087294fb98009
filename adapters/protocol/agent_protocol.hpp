// The agent protocol's frames (docs/protocol.md): client frames parsed and checked into plain
// structs, server frames rendered. No I/O here.
#pragma once

#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

#include "adapters/protocol/error_frame.hpp"
#include "core/error.hpp"
#include "core/json.hpp"

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

// How a tool baton ran (http, command) went.
struct tool_outcome {
  bool ok = false;
  std::string error_code;  // with `detail`, on the wire only when !ok
  std::string detail;
  int attempts = 0;
  json output;
};

// {"type":"tool_result","decision","tool","ok",["error_code","detail"],"attempts","output"} of a tool
// baton ran (docs/protocol.md); the caller adds "event" where it appended one to the history.
json render_tool_result(const std::string& decision, const std::string& tool, tool_outcome&& o);
// The runtime hands a tools::tool_outcome: protocol depends on core only, so that type is not named here.
template <class outcome_type>
  requires(!std::same_as<std::remove_cvref_t<outcome_type>, tool_outcome>)
json render_tool_result(const std::string& decision, const std::string& tool, outcome_type&& o) {
  return render_tool_result(decision, tool, tool_outcome{o.ok, o.error_code, o.detail, o.attempts, std::move(o.output)});
}

// A session id: 1–128 characters of A-Za-z0-9_.:@-
bool valid_session_id(std::string_view s) noexcept;

}  // namespace baton::protocol
