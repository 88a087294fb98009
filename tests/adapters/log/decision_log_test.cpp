#include <gtest/gtest.h>

#include <sqlite3.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <sstream>
#include <thread>

#include "adapters/cli/cli.hpp"
#include "adapters/log/decision_log.hpp"
#include "adapters/log/log_reader.hpp"
#include "adapters/log/sqlite_log.hpp"
#include "core/sha256.hpp"
#include "support/cli_run.hpp"
#include "support/log_rows.hpp"
#include "support/files.hpp"
#include "support/scratch_dir.hpp"

namespace baton::log {
namespace {

namespace fs = std::filesystem;

using test::cli;
using test::cli_result;

class decision_log_test : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.path = dir_ / "var" / "baton.db";
    db_arg_ = options_.path.string();
  }

  // A direct connection, as someone with the file would have: the statement's status and message.
  std::pair<int, std::string> raw_exec(const std::string& sql) {
    sqlite3* db = nullptr;
    sqlite3_open(db_arg_.c_str(), &db);
    char* message = nullptr;
    const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &message);
    std::string text = message ? message : "";
    sqlite3_free(message);
    sqlite3_close(db);
    return {rc, text};
  }

  std::vector<json> sql(const std::string& query) {
    const auto r = cli({"log", "sql", "--db", db_arg_, query});
    EXPECT_EQ(r.code, exit_ok) << r.err;
    std::vector<json> rows;
    for (const auto& l : lines(r.out)) rows.push_back(test::parse(l));
    return rows;
  }

  // Writes `n` decisions (and a tool run of the first) and closes the log.
  void write_decisions(int n, int first = 1) {
    auto log = decision_log::open(options_);
    outcomes done;
    for (int i = first; i < first + n; ++i) ASSERT_TRUE(log->append(decision(i), done.callback()));
    if (first == 1) {
      ASSERT_TRUE(log->append(tool_run(1, "d-1"), done.callback()));
    }
    log->close();
    EXPECT_EQ(done.ok(), static_cast<std::size_t>(n + (first == 1)));
  }

  // Opens the log (which migrates an older one), appends `d` and closes it.
  void append_one(const decision_record& d) {
    auto log = decision_log::open(options_);
    outcomes done;
    ASSERT_TRUE(log->append(d, done.callback()));
    log->close();
    EXPECT_EQ(done.ok(), 1u);
  }

  const test::scratch_dir dir_{"baton-declog"};
  log_options options_;
  std::string db_arg_;
};

TEST_F(decision_log_test, chain_text_is_pythons_sorted_compact_json_without_nulls) {
  const std::vector<column_value> row = {
      {"zeta", std::string_view("a\"b\nü")}, {"alpha", std::int64_t{-3}}, {"gone", nullptr},
      {"mid", 1e-05},                        {"one", 1.0},               {"row_hash", std::string_view("x")}};
  std::string text;
  render_chain_text(row, text);
  EXPECT_EQ(text, R"({"alpha":-3,"mid":1e-05,"one":1.0,"zeta":"a\"b\nü"})");
  std::string scratch;
  EXPECT_EQ(chain_hash(row, scratch), sha256_hex(text));
}

