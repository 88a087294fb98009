// libpq for the decision log's PostgreSQL store and reader: handles, one call that runs a
// statement and says how it failed, and a row read back as typed cells. Internal to adapters/log.
#pragma once

#include <libpq-fe.h>

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "adapters/log/chain.hpp"
#include "core/error.hpp"

namespace baton::log {

struct pg_finish {
  void operator()(PGconn* c) const noexcept { PQfinish(c); }
};
struct pg_clear {
  void operator()(PGresult* r) const noexcept { PQclear(r); }
};
using pg_conn = std::unique_ptr<PGconn, pg_finish>;
using pg_result = std::unique_ptr<PGresult, pg_clear>;

// A URL libpq takes, with no password in it (a config file is no place for one): the reason
// when it is not.
std::optional<std::string> check_postgres_url(const std::string& url);

// Connects to `url`; `password` (when not empty) overrides libpq's own sources (PGPASSWORD,
// ~/.pgpass). An error says why, naming the URL.
result<pg_conn> pg_connect(const std::string& url, const std::string& password, const char* application);

// What a statement gave: its result, or why it failed.
struct pg_reply {
  pg_result result;
  std::string sqlstate;  // the server's error code ("23505": unique violation); "" when none
  std::string message;   // "" when it succeeded
  bool lost = false;     // the connection is gone: nothing more can run on it
  bool empty = false;    // the statement was empty
  explicit operator bool() const noexcept { return message.empty(); }
};

// Runs `sql` (one statement with $1… parameters, or several without, in `simple` mode); a
// parameter is text, or NULL for a null pointer.
pg_reply pg_exec(PGconn* c, const std::string& sql, std::span<const char* const> params = {});
pg_reply pg_exec_simple(PGconn* c, const std::string& sql);
// Why `raw` (a failed result; null: the call itself failed) failed. Its result is not kept.
pg_reply describe_pg_failure(PGconn* c, const PGresult* raw);

// Row `r` of `res` as cells typed by the column's type (integers, floats and numerics as numbers,
// booleans as 0/1, the rest as text); text is borrowed from `res`.
void read_row(const PGresult* res, int r, std::vector<column_value>& out);

// A cell as a text parameter: integers in decimal, doubles in shortest round-trip digits (float8
// reads back the same double), text as is; "" for NULL (pass a null pointer for it instead).
std::string pg_text(const cell& v);

// `?` parameters (outside quotes) as PostgreSQL's $1, $2, …
std::string numbered_parameters(std::string_view sql);

// {"a","b"}: a text[] parameter.
std::string text_array(std::span<const std::string> values);

}  // namespace baton::log
