// What every store of the decision log shares: a row as named cells, the text its chain hash
// is taken over, and each record's columns. Internal to adapters/log.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "adapters/log/log_reader.hpp"
#include "adapters/log/records.hpp"

namespace baton::log {

struct column_value {
  std::string_view name;
  cell value;
};

// The cell of the column `name`; null when the row has none.
const cell* find_column(std::span<const column_value> row, std::string_view name);

// A query's column names, a repeated one (a join's two "id"s) as NAME:2, NAME:3, … so that no
// value is lost.
std::vector<std::string> unique_column_names(std::span<const std::string_view> names);

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

// Text that a row's cells borrow while it is written.
struct row_text {
  std::string created_at, deadline_at, arguments, proposal, output, candidates, media;
};

// A record's columns in table order: `seq` first (0: the store sets it), `prev_hash` and
// `row_hash` last (empty: the store sets them). The cells borrow from the record and `t`.
void fill_row(const decision_record& r, bool store_state, row_text& t, std::vector<column_value>& row);
void fill_row(const tool_run_record& r, bool store_state, row_text& t, std::vector<column_value>& row);
void fill_row(const escalation_record& r, bool store_state, row_text& t, std::vector<column_value>& row);
void fill_row(const resolution_record& r, bool store_state, row_text& t, std::vector<column_value>& row);
void fill_row(const delivery_record& r, bool store_state, row_text& t, std::vector<column_value>& row);
void fill_row(const reload_record& r, bool store_state, row_text& t, std::vector<column_value>& row);

// The table of each log_row alternative, in the variant's order (which is also an order in which
// every row's references come before it: decisions, tool runs, escalations, …).
inline constexpr const char* table_names[] = {"decisions", "tool_runs", "escalations", "resolutions", "deliveries", "reloads"};

}  // namespace baton::log
