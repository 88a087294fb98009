#include "adapters/log/log_reader.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <unordered_map>

#include "adapters/log/decision_log.hpp"
#include "adapters/log/log_source.hpp"
#include "adapters/log/sqlite_log.hpp"
#include "core/error_codes.hpp"

namespace baton::log {

namespace {

// The authorizer of the read-only connection: ATTACH could create a file next to the log.
int deny_attach(void*, int action, const char*, const char*, const char*, const char*) {
  return action == SQLITE_ATTACH ? SQLITE_DENY : SQLITE_OK;
}

std::string text(std::span<const column_value> row, std::string_view name) {
  const cell* c = find_column(row, name);
  const auto* t = c ? std::get_if<std::string_view>(c) : nullptr;
  return t ? std::string(*t) : std::string();
}

std::int64_t integer(std::span<const column_value> row, std::string_view name) {
  const cell* c = find_column(row, name);
  const auto* n = c ? std::get_if<std::int64_t>(c) : nullptr;
  return n ? *n : 0;
}

double real(std::span<const column_value> row, std::string_view name) {
  const cell* c = find_column(row, name);
  if (!c) return 0;
  if (const auto* d = std::get_if<double>(c)) return *d;
  if (const auto* n = std::get_if<std::int64_t>(c)) return static_cast<double>(*n);
  return 0;
}

// A JSON text the log holds; null when it does not parse (a row written by hand).
json json_column(std::span<const column_value> row, std::string_view name) { return parse_json_or_null(text(row, name)); }

escalation_row escalation_from(std::span<const column_value> row) {
  escalation_row out;
  escalation_record& r = out.escalation;
  r.id = text(row, "id");
  r.decision = text(row, "decision");
  r.session = text(row, "session");
  r.turn = integer(row, "turn");
  r.created_ms = integer(row, "created_ms");
  r.deadline_ms = integer(row, "deadline_ms");
  r.on_deadline = text(row, "on_deadline");
  r.reason = text(row, "reason");
  r.question = text(row, "question");
  r.tool = text(row, "tool");
  r.arguments = json_column(row, "arguments");
  r.confidence = real(row, "confidence");
  r.candidates = json_column(row, "candidates");
  r.state = text(row, "state");
  r.registry_hash = text(row, "registry_hash");
  r.policy_hash = text(row, "policy_hash");
  out.decision_answers = text(row, "decision_answers");
  out.decision_error = text(row, "decision_error");
  return out;
}

// `prefix`: the columns' names in a query that reads them under names of their own ("review_").
resolution_record resolution_from(std::span<const column_value> row, std::string_view prefix = {}) {
  const auto name = [&](std::string_view column) { return std::string(prefix).append(column); };
  resolution_record r;
  r.id = text(row, name("id"));
  r.escalation = text(row, name("escalation"));
  r.created_ms = integer(row, name("created_ms"));
  r.outcome = text(row, name("outcome"));
  r.tool = text(row, name("tool"));
  r.arguments = json_column(row, name("arguments"));
  r.reason = text(row, name("reason"));
  r.reviewer = text(row, name("reviewer"));
  r.by = text(row, name("by"));
  r.forced = integer(row, name("forced")) != 0;
  r.registry_hash = text(row, name("registry_hash"));
  r.policy_hash = text(row, name("policy_hash"));
  return r;
}

tool_run_record tool_run_from(std::span<const column_value> row) {
  tool_run_record r;
  r.id = text(row, "id");
  r.decision = text(row, "decision");
  r.tool = text(row, "tool");
  r.executor = text(row, "executor");
  r.created_ms = integer(row, "created_ms");
  r.duration_ms = real(row, "duration_ms");
  r.ok = integer(row, "ok") != 0;
  r.output = json_column(row, "output");
  r.error_code = text(row, "error_code");
  r.detail = text(row, "detail");
  r.attempts = static_cast<int>(integer(row, "attempts"));
  return r;
}

// The decision columns reviewed_decisions reads, and the review's under names of their own.
constexpr const char* reviewed_columns =
    "d.id, d.request_id, d.session, d.turn, d.created_ms, d.engine, d.model, d.fingerprint, d.registry_hash, "
    "d.policy_hash, d.schema_hash, d.state_hash, d.answers, d.action, d.tool, d.lane, d.confidence, d.error_code, "
    "d.fallback_of, d.proposal, e.id AS review_escalation, r.id AS review_id, r.created_ms AS review_created_ms, "
    "r.outcome AS review_outcome, r.tool AS review_tool, r.arguments AS review_arguments, r.reason AS review_reason, "
    "r.reviewer AS review_reviewer, r.\"by\" AS review_by, r.forced AS review_forced, "
    "r.registry_hash AS review_registry_hash, r.policy_hash AS review_policy_hash, f.id AS second_id, "
    "f.lane AS second_lane, f.action AS second_action, f.policy_hash AS second_policy_hash";

// A first pass that fell back has no escalation of its own: its second pass's is the turn's.
constexpr const char* reviewed_joins =
    " FROM decisions d LEFT JOIN decisions f ON f.fallback_of = d.id "
    "LEFT JOIN escalations e ON e.decision = COALESCE(f.id, d.id) "
    "LEFT JOIN resolutions r ON r.escalation = e.id WHERE d.created_ms >= ? ORDER BY d.seq";

reviewed_decision reviewed_from(std::span<const column_value> row) {
  reviewed_decision out;
  decision_record& d = out.decision;
  d.id = text(row, "id");
  d.request_id = text(row, "request_id");
  d.session = text(row, "session");
  d.turn = integer(row, "turn");
  d.created_ms = integer(row, "created_ms");
  d.engine = text(row, "engine");
  d.model = text(row, "model");
  d.fingerprint = text(row, "fingerprint");
  d.registry_hash = text(row, "registry_hash");
  d.policy_hash = text(row, "policy_hash");
  d.schema_hash = text(row, "schema_hash");
  d.state_hash = text(row, "state_hash");
  if (const cell* s = find_column(row, "state"); s && std::holds_alternative<std::string_view>(*s)) {
    d.state = std::string(std::get<std::string_view>(*s));
  }
  d.answers = text(row, "answers");
  d.action = text(row, "action");
  d.tool = text(row, "tool");
  d.lane = text(row, "lane");
  d.confidence = real(row, "confidence");
  d.error_code = text(row, "error_code");
  d.fallback_of = text(row, "fallback_of");
  d.proposal = json_column(row, "proposal");
  d.media = json_column(row, "media");
  if (!text(row, "second_id").empty()) {
    out.second_pass = {text(row, "second_id"), text(row, "second_lane"), text(row, "second_action"),
                       text(row, "second_policy_hash")};
  }
  out.escalation = text(row, "review_escalation");
  if (!text(row, "review_id").empty()) out.resolution = resolution_from(row, "review_");  // its escalation: review_escalation
  return out;
}

// Escalation rows with what their evidence is derived from: the decision's logged answers.
constexpr const char* with_decision =
    "SELECT e.*, d.answers AS decision_answers, d.error_code AS decision_error FROM escalations e "
    "LEFT JOIN decisions d ON d.id = e.decision";

// Columns that hold JSON text: a decision shown as one object nests them as values.
bool holds_json(std::string_view name) {
  return name == "answers" || name == "arguments" || name == "proposal" || name == "output" || name == "media";
}

json row_object(std::span<const column_value> row) {
  json o = json::object();
  for (const column_value& c : row) {
    json& v = o[std::string(c.name)];
    if (const auto* n = std::get_if<std::int64_t>(&c.value)) {
      v = *n;
    } else if (const auto* d = std::get_if<double>(&c.value)) {
      v = *d;
    } else if (const auto* t = std::get_if<std::string_view>(&c.value)) {
      json_parse_error unused;
      if (!holds_json(c.name) || !parse_json(*t, v, unused)) v = std::string(*t);
    }
  }
  return o;
}

std::string cell_text(const cell* v) {
  std::string out;
  if (!v) return out;
  if (const auto* n = std::get_if<std::int64_t>(v)) {
    out = std::to_string(*n);
  } else if (const auto* d = std::get_if<double>(v)) {
    render_double(*d, out);
  } else if (const auto* t = std::get_if<std::string_view>(v)) {
    render_string(*t, out);
  } else {
    out = "null";
  }
  return out;
}

// The SQLite file, read-only.
class sqlite_source final : public log_source {
 public:
  explicit sqlite_source(db_handle db) : db_(std::move(db)) {}