TEST_F(decision_log_test, a_row_is_in_the_file_when_its_callback_runs) {
  auto log = decision_log::open(options_);
  std::atomic<int> rows_seen{-1};
  outcomes done;
  auto check = done.callback();
  ASSERT_TRUE(log->append(decision(1), [&](result<void> r) {
    // Another connection sees the row as soon as the callback runs: it is committed.
    sqlite3* db = nullptr;
    sqlite3_open_v2(db_arg_.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
    sqlite3_stmt* s = nullptr;
    sqlite3_prepare_v2(db, "SELECT count(*) FROM decisions WHERE id = 'd-1'", -1, &s, nullptr);
    if (sqlite3_step(s) == SQLITE_ROW) rows_seen = sqlite3_column_int(s, 0);
    sqlite3_finalize(s);
    sqlite3_close(db);
    check(r);
  }));
  ASSERT_TRUE(done.wait_for(1));
  EXPECT_EQ(done.ok(), 1u);
  EXPECT_EQ(rows_seen, 1);
  log->close();
}

TEST_F(decision_log_test, every_field_is_stored_in_its_column) {
  {
    options_.store_state = true;
    auto log = decision_log::open(options_);
    decision_record d = decision(7);
    d.queue_ms = -0.0;  // stored by SQLite as 0.0: hashed as such
    d.compile_ms = std::numeric_limits<double>::quiet_NaN();  // stored as NULL
    d.cached_tokens = 1792;
    d.events_dropped = 12;
    d.media = json::parse(R"([{"field":"images","number":2,"event":1,"source":"path","path":"shots/a.png"}])");
    d.media_dropped = 1;
    outcomes done;
    ASSERT_TRUE(log->append(d, done.callback()));
    ASSERT_TRUE(log->append(tool_run(3, "d-7"), done.callback()));
    log->close();
    EXPECT_EQ(done.ok(), 2u);
  }
  const auto r = cli({"log", "show", "--db", db_arg_, "d-7"});
  ASSERT_EQ(r.code, exit_ok) << r.err;
  EXPECT_NE(r.out.find("\n  \"id\": \"d-7\",\n"), std::string::npos) << r.out;  // pretty
  const json row = test::parse(r.out);
  const decision_record want = decision(7);
  EXPECT_EQ(row["seq"], 1);
  EXPECT_EQ(row["request_id"], want.request_id);
  EXPECT_EQ(row["session"], want.session);
  EXPECT_EQ(row["turn"], 7);
  EXPECT_EQ(row["created_ms"], want.created_ms);
  EXPECT_EQ(row["created_at"], "2023-11-14T22:13:20.130Z");
  EXPECT_EQ(row["queue_ms"], 0.0);
  EXPECT_TRUE(row["compile_ms"].is_null());
  EXPECT_EQ(row["engine_ms"], 1.75);
  EXPECT_EQ(row["policy_ms"], 0.125);
  EXPECT_EQ(row["total_ms"], 2.625);
  EXPECT_EQ(row["engine"], "keyword");
  EXPECT_EQ(row["model"], "baton-keyword-1");
  EXPECT_EQ(row["fingerprint"], "sha256:fp");
  EXPECT_EQ(row["registry_hash"], "sha256:reg");
  EXPECT_EQ(row["policy_hash"], "sha256:pol");
  EXPECT_EQ(row["schema_hash"], "sha256:sch");
  EXPECT_EQ(row["state_hash"], "sha256:state-7");
  EXPECT_EQ(row["state"], *want.state);
  EXPECT_EQ(row["answers"], test::parse(want.answers));
  EXPECT_EQ(row["action"], "escalate");
  EXPECT_EQ(row["tool"], "refund");
  EXPECT_EQ(row["lane"], "rule:always_escalate");
  EXPECT_EQ(row["confidence"], 0.31);
  EXPECT_EQ(row["arguments"], want.arguments);
  EXPECT_EQ(row["proposal"], want.proposal);
  EXPECT_EQ(row["error_code"], "");
  EXPECT_EQ(row["cached_tokens"], 1792);
  EXPECT_EQ(row["events_dropped"], 12);
  EXPECT_EQ(row["media"], json::parse(R"([{"field":"images","number":2,"event":1,"source":"path","path":"shots/a.png"}])"));
  EXPECT_EQ(row["media_dropped"], 1);
  EXPECT_EQ(row["prev_hash"], std::string(genesis_hash));
  EXPECT_TRUE(row["row_hash"].get<std::string>().starts_with("sha256:"));
  ASSERT_EQ(row["tool_runs"].size(), 1u);
  const json& run = row["tool_runs"][0];
  EXPECT_EQ(run["id"], "r-3");
  EXPECT_EQ(run["decision"], "d-7");
  EXPECT_EQ(run["executor"], "http");
  EXPECT_EQ(run["created_at"], "2023-11-14T22:13:21.003Z");
  EXPECT_EQ(run["duration_ms"], 12.5);
  EXPECT_EQ(run["ok"], 1);
  EXPECT_EQ(run["output"], test::parse(R"({"refunded":true})"));
  EXPECT_EQ(run["attempts"], 1);
  EXPECT_EQ(run["prev_hash"], std::string(genesis_hash));
  EXPECT_EQ(cli({"log", "verify", "--db", db_arg_}).out, "ok: 1 decisions, 1 tool runs, 0 escalations, 0 resolutions, 0 deliveries, 0 reloads\n");
}

TEST_F(decision_log_test, state_is_kept_only_when_configured_but_its_hash_always) {
  write_decisions(1);
  const auto rows = sql("SELECT state, state_hash FROM decisions");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_TRUE(rows[0]["state"].is_null());
  EXPECT_EQ(rows[0]["state_hash"], "sha256:state-1");
}

// Holds the first write until released, so that appends pile up in the queue.
class gated_store final : public decision_store {
 public:
  explicit gated_store(std::unique_ptr<decision_store> inner) : inner_(std::move(inner)) {}
  result<void> write(std::span<const log_row> rows, std::vector<std::optional<error>>& refused) override {
    {
      std::unique_lock lock(mutex_);
      entered_ = true;
      changed_.notify_all();
      changed_.wait(lock, [&] { return open_; });
      batches_.push_back(rows.size());
    }
    return inner_ ? inner_->write(rows, refused) : result<void>();
  }
  void wait_entered() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return entered_; });
  }
  void release() {
    std::lock_guard lock(mutex_);
    open_ = true;
    changed_.notify_all();
  }
  std::vector<std::size_t> batches() {
    std::lock_guard lock(mutex_);
    return batches_;
  }

 private:
  std::unique_ptr<decision_store> inner_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool entered_ = false, open_ = false;
  std::vector<std::size_t> batches_;
};

