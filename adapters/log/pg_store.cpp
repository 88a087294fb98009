// The decision log's PostgreSQL store: the schema (the SQLite log's tables, columns, views and
// append-only rules, plus the instance that wrote each row), its chains, and one transaction per
// batch, retried while the database is unreachable.
#include <algorithm>
#include <array>
#include <chrono>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_set>

#include <spdlog/spdlog.h>

#include "adapters/log/decision_log.hpp"
#include "adapters/log/pg_log.hpp"
#include "core/error_codes.hpp"
#include "core/json.hpp"
#include "core/sha256.hpp"

namespace baton::log {

namespace {

// Each step runs once per database, in its own transaction, and records its number in
// baton_meta. Released steps are never edited: a change to the schema is a new step. Version 1
// is the SQLite log's schema at its version 6, with `instance` in every table.
struct migration {
  int version;
  const char* sql;
};

constexpr migration migrations[] = {
    {1, R"sql(
CREATE TABLE decisions (
  seq BIGSERIAL PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  request_id TEXT NOT NULL,
  session TEXT NOT NULL,
  turn BIGINT NOT NULL,
  created_ms BIGINT NOT NULL,
  created_at TEXT NOT NULL,
  queue_ms DOUBLE PRECISION,
  compile_ms DOUBLE PRECISION,
  engine_ms DOUBLE PRECISION,
  policy_ms DOUBLE PRECISION,
  total_ms DOUBLE PRECISION,
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
  confidence DOUBLE PRECISION,
  arguments TEXT,
  proposal TEXT,
  error_code TEXT NOT NULL,
  fallback_of TEXT,
  cached_tokens BIGINT,
  events_dropped BIGINT,
  media TEXT,
  media_dropped BIGINT,
  instance TEXT,
  prev_hash TEXT NOT NULL,
  row_hash TEXT NOT NULL
);
CREATE INDEX decisions_session ON decisions (session, turn);
CREATE INDEX decisions_fallback_of ON decisions (fallback_of);
CREATE INDEX decisions_chain ON decisions (instance, seq);

CREATE TABLE tool_runs (
  seq BIGSERIAL PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  decision TEXT NOT NULL REFERENCES decisions (id),
  tool TEXT NOT NULL,
  executor TEXT NOT NULL,
  created_ms BIGINT NOT NULL,
  created_at TEXT NOT NULL,
  duration_ms DOUBLE PRECISION,
  ok BIGINT NOT NULL,
  output TEXT,
  error_code TEXT NOT NULL,
  detail TEXT NOT NULL,
  attempts BIGINT NOT NULL,
  instance TEXT,
  prev_hash TEXT NOT NULL,
  row_hash TEXT NOT NULL
);
CREATE INDEX tool_runs_decision ON tool_runs (decision);
CREATE INDEX tool_runs_chain ON tool_runs (instance, seq);

CREATE TABLE escalations (
  seq BIGSERIAL PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  decision TEXT NOT NULL REFERENCES decisions (id),
  session TEXT NOT NULL,
  turn BIGINT NOT NULL,
  created_ms BIGINT NOT NULL,
  created_at TEXT NOT NULL,
  deadline_ms BIGINT NOT NULL,
  deadline_at TEXT NOT NULL,
  on_deadline TEXT NOT NULL CHECK (on_deadline IN ('deny', 'execute')),
  reason TEXT NOT NULL,
  question TEXT NOT NULL,
  tool TEXT NOT NULL,
  arguments TEXT NOT NULL,
  confidence DOUBLE PRECISION,
  candidates TEXT NOT NULL,
  state TEXT NOT NULL,
  registry_hash TEXT NOT NULL,
  policy_hash TEXT NOT NULL,
  instance TEXT,
  prev_hash TEXT NOT NULL,
  row_hash TEXT NOT NULL
);
CREATE INDEX escalations_session ON escalations (session);
CREATE INDEX escalations_deadline ON escalations (deadline_ms);
CREATE INDEX escalations_chain ON escalations (instance, seq);

CREATE TABLE resolutions (
  seq BIGSERIAL PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  escalation TEXT NOT NULL UNIQUE REFERENCES escalations (id),
  created_ms BIGINT NOT NULL,
  created_at TEXT NOT NULL,
  outcome TEXT NOT NULL CHECK (outcome IN ('execute', 'deny')),
  tool TEXT NOT NULL,
  arguments TEXT NOT NULL,
  reason TEXT NOT NULL,
  reviewer TEXT NOT NULL,
  "by" TEXT NOT NULL CHECK ("by" IN ('reviewer', 'deadline')),
  forced BIGINT NOT NULL CHECK (forced IN (0, 1)),
  registry_hash TEXT NOT NULL,
  policy_hash TEXT NOT NULL,
  instance TEXT,
  prev_hash TEXT NOT NULL,
  row_hash TEXT NOT NULL
);
CREATE INDEX resolutions_chain ON resolutions (instance, seq);

CREATE TABLE deliveries (
  seq BIGSERIAL PRIMARY KEY,
  resolution TEXT NOT NULL UNIQUE REFERENCES resolutions (id),
  created_ms BIGINT NOT NULL,
  created_at TEXT NOT NULL,
  instance TEXT,
  prev_hash TEXT NOT NULL,
  row_hash TEXT NOT NULL
);
CREATE INDEX deliveries_chain ON deliveries (instance, seq);

CREATE TABLE reloads (
  seq BIGSERIAL PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  created_ms BIGINT NOT NULL,
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
  instance TEXT,
  prev_hash TEXT NOT NULL,
  row_hash TEXT NOT NULL
);
CREATE INDEX reloads_chain ON reloads (instance, seq);

-- Rows are only ever added: UPDATE, DELETE and TRUNCATE abort.
CREATE FUNCTION baton_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION '% is append-only', TG_TABLE_NAME;
END
$$;
DO $$
DECLARE t TEXT;
BEGIN
  FOREACH t IN ARRAY ARRAY['decisions', 'tool_runs', 'escalations', 'resolutions', 'deliveries', 'reloads'] LOOP
    EXECUTE format('CREATE TRIGGER %I BEFORE UPDATE ON %I FOR EACH ROW EXECUTE FUNCTION baton_append_only()', t || '_no_update', t);
    EXECUTE format('CREATE TRIGGER %I BEFORE DELETE ON %I FOR EACH ROW EXECUTE FUNCTION baton_append_only()', t || '_no_delete', t);
    EXECUTE format('CREATE TRIGGER %I BEFORE TRUNCATE ON %I FOR EACH STATEMENT EXECUTE FUNCTION baton_append_only()', t || '_no_truncate', t);
  END LOOP;
END
$$;

CREATE VIEW decisions_per_lane_per_day AS
  SELECT substr(created_at, 1, 10) AS day, tool, lane, action, count(*) AS count
  FROM decisions GROUP BY 1, 2, 3, 4;
CREATE VIEW low_confidence_decisions AS
  SELECT seq, id, created_at, session, turn, tool, action, lane, confidence, model
  FROM decisions WHERE confidence < 0.5;
CREATE VIEW escalated_decisions AS
  SELECT seq, id, created_at, session, turn, tool, lane, confidence, model, error_code
  FROM decisions WHERE action = 'escalate';
CREATE VIEW confidence_by_model AS
  SELECT model, fingerprint,
         CASE WHEN confidence IS NULL THEN NULL ELSE least(floor(confidence * 10), 9) / 10 END AS bucket,
         count(*) AS count, avg(confidence) AS avg_confidence
  FROM decisions GROUP BY 1, 2, 3;
CREATE VIEW pending_escalations AS
  SELECT e.seq, e.id, e.created_at, e.deadline_at, e.session, e.turn, e.tool, e.reason, e.confidence, e.decision
  FROM escalations e WHERE NOT EXISTS (SELECT 1 FROM resolutions r WHERE r.escalation = e.id);
CREATE VIEW resolved_escalations AS
  SELECT e.id, e.created_at, r.created_at AS resolved_at, e.session, e.turn, e.tool AS proposed_tool,
         e.confidence, r.outcome, r.tool, r.reviewer, r."by", r.forced, r.reason,
         (r.created_ms - e.created_ms) / 1000.0::float8 AS wait_s
  FROM escalations e JOIN resolutions r ON r.escalation = e.id;
)sql"},
};

constexpr int known_version = migrations[std::size(migrations) - 1].version;

// Advisory lock keys (pg_advisory_lock's two-int form): the first int names baton's use.
constexpr int lock_space = 0x62746e;            // "btn": with migrate_lock or chain_lock
constexpr int instance_lock_space = 0x62746f;  // with hashtext(the instance's name)
constexpr int migrate_lock = 1, chain_lock = 2;

const char* chains_name(log_options::chain_mode m) {
  return m == log_options::chain_mode::global ? "global" : "instance";
}

[[noreturn]] void open_failed(const log_options& o, const std::string& what) {
  throw error_exception(make_error(500, codes::log_open_failed, "cannot open the decision log " + o.url + ": " + what));
}

// What a unique or foreign key of a table names, and which rows it must name.
struct table_keys {
  const char* unique;     // the column a row is refused for when another row has its value
  const char* unique2;    // a second one (resolutions: one per escalation); null when none
  const char* reference;  // the column naming a row of `target`; null when none
  int target;             // its table (an index of table_names)
};
constexpr table_keys keys_of[] = {
    {"id", nullptr, nullptr, 0},                  // decisions
    {"id", nullptr, "decision", 0},               // tool_runs
    {"id", nullptr, "decision", 0},               // escalations
    {"id", "escalation", "escalation", 2},        // resolutions
    {"resolution", nullptr, "resolution", 3},     // deliveries
    {"id", nullptr, nullptr, 0},                  // reloads
};

class postgres_store final : public decision_store {
 public:
  explicit postgres_store(const log_options& o) : options_(o) {
    if (options_.instance.empty()) options_.instance = default_instance_name();
    auto c = pg_connect(options_.url, options_.password, "baton");
    if (!c) throw error_exception(c.error());
    conn_ = std::move(*c);
    migrate();
    claim_instance();
    for (std::size_t t = 0; t < std::size(table_names); ++t) insert_sql_[t] = insert_columns(t);
    spdlog::info("decision log: PostgreSQL {} (schema {}, {} chains, instance {})", options_.url, known_version,
                 chains_name(options_.chains), options_.instance);
  }