  result<void> query(const std::string& sql, std::span<const parameter> params, const row_callback& each) override {
    const statement s = prepare(sql);
    if (!s) return failed();
    int index = 1;
    for (const parameter& p : params) {
      if (const auto* t = std::get_if<std::string>(&p)) {
        sqlite3_bind_text(s.get(), index++, t->c_str(), static_cast<int>(t->size()), SQLITE_TRANSIENT);
      } else {
        sqlite3_bind_int64(s.get(), index++, std::get<std::int64_t>(p));
      }
    }
    std::vector<column_value> row;
    int rc;
    while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
      read_row(s.get(), row);
      each(row);
    }
    return rc == SQLITE_DONE ? result<void>() : failed();
  }

  result<void> read_statement(std::string_view query, const std::function<void(std::span<const std::string>)>& columns,
                         const std::function<void(std::span<const cell>)>& row) override {
    sqlite3* db = db_.get();
    const char* tail = nullptr;
    const statement s = prepare(query, &tail);
    if (!s) {
      if (sqlite3_errcode(db) == SQLITE_OK) return make_error(400, codes::sql_refused, "the query is empty");
      return make_error(400, codes::sql_failed, sqlite3_errmsg(db));
    }
    // Whatever follows must be blank or comments, not a second statement nor garbage.
    if (const std::string_view rest(tail, static_cast<std::size_t>(query.data() + query.size() - tail));
        prepare(rest) || sqlite3_errcode(db) != SQLITE_OK) {
      return make_error(400, codes::sql_refused, "one statement at a time");
    }
    if (!sqlite3_stmt_readonly(s.get())) {
      return make_error(400, codes::sql_refused, "only statements that read are allowed; this one would change the log");
    }
    std::vector<std::string_view> names;
    for (int i = 0; i < sqlite3_column_count(s.get()); ++i) names.emplace_back(sqlite3_column_name(s.get(), i));
    columns(unique_column_names(names));
    std::vector<column_value> values;
    std::vector<cell> cells;
    int rc;
    while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
      read_row(s.get(), values);
      cells.clear();
      for (const column_value& v : values) cells.push_back(v.value);
      row(cells);
    }
    if (rc != SQLITE_DONE) return make_error(400, codes::sql_failed, sqlite3_errmsg(db));
    return {};
  }

