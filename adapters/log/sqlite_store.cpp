// The decision log's SQLite store: schema migrations, the chain, and one transaction per batch.
#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <string>

#include "adapters/log/decision_log.hpp"
#include "adapters/log/sqlite_log.hpp"
#include "core/error_codes.hpp"
#include "core/ids.hpp"
#include "core/sha256.hpp"

namespace baton::log {

void read_row(sqlite3_stmt* s, std::vector<column_value>& out) {
  out.clear();
  const int n = sqlite3_column_count(s);
  for (int i = 0; i < n; ++i) {
    cell value = nullptr;
    switch (sqlite3_column_type(s, i)) {
      case SQLITE_INTEGER: value = static_cast<std::int64_t>(sqlite3_column_int64(s, i)); break;
      case SQLITE_FLOAT: value = sqlite3_column_double(s, i); break;
      case SQLITE_TEXT:
        value = std::string_view(reinterpret_cast<const char*>(sqlite3_column_text(s, i)),
                                 static_cast<std::size_t>(sqlite3_column_bytes(s, i)));
        break;
      case SQLITE_BLOB:
        value = std::string_view(static_cast<const char*>(sqlite3_column_blob(s, i)),
                                 static_cast<std::size_t>(sqlite3_column_bytes(s, i)));
        break;
      default: break;
    }
    out.push_back({sqlite3_column_name(s, i), value});
  }
}

namespace {

// Each step runs once per database, in its own transaction, and raises user_version to its
// number. Released steps are never edited: a change to the schema is a new step.
struct migration {
  int version;
  const char* sql;
};

constexpr migration migrations[] = {
    {1, R"sql(
CREATE TABLE decisions (
  seq INTEGER PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  request_id TEXT NOT NULL,
  session TEXT NOT NULL,
  turn INTEGER NOT NULL,
  created_ms INTEGER NOT NULL,
  created_at TEXT NOT NULL,
  queue_ms REAL,
  compile_ms REAL,
  engine_ms REAL,
  policy_ms REAL,
  total_ms REAL,
  engine TEXT NOT NULL,
  model TEXT NOT NULL,
  fingerprint TEXT NOT NULL,
  registry_hash TEXT NOT NULL,
  policy_hash TEXT NOT NULL,
  schema_hash TEXT NOT NULL,
  state_hash TEXT NOT NULL,
  state TEXT,
  answers TEXT,
  action TEXT NOT NULL,
  tool TEXT NOT NULL,
  lane TEXT NOT NULL,
  confidence REAL,
  arguments TEXT,
  proposal TEXT,
  error_code TEXT NOT NULL,
  prev_hash TEXT NOT NULL,
  row_hash TEXT NOT NULL
) STRICT;
CREATE INDEX decisions_session ON decisions (session, turn);

CREATE TABLE tool_runs (
  seq INTEGER PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  decision TEXT NOT NULL REFERENCES decisions (id),
  tool TEXT NOT NULL,
  executor TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  created_at TEXT NOT NULL,
  duration_ms REAL,
  ok INTEGER NOT NULL,
  output TEXT,
  error_code TEXT NOT NULL,
  detail TEXT NOT NULL,
  attempts INTEGER NOT NULL,
  prev_hash TEXT NOT NULL,
  row_hash TEXT NOT NULL
) STRICT;
CREATE INDEX tool_runs_decision ON tool_runs (decision);

CREATE TRIGGER decisions_no_update BEFORE UPDATE ON decisions
  BEGIN SELECT RAISE(ABORT, 'decisions is append-only'); END;
CREATE TRIGGER decisions_no_delete BEFORE DELETE ON decisions
  BEGIN SELECT RAISE(ABORT, 'decisions is append-only'); END;
CREATE TRIGGER tool_runs_no_update BEFORE UPDATE ON tool_runs
  BEGIN SELECT RAISE(ABORT, 'tool_runs is append-only'); END;
CREATE TRIGGER tool_runs_no_delete BEFORE DELETE ON tool_runs
  BEGIN SELECT RAISE(ABORT, 'tool_runs is append-only'); END;

CREATE VIEW decisions_per_lane_per_day AS
  SELECT substr(created_at, 1, 10) AS day, tool, lane, action, count(*) AS count
  FROM decisions GROUP BY day, tool, lane, action;
CREATE VIEW low_confidence_decisions AS
  SELECT seq, id, created_at, session, turn, tool, action, lane, confidence, model
  FROM decisions WHERE confidence < 0.5;
CREATE VIEW escalated_decisions AS
  SELECT seq, id, created_at, session, turn, tool, lane, confidence, model, error_code
  FROM decisions WHERE action = 'escalate';
CREATE VIEW confidence_by_model AS
  SELECT model, fingerprint, min(CAST(confidence * 10 AS INTEGER), 9) / 10.0 AS bucket,
         count(*) AS count, avg(confidence) AS avg_confidence
  FROM decisions GROUP BY model, fingerprint, bucket;
)sql"},
    // A decision made again by the fallback engine names the first pass it follows.
    {2, R"sql(
ALTER TABLE decisions ADD COLUMN fallback_of TEXT;
CREATE INDEX decisions_fallback_of ON decisions (fallback_of);
)sql"},
    // Escalations to a person, their single resolution and the agent's acknowledgement of it:
    // rows are only ever added, so a state is what the rows say (pending = no resolution).
    {3, R"sql(
CREATE TABLE escalations (
  seq INTEGER PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  decision TEXT NOT NULL REFERENCES decisions (id),
  session TEXT NOT NULL,
  turn INTEGER NOT NULL,
  created_ms INTEGER NOT NULL,
  created_at TEXT NOT NULL,
  deadline_ms INTEGER NOT NULL,
  deadline_at TEXT NOT NULL,
  on_deadline TEXT NOT NULL CHECK (on_deadline IN ('deny', 'execute')),
  reason TEXT NOT NULL,
  question TEXT NOT NULL,
  tool TEXT NOT NULL,
  arguments TEXT NOT NULL,
  confidence REAL,
  candidates TEXT NOT NULL,
  state TEXT NOT NULL,
  registry_hash TEXT NOT NULL,
  policy_hash TEXT NOT NULL,
  prev_hash TEXT NOT NULL,
  row_hash TEXT NOT NULL
) STRICT;
CREATE INDEX escalations_session ON escalations (session);

CREATE TABLE resolutions (
  seq INTEGER PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  escalation TEXT NOT NULL UNIQUE REFERENCES escalations (id),
  created_ms INTEGER NOT NULL,
  created_at TEXT NOT NULL,
  outcome TEXT NOT NULL CHECK (outcome IN ('execute', 'deny')),
  tool TEXT NOT NULL,
  arguments TEXT NOT NULL,
  reason TEXT NOT NULL,
  reviewer TEXT NOT NULL,
  by TEXT NOT NULL CHECK (by IN ('reviewer', 'deadline')),
  forced INTEGER NOT NULL CHECK (forced IN (0, 1)),
  registry_hash TEXT NOT NULL,
  policy_hash TEXT NOT NULL,
  prev_hash TEXT NOT NULL,
  row_hash TEXT NOT NULL
) STRICT;

CREATE TABLE deliveries (
  seq INTEGER PRIMARY KEY,
  resolution TEXT NOT NULL UNIQUE REFERENCES resolutions (id),
  created_ms INTEGER NOT NULL,
  created_at TEXT NOT NULL,
  prev_hash TEXT NOT NULL,
  row_hash TEXT NOT NULL
) STRICT;

CREATE TRIGGER escalations_no_update BEFORE UPDATE ON escalations
  BEGIN SELECT RAISE(ABORT, 'escalations is append-only'); END;
CREATE TRIGGER escalations_no_delete BEFORE DELETE ON escalations
  BEGIN SELECT RAISE(ABORT, 'escalations is append-only'); END;
CREATE TRIGGER resolutions_no_update BEFORE UPDATE ON resolutions
  BEGIN SELECT RAISE(ABORT, 'resolutions is append-only'); END;
CREATE TRIGGER resolutions_no_delete BEFORE DELETE ON resolutions
  BEGIN SELECT RAISE(ABORT, 'resolutions is append-only'); END;
CREATE TRIGGER deliveries_no_update BEFORE UPDATE ON deliveries
  BEGIN SELECT RAISE(ABORT, 'deliveries is append-only'); END;
CREATE TRIGGER deliveries_no_delete BEFORE DELETE ON deliveries
  BEGIN SELECT RAISE(ABORT, 'deliveries is append-only'); END;

CREATE VIEW pending_escalations AS
  SELECT e.seq, e.id, e.created_at, e.deadline_at, e.session, e.turn, e.tool, e.reason, e.confidence, e.decision
  FROM escalations e WHERE NOT EXISTS (SELECT 1 FROM resolutions r WHERE r.escalation = e.id);
CREATE VIEW resolved_escalations AS
  SELECT e.id, e.created_at, r.created_at AS resolved_at, e.session, e.turn, e.tool AS proposed_tool,
         e.confidence, r.outcome, r.tool, r.reviewer, r.by, r.forced, r.reason,
         (r.created_ms - e.created_ms) / 1000.0 AS wait_s
  FROM escalations e JOIN resolutions r ON r.escalation = e.id;
)sql"},
    // Prefix reuse (issue 19): the input tokens the engine's prefix cache served, and the oldest
    // events left out to fit its window. NULL in earlier rows, which their hashes leave out.
    {4, R"sql(
ALTER TABLE decisions ADD COLUMN cached_tokens INTEGER;
ALTER TABLE decisions ADD COLUMN events_dropped INTEGER;
)sql"},
    // Hot reload (issue 20): every reload of the registry and policy, applied or refused, with
    // what served before and after it and who asked.
    {5, R"sql(
CREATE TABLE reloads (
  seq INTEGER PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  created_ms INTEGER NOT NULL,
  created_at TEXT NOT NULL,
  who TEXT NOT NULL,
  outcome TEXT NOT NULL CHECK (outcome IN ('ok', 'failed')),
  reason TEXT NOT NULL,
  registry_file TEXT NOT NULL,
  policy_file TEXT NOT NULL,
  old_registry_hash TEXT NOT NULL,
  old_policy_hash TEXT NOT NULL,
  new_registry_hash TEXT,
  new_policy_hash TEXT,
  prev_hash TEXT NOT NULL,
  row_hash TEXT NOT NULL
) STRICT;

CREATE TRIGGER reloads_no_update BEFORE UPDATE ON reloads
  BEGIN SELECT RAISE(ABORT, 'reloads is append-only'); END;
CREATE TRIGGER reloads_no_delete BEFORE DELETE ON reloads
  BEGIN SELECT RAISE(ABORT, 'reloads is append-only'); END;
)sql"},
    // Media in agent turns (issue 21): what media each decision's request carried, and how many
    // items its session held that it did not. NULL in earlier rows and in SystemOne rows.
    {6, R"sql(
ALTER TABLE decisions ADD COLUMN media TEXT;
ALTER TABLE decisions ADD COLUMN media_dropped INTEGER;
)sql"},
};

constexpr int known_version = migrations[std::size(migrations) - 1].version;

[[noreturn]] void open_failed(const log_options& o, const std::string& what) {
  throw error_exception(make_error(500, codes::log_open_failed, "cannot open the decision log " + o.path.string() + ": " + what));
}

void exec(sqlite3* db, const log_options& o, const std::string& sql) {
  char* message = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &message) != SQLITE_OK) {
    const std::string what = message ? message : sqlite3_errmsg(db);
    sqlite3_free(message);
    open_failed(o, what);
  }
}

