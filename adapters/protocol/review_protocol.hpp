// The review protocol (docs/escalations.md): the reviewer's `resolve` frame on /v1/review and the
// resolve HTTP body, parsed and checked into plain structs (errors as values, as agent frames are);
// the escalation, resolution and tool run objects, the reviewer HTTP bodies and the /v1/review
// server frames, rendered from plain structs and read back from what was rendered. No I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "adapters/protocol/error_frame.hpp"
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
// 422 INVALID_RESOLUTION for one refused field of a resolution, named in `loc` as the agent
// protocol names a frame's fields: what parse_resolve_input answers, and the desk for a tool or
// arguments the registry refuses.
error invalid_resolution_field(json loc, std::string type, std::string msg);
// {"outcome","tool"?,"arguments"?,"reason","force"}: tool and arguments only when given.
std::string render(const resolve_input& in);

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
// {"type":"resolve","id"?,"escalation",…resolve_input}: `id` only when not null.
std::string render(const resolve_frame& f, const json& id = nullptr);

// The run of a tool (docs/escalations.md, `tool_run`).
struct tool_run_object {
  std::string id;
  std::string tool;
  std::string executor;  // agent | http | command
  bool ok = false;
  std::string error_code;  // on the wire null when ok
  std::string detail;
  json output;
  int attempts = 0;
  double duration_ms = 0;  // rounded to 3 decimals on the wire
  std::int64_t created_ms = 0;  // and `created_at`, its iso_utc
};

// How an escalation was resolved (docs/escalations.md, the resolution object). The same object is
// the `resolution` of the agent's `resolution` frame, of `resolve_result` and of the resolve call.
struct resolution_object {
  std::string id;
  std::string escalation;
  std::string decision;
  std::string session;
  std::int64_t turn = 0;
  std::string outcome;  // execute | deny
  std::string tool;     // on the wire null when empty (a deny)
  json arguments;
  std::string reason;
  std::string reviewer;
  std::string by;  // reviewer | deadline
  bool forced = false;
  std::int64_t created_ms = 0;          // and `created_at`, its iso_utc
  std::optional<std::string> executor;  // who runs the tool; null for a deny (or `finish`)
};

// An escalation (docs/escalations.md, the escalation object). `status` is derived: resolved when it
// has a resolution.
struct escalation_object {
  std::string id;
  std::string decision;
  std::string session;
  std::int64_t turn = 0;
  std::int64_t created_ms = 0;   // and `created_at`
  std::int64_t deadline_ms = 0;  // and `deadline_at`
  std::string on_deadline;       // deny | execute
  std::string reason;
  std::string question;
  std::string tool;  // on the wire null when empty (after an engine failure)
  json arguments;
  double confidence = 0;  // rounded to 4 decimals on the wire
  json candidates;        // [{"tool","description","probability"}]
  json state;             // the history
  json evidence;
  std::string registry_hash;
  std::string policy_hash;
  std::optional<resolution_object> resolution;
  // Only with a resolution, as its `tool_run` (null when none, or not yet).
  std::optional<tool_run_object> tool_run;
};

// GET /v1/escalations: {"escalations":[…]}.
struct escalation_list {
  std::vector<escalation_object> escalations;
};

// GET /v1/tools: the registry's tools, in file order, for a reviewer who edits the arguments.
struct tool_parameter_value {
  std::string value;
  std::string description;
};

struct tool_parameter {
  std::string name;
  std::string type;  // choice | boolean | text
  std::string instructions;
  std::vector<tool_parameter_value> values;  // a choice's; empty for the others
  std::optional<std::string> fixed;          // a text parameter's value when the registry sets it
};

struct tool_entry {
  std::string id;
  std::string description;
  std::string risk;      // low | medium | high
  std::string executor;  // agent | http | command
  std::vector<tool_parameter> parameters;
};

struct tools_list {
  std::vector<tool_entry> tools;
  std::optional<std::string> finish;  // the `finish` option's description, when the registry has it
  std::string registry_hash;
};

// The HTTP bodies (and the objects inside frames): render_json(…, false) of the objects as
// docs/escalations.md lists their keys, in that order.
std::string render(const tool_run_object& r);
std::string render(const resolution_object& r);  // without `tool_run`: that is an escalation's
std::string render(const escalation_object& e);
std::string render(const escalation_list& l);
std::string render(const tools_list& t);

// /v1/review, server → client.
struct snapshot_frame {  // the pending escalations, first
  std::vector<escalation_object> escalations;
};
struct escalation_frame {  // a new one
  escalation_object escalation;
};
struct resolved_frame {  // one was resolved (with its resolution)
  escalation_object escalation;
};
struct tool_run_frame {  // the tool of an execute resolution that baton runs ran
  std::string escalation;
  tool_run_object tool_run;
};
struct resolve_result_frame {  // the answer to a `resolve`
  json ref;
  resolution_object resolution;
};

std::string render(const snapshot_frame& f);
std::string render(const escalation_frame& f);
std::string render(const resolved_frame& f);
std::string render(const tool_run_frame& f);
std::string render(const resolve_result_frame& f);

}  // namespace baton::protocol