  result<bool> has_table(const std::string& table) override {
    const parameter p[] = {table};
    bool found = false;
    auto read = query("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?", p, [&](auto) { found = true; });
    if (!read) return read.error();
    return result<bool>(boost::system::in_place_value, found);
  }

  result<bool> has_column(const std::string& table, const std::string& column) override {
    const parameter p[] = {table, column};
    bool found = false;
    auto read = query("SELECT 1 FROM pragma_table_info(?) WHERE name = ?", p, [&](auto) { found = true; });
    if (!read) return read.error();
    return result<bool>(boost::system::in_place_value, found);
  }

  result<void> check_storage() override {
    std::string verdict;
    auto read = query("PRAGMA quick_check(1)", {}, [&](std::span<const column_value> row) {
      if (const auto* t = std::get_if<std::string_view>(&row[0].value)) verdict = *t;
    });
    if (!read) return read.error();
    if (verdict == "ok") return {};
    std::replace(verdict.begin(), verdict.end(), '\n', ' ');
    return make_error(500, codes::log_damaged, "the database file is damaged (SQLite's quick_check: " + verdict + ")");
  }

  bool instance_chains() const override { return false; }

 private:
  error failed() const {
    return make_error(500, codes::log_read_failed, std::string("cannot read the decision log: ") + sqlite3_errmsg(db_.get()));
  }