  result<void> write(std::span<const log_row> rows, std::vector<std::optional<error>>& refused) override {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.retry_ms);
    auto pause = std::chrono::milliseconds(50);
    const auto wait = [&] {
      if (std::chrono::steady_clock::now() + pause > deadline) return false;
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(1000));
      return true;
    };
    std::string last_problem;
    // A row of an attempt whose COMMIT was cut off: whether it is in says whether the batch is.
    std::optional<row_probe> unsettled;
    for (int conflicts = 0;;) {
      if (!connected(last_problem)) {
        if (!wait()) break;
        continue;
      }
      if (unsettled) {
        const std::optional<bool> in = committed(*unsettled, last_problem);
        if (!in) {
          conn_.reset();
          if (!wait()) break;
          continue;
        }
        if (*in) return {};  // written, with the refusals that attempt made
        unsettled.reset();   // not written: again
      }
      // Instance chains take the fast way unless a row of the batch needs the careful one.
      bool careful = options_.chains == log_options::chain_mode::global;
      for (auto& h : pending_heads_) h.reset();
      probe_.reset();
      outcome o = careful ? outcome{} : write_fast(rows, refused, careful);
      if (careful) o = write_once(rows, refused);
      if (o.done) return {};
      last_problem = o.problem;
      if (o.committed_unknown && probe_) unsettled = probe_;
      // Another instance wrote a row with one of our keys, or the database broke a deadlock: again.
      if (o.conflict && ++conflicts < 5) continue;
      if (!o.lost) return make_error(500, codes::log_write_failed, "the decision log cannot write: " + o.problem);
      spdlog::warn("decision log: lost the connection to {} ({}); retrying", options_.url, o.problem);
      conn_.reset();
      if (!wait()) break;
    }
    if (unsettled) {
      return make_error(500, codes::log_outcome_unknown,
                        "the decision log's database " + options_.url +
                            " went away while a batch was being committed and has not come back to say whether it was (" +
                            last_problem + "): its rows may be in the log");
    }
    return make_error(503, codes::log_unavailable, "the decision log's database " + options_.url + " is unreachable (" +
                                                  last_problem + "); retry later");
  }

