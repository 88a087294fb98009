// The decision log: append-only SQLite tables for decisions, tool runs,
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

  // The PostgreSQL store (adapters/log/README.md, "PostgreSQL"): a `postgresql://` URL selects it
  // and `path` is unused. The password never goes in the URL: here, or libpq's PGPASSWORD/.pgpass.
  std::string url;
  std::string password;
  std::string instance;  // this process's name in each row it writes: its chains' (default host-pid)
  // Each instance appends to chains of its own (no lock between instances), or every instance to
  // one chain per table, serialized by an advisory lock. Fixed when the database is created.
  enum class chain_mode { instance, global } chains = chain_mode::instance;
  int retry_ms = 10000;  // how long a batch is retried while the database is unreachable

  bool shared() const noexcept { return !url.empty(); }
  // The log as messages name it: its URL or its file.
  std::string where() const { return shared() ? url : path.string(); }
};

// Called once per row, on the writer thread, after its transaction committed (or failed: the
// error then says why, and the row is not in the log).
using durable_callback = std::function<void(result<void>)>;

// The storage behind the log: the SQLite file of one instance, or the PostgreSQL database that
// several share. Methods run on the log's writer thread only.
class decision_store {
 public:
  virtual ~decision_store() = default;
  // Writes the rows in one transaction, in order, each chained after the last committed row of
  // its table. A row refused on its own (a duplicate id: 409 DUPLICATE_ROW; a row naming an
  // unknown one: 500 LOG_WRITE_FAILED) gets its error in `refused` (one slot per row, nullopt
  // for a written row) and the others are written. An error returned means the transaction
  // failed: no row is in the log and the chains stay where they were; except 500
  // LOG_OUTCOME_UNKNOWN (PostgreSQL: the connection was lost during the commit and the database
  // did not come back within retry_ms to say whether it happened).
  virtual result<void> write(std::span<const log_row> rows, std::vector<std::optional<error>>& refused) = 0;
};

// An instance's name when `log.instance` gives none: HOSTNAME-PID.
std::string default_instance_name();

// Whether `db` (a --db argument) is a PostgreSQL URL rather than a file.
bool is_postgres_url(std::string_view db);
// The log a --db argument names: a PostgreSQL URL (its password from libpq's PGPASSWORD or
// ~/.pgpass) or a SQLite file.
log_options log_at(std::string_view db);
// Why `url` cannot name the PostgreSQL store (libpq cannot parse it, or it holds a password);
// none when it can.
std::optional<std::string> postgres_url_problem(const std::string& url);

// What `copy_log` copied: each table's rows, by its noun ("decisions", "tool runs", …).
struct copy_report {
  std::vector<std::pair<std::string, std::size_t>> counts;
};

// Copies the SQLite log `from` into the PostgreSQL log `to` (created when missing), rows as
// they are (seq, hashes; `instance` NULL, which their hashes leave out), in one transaction,
// then verifies the copy: its chains hold, with the file's row counts and last hashes.
// The database keeps the chains it was made with; a new one gets `to.chains`. Errors:
// 404 NO_LOG (no file), 422 CHAIN_BROKEN (the file's own chains do not hold: nothing is copied),
// 422 COPY_REFUSED (a text holds a NUL character, which PostgreSQL cannot store: nothing is copied),
// 409 LOG_NOT_EMPTY (the database already holds rows), 500 COPY_MISMATCH, LOG_OPEN_FAILED,
// LOG_WRITE_FAILED.
result<copy_report> copy_log(const std::filesystem::path& from, const log_options& to);

// The store `options` names: PostgreSQL for a URL, else the SQLite file. Throws as they do.
std::unique_ptr<decision_store> open_store(const log_options& options);

// The PostgreSQL store of `options.url`: applies the schema's migrations (the first instance to
// open an empty database creates it), takes its instance's lock (LOG_OPEN_FAILED when another
// process holds the same instance name). Throws error_exception (LOG_OPEN_FAILED,
// LOG_SCHEMA_TOO_NEW, or LOG_CHAINS_MISMATCH for a database created with the other chain mode).
std::unique_ptr<decision_store> open_postgres_store(const log_options& options);

// The SQLite store of `options.path`: creates the file (and its folder) when missing, applies the
// schema's migrations, sets WAL, synchronous and busy_timeout. Throws error_exception
// (LOG_OPEN_FAILED, or LOG_SCHEMA_TOO_NEW for a file written by a newer baton).
std::unique_ptr<decision_store> open_sqlite_store(const log_options& options);

class decision_log {
 public:
  // Opens (creating and migrating) the store `options` names; throws error_exception at start-up.
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