  statement prepare(std::string_view sql, const char** tail = nullptr) const {
    sqlite3_stmt* raw = nullptr;
    sqlite3_prepare_v2(db_.get(), sql.data(), static_cast<int>(sql.size()), &raw, tail);
    return statement(raw);
  }

  db_handle db_;
};

}  // namespace

struct log_reader::impl {
  std::unique_ptr<log_source> source;
  mutable std::mutex mutex;

  // The caller holds the mutex.
  result<void> query(const std::string& sql, std::span<const parameter> params, const row_callback& each) const {
    return source->query(sql, params, each);
  }

  // The resolutions `selection` picks (SQL over `resolutions r`: WHERE and ORDER BY, and `LIMIT ?`
  // when `limit` is given), each with its escalation (and with `tool_runs`, its decision's latest
  // tool run): two or three queries however many there are.
  result<std::vector<escalation_history>> resolutions(const std::string& selection, std::vector<parameter> params,
                                                      bool tool_runs) const {
    std::vector<escalation_history> out;
    auto read = query("SELECT r.* FROM resolutions r " + selection, params, [&](auto row) {
      out.push_back({{}, resolution_from(row), std::nullopt});
    });
    if (!read) return read.error();
    std::unordered_map<std::string, escalation_row> escalations;
    read = query(std::string(with_decision) + " WHERE e.id IN (SELECT r.escalation FROM resolutions r " + selection + ")",
                 params, [&](auto row) {
                   escalation_row e = escalation_from(row);
                   escalations.emplace(e.escalation.id, std::move(e));
                 });
    if (!read) return read.error();
    std::map<std::string, tool_run_record> runs;  // decision → its latest run
    if (tool_runs) {
      read = query("SELECT * FROM tool_runs WHERE decision IN (SELECT e.decision FROM resolutions r JOIN escalations e "
                   "ON e.id = r.escalation " + selection + ") ORDER BY seq",
                   params, [&](auto row) {
                     tool_run_record r = tool_run_from(row);
                     runs[r.decision] = std::move(r);
                   });
      if (!read) return read.error();
    }
    for (escalation_history& h : out) {
      if (const auto it = escalations.find(h.resolution->escalation); it != escalations.end()) h.row = it->second;
      if (const auto run = runs.find(h.row.escalation.decision); run != runs.end()) h.tool_run = run->second;
    }
    return out;
  }