TEST_F(decision_log_test, rows_from_many_threads_are_group_committed) {
  options_.max_batch = 64;
  auto store = std::make_unique<gated_store>(open_sqlite_store(options_));
  gated_store& gate = *store;
  auto log = decision_log::open(std::move(store), options_);
  outcomes done;
  constexpr int threads = 4, per_thread = 250;
  std::vector<std::thread> appenders;
  for (int t = 0; t < threads; ++t) {
    appenders.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        const int n = t * per_thread + i + 1;
        EXPECT_TRUE(log->append(decision(n), done.callback()));
        EXPECT_TRUE(log->append(tool_run(n, "d-" + std::to_string(n)), done.callback()));
      }
    });
  }
  for (auto& a : appenders) a.join();
  gate.wait_entered();
  gate.release();
  ASSERT_TRUE(done.wait_for(2 * threads * per_thread));
  const auto batches = gate.batches();  // before close() destroys the store
  log->close();
  EXPECT_EQ(done.ok(), 2u * threads * per_thread);
  EXPECT_TRUE(done.errors().empty());
  // Everything queued behind the held write went in full batches.
  ASSERT_GE(batches.size(), 2u);
  for (std::size_t b = 1; b + 1 < batches.size(); ++b) EXPECT_EQ(batches[b], 64u) << b;
  EXPECT_LE(batches.size(), 2 + 2 * threads * per_thread / 64);
  const auto seqs = sql("SELECT min(seq) AS lo, max(seq) AS hi, count(*) AS n FROM decisions");
  EXPECT_EQ(seqs[0], test::parse(R"({"lo":1,"hi":1000,"n":1000})"));
  EXPECT_EQ(cli({"log", "verify", "--db", db_arg_}).out, "ok: 1000 decisions, 1000 tool runs, 0 escalations, 0 resolutions, 0 deliveries, 0 reloads\n");
}

TEST_F(decision_log_test, the_chain_continues_across_a_reopen) {
  write_decisions(3);
  write_decisions(2, 4);
  const auto rows = sql("SELECT seq, prev_hash, row_hash FROM decisions ORDER BY seq");
  ASSERT_EQ(rows.size(), 5u);
  for (std::size_t i = 1; i < rows.size(); ++i) EXPECT_EQ(rows[i]["prev_hash"], rows[i - 1]["row_hash"]) << i;
  EXPECT_EQ(rows[3]["seq"], 4);
  const auto r = cli({"log", "verify", "--db", db_arg_});
  EXPECT_EQ(r.code, exit_ok) << r.out << r.err;
  EXPECT_EQ(r.out, "ok: 5 decisions, 1 tool runs, 0 escalations, 0 resolutions, 0 deliveries, 0 reloads\n");
}

TEST_F(decision_log_test, rows_cannot_be_updated_or_deleted) {
  write_decisions(2);
  for (const char* statement : {"UPDATE decisions SET lane = 'x' WHERE seq = 1", "DELETE FROM decisions WHERE seq = 2",
                                "UPDATE tool_runs SET ok = 0", "DELETE FROM tool_runs"}) {
    const auto [rc, message] = raw_exec(statement);
    EXPECT_NE(rc, SQLITE_OK) << statement;
    EXPECT_NE(message.find("append-only"), std::string::npos) << message;
  }
  EXPECT_EQ(sql("SELECT lane FROM decisions WHERE seq = 1")[0]["lane"], "rule:always_escalate");
  EXPECT_EQ(sql("SELECT count(*) AS n FROM decisions")[0]["n"], 2);
  EXPECT_EQ(sql("SELECT count(*) AS n FROM tool_runs")[0]["n"], 1);
}

