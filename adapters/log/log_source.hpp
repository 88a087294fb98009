// The connection a log_reader reads through: the SQLite file or the PostgreSQL database. The
// reader's queries are written once, with `?` parameters, in SQL both understand. Internal to
// adapters/log.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "adapters/log/chain.hpp"
#include "core/error.hpp"

namespace baton::log {

// A query's `?` parameters, in order.
using parameter = std::variant<std::string, std::int64_t>;
using row_callback = std::function<void(std::span<const column_value>)>;

class log_source {
 public:
  virtual ~log_source() = default;
  // Calls `each` with every row of `sql`, its `?` bound to `params`. 500 LOG_READ_FAILED.
  virtual result<void> query(const std::string& sql, std::span<const parameter> params, const row_callback& each) = 0;
  // The auditors' statement (log_reader::sql): one, that only reads.
  virtual result<void> read_statement(std::string_view sql, const std::function<void(std::span<const std::string>)>& columns,
                                 const std::function<void(std::span<const cell>)>& row) = 0;
  virtual result<bool> has_table(const std::string& table) = 0;
  virtual result<bool> has_column(const std::string& table, const std::string& column) = 0;
  // Whether the store's own structures are sound: SQLite's quick_check of every page (a damaged
  // index reads as rows missing, not as an error); PostgreSQL checks its own pages.
  virtual result<void> check_storage() = 0;
  // Whether each instance has chains of its own (the `instance` column says whose a row is) or
  // a table is one chain.
  virtual bool instance_chains() const = 0;
};

// The PostgreSQL database of `url`, in read-only transactions. 500 LOG_OPEN_FAILED when it
// cannot be reached, 404 NO_LOG when it holds no log.
result<std::unique_ptr<log_source>> open_postgres_source(const std::string& url, const std::string& password);

}  // namespace baton::log