  // Walks one table's chains (one, or one per instance that wrote to it): its row count, or
  // the first bad row in `report`. A chain is the rows of one instance in seq order.
  result<std::optional<std::size_t>> verify_chain(const char* table, chain_report& report) const {
    struct chain {
      std::string expected{genesis_hash};
      std::int64_t last_seq = 0;
      std::size_t count = 0;
    };
    std::map<std::string, chain> chains;
    std::string scratch;
    std::size_t count = 0;
    bool broken = false;
    const bool per_instance = source->instance_chains();
    auto read = query(std::string("SELECT * FROM ") + table + " ORDER BY seq", {}, [&](auto row) {
      if (broken) return;
      const cell* seq = find_column(row, "seq");
      const cell* prev = find_column(row, "prev_hash");
      const cell* stored = find_column(row, "row_hash");
      const auto* seq_value = seq ? std::get_if<std::int64_t>(seq) : nullptr;
      const auto* prev_text = prev ? std::get_if<std::string_view>(prev) : nullptr;
      const auto* stored_text = stored ? std::get_if<std::string_view>(stored) : nullptr;
      const std::string instance = per_instance ? text(row, "instance") : std::string();
      chain& c = chains[instance];
      const std::string whose = instance.empty() ? std::string() : " of instance " + instance;
      std::string problem;
      if (!seq_value || !prev_text || !stored_text) {
        problem = "seq, prev_hash or row_hash is missing or not of its type";
      } else if (*prev_text != c.expected) {
        problem = c.count == 0 ? "prev_hash is not the start of the chain" + whose +
                                     ": rows before it are missing or changed"
                               : "prev_hash does not match the row_hash of the row before it" +
                                     (per_instance ? " in the chain" + whose : std::string()) + " (seq " +
                                     std::to_string(c.last_seq) + ")";
        if (c.count > 0 && !per_instance && *seq_value != c.last_seq + 1) problem += "; rows between them are missing";
      } else if (const std::string computed = chain_hash(row, scratch); computed != *stored_text) {
        problem = "row_hash does not match the row's columns (stored " + std::string(*stored_text) + ", computed " +
                  computed + "): a column was changed";
      }
      if (!problem.empty()) {
        report.broken = std::string(table) + " seq " + cell_text(seq) + " (id " + cell_text(find_column(row, "id")) +
                        "): " + problem;
        broken = true;
        return;
      }
      c.expected.assign(*stored_text);
      c.last_seq = *seq_value;
      ++c.count;
      ++count;
    });
    if (!read) return read.error();
    if (broken) return std::optional<std::size_t>();
    for (const auto& [instance, c] : chains) report.chains.push_back({table, instance, c.count, c.expected});
    return std::optional<std::size_t>(count);
  }

  // Rows naming a row of another table (or of another instance's chain) that is not there: the
  // first such, in `report`.
  result<bool> verify_references(chain_report& report) const {
    static constexpr std::array<std::array<const char*, 3>, 4> references = {{
        {"tool_runs", "decision", "decisions"},
        {"escalations", "decision", "decisions"},
        {"resolutions", "escalation", "escalations"},
        {"deliveries", "resolution", "resolutions"},
    }};
    for (const auto& [table, column_name, target] : references) {
      auto child = source->has_table(table);
      if (!child) return child.error();
      if (!*child) continue;
      const std::string key = std::string_view(table) == "deliveries" ? "resolution" : "id";
      auto read = query(std::string("SELECT c.seq, c.") + key + " AS id, c." + column_name + " AS target FROM " + table +
                            " c WHERE NOT EXISTS (SELECT 1 FROM " + target + " t WHERE t.id = c." + column_name +
                            ") ORDER BY c.seq LIMIT 1",
                        {}, [&](auto row) {
                          report.broken = std::string(table) + " seq " + cell_text(find_column(row, "seq")) + " (id " +
                                          cell_text(find_column(row, "id")) + "): names " + target + " " +
                                          cell_text(find_column(row, "target")) + ", which is not in the log";
                        });
      if (!read) return read.error();
      if (report.broken) return result<bool>(boost::system::in_place_value, false);
    }
    return result<bool>(boost::system::in_place_value, true);
  }
};

log_reader::log_reader(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

log_reader::~log_reader() = default;

result<std::unique_ptr<log_reader>> log_reader::open(const std::filesystem::path& path, int busy_timeout_ms) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return make_error(404, codes::no_log, "no decision log at " + path.string());
  }
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr);
  db_handle db(raw);
  auto p = std::make_unique<impl>();
  if (rc != SQLITE_OK) {
    return make_error(500, codes::log_open_failed,
                      "cannot open " + path.string() + ": " + (raw ? sqlite3_errmsg(raw) : "out of memory"));
  }
  sqlite3_busy_timeout(raw, busy_timeout_ms);
  sqlite3_exec(raw, "PRAGMA query_only = ON", nullptr, nullptr, nullptr);
  sqlite3_set_authorizer(raw, deny_attach, nullptr);
  p->source = std::make_unique<sqlite_source>(std::move(db));
  return std::unique_ptr<log_reader>(new log_reader(std::move(p)));
}

