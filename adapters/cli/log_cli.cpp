#include "adapters/cli/log_cli.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "adapters/cli/exit_codes.hpp"
#include "adapters/cli/cli_args.hpp"
#include "adapters/log/sqlite_log.hpp"
#include "core/json.hpp"

namespace baton::log {

namespace {

// Exit statuses of `baton log` besides cli.hpp's.
constexpr int exit_failed = 1;         // show: no such decision; any command: the log cannot be read
constexpr int exit_sql_error = 2;      // sql: the statement failed or would write
constexpr int exit_chain_broken = 3;   // verify: a row does not match its chain

constexpr const char* log_help = R"(Usage: baton log sql [--db PATH] "SELECT ..."
       baton log show [--db PATH] DECISION
       baton log tail [--db PATH] [-n N]
       baton log verify [--db PATH]

Reads the decision log, the SQLite file `baton serve` appends decisions and tool runs to
(adapters/README.md, "Decision log"). The file is opened read-only and never created.

Commands:
  sql QUERY    runs one SQL statement that only reads; writes each row as a JSON object
               (column -> value) on its own line. JSON columns (answers, arguments, proposal,
               output) stay JSON text. Views: decisions_per_lane_per_day,
               low_confidence_decisions (confidence < 0.5), escalated_decisions,
               confidence_by_model, pending_escalations (no resolution yet),
               resolved_escalations (with their resolution and wait_s)
  show ID      the decision as one JSON object, its tool runs under "tool_runs"
  tail         the last decisions, oldest first, one line each: time, id, session, turn, tool,
               action, lane, confidence
  verify       walks every hash chain (decisions, tool runs, escalations, resolutions,
               deliveries) from its first row and names the first row that does not match
               (a changed column, a missing row)

Options:
  --db PATH    the decision log (default var/baton.db)
  -n N         tail: how many decisions (default 20)
  -h, --help   show this help

Exit status: 0 done; 1 show: no such decision, or the log cannot be read; 2 sql: the statement
failed or would write; 3 verify: a row does not match its chain; 64 usage; 66 no log at PATH.
)";

// The authorizer of the read-only connection: ATTACH could create a file next to the log.
int deny_attach(void*, int action, const char*, const char*, const char*, const char*) {
  return action == SQLITE_ATTACH ? SQLITE_DENY : SQLITE_OK;
}

// Opens the log read-only; on failure reports it and returns the exit status in `status`.
db_handle open_log(const command_args& a, std::ostream& err, const char* command, int& status) {
  const std::string path(a.get("--db").value_or("var/baton.db"));
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    err << "baton log " << command << ": no decision log at " << path << "\n";
    status = exit_no_input;
    return nullptr;
  }
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr);
  db_handle db(raw);
  if (rc != SQLITE_OK) {
    err << "baton log " << command << ": cannot open " << path << ": " << (raw ? sqlite3_errmsg(raw) : "out of memory")
        << "\n";
    status = exit_no_input;
    return nullptr;
  }
  sqlite3_busy_timeout(db.get(), 5000);
  sqlite3_exec(db.get(), "PRAGMA query_only = ON", nullptr, nullptr, nullptr);
  sqlite3_set_authorizer(db.get(), deny_attach, nullptr);
  status = exit_ok;
  return db;
}

statement prepare(sqlite3* db, std::string_view sql, const char** tail = nullptr) {
  sqlite3_stmt* raw = nullptr;
  sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &raw, tail);
  return statement(raw);
}

void render_cell(const cell& v, std::string& out) {
  if (const auto* n = std::get_if<std::int64_t>(&v)) {
    out += std::to_string(*n);
  } else if (const auto* d = std::get_if<double>(&v)) {
    render_double(*d, out);
  } else if (const auto* t = std::get_if<std::string_view>(&v)) {
    render_string(*t, out);
  } else {
    out += "null";
  }
}

// Columns that hold JSON text: `show` nests them as values.
bool json_column(std::string_view name) {
  return name == "answers" || name == "arguments" || name == "proposal" || name == "output";
}

