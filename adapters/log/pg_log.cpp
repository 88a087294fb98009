// libpq helpers and the PostgreSQL source of log_reader.
#include "adapters/log/pg_log.hpp"

#include <algorithm>
#include <cstdlib>
#include <optional>

#include "adapters/log/log_source.hpp"
#include "core/error_codes.hpp"
#include "core/json.hpp"

namespace baton::log {

namespace {

// Type OIDs (PostgreSQL's pg_type.h, stable across versions).
constexpr Oid bool_oid = 16, int8_oid = 20, int2_oid = 21, int4_oid = 23, oid_oid = 26, float4_oid = 700,
              float8_oid = 701, numeric_oid = 1700;

// libpq's message on one line: it spreads some over several, indented.
std::string trimmed(const char* message) {
  std::string s;
  for (const char* p = message ? message : ""; *p; ++p) {
    const bool space = *p == '\n' || *p == '\t' || *p == ' ';
    if (!space) {
      s.push_back(*p);
    } else if (!s.empty() && s.back() != ' ') {
      s.push_back(' ');
    }
  }
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

// Notices (a table that exists already, a cascade) are no errors: not printed.
void ignore_notice(void*, const char*) {}

// Why `raw` (null: the call itself failed) is an error.
pg_reply describe_failure(PGconn* c, const PGresult* raw) {
  pg_reply out;
  if (raw) {
    if (const char* state = PQresultErrorField(raw, PG_DIAG_SQLSTATE)) out.sqlstate = state;
    out.message = trimmed(PQresultErrorField(raw, PG_DIAG_MESSAGE_PRIMARY));
  }
  if (out.message.empty()) out.message = trimmed(PQerrorMessage(c));
  if (out.message.empty()) out.message = "the statement failed";
  // Class 08 is a connection exception; a connection in CONNECTION_BAD cannot run anything more.
  out.lost = PQstatus(c) == CONNECTION_BAD || out.sqlstate.starts_with("08") || out.sqlstate == "57P01" ||
             out.sqlstate == "57P02" || out.sqlstate == "57P03";
  return out;
}

pg_reply reply_of(PGconn* c, PGresult* raw) {
  const ExecStatusType status = raw ? PQresultStatus(raw) : PGRES_FATAL_ERROR;
  if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) {
    pg_reply out;
    out.result.reset(raw);
    return out;
  }
  if (status == PGRES_EMPTY_QUERY) {
    pg_reply out;
    out.result.reset(raw);
    out.empty = true;
    out.message = "the statement is empty";
    return out;
  }
  pg_reply out = describe_failure(c, raw);
  out.result.reset(raw);
  return out;
}

}  // namespace

std::optional<std::string> check_postgres_url(const std::string& url) {
  char* message = nullptr;
  PQconninfoOption* options = PQconninfoParse(url.c_str(), &message);
  if (!options) {
    // libpq's reason quotes the part it could not read, which may be the password: not repeated.
    PQfreemem(message);
    return std::string("not a PostgreSQL URL libpq understands (postgresql://USER@HOST:PORT/DATABASE?PARAMS)");
  }
  std::optional<std::string> problem;
  for (const PQconninfoOption* o = options; o->keyword; ++o) {
    if (std::string_view(o->keyword) == "password" && o->val && *o->val) {
      problem = "the URL holds a password; give it in `log.password` (env or file) or libpq's PGPASSWORD or "
                "~/.pgpass, never in the URL";
    }
  }
  PQconninfoFree(options);
  return problem;
}

result<pg_conn> pg_connect(const std::string& url, const std::string& password, const char* application) {
  if (auto problem = check_postgres_url(url)) return make_error(500, codes::log_open_failed, *problem);
  // dbname first: the URL expands there, and the keywords after it override what it says. TCP
  // keepalives and a user timeout: a server that vanishes without a reset (a host lost, an
  // address moved at a failover) fails the call within about 30 s instead of the OS's hours.
  const char* keywords[] = {"dbname",         "application_name",   "connect_timeout", "keepalives_idle",
                            "keepalives_interval", "keepalives_count", "tcp_user_timeout",
                            password.empty() ? nullptr : "password", nullptr};
  const char* values[] = {url.c_str(), application, "5", "10", "5", "3", "30000",
                          password.empty() ? nullptr : password.c_str(), nullptr};
  pg_conn c(PQconnectdbParams(keywords, values, 1));
  if (!c) return make_error(500, codes::log_open_failed, "cannot connect to " + url + ": out of memory");
  if (PQstatus(c.get()) != CONNECTION_OK) {
    return make_error(500, codes::log_open_failed, "cannot connect to " + url + ": " + trimmed(PQerrorMessage(c.get())));
  }
  PQsetNoticeProcessor(c.get(), ignore_notice, nullptr);
  // The log's texts are UTF-8 whatever the client's locale says; floats read back exactly (3: also
  // on servers before 12, where the default 0 rounds them).
  if (const pg_reply r = pg_exec_simple(c.get(), "SET client_encoding = 'UTF8'; SET extra_float_digits = 3"); !r) {
    return make_error(500, codes::log_open_failed, "cannot set up the connection to " + url + ": " + r.message);
  }
  return c;
}

pg_reply pg_exec(PGconn* c, const std::string& sql, std::span<const char* const> params) {
  return reply_of(c, PQexecParams(c, sql.c_str(), static_cast<int>(params.size()), nullptr, params.data(), nullptr,
                                   nullptr, 0));
}

pg_reply pg_exec_simple(PGconn* c, const std::string& sql) { return reply_of(c, PQexec(c, sql.c_str())); }

pg_reply describe_pg_failure(PGconn* c, const PGresult* raw) { return describe_failure(c, raw); }

void read_row(const PGresult* res, int r, std::vector<column_value>& out) {
  out.clear();
  const int n = PQnfields(res);
  for (int i = 0; i < n; ++i) {
    cell value = nullptr;
    if (!PQgetisnull(res, r, i)) {
      const char* text = PQgetvalue(res, r, i);
      switch (PQftype(res, i)) {
        case int2_oid:
        case int4_oid:
        case int8_oid:
        case oid_oid: value = static_cast<std::int64_t>(std::strtoll(text, nullptr, 10)); break;
        case float4_oid:
        case float8_oid:
        case numeric_oid: value = std::strtod(text, nullptr); break;
        case bool_oid: value = static_cast<std::int64_t>(text[0] == 't'); break;
        default: value = std::string_view(text, static_cast<std::size_t>(PQgetlength(res, r, i))); break;
      }
    }
    out.push_back({PQfname(res, i), value});
  }
}

std::string pg_text(const cell& v) {
  if (const auto* n = std::get_if<std::int64_t>(&v)) return std::to_string(*n);
  if (const auto* d = std::get_if<double>(&v)) {
    std::string out;
    render_double(*d, out);
    return out;
  }
  if (const auto* t = std::get_if<std::string_view>(&v)) return std::string(*t);
  return {};
}

std::string numbered_parameters(std::string_view sql) {
  std::string out;
  out.reserve(sql.size() + 8);
  int n = 0;
  char quote = 0;
  for (const char ch : sql) {
    if (quote) {
      if (ch == quote) quote = 0;
    } else if (ch == '\'' || ch == '"') {
      quote = ch;
    } else if (ch == '?') {
      out += '$' + std::to_string(++n);
      continue;
    }
    out += ch;
  }
  return out;
}

std::string text_array(std::span<const std::string> values) {
  std::string out = "{";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i) out += ',';
    out += '"';
    for (const char ch : values[i]) {
      if (ch == '"' || ch == '\\') out += '\\';
      out += ch;
    }
    out += '"';
  }
  return out + "}";
}