result<std::unique_ptr<log_reader>> log_reader::open(const log_options& options) {
  if (!options.shared()) return open(options.path, options.busy_timeout_ms);
  auto source = open_postgres_source(options.url, options.password);
  if (!source) return source.error();
  auto p = std::make_unique<impl>();
  p->source = std::move(*source);
  return std::unique_ptr<log_reader>(new log_reader(std::move(p)));
}

result<std::vector<escalation_row>> log_reader::pending_escalations(const std::optional<std::string>& session) const {
  std::lock_guard lock(impl_->mutex);
  std::vector<escalation_row> out;
  std::vector<parameter> params;
  if (session) params.emplace_back(*session);
  auto read = impl_->query(std::string(with_decision) +
                               " WHERE NOT EXISTS (SELECT 1 FROM resolutions r WHERE r.escalation = e.id)" +
                               (session ? " AND e.session = ?" : "") + " ORDER BY e.seq",
                           params, [&](auto row) { out.push_back(escalation_from(row)); });
  if (!read) return read.error();
  return out;
}

result<std::vector<escalation_history>> log_reader::unacknowledged_resolutions(const std::optional<std::string>& session) const {
  std::lock_guard lock(impl_->mutex);
  std::vector<parameter> params;
  if (session) params.emplace_back(*session);
  return impl_->resolutions(std::string("WHERE NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.resolution = r.id)") +
                                (session ? " AND r.escalation IN (SELECT s.id FROM escalations s WHERE s.session = ?)" : "") +
                                " ORDER BY r.seq",
                            std::move(params), true);
}

result<std::vector<escalation_history>> log_reader::latest_resolutions(std::size_t limit) const {
  std::lock_guard lock(impl_->mutex);
  return impl_->resolutions("ORDER BY r.seq DESC LIMIT ?", {static_cast<std::int64_t>(std::min<std::size_t>(limit, INT64_MAX))},
                            true);
}

result<std::optional<escalation_history>> log_reader::escalation(const std::string& id) const {
  std::lock_guard lock(impl_->mutex);
  std::optional<escalation_history> found;
  const parameter by_id[] = {id};
  auto read = impl_->query(std::string(with_decision) + " WHERE e.id = ?", by_id,
                           [&](auto row) { found.emplace(escalation_history{escalation_from(row), std::nullopt, std::nullopt, false}); });
  if (!read) return read.error();
  if (!found) return found;
  read = impl_->query("SELECT * FROM resolutions WHERE escalation = ?", by_id,
                      [&](auto row) { found->resolution = resolution_from(row); });
  if (!read) return read.error();
  if (!found->resolution) return found;
  const parameter by_decision[] = {found->row.escalation.decision};
  read = impl_->query("SELECT * FROM tool_runs WHERE decision = ? ORDER BY seq", by_decision,
                      [&](auto row) { found->tool_run = tool_run_from(row); });
  if (!read) return read.error();
  const parameter by_resolution[] = {found->resolution->id};
  read = impl_->query("SELECT 1 FROM deliveries WHERE resolution = ?", by_resolution,
                      [&](auto) { found->acknowledged = true; });
  if (!read) return read.error();
  return found;
}

result<std::optional<std::string>> log_reader::escalation_of(const std::string& resolution) const {
  std::lock_guard lock(impl_->mutex);
  std::optional<std::string> escalation;
  const parameter by_id[] = {resolution};
  auto read = impl_->query("SELECT escalation FROM resolutions WHERE id = ?", by_id,
                           [&](auto row) { escalation = text(row, "escalation"); });
  if (!read) return read.error();
  return escalation;
}

