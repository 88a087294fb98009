// The SQLite side of the decision log, shared by its store (sqlite_store.cpp) and its reader
// (log_reader.cpp): handles and reading a row.
// Internal to adapters/log.
#pragma once

#include <sqlite3.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "adapters/log/chain.hpp"

namespace baton::log {

struct sqlite_closer {
  void operator()(sqlite3* db) const noexcept { sqlite3_close_v2(db); }
};
struct statement_finalizer {
  void operator()(sqlite3_stmt* s) const noexcept { sqlite3_finalize(s); }
};
using db_handle = std::unique_ptr<sqlite3, sqlite_closer>;
using statement = std::unique_ptr<sqlite3_stmt, statement_finalizer>;

// The columns of the row `s` stands on (after SQLITE_ROW); text stays valid until the next step.
// A BLOB is read as its bytes.
void read_row(sqlite3_stmt* s, std::vector<column_value>& out);

}  // namespace baton::log