// The first column of the first row of a one-value query (a PRAGMA).
std::string query_value(sqlite3* db, const log_options& o, const char* sql) {
  sqlite3_stmt* raw = nullptr;
  if (sqlite3_prepare_v2(db, sql, -1, &raw, nullptr) != SQLITE_OK) open_failed(o, sqlite3_errmsg(db));
  statement s(raw);
  const int rc = sqlite3_step(s.get());
  if (rc != SQLITE_ROW) open_failed(o, sqlite3_errmsg(db));
  const auto* text = sqlite3_column_text(s.get(), 0);
  return text ? reinterpret_cast<const char*>(text) : "";
}

int user_version(sqlite3* db, const log_options& o) { return std::stoi(query_value(db, o, "PRAGMA user_version")); }

void migrate(sqlite3* db, const log_options& o) {
  const int found = user_version(db, o);
  if (found > known_version) {
    throw error_exception(make_error(
        500, codes::log_schema_too_new,
        "the decision log " + o.path.string() + " has schema version " + std::to_string(found) +
            "; this baton knows versions up to " + std::to_string(known_version) + " (a newer baton wrote it)"));
  }
  for (const migration& m : migrations) {
    if (m.version <= found) continue;
    exec(db, o, "BEGIN IMMEDIATE");
    try {
      // Another process may have applied it while this one waited for the lock.
      if (user_version(db, o) < m.version) {
        exec(db, o, m.sql);
        exec(db, o, "PRAGMA user_version = " + std::to_string(m.version));
      }
      exec(db, o, "COMMIT");
    } catch (...) {
      sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
  }
}

// The INSERT of a table of `Record`s: its columns are fill_row's, in its order.
template <class Record>
std::string insert_sql(const char* table) {
  row_text t;
  std::vector<column_value> row;
  fill_row(Record{}, true, t, row);
  std::string names, params;
  for (std::size_t i = 0; i < row.size(); ++i) {
    names += (i ? ", " : "") + std::string(row[i].name);
    params += (i ? ", ?" : "?") + std::to_string(i + 1);
  }
  return std::string("INSERT INTO ") + table + " (" + names + ") VALUES (" + params + ")";
}

error write_failed(sqlite3* db, const char* what) {
  return make_error(500, codes::log_write_failed, std::string("the decision log cannot ") + what + ": " + sqlite3_errmsg(db));
}

class sqlite_store final : public decision_store {
 public:
  explicit sqlite_store(const log_options& o) : store_state_(o.store_state) {
    std::error_code ec;
    if (o.path.has_parent_path()) std::filesystem::create_directories(o.path.parent_path(), ec);
    sqlite3* raw = nullptr;
    const int rc = sqlite3_open_v2(o.path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
    db_.reset(raw);
    if (rc != SQLITE_OK) open_failed(o, raw ? sqlite3_errmsg(raw) : "out of memory");
    sqlite3_extended_result_codes(db(), 1);
    sqlite3_busy_timeout(db(), o.busy_timeout_ms);
    if (query_value(db(), o, "PRAGMA journal_mode = WAL") != "wal") open_failed(o, "WAL mode is not available");
    static constexpr const char* sync_names[] = {"OFF", "NORMAL", "FULL"};
    exec(db(), o, std::string("PRAGMA synchronous = ") + sync_names[static_cast<int>(o.synchronous)]);
    exec(db(), o, "PRAGMA foreign_keys = ON");
    migrate(db(), o);
    begin_ = prepare(o, "BEGIN IMMEDIATE");
    commit_ = prepare(o, "COMMIT");
    rollback_ = prepare(o, "ROLLBACK");
    tables_[0] = make_table<decision_record>(o, "decisions");
    tables_[1] = make_table<tool_run_record>(o, "tool_runs");
    tables_[2] = make_table<escalation_record>(o, "escalations");
    tables_[3] = make_table<resolution_record>(o, "resolutions");
    tables_[4] = make_table<delivery_record>(o, "deliveries");
    tables_[5] = make_table<reload_record>(o, "reloads");
  }

  result<void> write(std::span<const log_row> rows, std::vector<std::optional<error>>& refused) override {
    refused.assign(rows.size(), std::nullopt);
    if (!run(begin_.get())) return write_failed(db(), "begin a transaction");
    for (table& t : tables_) t.loaded = false;
    result<void> written;
    for (std::size_t i = 0; i < rows.size() && written; ++i) {
      written = std::visit(
          [&](const auto& r) {
            fill_row(r, store_state_, text_, row_);
            return append_row(tables_[rows[i].index()], refused[i]);
          },
          rows[i]);
    }
    if (written && !run(commit_.get())) written = write_failed(db(), "commit");
    if (!written && !sqlite3_get_autocommit(db())) run(rollback_.get());
    return written;
  }

  // The rows into the database file itself, and the WAL emptied: SQLite does that when the last
  // connection closes, but a reader (the inbox's, the audit queries') may close after this one,
  // and a read-only connection cannot. A copy of the file alone then held none of the rows.
  // Without waiting: a reader in the middle of a query leaves the rest in the WAL (still durable)
  // rather than holding up the stop for the busy timeout.
  ~sqlite_store() override {
    if (!db()) return;
    sqlite3_busy_timeout(db(), 0);
    sqlite3_exec(db(), "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr, nullptr);
  }

 private:
  // One chained table: its statements and, inside a transaction, its chain head.
  struct table {
    const char* name = "";
    statement head, insert;
    bool loaded = false;
    std::int64_t seq = 0;
    std::string prev;
  };

  sqlite3* db() const noexcept { return db_.get(); }

  statement prepare(const log_options& o, const std::string& sql) {
    sqlite3_stmt* raw = nullptr;
    if (sqlite3_prepare_v3(db(), sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &raw, nullptr) != SQLITE_OK) {
      open_failed(o, sqlite3_errmsg(db()));
    }
    return statement(raw);
  }

  template <class Record>
  table make_table(const log_options& o, const char* name) {
    table t;
    t.name = name;
    t.head = prepare(o, std::string("SELECT seq, row_hash FROM ") + name + " ORDER BY seq DESC LIMIT 1");
    t.insert = prepare(o, insert_sql<Record>(name));
    return t;
  }

  // Steps a statement that returns no rows, then resets it.
  bool run(sqlite3_stmt* s) {
    const int rc = sqlite3_step(s);
    sqlite3_reset(s);
    return rc == SQLITE_DONE;
  }

  // Writes row_ as the table's next row. The chain head is read inside the transaction, so the
  // chain continues from what is committed whatever happened before (a restart, a failed batch).
  result<void> append_row(table& t, std::optional<error>& refused) {
    if (!t.loaded) {
      t.seq = 0;
      t.prev.assign(genesis_hash);
      const int rc = sqlite3_step(t.head.get());
      if (rc == SQLITE_ROW) {
        t.seq = sqlite3_column_int64(t.head.get(), 0);
        t.prev.assign(reinterpret_cast<const char*>(sqlite3_column_text(t.head.get(), 1)),
                      static_cast<std::size_t>(sqlite3_column_bytes(t.head.get(), 1)));
      }
      sqlite3_reset(t.head.get());
      if (rc != SQLITE_ROW && rc != SQLITE_DONE) return write_failed(db(), "read the chain");
      t.loaded = true;
    }
    row_.front().value = t.seq + 1;
    row_[row_.size() - 2].value = std::string_view(t.prev);
    std::string hash = chain_hash(row_, scratch_);
    row_.back().value = std::string_view(hash);
    sqlite3_stmt* insert = t.insert.get();
    for (std::size_t c = 0; c < row_.size(); ++c) bind(insert, static_cast<int>(c + 1), row_[c].value);
    const int step = sqlite3_step(insert);
    sqlite3_reset(insert);
    sqlite3_clear_bindings(insert);
    if (step == SQLITE_DONE) {
      ++t.seq;
      t.prev = std::move(hash);
    } else if (step == SQLITE_CONSTRAINT_UNIQUE && !sqlite3_get_autocommit(db())) {
      // Only this statement was undone; the transaction and the rest of the batch go on.
      refused = make_error(409, codes::duplicate_row, std::string("the ") + t.name + " row is already in the log: " +
                                                     sqlite3_errmsg(db()));
    } else if ((step & 0xff) == SQLITE_CONSTRAINT && !sqlite3_get_autocommit(db())) {
      refused = write_failed(db(), "write this row");
    } else {
      return write_failed(db(), "write");
    }
    return {};
  }

  static void bind(sqlite3_stmt* s, int index, const cell& v) {
    if (const auto* n = std::get_if<std::int64_t>(&v)) {
      sqlite3_bind_int64(s, index, *n);
    } else if (const auto* d = std::get_if<double>(&v)) {
      sqlite3_bind_double(s, index, *d);
    } else if (const auto* t = std::get_if<std::string_view>(&v)) {
      // A null pointer would bind NULL, not "".
      sqlite3_bind_text64(s, index, t->data() ? t->data() : "", t->size(), SQLITE_STATIC, SQLITE_UTF8);
    } else {
      sqlite3_bind_null(s, index);
    }
  }

  bool store_state_;
  db_handle db_;
  statement begin_, commit_, rollback_;
  std::array<table, std::variant_size_v<log_row>> tables_;
  row_text text_;
  std::vector<column_value> row_;
  std::string scratch_;
};

}  // namespace

std::unique_ptr<decision_store> open_sqlite_store(const log_options& options) {
  return std::make_unique<sqlite_store>(options);
}

}  // namespace baton::log