result<std::optional<std::string>> log_reader::acknowledged_session(const std::string& resolution) const {
  std::lock_guard lock(impl_->mutex);
  std::optional<std::string> session;
  const parameter by_id[] = {resolution};
  auto read = impl_->query("SELECT e.session FROM deliveries d JOIN resolutions r ON r.id = d.resolution "
                           "JOIN escalations e ON e.id = r.escalation WHERE d.resolution = ?",
                           by_id, [&](auto row) { session = text(row, "session"); });
  if (!read) return read.error();
  return session;
}

result<void> log_reader::sql(std::string_view query, const std::function<void(std::span<const std::string>)>& columns,
                             const std::function<void(std::span<const cell>)>& row) const {
  std::lock_guard lock(impl_->mutex);
  return impl_->source->read_statement(query, columns, row);
}

result<std::optional<json>> log_reader::decision(const std::string& id) const {
  std::lock_guard lock(impl_->mutex);
  std::optional<json> found;
  const parameter by_id[] = {id};
  auto read = impl_->query("SELECT * FROM decisions WHERE id = ?", by_id, [&](auto row) { found = row_object(row); });
  if (!read) return read.error();
  if (!found) return found;
  json runs = json::array();
  read = impl_->query("SELECT * FROM tool_runs WHERE decision = ? ORDER BY seq", by_id,
                      [&](auto row) { runs.push_back(row_object(row)); });
  if (!read) return read.error();
  (*found)["tool_runs"] = std::move(runs);
  return found;
}

result<void> log_reader::reviewed_decisions(std::int64_t since_ms, bool with_state,
                                            const std::function<void(const reviewed_decision&)>& each) const {
  std::lock_guard lock(impl_->mutex);
  const parameter since[] = {since_ms};
  // What a state was decided with besides its text: a log an earlier baton wrote has no media.
  bool with_media = false;
  if (with_state) {
    auto has = impl_->source->has_column("decisions", "media");
    if (!has) return has.error();
    with_media = *has;
  }
  return impl_->query(std::string("SELECT ") + reviewed_columns + (with_state ? ", d.state" : "") +
                          (with_media ? ", d.media" : "") + reviewed_joins,
                      since, [&](auto row) { each(reviewed_from(row)); });
}

result<void> log_reader::tail(std::size_t n, const std::function<void(std::span<const cell>)>& row) const {
  std::lock_guard lock(impl_->mutex);
  const parameter limit[] = {static_cast<std::int64_t>(std::min<std::size_t>(n, INT64_MAX))};
  std::vector<cell> cells;
  return impl_->query(
      "SELECT created_at, id, session, turn, tool, action, lane, confidence FROM "
      "(SELECT * FROM decisions ORDER BY seq DESC LIMIT ?) AS last ORDER BY seq",
      limit, [&](auto values) {
        cells.clear();
        for (const column_value& v : values) cells.push_back(v.value);
        row(cells);
      });
}

result<chain_report> log_reader::verify() const {
  std::lock_guard lock(impl_->mutex);
  static constexpr std::pair<const char*, const char*> tables[] = {
      {"decisions", "decisions"}, {"tool_runs", "tool runs"}, {"escalations", "escalations"},
      {"resolutions", "resolutions"}, {"deliveries", "deliveries"}, {"reloads", "reloads"}};
  chain_report report;
  if (auto sound = impl_->source->check_storage(); !sound) return sound.error();
  for (const auto& [table, noun] : tables) {
    // A log written by an older baton lacks the newer tables: they have no rows to check. Every
    // log has its decisions table from the first row on: without it, this is another database.
    auto exists = impl_->source->has_table(table);
    if (!exists) return exists.error();
    if (!*exists && tables[0].first == table) {
      return make_error(422, codes::not_a_log, "the database has no decisions table: it is not a decision log");
    }
    if (!*exists) continue;
    auto n = impl_->verify_chain(table, report);
    if (!n) return n.error();
    if (!*n) return report;
    report.counts.emplace_back(noun, **n);
  }
  if (auto whole = impl_->verify_references(report); !whole) return whole.error();
  return report;
}

}  // namespace baton::log