json row_object(const std::vector<column_value>& row) {
  json o = json::object();
  for (const column_value& c : row) {
    json& v = o[std::string(c.name)];
    if (const auto* n = std::get_if<std::int64_t>(&c.value)) {
      v = *n;
    } else if (const auto* d = std::get_if<double>(&c.value)) {
      v = *d;
    } else if (const auto* t = std::get_if<std::string_view>(&c.value)) {
      json_parse_error unused;
      if (!json_column(c.name) || !parse_json(*t, v, unused)) v = std::string(*t);
    }
  }
  return o;
}

// Python's json.dumps(v, indent=2, ensure_ascii=False), numbers spelled as render_json does.
void render_pretty(const json& v, std::size_t depth, std::string& out) {
  const bool object = v.is_object();
  if ((!object && !v.is_array()) || v.empty()) {
    render_json(v, out, false);
    return;
  }
  out.push_back(object ? '{' : '[');
  bool first = true;
  for (auto it = v.begin(); it != v.end(); ++it) {
    out += first ? "\n" : ",\n";
    first = false;
    out.append(2 * (depth + 1), ' ');
    if (object) {
      render_string(it.key(), out);
      out += ": ";
    }
    render_pretty(it.value(), depth + 1, out);
  }
  out.push_back('\n');
  out.append(2 * depth, ' ');
  out.push_back(object ? '}' : ']');
}

int sql_main(const command_args& a, std::ostream& out, std::ostream& err) {
  if (!a.file) return usage_error(err, "sql needs a query", "log sql");
  int status = exit_ok;
  const db_handle db = open_log(a, err, "sql", status);
  if (!db) return status;
  const std::string& query = *a.file;
  const char* tail = nullptr;
  const statement s = prepare(db.get(), query, &tail);
  if (!s) {
    err << "baton log sql: "
        << (sqlite3_errcode(db.get()) == SQLITE_OK ? "the query is empty" : sqlite3_errmsg(db.get())) << "\n";
    return exit_sql_error;
  }
  // Whatever follows must be blank or comments, not a second statement nor garbage.
  if (const std::string_view rest(tail, static_cast<std::size_t>(query.data() + query.size() - tail));
      prepare(db.get(), rest) || sqlite3_errcode(db.get()) != SQLITE_OK) {
    err << "baton log sql: one statement at a time\n";
    return exit_sql_error;
  }
  if (!sqlite3_stmt_readonly(s.get())) {
    err << "baton log sql: only statements that read are allowed; this one would change the log\n";
    return exit_sql_error;
  }
  // Repeated column names (a join's two "id"s) get ":2", ":3", … so that no value is lost.
  std::vector<std::string> names;
  for (int i = 0; i < sqlite3_column_count(s.get()); ++i) {
    std::string name = sqlite3_column_name(s.get(), i);
    const std::string base = name;
    for (int k = 2; std::find(names.begin(), names.end(), name) != names.end(); ++k) name = base + ":" + std::to_string(k);
    names.push_back(std::move(name));
  }
  std::vector<column_value> row;
  std::string buffer;
  int rc = SQLITE_ROW;
  while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
    read_row(s.get(), row);
    buffer.push_back('{');
    for (std::size_t i = 0; i < row.size(); ++i) {
      if (i) buffer.push_back(',');
      render_string(names[i], buffer);
      buffer.push_back(':');
      render_cell(row[i].value, buffer);
    }
    buffer += "}\n";
    if (buffer.size() >= 1 << 16) {
      out << buffer;
      buffer.clear();
    }
  }
  out << buffer;
  out.flush();
  if (rc != SQLITE_DONE) {
    err << "baton log sql: " << sqlite3_errmsg(db.get()) << "\n";
    return exit_sql_error;
  }
  return exit_ok;
}

// Every row of a one-parameter query on the log, as JSON objects; false after reporting.
bool select_rows(sqlite3* db, const char* sql, std::string_view param, json& rows, std::ostream& err,
                 const char* command) {
  const statement s = prepare(db, sql);
  if (s) sqlite3_bind_text(s.get(), 1, param.data(), static_cast<int>(param.size()), SQLITE_STATIC);
  std::vector<column_value> row;
  int rc = s ? SQLITE_ROW : SQLITE_ERROR;
  while (s && (rc = sqlite3_step(s.get())) == SQLITE_ROW) {
    read_row(s.get(), row);
    rows.push_back(row_object(row));
  }
  if (rc != SQLITE_DONE) {
    err << "baton log " << command << ": cannot read the log: " << sqlite3_errmsg(db) << "\n";
    return false;
  }
  return true;
}