namespace {

class postgres_source final : public log_source {
 public:
  postgres_source(pg_conn c, std::string url, std::string password, bool instance_chains)
      : conn_(std::move(c)), url_(std::move(url)), password_(std::move(password)), instance_chains_(instance_chains) {}

  result<void> query(const std::string& sql, std::span<const parameter> params, const row_callback& each) override {
    std::vector<std::string> texts;
    texts.reserve(params.size());
    for (const parameter& p : params) {
      if (const auto* t = std::get_if<std::string>(&p)) {
        texts.push_back(*t);
      } else {
        texts.push_back(std::to_string(std::get<std::int64_t>(p)));
      }
    }
    std::vector<const char*> values;
    for (const std::string& t : texts) values.push_back(t.c_str());
    const std::string numbered = numbered_parameters(sql);
    for (int attempt = 0;; ++attempt) {
      if (auto ready = connected(); !ready) return ready.error();
      bool any = false;
      std::vector<column_value> row;
      const auto failure = stream(numbered, values, nullptr, [&](const PGresult* res) {
        any = true;
        read_row(res, 0, row);
        each(row);
      });
      if (!failure) return {};
      if (failure->lost) conn_.reset();
      // Only a query that lost its connection before any row is tried again.
      if (!failure->lost || any || attempt > 0) return read_failed(*failure);
    }
  }

