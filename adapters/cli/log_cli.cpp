#include "adapters/cli/log_cli.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "adapters/cli/cli_args.hpp"
#include "adapters/cli/exit_codes.hpp"
#include "adapters/log/decision_log.hpp"
#include "adapters/log/log_reader.hpp"
#include "core/error_codes.hpp"
#include "core/json.hpp"

namespace baton {

namespace {

using log::cell;
using log::log_reader;

// Exit statuses of `baton log` besides exit_codes.hpp's.
constexpr int exit_failed = 1;         // show: no such decision; any command: the log cannot be read
constexpr int exit_sql_error = 2;      // sql: the statement failed or would write
constexpr int exit_chain_broken = 3;   // verify: a row does not match its chain

constexpr const char* log_help = R"(Usage: baton log sql [--db LOG] "SELECT ..."
       baton log show [--db LOG] DECISION
       baton log tail [--db LOG] [-n N]
       baton log verify [--db LOG]
       baton log copy --from FILE.db --to postgresql://... [--chains instance|global]

Reads the decision log `baton serve` appends decisions and tool runs to (adapters/log/README.md):
a SQLite file, opened read-only and never created, or a PostgreSQL database (a postgresql://
URL; the password from libpq's PGPASSWORD or ~/.pgpass), read in read-only transactions.

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
               deliveries, reloads) from its first row and names the first row that does not match
               (a changed column, a missing row), and that every row another names is
               there; on PostgreSQL, each instance's chains, and then a line per chain with
               its last row_hash: keep them elsewhere to catch rows cut from the end
  copy         moves a SQLite log into an empty PostgreSQL one, rows as they are (their
               hashes hold: the instance column stays NULL), then verifies the copy;
               --chains: of a database it creates (default instance; log.chains)

Options:
  --db LOG     the decision log: a file or a postgresql:// URL (default var/baton.db)
  -n N         tail: how many decisions (default 20)
  -h, --help   show this help

Exit status: 0 done; 1 show: no such decision, or the log cannot be read or (copy) written;
2 sql: the statement failed or would write; 3 verify: a row does not match its chain (copy: in
the file, a row that PostgreSQL cannot hold as it is, or a copy that does not match the file);
64 usage; 66 no log at PATH.
)";

// Opens the log read-only; on failure reports it and returns null, with the exit status in `status`.
std::unique_ptr<log_reader> open_log(const command_args& a, std::ostream& err, const char* command, int& status) {
  auto reader = log_reader::open(log::log_at(a.get("--db").value_or("var/baton.db")));
  if (!reader) {
    err << "baton log " << command << ": " << reader.error().message << "\n";
    status = exit_no_input;
    return nullptr;
  }
  status = exit_ok;
  return std::move(*reader);
}

// A cell as JSON, which has no infinities and carries only UTF-8: an infinite or NaN result is
// null, and bytes that are not UTF-8 (a blob, text stored as such) are replaced with U+FFFD.
void render_cell(const cell& v, std::string& out) {
  if (const auto* n = std::get_if<std::int64_t>(&v)) {
    out += std::to_string(*n);
  } else if (const auto* d = std::get_if<double>(&v)) {
    if (std::isfinite(*d)) {
      render_double(*d, out);
    } else {
      out += "null";
    }
  } else if (const auto* t = std::get_if<std::string_view>(&v)) {
    render_string(replace_invalid_utf8(*t), out);
  } else {
    out += "null";
  }
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
  const auto log = open_log(a, err, "sql", status);
  if (!log) return status;
  std::vector<std::string> names;
  std::string buffer;
  const auto done = log->sql(
      *a.file, [&](std::span<const std::string> columns) { names.assign(columns.begin(), columns.end()); },
      [&](std::span<const cell> row) {
        buffer.push_back('{');
        for (std::size_t i = 0; i < row.size(); ++i) {
          if (i) buffer.push_back(',');
          render_string(names[i], buffer);
          buffer.push_back(':');
          render_cell(row[i], buffer);
        }
        buffer += "}\n";
        if (buffer.size() >= 1 << 16) {
          out << buffer;
          buffer.clear();
        }
      });
  out << buffer;
  out.flush();
  if (!done) {
    err << "baton log sql: " << done.error().message << "\n";
    return exit_sql_error;
  }
  return exit_ok;
}

int show_main(const command_args& a, std::ostream& out, std::ostream& err) {
  if (!a.file) return usage_error(err, "show needs a decision id", "log show");
  int status = exit_ok;
  const auto log = open_log(a, err, "show", status);
  if (!log) return status;
  const auto decision = log->decision(*a.file);
  if (!decision) {
    err << "baton log show: " << decision.error().message << "\n";
    return exit_failed;
  }
  if (!*decision) {
    err << "baton log show: no decision " << *a.file << "\n";
    return exit_failed;
  }
  std::string text;
  render_pretty(**decision, 0, text);
  out << text << "\n";
  out.flush();
  return exit_ok;
}

int tail_main(const command_args& a, std::ostream& out, std::ostream& err) {
  std::size_t n = 20;
  if (!read_count(a, "-n", n)) return usage_error(err, "-n needs a positive number", "log tail");
  if (a.file) return usage_error(err, "tail takes no argument", "log tail");
  int status = exit_ok;
  const auto log = open_log(a, err, "tail", status);
  if (!log) return status;
  // Cells as text, then padded to the widest of each column.
  std::vector<std::vector<std::string>> lines;
  std::vector<std::size_t> widths;
  const auto read = log->tail(n, [&](std::span<const cell> row) {
    std::vector<std::string> cells;
    for (const cell& v : row) {
      std::string text;
      if (const auto* d = std::get_if<double>(&v)) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.4f", *d);
        text = buf;
      } else if (const auto* i = std::get_if<std::int64_t>(&v)) {
        text = std::to_string(*i);
      } else if (const auto* t = std::get_if<std::string_view>(&v)) {
        text = std::string(*t);
      }
      if (text.empty()) text.push_back('-');
      if (widths.size() <= cells.size()) widths.push_back(0);
      widths[cells.size()] = std::max(widths[cells.size()], text.size());
      cells.push_back(std::move(text));
    }
    lines.push_back(std::move(cells));
  });
  if (!read) {
    err << "baton log tail: " << read.error().message << "\n";
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

int verify_main(const command_args& a, std::ostream& out, std::ostream& err) {
  if (a.file) return usage_error(err, "verify takes no argument", "log verify");
  int status = exit_ok;
  const auto log = open_log(a, err, "verify", status);
  if (!log) return status;
  const auto report = log->verify();
  if (!report) {
    err << "baton log verify: " << report.error().message << "\n";
    return exit_failed;
  }
  if (report->broken) {
    out << "bad: " << *report->broken << "\n";
    out.flush();
    return exit_chain_broken;
  }
  std::string counts;
  for (const auto& [noun, n] : report->counts) counts += (counts.empty() ? "" : ", ") + std::to_string(n) + " " + noun;
  out << "ok: " << counts << "\n";
  // Several instances' chains (PostgreSQL): each one's end, to keep elsewhere.
  const bool instances = std::any_of(report->chains.begin(), report->chains.end(),
                                     [](const auto& c) { return !c.instance.empty(); });
  for (const auto& c : report->chains) {
    if (!instances) break;
    out << "  " << c.table << (c.instance.empty() ? "" : " of " + c.instance) << ": " << c.rows << " rows, last "
        << c.row_hash << "\n";
  }
  out.flush();
  return exit_ok;
}

int copy_main(const command_args& a, std::ostream& out, std::ostream& err) {
  if (a.file) return usage_error(err, "copy takes no argument", "log copy");
  const auto from = a.get("--from");
  const auto to = a.get("--to");
  if (!from || !to) return usage_error(err, "copy needs --from FILE.db and --to postgresql://...", "log copy");
  if (!log::is_postgres_url(*to)) return usage_error(err, "--to must be a postgresql:// URL", "log copy");
  log::log_options target = log::log_at(*to);
  if (const auto chains = a.get("--chains")) {
    if (*chains != "instance" && *chains != "global") return usage_error(err, "--chains takes instance or global", "log copy");
    target.chains = *chains == "global" ? log::log_options::chain_mode::global : log::log_options::chain_mode::instance;
  }
  const auto copied = log::copy_log(std::filesystem::path(*from), target);
  if (!copied) {
    err << "baton log copy: " << copied.error().message << "\n";
    const std::string& code = copied.error().code;
    if (code == codes::no_log) return exit_no_input;
    return code == codes::chain_broken || code == codes::copy_mismatch || code == codes::copy_refused ? exit_chain_broken : exit_failed;
  }
  std::string counts;
  for (const auto& [noun, n] : copied->counts) counts += (counts.empty() ? "" : ", ") + std::to_string(n) + " " + noun;
  out << "copied and verified: " << counts << "\n";
  out.flush();
  return exit_ok;
}

}  // namespace

int log_main(std::span<const std::string_view> args, std::istream&, std::ostream& out, std::ostream& err) {
  if (args.empty()) return usage_error(err, "log needs a command: sql, show, tail, verify or copy", "log");
  const std::string_view command = args[0];
  if (command == "-h" || command == "--help") {
    out << log_help;
    return exit_ok;
  }
  if (command != "sql" && command != "show" && command != "tail" && command != "verify" && command != "copy") {
    return usage_error(err, "unknown command '" + std::string(command) + "'", "log");
  }
  command_args a;
  const auto problem = command == "tail"   ? parse_args(args.subspan(1), {"--db", "-n"}, {}, a)
                       : command == "copy" ? parse_args(args.subspan(1), {"--from", "--to", "--chains"}, {}, a)
                                           : parse_args(args.subspan(1), {"--db"}, {}, a);
  if (problem) return usage_error(err, *problem, ("log " + std::string(command)).c_str());
  if (a.help) {
    out << log_help;
    return exit_ok;
  }
  if (command == "sql") return sql_main(a, out, err);
  if (command == "show") return show_main(a, out, err);
  if (command == "tail") return tail_main(a, out, err);
  if (command == "copy") return copy_main(a, out, err);
  return verify_main(a, out, err);
}

}  // namespace baton