TEST_F(decision_log_test, verify_names_a_changed_middle_row) {
  write_decisions(5);
  EXPECT_EQ(raw_exec("DROP TRIGGER decisions_no_update; UPDATE decisions SET confidence = 0.99 WHERE seq = 3").first,
            SQLITE_OK);
  const auto r = cli({"log", "verify", "--db", db_arg_});
  EXPECT_EQ(r.code, 3);
  EXPECT_NE(r.out.find("bad: decisions seq 3 (id \"d-3\"): row_hash does not match"), std::string::npos) << r.out;
}

// A database that is not a decision log is not "ok", nor is one whose pages are damaged: an
// index page overwritten reads as rows missing, which the chains alone might not see.
TEST_F(decision_log_test, verify_refuses_what_is_not_a_sound_decision_log) {
  std::filesystem::create_directories(options_.path.parent_path());
  { std::ofstream empty(options_.path); }
  auto r = cli({"log", "verify", "--db", db_arg_});
  EXPECT_NE(r.code, exit_ok) << r.out;
  EXPECT_NE(r.err.find("not a decision log"), std::string::npos) << r.err;
  EXPECT_EQ(raw_exec("CREATE TABLE unrelated (x INTEGER)").first, SQLITE_OK);
  r = cli({"log", "verify", "--db", db_arg_});
  EXPECT_NE(r.code, exit_ok) << r.out;
  EXPECT_NE(r.err.find("not a decision log"), std::string::npos) << r.err;

  std::filesystem::remove(options_.path);
  write_decisions(300);
  ASSERT_EQ(cli({"log", "verify", "--db", db_arg_}).code, exit_ok);
  // Overwrite the middle of the file's last page but one (a b-tree page of a table or an index).
  const auto size = std::filesystem::file_size(options_.path);
  ASSERT_GT(size, 8u * 4096u);
  {
    std::fstream f(options_.path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(static_cast<std::streamoff>(size - 4096 - 2048));
    const std::string garbage(512, '\xA5');
    f.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
  }
  r = cli({"log", "verify", "--db", db_arg_});
  EXPECT_NE(r.code, exit_ok) << r.out;
  EXPECT_EQ(r.out.find("ok:"), std::string::npos) << r.out;
}

// Closed while a reader (the inbox's, an auditor's) still has the file open, the log leaves its
// rows in the file itself: a copy of baton.db alone holds them (it held none, all in -wal).
TEST_F(decision_log_test, a_closed_log_leaves_its_rows_in_the_file_itself) {
  write_decisions(1);
  auto reader = log::log_reader::open(options_.path);
  ASSERT_TRUE(reader) << reader.error().message;
  ASSERT_TRUE((*reader)->verify());  // SQLite opens the file at a connection's first read
  write_decisions(3, 2);
  std::error_code ec;
  const auto wal = std::filesystem::path(options_.path.string() + "-wal");
  EXPECT_TRUE(!std::filesystem::exists(wal) || std::filesystem::file_size(wal, ec) == 0);
  const auto copy = dir_ / "copy.db";
  std::filesystem::copy_file(options_.path, copy);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(copy.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* count = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT count(*) FROM decisions", -1, &count, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(count), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(count, 0), 4);
  sqlite3_finalize(count);
  sqlite3_close(db);
}

TEST_F(decision_log_test, verify_names_a_changed_tool_run) {
  write_decisions(2);
  EXPECT_EQ(raw_exec("DROP TRIGGER tool_runs_no_update; UPDATE tool_runs SET output = '{\"refunded\":false}'").first,
            SQLITE_OK);
  const auto r = cli({"log", "verify", "--db", db_arg_});
  EXPECT_EQ(r.code, 3);
  EXPECT_NE(r.out.find("bad: tool_runs seq 1 (id \"r-1\"): row_hash"), std::string::npos) << r.out;
}

TEST_F(decision_log_test, verify_finds_a_deleted_row) {
  write_decisions(5);
  EXPECT_EQ(raw_exec("DROP TRIGGER decisions_no_delete; PRAGMA foreign_keys = OFF; DELETE FROM decisions WHERE seq = 3")
                .first,
            SQLITE_OK);
  const auto r = cli({"log", "verify", "--db", db_arg_});
  EXPECT_EQ(r.code, 3);
  EXPECT_NE(r.out.find("bad: decisions seq 4 (id \"d-4\"): prev_hash does not match the row_hash of the row before it "
                       "(seq 2); rows between them are missing"),
            std::string::npos)
      << r.out;

  // The first row gone: the new first row does not start the chain.
  EXPECT_EQ(raw_exec("PRAGMA foreign_keys = OFF; DELETE FROM decisions WHERE seq = 1").first, SQLITE_OK);
  const auto first = cli({"log", "verify", "--db", db_arg_});
  EXPECT_EQ(first.code, 3);
  EXPECT_NE(first.out.find("decisions seq 2 (id \"d-2\"): prev_hash is not the start of the chain"), std::string::npos)
      << first.out;
}

TEST_F(decision_log_test, a_full_queue_answers_log_backlog) {
  options_.queue_capacity = 2;
  auto store = std::make_unique<gated_store>(nullptr);
  gated_store& gate = *store;
  auto log = decision_log::open(std::move(store), options_);
  outcomes done;
  ASSERT_TRUE(log->append(decision(1), done.callback()));
  gate.wait_entered();  // the writer holds row 1: the queue is empty again
  ASSERT_TRUE(log->append(decision(2), done.callback()));
  ASSERT_TRUE(log->append(tool_run(3, "d-2"), done.callback()));
  bool called = false;
  const auto refused = log->append(decision(4), [&](result<void>) { called = true; });
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().status, 503);
  EXPECT_EQ(refused.error().code, "LOG_BACKLOG");
  gate.release();
  log->close();
  EXPECT_EQ(done.ok(), 3u);
  EXPECT_FALSE(called);
}

TEST_F(decision_log_test, close_writes_what_is_queued_then_refuses_appends) {
  auto log = decision_log::open(options_);
  outcomes done;
  for (int i = 1; i <= 50; ++i) ASSERT_TRUE(log->append(decision(i), done.callback()));
  log->close();
  EXPECT_EQ(done.ok(), 50u);  // close() returned after every callback
  log->close();
  bool called = false;
  const auto refused = log->append(decision(51), [&](result<void>) { called = true; });
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().status, 503);
  EXPECT_EQ(refused.error().code, "SHUTTING_DOWN");
  EXPECT_FALSE(called);
  EXPECT_EQ(sql("SELECT count(*) AS n FROM decisions")[0]["n"], 50);
}