 private:
  // A row an attempt wrote: its table and seq.
  struct row_probe {
    std::size_t table = 0;
    std::int64_t seq = 0;
  };

  struct outcome {
    bool done = false;
    bool lost = false;               // the connection is gone
    bool committed_unknown = false;  // lost during COMMIT: the rows may be in
    bool conflict = false;           // a concurrent writer took a unique key of ours
    std::string problem;
  };

  // A statement with its parameters as text (none: NULL).
  struct statement_text {
    std::string sql;
    std::vector<std::optional<std::string>> values;
    std::size_t rows = 0;        // an INSERT's
    std::int64_t first_seq = 0;  // an INSERT's first row's
  };

  PGconn* db() const noexcept { return conn_.get(); }

  void exec_or_throw(const std::string& sql) {
    if (const pg_reply r = pg_exec_simple(db(), sql); !r) open_failed(options_, r.message);
  }

  int schema_version() {
    const pg_reply r = pg_exec(db(), "SELECT value FROM baton_meta WHERE key = 'schema_version'");
    if (!r) open_failed(options_, r.message);
    return PQntuples(r.result.get()) ? std::stoi(PQgetvalue(r.result.get(), 0, 0)) : 0;
  }

  // Applies what is missing, each step in its transaction, under a lock: instances starting
  // together apply each step once.
  void migrate() {
    // Text is UTF-8 end to end: a database of another encoding would refuse some rows' characters.
    const pg_reply encoding = pg_exec(db(), "SHOW server_encoding");
    if (!encoding) open_failed(options_, encoding.message);
    if (const std::string e = PQgetvalue(encoding.result.get(), 0, 0); e != "UTF8") {
      open_failed(options_, "the database's encoding is " + e + "; the log needs UTF8 (CREATE DATABASE … ENCODING 'UTF8')");
    }
    const std::string lock = std::to_string(lock_space) + ", " + std::to_string(migrate_lock);
    exec_or_throw("SELECT pg_advisory_lock(" + lock + ")");  // also around CREATE … IF NOT EXISTS, which races
    struct unlock {
      PGconn* c;
      std::string key;
      ~unlock() { pg_exec_simple(c, "SELECT pg_advisory_unlock(" + key + ")"); }
    } unlock_at_end{db(), lock};
    exec_or_throw("CREATE TABLE IF NOT EXISTS baton_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)");
    exec_or_throw("BEGIN");
    try {
      const int found = schema_version();
      if (found > known_version) {
        throw error_exception(make_error(500, codes::log_schema_too_new,
                                         "the decision log " + options_.url + " has schema version " + std::to_string(found) +
                                             "; this baton knows versions up to " + std::to_string(known_version) +
                                             " (a newer baton wrote it)"));
      }
      for (const migration& m : migrations) {
        if (m.version <= found) continue;
        exec_or_throw(m.sql);
      }
      const std::string chains = chains_name(options_.chains);
      const char* params[] = {chains.c_str()};
      const pg_reply set = pg_exec(db(), "INSERT INTO baton_meta VALUES ('chains', $1) ON CONFLICT (key) DO NOTHING", params);
      if (!set) open_failed(options_, set.message);
      const pg_reply mode = pg_exec(db(), "SELECT value FROM baton_meta WHERE key = 'chains'");
      if (!mode) open_failed(options_, mode.message);
      if (const std::string stored = PQgetvalue(mode.result.get(), 0, 0); stored != chains) {
        throw error_exception(make_error(500, codes::log_chains_mismatch,
                                         "the decision log " + options_.url + " keeps " + stored +
                                             " chains; `log.chains` says " + chains + " (it is fixed when the database is created)"));
      }
      const std::string version = std::to_string(known_version);
      const char* v[] = {version.c_str()};
      const pg_reply done = pg_exec(db(),
                                    "INSERT INTO baton_meta VALUES ('schema_version', $1) "
                                    "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                                    v);
      if (!done) open_failed(options_, done.message);
      exec_or_throw("COMMIT");
    } catch (...) {
      pg_exec_simple(db(), "ROLLBACK");
      throw;
    }
  }

  // One process per instance name: its chains have one writer. Held for the connection's life
  // (a process that dies loses it with its connection).
  bool try_claim() {
    const char* params[] = {options_.instance.c_str()};
    const pg_reply r = pg_exec(db(),
                               "SELECT pg_try_advisory_lock(" + std::to_string(instance_lock_space) + ", hashtext($1))",
                               params);
    return r && std::string_view(PQgetvalue(r.result.get(), 0, 0)) == "t";
  }

  void claim_instance() {
    if (!try_claim()) {
      open_failed(options_, "another process is writing as instance " + options_.instance +
                                " (`log.instance` must differ between instances)");
    }
  }

  // A connection, made again after a loss (and its instance claimed again).
  bool connected(std::string& problem) {
    if (conn_ && PQstatus(db()) == CONNECTION_OK) return true;
    conn_.reset();
    auto c = pg_connect(options_.url, options_.password, "baton");
    if (!c) {
      problem = c.error().message;
      return false;
    }
    conn_ = std::move(*c);
    if (!try_claim()) {
      // The old connection's session may not be gone from the server yet.
      problem = "instance " + options_.instance + " is still held by an earlier connection";
      conn_.reset();
      return false;
    }
    for (auto& h : heads_) h.reset();
    spdlog::info("decision log: connected to {} again", options_.url);
    return true;
  }

  // Whether the row `p` is in the log (its seq was nextval's: no other transaction wrote it); none
  // when the database cannot say.
  std::optional<bool> committed(const row_probe& p, std::string& problem) {
    const std::string seq = std::to_string(p.seq);
    const char* params[] = {seq.c_str()};
    const pg_reply r = pg_exec(db(), std::string("SELECT 1 FROM ") + table_names[p.table] + " WHERE seq = $1", params);
    if (!r) {
      problem = r.message;
      return std::nullopt;
    }
    return PQntuples(r.result.get()) > 0;
  }

  void fill(const log_row& r) {
    std::visit([&](const auto& record) { fill_row(record, options_.store_state, text_, row_); }, r);
    // Whose chain the row is on, before prev_hash (the columns' order is the INSERT's).
    row_.insert(row_.end() - 2, column_value{"instance", std::string_view(options_.instance)});
  }

  std::string insert_columns(std::size_t t) {
    std::visit([&](const auto& record) { fill_row(record, true, text_, row_); }, empty_row(t));
    row_.insert(row_.end() - 2, column_value{"instance", std::string_view()});
    std::string names;
    for (std::size_t i = 0; i < row_.size(); ++i) names += (i ? ", \"" : "\"") + std::string(row_[i].name) + "\"";
    return std::string("INSERT INTO ") + table_names[t] + " (" + names + ") VALUES ";
  }

  static log_row empty_row(std::size_t t) {
    switch (t) {
      case 0: return decision_record{};
      case 1: return tool_run_record{};
      case 2: return escalation_record{};
      case 3: return resolution_record{};
      case 4: return delivery_record{};
      default: return reload_record{};
    }
  }

  // The values of `column` in the database among `values`; none when it cannot be read (`why`).
  std::optional<std::unordered_set<std::string>> existing(const char* table, const char* column,
                                                          const std::vector<std::string>& values, outcome& why) {
    std::unordered_set<std::string> out;
    if (values.empty() || !column) return out;
    const std::string array = text_array(values);
    const char* params[] = {array.c_str()};
    const pg_reply r = pg_exec(db(), std::string("SELECT \"") + column + "\" FROM " + table + " WHERE \"" + column +
                                         "\" = ANY($1::text[])",
                               params);
    if (!r) {
      why.problem = r.message;
      why.lost = r.lost;
      return std::nullopt;
    }
    for (int i = 0; i < PQntuples(r.result.get()); ++i) out.insert(PQgetvalue(r.result.get(), i, 0));
    return out;
  }

  outcome failed(const pg_reply& r) {
    outcome o;
    o.problem = r.message;
    o.lost = r.lost;
    o.conflict = r.sqlstate == "40P01" || r.sqlstate == "40001";
    pg_exec_simple(db(), "ROLLBACK");
    return o;
  }

  outcome write_once(std::span<const log_row> rows, std::vector<std::optional<error>>& refused) {
    refused.assign(rows.size(), std::nullopt);
    for (auto& h : pending_heads_) h.reset();
    if (const pg_reply r = pg_exec_simple(db(), "BEGIN"); !r) return failed(r);
    if (options_.chains == log_options::chain_mode::global) {
      // One chain per table: the batches of every instance take turns.
      const pg_reply r = pg_exec_simple(
          db(), "SELECT pg_advisory_xact_lock(" + std::to_string(lock_space) + ", " + std::to_string(chain_lock) + ")");
      if (!r) return failed(r);
    }
    std::array<std::vector<std::size_t>, std::size(table_names)> by_table;
    for (std::size_t i = 0; i < rows.size(); ++i) by_table[rows[i].index()].push_back(i);
    // The unique keys this batch writes, per table: a later row may name an earlier one.
    std::array<std::unordered_set<std::string>, std::size(table_names)> written;
    // What the other instances' escalation desks hear of: "e ID" (an escalation), "v ID ESCALATION"
    // (a resolution), "d RESOLUTION" (a delivery), a line each.
    std::string changes;
    for (std::size_t t = 0; t < by_table.size(); ++t) {
      if (by_table[t].empty()) continue;
      const table_keys& k = keys_of[t];
      std::vector<std::string> unique, unique2, reference;
      for (const std::size_t i : by_table[t]) {
        fill(rows[i]);
        unique.push_back(pg_text(*find_column(row_, k.unique)));
        if (k.unique2) unique2.push_back(pg_text(*find_column(row_, k.unique2)));
        if (k.reference) reference.push_back(pg_text(*find_column(row_, k.reference)));
      }
      outcome why;
      auto taken = existing(table_names[t], k.unique, unique, why);
      auto taken2 = taken ? existing(table_names[t], k.unique2, unique2, why) : std::nullopt;
      auto known = taken2 ? existing(table_names[k.target], k.reference ? keys_of[k.target].unique : nullptr, reference, why)
                          : std::nullopt;
      if (!taken || !taken2 || !known) {
        pg_exec_simple(db(), "ROLLBACK");
        return why;
      }
      std::unordered_set<std::string> seen2;
      std::vector<std::size_t> accepted;
      for (std::size_t n = 0; n < by_table[t].size(); ++n) {
        const std::size_t i = by_table[t][n];
        std::optional<error>& why = refused[i];
        if (taken->contains(unique[n]) || written[t].contains(unique[n]) ||
            (k.unique2 && (taken2->contains(unique2[n]) || seen2.contains(unique2[n])))) {
          why = make_error(409, codes::duplicate_row, std::string("the ") + table_names[t] + " row is already in the log: " +
                                                     (taken->contains(unique[n]) || written[t].contains(unique[n])
                                                          ? std::string(k.unique) + " " + unique[n]
                                                          : std::string(k.unique2) + " " + unique2[n]));
        } else if (k.reference && !known->contains(reference[n]) && !written[k.target].contains(reference[n])) {
          why = make_error(500, codes::log_write_failed, std::string("the decision log cannot write this row: its ") +
                                                        k.reference + " " + reference[n] + " is not in " +
                                                        table_names[k.target]);
        } else {
          fill(rows[i]);
          if (const std::string nul = first_nul_column(); !nul.empty()) {
            why = make_error(500, codes::log_write_failed, "the decision log cannot write this row: its " + nul +
                                                          " holds a NUL character, which PostgreSQL text cannot");
            continue;
          }
          written[t].insert(unique[n]);
          if (k.unique2) seen2.insert(unique2[n]);
          accepted.push_back(i);
          note_change(t, unique[n], k.unique2 ? unique2[n] : std::string(), changes);
        }
      }
      if (accepted.empty()) continue;
      if (outcome o = insert(t, rows, accepted); !o.done) return o;
    }
    for (const statement_text& st : notifications(changes)) {
      if (const pg_reply r = pg_exec(db(), st.sql, pointers(st.values)); !r) return failed(r);
    }
    const pg_reply commit = pg_exec_simple(db(), "COMMIT");
    if (!commit) {
      outcome o = failed(commit);
      o.committed_unknown = o.lost;
      for (auto& h : heads_) h.reset();
      return o;
    }
    for (std::size_t t = 0; t < heads_.size(); ++t) {
      if (pending_heads_[t]) heads_[t] = std::move(pending_heads_[t]);
      pending_heads_[t].reset();
    }
    if (options_.chains == log_options::chain_mode::global) {
      for (auto& h : heads_) h.reset();  // other instances append after it
    }
    outcome o;
    o.done = true;
    return o;
  }

  // What the other instances' escalation desks hear of the batch's `changes` ("e ID", "v ID
  // ESCALATION", "d RESOLUTION" lines): delivered to the listeners when the transaction commits,
  // in commit order (change_feed.hpp). A payload holds at most 8000 bytes; each starts with the
  // instance that wrote the rows.
  std::vector<statement_text> notifications(const std::string& changes) const {
    std::vector<statement_text> out;
    for (std::size_t from = 0; from < changes.size();) {
      std::size_t to = std::min(changes.size(), from + 7000);
      if (to < changes.size()) {
        const std::size_t line_end = changes.rfind('\n', to - 1);
        to = line_end != std::string::npos && line_end >= from ? line_end + 1 : changes.find('\n', to) + 1;
      }
      statement_text& st = out.emplace_back();
      st.sql = "SELECT pg_notify('baton_changes', $1)";
      st.values.emplace_back(options_.instance + "\n" + changes.substr(from, to - from));
      from = to;
    }
    return out;
  }

  static void note_change(std::size_t t, const std::string& unique, const std::string& unique2, std::string& changes) {
    if (t == 2) changes += "e " + unique + "\n";
    if (t == 3) changes += "v " + unique + " " + unique2 + "\n";
    if (t == 4) changes += "d " + unique + "\n";
  }

  // The usual batch of instance chains in two round trips: the seqs, then one pipeline of its
  // INSERTs and notifications, which commits at its sync as one implicit transaction. A row that
  // cannot be written on its own (a key in the log already or twice in the batch, a reference to
  // a row that is not there) fails it, nothing is written, and the batch goes the careful way
  // (write_once), which reads the keys first (`careful`).
  outcome write_fast(std::span<const log_row> rows, std::vector<std::optional<error>>& refused, bool& careful) {
    refused.assign(rows.size(), std::nullopt);
    std::array<std::vector<std::size_t>, std::size(table_names)> by_table;
    std::array<std::size_t, std::size(table_names)> count{};
    for (std::size_t i = 0; i < rows.size(); ++i) {
      by_table[rows[i].index()].push_back(i);
      ++count[rows[i].index()];
    }
    // A seq for every row; one refused below leaves a gap, as a failed batch does.
    outcome o;
    auto seqs = next_seqs(count, o);
    if (!seqs) return o;
    std::array<std::unordered_set<std::string>, std::size(table_names)> seen, seen2;
    std::string changes;
    bool twice = false;  // a key twice in the batch: the careful way says which row is refused
    const auto accept = [&](std::size_t i) {
      const std::size_t t = rows[i].index();
      const table_keys& k = keys_of[t];
      const std::string unique = pg_text(*find_column(row_, k.unique));
      const std::string unique2 = k.unique2 ? pg_text(*find_column(row_, k.unique2)) : std::string();
      if (!seen[t].insert(unique).second || (k.unique2 && !seen2[t].insert(unique2).second)) {
        twice = true;
        return false;
      }
      if (const std::string nul = first_nul_column(); !nul.empty()) {
        refused[i] = make_error(500, codes::log_write_failed, "the decision log cannot write this row: its " + nul +
                                                             " holds a NUL character, which PostgreSQL text cannot");
        return false;
      }
      note_change(t, unique, unique2, changes);
      return true;
    };
    std::vector<statement_text> statements;
    for (std::size_t t = 0; t < by_table.size(); ++t) {
      if (by_table[t].empty()) continue;
      std::optional<std::string> prev = heads_[t] ? heads_[t] : read_head(t, o);
      if (!prev) return o;
      std::vector<statement_text> inserts = chained_inserts(t, rows, by_table[t], (*seqs)[t], *prev, accept);
      if (twice) {
        careful = true;
        return {};
      }
      if (inserts.empty()) continue;
      if (!probe_) probe_ = row_probe{t, inserts.front().first_seq};
      for (statement_text& st : inserts) statements.push_back(std::move(st));
      pending_heads_[t] = std::move(prev);
    }
    for (statement_text& st : notifications(changes)) statements.push_back(std::move(st));
    if (statements.empty()) {
      o.done = true;
      return o;
    }
    PGconn* c = db();
    if (!PQenterPipelineMode(c)) {
      careful = true;
      return {};
    }
    bool sent = true;
    for (const statement_text& st : statements) {
      const auto params = pointers(st.values);
      sent = sent && PQsendQueryParams(c, st.sql.c_str(), static_cast<int>(params.size()), nullptr, params.data(), nullptr,
                                       nullptr, 0);
    }
    sent = sent && PQpipelineSync(c);
    // Every statement's result (or PIPELINE_ABORTED after the first error), then the sync's.
    std::optional<pg_reply> first_error;
    bool synced = false, lost = !sent;
    for (std::size_t i = 0; !lost && i <= statements.size(); ++i) {
      PGresult* raw = PQgetResult(c);
      if (!raw) {
        lost = true;
        break;
      }
      const pg_result res(raw);
      const ExecStatusType status = PQresultStatus(raw);
      if (i == statements.size()) {
        synced = status == PGRES_PIPELINE_SYNC;
        lost = !synced;
        break;
      }
      if (status == PGRES_FATAL_ERROR && !first_error) first_error = describe_pg_failure(c, raw);
      if (const pg_result extra(PQgetResult(c)); extra) lost = true;  // each statement's results end with a null
    }
    if (lost || PQstatus(c) != CONNECTION_OK || !PQexitPipelineMode(c)) {
      o.lost = true;
      // The sync went out and nothing failed before the loss: the transaction may have committed.
      o.committed_unknown = sent && !first_error;
      o.problem = first_error ? first_error->message : "the connection was lost during the batch";
      conn_.reset();
      for (auto& h : heads_) h.reset();
      return o;
    }
    if (first_error) {
      if (first_error->sqlstate == "23505" || first_error->sqlstate == "23503") {
        careful = true;  // a duplicate key or an unknown reference: which row, the careful way says
        return {};
      }
      o.problem = first_error->message;
      o.lost = first_error->lost;
      o.conflict = first_error->sqlstate == "40P01" || first_error->sqlstate == "40001";
      return o;
    }
    for (std::size_t t = 0; t < heads_.size(); ++t) {
      if (pending_heads_[t]) heads_[t] = std::move(pending_heads_[t]);
      pending_heads_[t].reset();
    }
    o.done = true;
    return o;
  }

  std::string first_nul_column() const {
    for (const column_value& c : row_) {
      if (const auto* t = std::get_if<std::string_view>(&c.value); t && t->find('\0') != std::string_view::npos) {
        return std::string(c.name);
      }
    }
    return {};
  }

  static std::vector<const char*> pointers(const std::vector<std::optional<std::string>>& values) {
    std::vector<const char*> out;
    out.reserve(values.size());
    for (const auto& v : values) out.push_back(v ? v->c_str() : nullptr);
    return out;
  }

  // The row_hash table `t`'s chain ends with (this instance's, or the table's with global chains),
  // or the genesis hash; none when it cannot be read.
  std::optional<std::string> read_head(std::size_t t, outcome& why) {
    const bool global = options_.chains == log_options::chain_mode::global;
    const char* who[] = {options_.instance.c_str()};
    const pg_reply head =
        global ? pg_exec(db(), std::string("SELECT row_hash FROM ") + table_names[t] + " ORDER BY seq DESC LIMIT 1")
               : pg_exec(db(), std::string("SELECT row_hash FROM ") + table_names[t] +
                                   " WHERE instance = $1 ORDER BY seq DESC LIMIT 1",
                         who);
    if (!head) {
      why.problem = head.message;
      why.lost = head.lost;
      return std::nullopt;
    }
    return PQntuples(head.result.get()) ? PQgetvalue(head.result.get(), 0, 0) : std::string(genesis_hash);
  }

  // The INSERTs of the rows `indices` of table `t` (at most 1000 rows each: PostgreSQL takes
  // 65535 parameters), chained after `prev`, which ends as the last row's hash, each taking the
  // next of `seq`. `accept` (may be empty) sees each row once it is filled in (row_) and may leave
  // it out. Every row is filled in once.
  std::vector<statement_text> chained_inserts(std::size_t t, std::span<const log_row> rows,
                                              const std::vector<std::size_t>& indices,
                                              const std::vector<std::int64_t>& seq, std::string& prev,
                                              const std::function<bool(std::size_t)>& accept = {}) {
    constexpr std::size_t per_statement = 1000;
    std::vector<statement_text> out;
    std::size_t next_seq = 0;
    for (const std::size_t i : indices) {
      fill(rows[i]);
      if (accept && !accept(i)) continue;
      if (out.empty() || out.back().rows == per_statement) {
        statement_text& st = out.emplace_back();
        st.sql = insert_sql_[t];
        st.first_seq = seq[next_seq];
      }
      statement_text& st = out.back();
      row_.front().value = seq[next_seq++];
      row_[row_.size() - 2].value = std::string_view(prev);
      std::string hash = chain_hash(row_, scratch_);
      row_.back().value = std::string_view(hash);
      st.sql += st.rows++ ? ", (" : "(";
      for (std::size_t c = 0; c < row_.size(); ++c) {
        st.sql += (c ? ", $" : "$") + std::to_string(st.values.size() + 1);
        st.values.push_back(std::holds_alternative<std::nullptr_t>(row_[c].value) ? std::nullopt
                                                                                     : std::optional(pg_text(row_[c].value)));
      }
      st.sql += ")";
      prev = std::move(hash);
    }
    return out;
  }

  // `count` new seqs of each table (nextval: never given twice, gaps where a batch failed), in
  // one query; ascending per table.
  std::optional<std::array<std::vector<std::int64_t>, std::size(table_names)>> next_seqs(
      const std::array<std::size_t, std::size(table_names)>& count, outcome& why) {
    std::string sql;
    for (std::size_t t = 0; t < count.size(); ++t) {
      if (!count[t]) continue;
      sql += (sql.empty() ? "" : " UNION ALL ") + std::string("SELECT ") + std::to_string(t) +
             ", nextval(pg_get_serial_sequence('" + table_names[t] + "', 'seq')) FROM generate_series(1, " +
             std::to_string(count[t]) + ")";
    }
    std::array<std::vector<std::int64_t>, std::size(table_names)> out;
    if (sql.empty()) return out;
    const pg_reply r = pg_exec(db(), sql);
    if (!r) {
      why.problem = r.message;
      why.lost = r.lost;
      return std::nullopt;
    }
    for (int i = 0; i < PQntuples(r.result.get()); ++i) {
      out[std::stoul(PQgetvalue(r.result.get(), i, 0))].push_back(std::stoll(PQgetvalue(r.result.get(), i, 1)));
    }
    for (auto& v : out) std::sort(v.begin(), v.end());
    return out;
  }

  // Chains the accepted rows of table `t` after its head, and inserts them; a row another
  // instance wrote meanwhile with one of their unique keys rolls the batch back (`conflict`).
  outcome insert(std::size_t t, std::span<const log_row> rows, const std::vector<std::size_t>& accepted) {
    outcome o;
    std::array<std::size_t, std::size(table_names)> count{};
    count[t] = accepted.size();
    auto seqs = next_seqs(count, o);
    if (!seqs) {
      pg_exec_simple(db(), "ROLLBACK");
      return o;
    }
    std::optional<std::string> prev = heads_[t] ? heads_[t] : read_head(t, o);
    if (!prev) {
      pg_exec_simple(db(), "ROLLBACK");
      return o;
    }
    const std::vector<statement_text> inserts = chained_inserts(t, rows, accepted, (*seqs)[t], *prev);
    if (!probe_ && !inserts.empty()) probe_ = row_probe{t, inserts.front().first_seq};
    for (const statement_text& st : inserts) {
      const pg_reply r = pg_exec(db(), st.sql + " ON CONFLICT DO NOTHING", pointers(st.values));
      if (!r) return failed(r);
      // Left out, the row would leave a gap in the chain: the batch is written again after
      // looking at what is there.
      if (std::to_string(st.rows) != PQcmdTuples(r.result.get())) {
        pg_exec_simple(db(), "ROLLBACK");
        o.conflict = true;
        o.problem = std::string("another instance wrote a ") + table_names[t] + " row with the same key";
        for (auto& h : heads_) h.reset();
        return o;
      }
    }
    pending_heads_[t] = *prev;
    o.done = true;
    return o;
  }

  log_options options_;
  pg_conn conn_;
  std::optional<row_probe> probe_;  // a row the current attempt writes
  std::array<std::string, std::size(table_names)> insert_sql_;
  // Each table's chain head after the last commit (instance chains: this process is their only
  // writer); none until read inside a transaction.
  std::array<std::optional<std::string>, std::size(table_names)> heads_, pending_heads_;
  row_text text_;
  std::vector<column_value> row_;
  std::string scratch_;
};

}  // namespace

std::unique_ptr<decision_store> open_postgres_store(const log_options& options) {
  return std::make_unique<postgres_store>(options);
}

}  // namespace baton::log