  result<void> read_statement(std::string_view sql, const std::function<void(std::span<const std::string>)>& columns,
                              const std::function<void(std::span<const cell>)>& row) override {
    if (auto ready = connected(); !ready) return ready.error();
    // A read-only transaction: PostgreSQL refuses whatever writes to a table. The extended
    // protocol takes one statement only. Streamed: an auditor may read a whole table.
    if (const pg_reply begin = pg_exec_simple(conn_.get(), "BEGIN READ ONLY"); !begin) {
      if (begin.lost) conn_.reset();
      return read_failed(begin);
    }
    std::vector<column_value> values;
    std::vector<cell> cells;
    const auto failure = stream(
        std::string(sql), {},
        [&](const PGresult* res) {
          std::vector<std::string_view> names;
          for (int i = 0; i < PQnfields(res); ++i) names.emplace_back(PQfname(res, i));
          columns(unique_column_names(names));
        },
        [&](const PGresult* res) {
          read_row(res, 0, values);
          cells.clear();
          for (const column_value& v : values) cells.push_back(v.value);
          row(cells);
        });
    if (failure && failure->lost) {
      conn_.reset();
      return read_failed(*failure);
    }
    pg_exec_simple(conn_.get(), "ROLLBACK");
    if (!failure) return {};
    const pg_reply& r = *failure;
    if (r.empty) return make_error(400, codes::sql_refused, "the query is empty");
    if (r.sqlstate == "25006") {
      return make_error(400, codes::sql_refused, "only statements that read are allowed; this one would change the log");
    }
    if (r.message.find("multiple commands") != std::string::npos) {
      return make_error(400, codes::sql_refused, "one statement at a time");
    }
    return make_error(400, codes::sql_failed, r.message);
  }

  result<void> check_storage() override { return {}; }  // PostgreSQL checks its own pages

  result<bool> has_table(const std::string& table) override {
    const parameter p[] = {table};
    bool found = false;
    auto read = query("SELECT 1 FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = ?",
                      p, [&](auto) { found = true; });
    if (!read) return read.error();
    return result<bool>(boost::system::in_place_value, found);
  }

  result<bool> has_column(const std::string& table, const std::string& column) override {
    const parameter p[] = {table, column};
    bool found = false;
    auto read = query("SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() AND "
                      "table_name = ? AND column_name = ?",
                      p, [&](auto) { found = true; });
    if (!read) return read.error();
    return result<bool>(boost::system::in_place_value, found);
  }

  bool instance_chains() const override { return instance_chains_; }

 private:
  // Runs `sql` in single-row mode: `columns` (may be null) once with the first result, before any
  // row (also when there is none), then `row` with each row. Why it failed, or none.
  std::optional<pg_reply> stream(const std::string& sql, std::span<const char* const> params,
                                 const std::function<void(const PGresult*)>& columns,
                                 const std::function<void(const PGresult*)>& row) {
    PGconn* c = conn_.get();
    if (!PQsendQueryParams(c, sql.c_str(), static_cast<int>(params.size()), nullptr, params.data(), nullptr, nullptr, 0) ||
        !PQsetSingleRowMode(c)) {
      return describe_failure(c, nullptr);
    }
    std::optional<pg_reply> failure;
    bool described = false;
    while (PGresult* raw = PQgetResult(c)) {
      const pg_result res(raw);
      const ExecStatusType status = PQresultStatus(raw);
      if (failure) continue;  // the rest of a failed query's results
      if (status == PGRES_SINGLE_TUPLE || status == PGRES_TUPLES_OK) {
        if (!described && columns) columns(raw);
        described = true;
        if (status == PGRES_SINGLE_TUPLE) row(raw);
      } else if (status == PGRES_EMPTY_QUERY) {
        failure.emplace();
        failure->empty = true;
        failure->message = "the statement is empty";
      } else if (status != PGRES_COMMAND_OK) {
        failure = describe_failure(c, raw);
      }
    }
    if (!failure && PQstatus(c) != CONNECTION_OK) failure = describe_failure(c, nullptr);
    return failure;
  }

  static error read_failed(const pg_reply& r) {
    return make_error(500, codes::log_read_failed, "cannot read the decision log: " + r.message);
  }

  // A connection the database dropped (a restart) is made again before the next read.
  result<void> connected() {
    if (conn_ && PQstatus(conn_.get()) == CONNECTION_OK) return {};
    auto c = pg_connect(url_, password_, "baton-reader");
    if (!c) return make_error(500, codes::log_read_failed, "cannot read the decision log: " + c.error().message);
    conn_ = std::move(*c);
    return {};
  }

  pg_conn conn_;
  std::string url_, password_;
  bool instance_chains_;
};

}  // namespace

result<std::unique_ptr<log_source>> open_postgres_source(const std::string& url, const std::string& password) {
  auto c = pg_connect(url, password, "baton-reader");
  if (!c) return c.error();
  const pg_reply meta = pg_exec(c->get(), "SELECT value FROM baton_meta WHERE key = 'chains'");
  if (!meta) {
    if (meta.sqlstate == "42P01") return make_error(404, codes::no_log, "no decision log in " + url + " (no baton_meta table)");
    return make_error(500, codes::log_open_failed, "cannot read " + url + ": " + meta.message);
  }
  const bool per_instance = PQntuples(meta.result.get()) == 0 || std::string_view(PQgetvalue(meta.result.get(), 0, 0)) != "global";
  return std::unique_ptr<log_source>(new postgres_source(std::move(*c), url, password, per_instance));
}

}  // namespace baton::log
