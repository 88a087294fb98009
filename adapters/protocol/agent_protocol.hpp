// The agent protocol's frames (docs/protocol.md): client frames parsed and checked into plain
// structs (and rendered, for C++ clients and the tests); server frames rendered from plain structs
// exactly as baton sends them (and read back). No I/O here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "adapters/protocol/error_frame.hpp"
#include "adapters/protocol/review_protocol.hpp"
#include "core/answers.hpp"
#include "core/error.hpp"
#include "core/json.hpp"
#include "core/limits.hpp"
#include "core/request.hpp"

namespace baton::protocol {

// Client → server. A frame's `id` is beside it: parse_frame() hands it out, render() takes it.

// A media item of one of a decide frame's events.
struct event_item {
  std::size_t event = 0;   // the event's index in the frame's events
  std::string_view field;  // "images", "audio" or "videos" (static text)
  std::size_t slot = 0;    // its index in the event's array
  media_item item;
};

struct decide_frame {
  std::string session;
  std::optional<std::int64_t> turn;
  bool append = false;  // `events` are the new events (append) or the whole history
  json events;          // an array of event objects
  // The events' media items (`images`, `audio`, `videos`), in event order: parse_frame takes them
  // out of `events`, whose arrays hold null in their places until the session names them
  // ("image 3"); render() puts them back. Empty for a frame built by hand with the items in
  // `events`.
  std::vector<event_item> media;
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

// The agent is done with the session: the server forgets it (docs/protocol.md, `end`).
struct end_frame {
  std::string session;
};

using frame = std::variant<decide_frame, tool_result_frame, resume_frame, ack_frame, end_frame>;

// The largest turn number: 2^53, the largest integer every JSON client (a JavaScript number)
// reads exactly.
inline constexpr std::int64_t max_turn = std::int64_t(1) << 53;

// 422 INVALID_FRAME at `turn` for a turn beyond max_turn; `context` (may be empty) says which
// turn that was when the frame named none.
error turn_too_large(std::string_view context);

// What a client frame gets: its content, or the error to answer it with. `id` is the frame's `id`
// (null when absent or unreadable), set as soon as the frame is a JSON object. `limits` are the
// engine's: its JSON depth, and the per-item media limits an event's items are read under
// (core's read_media_array: the SystemOne API's item forms and issues, at
// ["append", 0, "images", 1]). A wrong item is 422 INVALID_FRAME with the frame's other issues;
// an item over its size limit alone is 413 REQUEST_TOO_LARGE.
result<frame> parse_frame(std::string_view text, const request_limits& limits, json& id);

// The frames as a client writes them, `id` only when not null: decide
// {"type","id","session","turn"?,"history"|"append","proposal"?,"questions"?} (proposal and
// questions when not null), tool_result {"type","id","decision","ok","output"}, resume
// {"type","id","session"}, ack {"type","id","resolution"}, end {"type","id","session"}.
std::string render(const decide_frame& f, const json& id = nullptr);
std::string render(const tool_result_frame& f, const json& id = nullptr);
std::string render(const resume_frame& f, const json& id = nullptr);
std::string render(const ack_frame& f, const json& id = nullptr);
std::string render(const end_frame& f, const json& id = nullptr);

// A session id: 1–128 characters of A-Za-z0-9_.:@-
bool valid_session_id(std::string_view s) noexcept;

// Server → client.

// The escalation a decision raised (with "action": "escalate").
struct decision_escalation {
  std::string id;
  std::int64_t deadline_ms = 0;  // on the wire `deadline_at`, its iso_utc
};

// Milliseconds per stage, rounded to 3 decimals on the wire.
struct decision_timings {
  double queue = 0;    // waiting for the engine
  double compile = 0;
  double engine = 0;
  double policy = 0;
  double log = 0;      // until the row was committed
  double total = 0;    // frame received → decision sent
};

// What the engine read for a decision (SystemOne's usage), and what the runtime left out to fit
// its window (tools::drop_oldest_events).
struct decision_usage {
  std::int64_t input_tokens = 0;    // 0 when the engine did not answer
  std::int64_t cached_tokens = 0;   // of input_tokens, served from the engine's prefix cache
  bool state_truncated = false;     // the engine still cut the state's end
  std::int64_t events_dropped = 0;  // the history's oldest events (after routing.keep_first) not sent
  std::int64_t media_dropped = 0;   // media items the session holds that the engine was not sent
};

struct decision_frame {
  json id;  // the decide frame's `id`, null when it had none
  std::string decision;
  std::string session;
  std::int64_t turn = 0;
  std::string action;  // execute | fallback | escalate | deny | finish
  std::string tool;    // null on the wire when empty
  json arguments;
  std::string lane;
  double confidence = 0;                // rounded to 4 decimals on the wire
  std::optional<std::string> executor;  // agent | http | command; null for no tool (or finish)
  // The SystemOne answers, rendered as render_answers(…, 4) writes them (null without answers: an
  // engine failure). Only `answers` is on the wire: a parsed frame's has the frame's `model` and
  // zero usage.
  std::optional<response> answers;
  std::string model;
  decision_usage usage;
  std::string error_code;   // absent on the wire when empty
  std::string fallback_of;  // absent on the wire when empty
  std::optional<decision_escalation> escalation;
  decision_timings timings_ms;
};

// `tool_result` of a tool baton ran (http, command): how it went.
struct tool_outcome {
  bool ok = false;
  std::string error_code;  // with `detail`, on the wire only when !ok
  std::string detail;
  int attempts = 0;
  json output;
};

struct tool_outcome_frame {
  std::string decision;
  std::string tool;
  tool_outcome outcome;
  std::optional<json> event;  // the event baton appended to the session's history
};

// The answer to `resume`; that many `resolution` frames follow.
struct resumed_frame {
  json ref;
  std::string session;
  std::vector<std::string> pending;  // the session's pending escalations
  std::size_t resolutions = 0;
};

// The answer to `end`: the session is forgotten.
struct ended_frame {
  json ref;
  std::string session;
};

// The answer to a `tool_result` once it is in the log.
struct tool_result_ack_frame {
  json ref;
  std::string decision;
};

// One of the session's escalations was resolved (the review protocol's resolution object).
struct resolution_frame {
  resolution_object resolution;
};

// {"type":"decision","id","decision","session","turn","action","tool","arguments","lane",
// "confidence","executor","answers","model",
// "usage":{"input_tokens","cached_tokens","state_truncated","events_dropped","media_dropped"},["error_code"],["fallback_of"],
// ["escalation","deadline_at"],"timings_ms":{"queue","compile","engine","policy","log","total"}}
std::string render(const decision_frame& f);
// {"type":"tool_result","decision","tool","ok",["error_code","detail"],"attempts","output",["event"]}
std::string render(const tool_outcome_frame& f);
// {"type":"resumed","ref","session","pending","resolutions"}
std::string render(const resumed_frame& f);
// {"type":"ack","ref","decision"}
std::string render(const tool_result_ack_frame& f);
// {"type":"ended","ref","session"}
std::string render(const ended_frame& f);
// {"type":"resolution","resolution":{…}}
std::string render(const resolution_frame& f);

}  // namespace baton::protocol
