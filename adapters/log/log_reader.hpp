// Reading the decision log back: what the escalation desk rebuilds and shows from it, and what
// auditors ask of it (`baton log`). A read-only connection: a SQLite file is never created nor
// changed (SQLITE_OPEN_READONLY, PRAGMA query_only, ATTACH denied); PostgreSQL is read in
// read-only transactions. Thread-safe.
#pragma once

#include <cstddef>
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

#include "adapters/log/records.hpp"
#include "core/error.hpp"
#include "core/json.hpp"

namespace baton::log {

struct log_options;  // decision_log.hpp

// One stored value, by SQLite storage class (the log stores no BLOBs; one is read as its bytes).
// Text is borrowed: valid until the next row.
using cell = std::variant<std::nullptr_t, std::int64_t, double, std::string_view>;

// An escalation row with what its evidence is derived from: the escalated decision's logged
// answers and error code ("" when none).
struct escalation_row {
  escalation_record escalation;
  std::string decision_answers;
  std::string decision_error;
};

// An escalation with its resolution (none while pending) and the latest run of its decision's
// tool (when the read asks for it and there is one).
struct escalation_history {
  escalation_row row;
  std::optional<resolution_record> resolution;
  std::optional<tool_run_record> tool_run;
  bool acknowledged = false;  // the resolution has a delivery row (escalation() only)
};

// A decision with how the escalation that followed it ended: its own escalation, or for a first
// pass that fell back, its second pass's (the person judged the same turn). What `baton replay`
// and `baton calibrate` read.
struct reviewed_decision {
  decision_record decision;
  std::string escalation;                       // the escalation's id; "" when none followed
  std::optional<resolution_record> resolution;  // none when none followed or it is pending
  // Of a first pass that fell back: its second pass, whose escalation `escalation` is. Its lane
  // says whether the audit drew it ("fallback:audit"), which weighs the review as a label.
  struct second_pass_record {
    std::string id, lane, action, policy_hash;
  };
  std::optional<second_pass_record> second_pass;
};

// What `verify` found: each chain's row count (in table order, by its noun: "decisions",
// "tool runs", …), or the first row that does not match its chain.
struct chain_report {
  std::vector<std::pair<std::string, std::size_t>> counts;
  std::optional<std::string> broken;  // `TABLE seq N (id "…"): what`
  // Each chain's end: one per table, or on PostgreSQL with instance chains one per instance that
  // wrote to the table ("" for rows copied from a SQLite log). Rows cut from the end of a chain
  // leave a valid shorter chain: compare these with a copy kept elsewhere.
  struct chain_end {
    std::string table, instance;
    std::size_t rows = 0;
    std::string row_hash;
  };
  std::vector<chain_end> chains;
};

class log_reader {
 public:
  // 404 NO_LOG "no decision log at PATH" when there is no such file; 500 LOG_OPEN_FAILED when
  // SQLite cannot open it. A write in progress is waited for up to `busy_timeout_ms`.
  static result<std::unique_ptr<log_reader>> open(const std::filesystem::path& path, int busy_timeout_ms = 5000);
  // The log `options` names: its SQLite file, or its PostgreSQL database (read-only transactions;
  // 404 NO_LOG for a database baton never wrote to, 500 LOG_OPEN_FAILED when it cannot be reached).
  static result<std::unique_ptr<log_reader>> open(const log_options& options);
  ~log_reader();

  // The escalation desk's reads. Errors: 500 LOG_READ_FAILED.
  // Escalations without a resolution, oldest first (of `session` only, when given).
  result<std::vector<escalation_row>> pending_escalations(const std::optional<std::string>& session = {}) const;
  // Resolutions the agent has not acknowledged (no delivery row), oldest first, with the tool run of
  // their decision when there is one (of `session`'s escalations only, when given).
  result<std::vector<escalation_history>> unacknowledged_resolutions(const std::optional<std::string>& session = {}) const;
  // The `limit` most recent resolutions, newest first, with their tool runs.
  result<std::vector<escalation_history>> latest_resolutions(std::size_t limit) const;
  // The escalation `id`, with its resolution and tool run; none when there is no such escalation.
  result<std::optional<escalation_history>> escalation(const std::string& id) const;
  // The escalation resolution `resolution` resolved; none when there is no such resolution.
  result<std::optional<std::string>> escalation_of(const std::string& resolution) const;
  // The session whose resolution `resolution` the agent acknowledged; none when it was not.
  result<std::optional<std::string>> acknowledged_session(const std::string& resolution) const;

  // The auditors' reads (`baton log`).
  // Runs one statement that only reads: `columns` gets the column names once (a repeated name as
  // NAME:2, NAME:3, …), then `row` each row. 400 SQL_REFUSED for an empty query, more than one
  // statement or one that would write; 400 SQL_FAILED with SQLite's reason for an SQL error.
  result<void> sql(std::string_view query, const std::function<void(std::span<const std::string>)>& columns,
                   const std::function<void(std::span<const cell>)>& row) const;
  // The decision `id` as one JSON object (JSON columns as values), its tool runs under
  // "tool_runs"; none when there is no such decision.
  result<std::optional<json>> decision(const std::string& id) const;
  // The last `n` decisions, oldest first, each as: created_at, id, session, turn, tool, action,
  // lane, confidence.
  result<void> tail(std::size_t n, const std::function<void(std::span<const cell>)>& row) const;
  // Every decision created at or after `since_ms` (unix ms), in log order, with its review. `each`
  // runs while the reader is held: it must not call the reader. Of the decision, what routing
  // used is read (ids, session, turn, created_ms, engine, model, fingerprint, the hashes, answers,
  // action, tool, lane, confidence, error_code, fallback_of, proposal), and its `state` and `media`
  // (what else the state was decided with) when `with_state`; not the timings, arguments nor
  // token counts.
  result<void> reviewed_decisions(std::int64_t since_ms, bool with_state,
                                  const std::function<void(const reviewed_decision&)>& each) const;
  // Walks every hash chain from its first row (adapters/log/README.md, "Hash chain").
  result<chain_report> verify() const;

 private:
  struct impl;
  explicit log_reader(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace baton::log