int show_main(const command_args& a, std::ostream& out, std::ostream& err) {
  if (!a.file) return usage_error(err, "show needs a decision id", "log show");
  int status = exit_ok;
  const db_handle db = open_log(a, err, "show", status);
  if (!db) return status;
  json decisions = json::array(), runs = json::array();
  if (!select_rows(db.get(), "SELECT * FROM decisions WHERE id = ?1", *a.file, decisions, err, "show")) {
    return exit_failed;
  }
  if (decisions.empty()) {
    err << "baton log show: no decision " << *a.file << "\n";
    return exit_failed;
  }
  if (!select_rows(db.get(), "SELECT * FROM tool_runs WHERE decision = ?1 ORDER BY seq", *a.file, runs, err, "show")) {
    return exit_failed;
  }
  json& decision = decisions[0];
  decision["tool_runs"] = std::move(runs);
  std::string text;
  render_pretty(decision, 0, text);
  out << text << "\n";
  out.flush();
  return exit_ok;
}

int tail_main(const command_args& a, std::ostream& out, std::ostream& err) {
  std::size_t n = 20;
  if (!read_count(a, "-n", n)) return usage_error(err, "-n needs a positive number", "log tail");
  if (a.file) return usage_error(err, "tail takes no argument", "log tail");
  int status = exit_ok;
  const db_handle db = open_log(a, err, "tail", status);
  if (!db) return status;
  const statement s = prepare(db.get(),
                              "SELECT created_at, id, session, turn, tool, action, lane, confidence FROM "
                              "(SELECT * FROM decisions ORDER BY seq DESC LIMIT ?1) ORDER BY seq");
  if (s) sqlite3_bind_int64(s.get(), 1, static_cast<sqlite3_int64>(std::min<std::size_t>(n, INT64_MAX)));
  // Cells as text, then padded to the widest of each column.
  std::vector<std::vector<std::string>> lines;
  std::vector<std::size_t> widths;
  int rc = s ? SQLITE_ROW : SQLITE_ERROR;
  while (s && (rc = sqlite3_step(s.get())) == SQLITE_ROW) {
    std::vector<std::string> cells;
    for (int i = 0; i < sqlite3_column_count(s.get()); ++i) {
      std::string text;
      if (sqlite3_column_type(s.get(), i) == SQLITE_FLOAT) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.4f", sqlite3_column_double(s.get(), i));
        text = buf;
      } else if (const auto* t = sqlite3_column_text(s.get(), i)) {
        text = reinterpret_cast<const char*>(t);
      }
      if (text.empty()) text.push_back('-');
      if (widths.size() <= cells.size()) widths.push_back(0);
      widths[cells.size()] = std::max(widths[cells.size()], text.size());
      cells.push_back(std::move(text));
    }
    lines.push_back(std::move(cells));
  }
  if (rc != SQLITE_DONE) {
    err << "baton log tail: cannot read the log: " << sqlite3_errmsg(db.get()) << "\n";
    return exit_failed;
  }
  std::string text;
  for (const auto& cells : lines) {
    for (std::size_t i = 0; i < cells.size(); ++i) {
      text += cells[i];
      if (i + 1 < cells.size()) text.append(widths[i] - cells[i].size() + 2, ' ');
    }
    text.push_back('\n');
  }
  out << text;
  out.flush();
  return exit_ok;
}

const cell* find_column(const std::vector<column_value>& row, std::string_view name) {
  for (const column_value& c : row)
    if (c.name == name) return &c.value;
  return nullptr;
}

std::string cell_text(const cell* v) {
  std::string out;
  if (v) render_cell(*v, out);
  return out;
}

