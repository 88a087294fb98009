// The rows of the decision log (adapters/log/README.md "Schema"): what the runtime
// appends and what log_reader reads back. Plain types: no SQLite here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include "core/json.hpp"

namespace baton::log {

struct decision_record {
  std::string id;          // the decision id the agent sees
  std::string request_id;  // the client frame's `id` rendered as JSON ("" when it sent none); SystemOne: the request id
  std::string session;
  std::int64_t turn = 0;
  std::int64_t created_ms = 0;  // unix time, milliseconds
  // Timings, milliseconds: waiting for the engine, schema compile, engine, policy, whole turn.
  double queue_ms = 0, compile_ms = 0, engine_ms = 0, policy_ms = 0, total_ms = 0;
  std::string engine;       // "keyword", "clef", …
  std::string model;        // the model id that answered ("" after an engine failure)
  std::string fingerprint;  // the engine's fingerprint
  std::string registry_hash, policy_hash, schema_hash;
  std::string state_hash;            // "sha256:…" of the rendered state (always)
  std::optional<std::string> state;  // the rendered state, only when the log is configured to keep it
  std::string answers;               // the answers as rendered without rounding (render_answers(r, out, -1):
                                     // every probability); "" after a failure (NULL in the log)
  std::string action;                // execute | fallback | escalate | deny | finish
  std::string tool;                  // "" when none
  std::string lane;                  // what decided, e.g. "lane:default", "rule:deny", "on_engine_error"
  double confidence = 0;
  json arguments = json::object();
  json proposal;            // the agent's proposal as sent, null when none
  std::string error_code;   // the engine error code after a failure, else ""
  std::string fallback_of;  // the first pass's decision id when the fallback engine made this one
  // Of the engine's input tokens, those served from its prefix cache; none when the engine did
  // not answer or did not say (another SystemOne server).
  std::optional<std::int64_t> cached_tokens;
  // The history's oldest events left out to fit the engine's window (agent turns); none for a
  // SystemOne request, whose state is sent as it came.
  std::optional<std::int64_t> events_dropped;
  // The media items an agent turn's request carried (tools::logged_item each: field, number,
  // event, source, and the content type, decoded bytes and payload digest of inline data or the
  // path or URL); null when it carried none.
  json media;
  // The media items the session held that the request did not carry (agent turns); none for a
  // SystemOne request.
  std::optional<std::int64_t> media_dropped;
};

struct tool_run_record {
  std::string id;        // the run id
  std::string decision;  // the decision it carries out
  std::string tool;
  std::string executor;  // agent | http | command
  std::int64_t created_ms = 0;
  double duration_ms = 0;
  bool ok = false;
  json output;             // what the tool returned (null when none)
  std::string error_code;  // "" when ok
  std::string detail;
  int attempts = 0;
};

// An escalation to a person (docs/escalations.md), written before anyone is told of it.
struct escalation_record {
  std::string id;
  std::string decision;  // the escalated decision, written before it
  std::string session;   // as in the decision row
  std::int64_t turn = 0;
  std::int64_t created_ms = 0;
  std::int64_t deadline_ms = 0;
  std::string on_deadline;  // deny | execute
  std::string reason;       // the lane that escalated
  std::string question;     // for the reviewer
  std::string tool;         // proposed; "" when none
  json arguments = json::object();
  double confidence = 0;
  json candidates = json::array();  // [{"tool","description","probability"}], highest first
  std::string state;                // the rendered history: the reviewer needs it
  std::string registry_hash, policy_hash;
};

// How an escalation ended; at most one per escalation (the table's UNIQUE constraint).
struct resolution_record {
  std::string id;
  std::string escalation;
  std::int64_t created_ms = 0;
  std::string outcome;  // execute | deny
  std::string tool;     // "" for deny
  json arguments = json::object();
  std::string reason;
  std::string reviewer;  // the API key's name; "baton" for a deadline
  std::string by;        // reviewer | deadline
  bool forced = false;   // resolved although the registry or policy changed
  std::string registry_hash, policy_hash;  // what was serving when it was resolved
};

// The agent acknowledged a resolution: it is not sent again.
struct delivery_record {
  std::string resolution;
  std::int64_t created_ms = 0;
};

// A reload of the registry and policy (SIGHUP or POST /v1/admin/reload): applied, or refused
// with nothing changed. Written before the new snapshot serves.
struct reload_record {
  std::string id;  // l-…
  std::int64_t created_ms = 0;
  std::string who;      // the API key's name ("anonymous" without keys); "signal" for SIGHUP
  std::string outcome;  // ok | failed
  std::string reason;   // why it failed ("FILE:LINE: reason"); "" when ok
  std::string registry_file, policy_file;
  std::string old_registry_hash, old_policy_hash;  // what served before
  std::string new_registry_hash, new_policy_hash;  // what serves after; "" when it failed (NULL in the log)
};

using log_row =
    std::variant<decision_record, tool_run_record, escalation_record, resolution_record, delivery_record, reload_record>;

}  // namespace baton::log