TEST_F(decision_log_test, a_failed_transaction_writes_nothing_and_the_chain_stays) {
  write_decisions(1);
  // A trigger that rolls back the whole transaction when it sees one tool run.
  ASSERT_EQ(raw_exec("CREATE TRIGGER explode BEFORE INSERT ON tool_runs WHEN NEW.tool = 'explode' "
                     "BEGIN SELECT RAISE(ROLLBACK, 'boom'); END")
                .first,
            SQLITE_OK);
  auto store = open_sqlite_store(options_);
  tool_run_record bad = tool_run(9, "d-2");
  bad.tool = "explode";
  const std::vector<log_row> batch = {decision(2), decision(3), bad};
  std::vector<std::optional<error>> refused;
  const auto failed = store->write(batch, refused);
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().status, 500);
  EXPECT_EQ(failed.error().code, "LOG_WRITE_FAILED");
  EXPECT_NE(failed.error().message.find("boom"), std::string::npos) << failed.error().message;

  ASSERT_TRUE(store->write(std::vector<log_row>{decision(4)}, refused));
  store.reset();
  const auto rows = sql("SELECT seq, id FROM decisions ORDER BY seq");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1], test::parse(R"({"seq":2,"id":"d-4"})"));
  EXPECT_EQ(cli({"log", "verify", "--db", db_arg_}).out, "ok: 2 decisions, 1 tool runs, 0 escalations, 0 resolutions, 0 deliveries, 0 reloads\n");

  // Through the log: the row's callback gets the error.
  auto log = decision_log::open(options_);
  outcomes done;
  bad.decision = "d-4";
  ASSERT_TRUE(log->append(bad, done.callback()));
  log->close();
  ASSERT_EQ(done.errors().size(), 1u);
  EXPECT_EQ(done.errors()[0].code, "LOG_WRITE_FAILED");
}