// Walks one table's chain. Returns its row count, or reports the first bad row and returns
// nothing (`status` then says how to exit).
std::optional<std::size_t> verify_chain(sqlite3* db, const char* table, std::ostream& out, std::ostream& err,
                                        int& status) {
  const statement s = prepare(db, std::string("SELECT * FROM ") + table + " ORDER BY seq");
  std::vector<column_value> row;
  std::string expected(genesis_hash), scratch;
  std::int64_t last_seq = 0;
  std::size_t count = 0;
  int rc = s ? SQLITE_ROW : SQLITE_ERROR;
  while (s && (rc = sqlite3_step(s.get())) == SQLITE_ROW) {
    read_row(s.get(), row);
    const cell* seq = find_column(row, "seq");
    const cell* prev = find_column(row, "prev_hash");
    const cell* stored = find_column(row, "row_hash");
    const auto* seq_value = seq ? std::get_if<std::int64_t>(seq) : nullptr;
    const auto* prev_text = prev ? std::get_if<std::string_view>(prev) : nullptr;
    const auto* stored_text = stored ? std::get_if<std::string_view>(stored) : nullptr;
    std::string problem;
    if (!seq_value || !prev_text || !stored_text) {
      problem = "seq, prev_hash or row_hash is missing or not of its type";
    } else if (*prev_text != expected) {
      problem = count == 0 ? "prev_hash is not the start of the chain: rows before it are missing or changed"
                           : "prev_hash does not match the row_hash of the row before it (seq " +
                                 std::to_string(last_seq) + ")";
      if (count > 0 && *seq_value != last_seq + 1) problem += "; rows between them are missing";
    } else if (const std::string computed = chain_hash(row, scratch); computed != *stored_text) {
      problem = "row_hash does not match the row's columns (stored " + std::string(*stored_text) + ", computed " +
                computed + "): a column was changed";
    }
    if (!problem.empty()) {
      out << "bad: " << table << " seq " << cell_text(seq) << " (id " << cell_text(find_column(row, "id"))
          << "): " << problem << "\n";
      status = exit_chain_broken;
      return std::nullopt;
    }
    expected.assign(*stored_text);
    last_seq = *seq_value;
    ++count;
  }
  if (rc != SQLITE_DONE) {
    err << "baton log verify: cannot read " << table << ": " << sqlite3_errmsg(db) << "\n";
    status = exit_failed;
    return std::nullopt;
  }
  return count;
}

int verify_main(const command_args& a, std::ostream& out, std::ostream& err) {
  if (a.file) return usage_error(err, "verify takes no argument", "log verify");
  int status = exit_ok;
  const db_handle db = open_log(a, err, "verify", status);
  if (!db) return status;
  static constexpr std::pair<const char*, const char*> tables[] = {
      {"decisions", "decisions"}, {"tool_runs", "tool runs"}, {"escalations", "escalations"},
      {"resolutions", "resolutions"}, {"deliveries", "deliveries"}};
  std::string counts;
  for (const auto& [table, noun] : tables) {
    // A log written by an older baton lacks the newer tables: they have no rows to check.
    const statement exists = prepare(db.get(), std::string("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = '") + table + "'");
    if (exists && sqlite3_step(exists.get()) != SQLITE_ROW) continue;
    const auto n = verify_chain(db.get(), table, out, err, status);
    if (!n) return status;
    counts += (counts.empty() ? "" : ", ") + std::to_string(*n) + " " + noun;
  }
  out << "ok: " << counts << "\n";
  out.flush();
  return exit_ok;
}

}  // namespace

int log_main(std::span<const std::string_view> args, std::istream&, std::ostream& out, std::ostream& err) {
  if (args.empty()) return usage_error(err, "log needs a command: sql, show, tail or verify", "log");
  const std::string_view command = args[0];
  if (command == "-h" || command == "--help") {
    out << log_help;
    return exit_ok;
  }
  if (command != "sql" && command != "show" && command != "tail" && command != "verify") {
    return usage_error(err, "unknown command '" + std::string(command) + "'", "log");
  }
  command_args a;
  const auto problem = command == "tail" ? parse_args(args.subspan(1), {"--db", "-n"}, {}, a)
                                         : parse_args(args.subspan(1), {"--db"}, {}, a);
  if (problem) return usage_error(err, *problem, ("log " + std::string(command)).c_str());
  if (a.help) {
    out << log_help;
    return exit_ok;
  }
  if (command == "sql") return sql_main(a, out, err);
  if (command == "show") return show_main(a, out, err);
  if (command == "tail") return tail_main(a, out, err);
  return verify_main(a, out, err);
}

}  // namespace baton::log
