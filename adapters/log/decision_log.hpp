// The decision log (DESIGN §6): append-only SQLite tables for decisions, tool runs,
// escalations and reloads of the registry and policy (records.hpp), each row chained to the previous one by hash, written by one thread
// in group commits. Reading it back is log_reader.hpp's.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "adapters/log/records.hpp"
#include "core/error.hpp"

namespace baton::log {

struct log_options {
  std::filesystem::path path = "var/baton.db";
  enum class sync_mode { off, normal, full } synchronous = sync_mode::full;  // SQLite's PRAGMA synchronous
  bool store_state = false;
  std::size_t max_batch = 512;        // rows per transaction
  std::size_t queue_capacity = 65536; // rows waiting; append() refuses beyond (503 LOG_BACKLOG)
  int busy_timeout_ms = 5000;         // how long a write waits for another connection's lock
};

// Called once per row, on the writer thread, after its transaction committed (or failed: the
// error then says why, and the row is not in the log).
using durable_callback = std::function<void(result<void>)>;

// The storage behind the log: SQLite here; a PostgreSQL store for several nodes would implement
// the same. Methods run on the log's writer thread only.
class decision_store {
 public:
  virtual ~decision_store() = default;
  // Writes the rows in one transaction, in order, each chained after the last committed row of
  // its table. A row refused on its own (a duplicate id: 409 DUPLICATE_ROW; a row naming an
  // unknown one: 500 LOG_WRITE_FAILED) gets its error in `refused` (one slot per row, nullopt
  // for a written row) and the others are written. An error returned means the transaction
  // failed: no row is in the log and the chains stay where they were.
  virtual result<void> write(std::span<const log_row> rows, std::vector<std::optional<error>>& refused) = 0;
};

// The SQLite store of `options.path`: creates the file (and its folder) when missing, applies the
// schema's migrations, sets WAL, synchronous and busy_timeout. Throws error_exception
// (LOG_OPEN_FAILED, or LOG_SCHEMA_TOO_NEW for a file written by a newer baton).
std::unique_ptr<decision_store> open_sqlite_store(const log_options& options);

class decision_log {
 public:
  // Opens (creating and migrating) the SQLite database; throws error_exception at start-up.
  static std::unique_ptr<decision_log> open(const log_options& options);
  // The same over any store.
  static std::unique_ptr<decision_log> open(std::unique_ptr<decision_store> store, const log_options& options);
  ~decision_log();  // close()

  // Queue a row. `done` (may be empty) runs on the writer thread once the row is committed, or
  // with 500 LOG_WRITE_FAILED when it could not be; it must not throw nor call close(). Never
  // blocks: a full queue answers 503 LOG_BACKLOG at once, a closed log 503 SHUTTING_DOWN (and
  // `done` is not called).
  result<void> append(log_row r, durable_callback done);
  // Queues a decision nobody waits for (no durable ack): a row that cannot be queued or written
  // is an error line naming the decision.
  void append_unwaited(decision_record r);

  // Writes what is queued, then stops the writer. Idempotent.
  void close();

  const log_options& options() const noexcept;

 private:
  struct impl;
  explicit decision_log(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace baton::log