TEST_F(decision_log_test, a_row_refused_on_its_own_leaves_the_rest_of_its_batch) {
  write_decisions(1);
  auto store = open_sqlite_store(options_);
  // d-1 exists; there is no d-404.
  const std::vector<log_row> rows = {decision(2), decision(1), decision(3), tool_run(2, "d-2"), tool_run(3, "d-404")};
  std::vector<std::optional<error>> refused;
  ASSERT_TRUE(store->write(rows, refused));
  ASSERT_EQ(refused.size(), 5u);
  EXPECT_FALSE(refused[0]);
  ASSERT_TRUE(refused[1]);
  EXPECT_EQ(refused[1]->status, 409);
  EXPECT_EQ(refused[1]->code, "DUPLICATE_ROW");
  EXPECT_NE(refused[1]->message.find("UNIQUE"), std::string::npos) << refused[1]->message;
  EXPECT_FALSE(refused[2]);
  EXPECT_FALSE(refused[3]);
  ASSERT_TRUE(refused[4]);
  EXPECT_EQ(refused[4]->code, "LOG_WRITE_FAILED");
  EXPECT_NE(refused[4]->message.find("FOREIGN KEY"), std::string::npos) << refused[4]->message;
  store.reset();
  EXPECT_EQ(sql("SELECT group_concat(id) AS ids FROM decisions")[0]["ids"], "d-1,d-2,d-3");
  EXPECT_EQ(cli({"log", "verify", "--db", db_arg_}).out, "ok: 3 decisions, 2 tool runs, 0 escalations, 0 resolutions, 0 deliveries, 0 reloads\n");
}

TEST_F(decision_log_test, migrations_run_once_and_a_newer_schema_is_refused) {
  write_decisions(1);
  const auto schema = sql("SELECT type, name, sql FROM sqlite_schema ORDER BY name");
  write_decisions(1, 2);
  EXPECT_EQ(sql("SELECT type, name, sql FROM sqlite_schema ORDER BY name"), schema);
  EXPECT_EQ(sql("PRAGMA user_version")[0]["user_version"], 6);
  EXPECT_EQ(sql("SELECT count(*) AS n FROM decisions")[0]["n"], 2);

  ASSERT_EQ(raw_exec("PRAGMA user_version = 99").first, SQLITE_OK);
  try {
    decision_log::open(options_);
    FAIL() << "a schema from a newer baton was opened";
  } catch (const error_exception& e) {
    EXPECT_EQ(e.err().code, "LOG_SCHEMA_TOO_NEW");
    EXPECT_NE(e.err().message.find("schema version 99"), std::string::npos) << e.err().message;
  }
}

TEST_F(decision_log_test, a_log_of_the_previous_schema_keeps_its_rows_and_gains_the_prefix_reuse_columns) {
  write_decisions(3);
  const auto columns = sql("SELECT name, type FROM pragma_table_info('decisions') ORDER BY cid");
  // The log as baton wrote it before prefix reuse (schema version 3): the decisions without the
  // two columns step 4 adds (nor step 6's), their rows chained without them (they were NULL: no
  // hash has them), and no reloads table (step 5).
  ASSERT_EQ(raw_exec("ALTER TABLE decisions DROP COLUMN cached_tokens; ALTER TABLE decisions DROP COLUMN events_dropped; "
                     "ALTER TABLE decisions DROP COLUMN media; ALTER TABLE decisions DROP COLUMN media_dropped; "
                     "DROP TABLE reloads; PRAGMA user_version = 3")
                .first,
            SQLITE_OK);
  ASSERT_EQ(sql("SELECT count(*) AS n FROM pragma_table_info('decisions') WHERE name IN ('cached_tokens', 'events_dropped')")[0]["n"], 0);
  EXPECT_EQ(cli({"log", "verify", "--db", db_arg_}).out, "ok: 3 decisions, 1 tool runs, 0 escalations, 0 resolutions, 0 deliveries\n");

  decision_record d = decision(4);
  d.cached_tokens = 64;
  d.events_dropped = 0;
  ASSERT_NO_FATAL_FAILURE(append_one(d));
  EXPECT_EQ(sql("PRAGMA user_version")[0]["user_version"], 6);
  EXPECT_EQ(sql("SELECT name, type FROM pragma_table_info('decisions') ORDER BY cid"), columns);
  const auto rows = sql("SELECT id, cached_tokens, events_dropped FROM decisions ORDER BY seq");
  ASSERT_EQ(rows.size(), 4u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(rows[i], test::parse(R"({"id":"d-)" + std::to_string(i + 1) + R"(","cached_tokens":null,"events_dropped":null})"));
  }
  EXPECT_EQ(rows[3], test::parse(R"({"id":"d-4","cached_tokens":64,"events_dropped":0})"));
  // The old rows' hashes still hold, and the new row continues their chain.
  EXPECT_EQ(cli({"log", "verify", "--db", db_arg_}).out, "ok: 4 decisions, 1 tool runs, 0 escalations, 0 resolutions, 0 deliveries, 0 reloads\n");
}

