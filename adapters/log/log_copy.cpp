// `baton log copy`: a SQLite log into an empty PostgreSQL one, rows as they are, then verified.
#include <string>
#include <vector>

#include "adapters/log/decision_log.hpp"
#include "adapters/log/log_reader.hpp"
#include "adapters/log/pg_log.hpp"
#include "core/error_codes.hpp"

namespace baton::log {

namespace {

error write_failed(const std::string& what) { return make_error(500, codes::log_write_failed, "cannot copy the log: " + what); }

// Inserts the rows gathered so far into `table` (one statement), then forgets them.
result<void> flush(PGconn* c, const std::string& table, const std::vector<std::string>& names,
                   std::vector<std::optional<std::string>>& values) {
  if (values.empty()) return {};
  std::string sql = "INSERT INTO " + table + " (";
  for (std::size_t i = 0; i < names.size(); ++i) sql += (i ? ", \"" : "\"") + names[i] + "\"";
  sql += ") VALUES ";
  for (std::size_t v = 0; v < values.size(); ++v) {
    sql += v % names.size() == 0 ? (v ? "), ($" : "($") : ", $";
    sql += std::to_string(v + 1);
  }
  sql += ")";
  std::vector<const char*> params;
  params.reserve(values.size());
  for (const auto& v : values) params.push_back(v ? v->c_str() : nullptr);
  const pg_reply r = pg_exec(c, sql, params);
  values.clear();
  if (!r) return write_failed(table + ": " + r.message);
  return {};
}

}  // namespace

result<copy_report> copy_log(const std::filesystem::path& from, const log_options& to) {
  auto source = log_reader::open(from);
  if (!source) return source.error();
  auto before = (*source)->verify();
  if (!before) return before.error();
  if (before->broken) {
    return make_error(422, codes::chain_broken, "the log " + from.string() + " does not verify (" + *before->broken +
                                               "); nothing was copied");
  }
  auto conn = pg_connect(to.url, to.password, "baton-log-copy");
  if (!conn) return conn.error();
  PGconn* c = conn->get();
  // The schema, made the way `baton serve` makes it (the store is closed again at once), with
  // the chains a database made earlier keeps.
  log_options o = to;
  o.instance = "baton-log-copy";
  if (const pg_reply mode = pg_exec(c, "SELECT value FROM baton_meta WHERE key = 'chains'"); mode && PQntuples(mode.result.get())) {
    o.chains = std::string_view(PQgetvalue(mode.result.get(), 0, 0)) == "global" ? log_options::chain_mode::global
                                                                                   : log_options::chain_mode::instance;
  }
  try {
    open_postgres_store(o);
  } catch (const error_exception& e) {
    return e.err();
  }
  if (const pg_reply r = pg_exec_simple(c, "BEGIN"); !r) return write_failed(r.message);
  // Rows keep their seq: the database must not hold any yet.
  for (const char* table : table_names) {
    const pg_reply r = pg_exec(c, std::string("SELECT EXISTS (SELECT 1 FROM ") + table + ")");
    if (!r) return write_failed(r.message);
    if (std::string_view(PQgetvalue(r.result.get(), 0, 0)) == "t") {
      return make_error(409, codes::log_not_empty, to.url + " already holds " + table +
                                                  " rows; the copy goes into an empty log (rows keep their seq)");
    }
  }
  std::vector<std::string> present;
  auto listed = (*source)->sql("SELECT name FROM sqlite_schema WHERE type = 'table'", [](auto) {},
                               [&](std::span<const cell> row) { present.emplace_back(std::get<std::string_view>(row[0])); });
  if (!listed) return listed.error();
  constexpr std::size_t rows_per_statement = 500;
  for (const char* table : table_names) {
    if (std::find(present.begin(), present.end(), table) == present.end()) continue;
    std::vector<std::string> names;
    std::vector<std::optional<std::string>> values;
    result<void> written;
    std::size_t rows = 0;
    auto read = (*source)->sql(
        std::string("SELECT * FROM ") + table + " ORDER BY seq",
        [&](std::span<const std::string> columns) { names.assign(columns.begin(), columns.end()); },
        [&](std::span<const cell> row) {
          if (!written) return;
          for (std::size_t i = 0; i < row.size(); ++i) {
            const cell& v = row[i];
            if (const auto* t = std::get_if<std::string_view>(&v); t && t->find('\0') != std::string_view::npos) {
              // libpq would cut the text there, and the copy's hashes would not hold.
              written = make_error(422, codes::copy_refused, std::string(table) + " row " + std::to_string(rows + 1) + ": its " +
                                                            names[i] + " holds a NUL character, which PostgreSQL text "
                                                            "cannot; nothing was copied");
              return;
            }
            values.push_back(std::holds_alternative<std::nullptr_t>(v) ? std::nullopt : std::optional(pg_text(v)));
          }
          if (++rows % rows_per_statement == 0) written = flush(c, table, names, values);
        });
    if (!read) return read.error();
    if (written) written = flush(c, table, names, values);
    if (!written) return written.error();
    if (rows) {
      const pg_reply r = pg_exec(c, std::string("SELECT setval(pg_get_serial_sequence('") + table + "', 'seq'), " +
                                        "(SELECT max(seq) FROM " + table + "))");
      if (!r) return write_failed(r.message);
    }
  }
  if (const pg_reply r = pg_exec_simple(c, "COMMIT"); !r) return write_failed(r.message);

  auto copy = log_reader::open(to);
  if (!copy) return copy.error();
  auto after = (*copy)->verify();
  if (!after) return after.error();
  if (after->broken) return make_error(500, codes::copy_mismatch, "the copy in " + to.url + " does not verify: " + *after->broken);
  const auto same = [](const chain_report::chain_end& a, const chain_report::chain_end& b) {
    return a.table == b.table && a.instance == b.instance && a.rows == b.rows && a.row_hash == b.row_hash;
  };
  if (before->counts != after->counts || before->chains.size() != after->chains.size() ||
      !std::equal(before->chains.begin(), before->chains.end(), after->chains.begin(), same)) {
    return make_error(500, codes::copy_mismatch, "the copy in " + to.url + " does not end where " + from.string() + " does");
  }
  return copy_report{after->counts};
}

}  // namespace baton::log
