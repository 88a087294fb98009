// The SQLite side of the decision log, shared by its store (sqlite_store.cpp) and its reader
// (log_reader.cpp): handles, the cells of a row and the text its chain hash is taken over.
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

#include "adapters/log/log_reader.hpp"

namespace baton::log {

struct sqlite_closer {
  void operator()(sqlite3* db) const noexcept { sqlite3_close_v2(db); }
};
struct statement_finalizer {
  void operator()(sqlite3_stmt* s) const noexcept { sqlite3_finalize(s); }
};
using db_handle = std::unique_ptr<sqlite3, sqlite_closer>;
using statement = std::unique_ptr<sqlite3_stmt, statement_finalizer>;

struct column_value {
  std::string_view name;
  cell value;
};

// The prev_hash of the first row of each chain.
inline constexpr std::string_view genesis_hash =
    "sha256:0000000000000000000000000000000000000000000000000000000000000000";

// The text a row's row_hash is the sha256 of (adapters/log/README.md, "Hash chain"): a JSON object of
// the row's columns except row_hash, keys sorted, NULL columns left out, written as Python's
// json.dumps(row, ensure_ascii=False, separators=(",", ":"), sort_keys=True) writes it.
// Sorted keys and skipped NULLs keep old rows valid when a migration adds a nullable column.
void render_chain_text(std::span<const column_value> row, std::string& out);
// sha256_hex of render_chain_text; `scratch` is reused between rows.
std::string chain_hash(std::span<const column_value> row, std::string& scratch);

// The columns of the row `s` stands on (after SQLITE_ROW); text stays valid until the next step.
// A BLOB is read as its bytes.
void read_row(sqlite3_stmt* s, std::vector<column_value>& out);

}  // namespace baton::log
