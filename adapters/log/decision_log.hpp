// The decision log (DESIGN §6): append-only SQLite tables for decisions and tool runs, each row
// chained to the previous one by hash, written by one thread in group commits.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/error.hpp"
#include "core/json.hpp"

namespace baton::tools {
struct tool_outcome;
}  // namespace baton::tools

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
  // Not a column: what made the policy escalate, derived from the decision row's answers
  // (escalations.cpp, docs/escalations.md).
  json evidence;
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

// The row of a tool baton ran (an `http` or `command` executor) for `decision`.
tool_run_record tool_run_of(const std::string& decision, const std::string& tool, std::string_view executor,
                            const tools::tool_outcome& o);

using log_row = std::variant<decision_record, tool_run_record, escalation_record, resolution_record, delivery_record>;

struct log_options {
  std::filesystem::path path = "var/baton.db";
  enum class sync_mode { off, normal, full } synchronous = sync_mode::full;  // SQLite's PRAGMA synchronous
  bool store_state = false;
  std::size_t max_batch = 512;        // rows per transaction
  std::size_t queue_capacity = 65536; // rows waiting; append() refuses beyond (503 LOG_BACKLOG)
  int busy_timeout_ms = 5000;         // how long a write waits for another connection's lock
};

// Called once per row, on the writer thread, after its transaction committed (or failed: the
// error then says why, and the row is not in the log).
using durable_callback = std::function<void(result<void>)>;

// The storage behind the log: SQLite here; a PostgreSQL store for several nodes would implement
// the same. Methods run on the log's writer thread only.
class decision_store {
 public:
  virtual ~decision_store() = default;
  // Writes the rows in one transaction, in order, each chained after the last committed row of
  // its table. A row refused on its own (a duplicate id: 409 DUPLICATE_ROW; a row naming an
  // unknown one: 500 LOG_WRITE_FAILED) gets its error in `refused` (one slot per row, nullopt
  // for a written row) and the others are written. An error returned means the transaction
  // failed: no row is in the log and the chains stay where they were.
  virtual result<void> write(std::span<const log_row> rows, std::vector<std::optional<error>>& refused) = 0;
};

// The SQLite store of `options.path`: creates the file (and its folder) when missing, applies the
// schema's migrations, sets WAL, synchronous and busy_timeout. Throws error_exception
// (LOG_OPEN_FAILED, or LOG_SCHEMA_TOO_NEW for a file written by a newer baton).
std::unique_ptr<decision_store> open_sqlite_store(const log_options& options);

class decision_log {
 public:
  // Opens (creating and migrating) the SQLite database; throws error_exception at start-up.
  static std::unique_ptr<decision_log> open(const log_options& options);
  // The same over any store.
  static std::unique_ptr<decision_log> open(std::unique_ptr<decision_store> store, const log_options& options);
  ~decision_log();  // close()

  // Queue a row. `done` (may be empty) runs on the writer thread once the row is committed, or
  // with 500 LOG_WRITE_FAILED when it could not be; it must not throw nor call close(). Never
  // blocks: a full queue answers 503 LOG_BACKLOG at once, a closed log 503 SHUTTING_DOWN (and
  // `done` is not called).
  result<void> append(log_row r, durable_callback done);
  // Queues a decision nobody waits for (no durable ack): a row that cannot be queued or written
  // is an error line naming the decision.
  void append_unwaited(decision_record r);

  // Writes what is queued, then stops the writer. Idempotent.
  void close();

  const log_options& options() const noexcept;

 private:
  struct impl;
  explicit decision_log(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace baton::log