TEST_F(decision_log_test, a_log_of_schema_5_keeps_its_rows_and_gains_the_media_columns) {
  write_decisions(2);
  const auto columns = sql("SELECT name, type FROM pragma_table_info('decisions') ORDER BY cid");
  ASSERT_EQ(raw_exec("ALTER TABLE decisions DROP COLUMN media; ALTER TABLE decisions DROP COLUMN media_dropped; "
                     "PRAGMA user_version = 5")
                .first,
            SQLITE_OK);
  decision_record d = decision(3);
  d.media = json::array({json{{"field", "images"}, {"number", 1}, {"event", 0}, {"source", "inline"},
                              {"content_type", "image/png"}, {"bytes", 3}, {"sha256", "sha256:ba78"}}});
  d.media_dropped = 0;
  ASSERT_NO_FATAL_FAILURE(append_one(d));
  EXPECT_EQ(sql("PRAGMA user_version")[0]["user_version"], 6);
  EXPECT_EQ(sql("SELECT name, type FROM pragma_table_info('decisions') ORDER BY cid"), columns);
  const auto rows = sql("SELECT id, json_extract(media, '$[0].sha256') AS sha, media_dropped FROM decisions ORDER BY seq");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0], test::parse(R"({"id":"d-1","sha":null,"media_dropped":null})"));
  EXPECT_EQ(rows[2], test::parse(R"({"id":"d-3","sha":"sha256:ba78","media_dropped":0})"));
  EXPECT_EQ(cli({"log", "verify", "--db", db_arg_}).out, "ok: 3 decisions, 1 tool runs, 0 escalations, 0 resolutions, 0 deliveries, 0 reloads\n");
}

TEST_F(decision_log_test, sql_writes_json_lines_and_serves_the_views) {
  write_decisions(4);
  const auto rows = sql("SELECT id, turn, confidence, arguments, proposal IS NULL AS none FROM decisions ORDER BY seq");
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0], test::parse(R"({"id":"d-1","turn":1,"confidence":0.31,"arguments":"{\"reason\":\"duplicate\",\"notify\":true}","none":0})"));
  const auto dup = sql("SELECT d.id, r.id FROM decisions d JOIN tool_runs r ON r.decision = d.id");
  EXPECT_EQ(dup.at(0), test::parse(R"({"id":"d-1","id:2":"r-1"})"));

  const auto per_lane = sql("SELECT * FROM decisions_per_lane_per_day ORDER BY lane");
  ASSERT_EQ(per_lane.size(), 2u);
  EXPECT_EQ(per_lane[0], test::parse(R"({"day":"2023-11-14","tool":"refund","lane":"lane:default","action":"execute","count":2})"));
  EXPECT_EQ(sql("SELECT id FROM low_confidence_decisions ORDER BY seq").size(), 2u);
  const auto escalated = sql("SELECT id FROM escalated_decisions ORDER BY seq");
  ASSERT_EQ(escalated.size(), 2u);
  EXPECT_EQ(escalated[1]["id"], "d-3");
  const auto buckets = sql("SELECT bucket, count, avg_confidence FROM confidence_by_model ORDER BY bucket");
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets[0], test::parse(R"({"bucket":0.3,"count":2,"avg_confidence":0.31})"));
  EXPECT_EQ(buckets[1]["bucket"], 0.9);
  // JSON has no infinities and carries only UTF-8 (these lines were not JSON before).
  EXPECT_EQ(sql("SELECT 1e308 * 10 AS inf, x'ff00fe41' AS b, 'caf' || char(233) AS t").at(0),
            test::parse(R"({"inf":null,"b":"\ufffd\u0000\ufffdA","t":"café"})"));
}

// `baton log --help` names every view the log has, so an auditor finds the escalation views too.
TEST_F(decision_log_test, help_lists_every_view) {
  write_decisions(1);
  const auto views = sql("SELECT name FROM sqlite_schema WHERE type = 'view' ORDER BY name");
  EXPECT_GE(views.size(), 6u);
  const auto help = cli({"log", "--help"});
  EXPECT_EQ(help.code, exit_ok);
  for (const json& v : views) {
    const std::string name = v["name"].get<std::string>();
    EXPECT_NE(help.out.find(name), std::string::npos) << name << " is missing from\n" << help.out;
  }
}

TEST_F(decision_log_test, sql_refuses_statements_that_write) {
  write_decisions(2);
  const std::string copy = (dir_ / "copy.db").string(), other = (dir_ / "other.db").string();
  for (const std::string& statement :
       {std::string("DELETE FROM decisions"), std::string("INSERT INTO decisions (id) VALUES ('x')"),
        std::string("CREATE TEMP TABLE t (x)"), "VACUUM INTO '" + copy + "'", "ATTACH '" + other + "' AS other"}) {
    const auto r = cli({"log", "sql", "--db", db_arg_, statement});
    EXPECT_EQ(r.code, 2) << statement;
    EXPECT_FALSE(r.err.empty());
    EXPECT_TRUE(r.out.empty());
  }
  EXPECT_FALSE(fs::exists(copy));
  EXPECT_FALSE(fs::exists(other));
  const auto write = cli({"log", "sql", "--db", db_arg_, "DELETE FROM decisions"});
  EXPECT_NE(write.err.find("would change the log"), std::string::npos) << write.err;
  const auto two = cli({"log", "sql", "--db", db_arg_, "SELECT 1; SELECT 2"});
  EXPECT_EQ(two.code, 2);
  EXPECT_NE(two.err.find("one statement"), std::string::npos) << two.err;
  EXPECT_EQ(cli({"log", "sql", "--db", db_arg_, "SELECT 1; nonsense"}).code, 2);
  EXPECT_EQ(cli({"log", "sql", "--db", db_arg_, "SELECT 1; -- a comment"}).code, exit_ok);
  const auto bad = cli({"log", "sql", "--db", db_arg_, "SELECT nope FROM decisions"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("no such column: nope"), std::string::npos) << bad.err;
  EXPECT_EQ(sql("SELECT count(*) AS n FROM decisions")[0]["n"], 2);
}

TEST_F(decision_log_test, show_and_tail) {
  write_decisions(3);
  const auto missing = cli({"log", "show", "--db", db_arg_, "d-404"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.err.find("no decision d-404"), std::string::npos) << missing.err;
  EXPECT_EQ(test::parse(cli({"log", "show", "--db", db_arg_, "d-2"}).out)["tool_runs"], json::array());

  const auto tail = cli({"log", "tail", "--db", db_arg_, "-n", "2"});
  EXPECT_EQ(tail.code, exit_ok) << tail.err;
  const auto got = lines(tail.out);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], "2023-11-14T22:13:20.125Z  d-2  ticket-2  2  refund  execute   lane:default          0.9200");
  EXPECT_EQ(got[1], "2023-11-14T22:13:20.126Z  d-3  ticket-0  3  refund  escalate  rule:always_escalate  0.3100");
  EXPECT_EQ(lines(cli({"log", "tail", "--db", db_arg_}).out).size(), 3u);
  EXPECT_EQ(cli({"log", "tail", "--db", db_arg_, "-n", "0"}).code, exit_usage);
}

TEST_F(decision_log_test, commands_need_an_existing_log_and_never_create_one) {
  for (const auto& args : std::vector<std::vector<std::string_view>>{{"log", "sql", "--db", db_arg_, "SELECT 1"},
                                                                     {"log", "show", "--db", db_arg_, "d-1"},
                                                                     {"log", "tail", "--db", db_arg_},
                                                                     {"log", "verify", "--db", db_arg_}}) {
    const auto r = cli(args);
    EXPECT_EQ(r.code, exit_no_input) << args[1];
    EXPECT_NE(r.err.find("no decision log at"), std::string::npos) << r.err;
  }
  EXPECT_FALSE(fs::exists(options_.path));
  EXPECT_EQ(cli({"log"}).code, exit_usage);
  EXPECT_EQ(cli({"log", "grep"}).code, exit_usage);
  EXPECT_EQ(cli({"log", "sql", "--db", db_arg_}).code, exit_usage);
  EXPECT_EQ(cli({"log", "verify", "--help"}).code, exit_ok);
  EXPECT_NE(cli({"--help"}).out.find("  log "), std::string::npos);
}

}  // namespace
}  // namespace baton::log
