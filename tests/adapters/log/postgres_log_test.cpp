// The decision log on a real PostgreSQL server (tests/support/pg_cluster.py starts one for this
// binary, as an unprivileged user when the tests run as root): the same rows and reads as
// SQLite, each instance's chains, concurrent writers, the read-only auditor queries, `baton log
// copy`, and a database restart while rows wait.
#include <gtest/gtest.h>

#include <libpq-fe.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <thread>

#include "adapters/log/decision_log.hpp"
#include "adapters/log/log_reader.hpp"
#include "support/cli_run.hpp"
#include "support/log_rows.hpp"
#include "support/files.hpp"
#include "support/scratch_dir.hpp"

namespace baton::log {
namespace {

using test::cli;

// One server for the whole binary, started on first use and stopped at exit.
class pg_server {
 public:
  static pg_server& get() {
    static pg_server server;
    return server;
  }
  const std::string& url() const { return url_; }
  const std::string& password() const { return password_; }
  bool running() const { return !url_.empty(); }
  const std::string& problem() const { return problem_; }

  // A fresh, empty database on the server; its URL.
  std::string fresh_database() {
    const std::string name = "t" + std::to_string(++databases_);
    admin("CREATE DATABASE " + name);
    return url_.substr(0, url_.rfind('/') + 1) + name;
  }

  // Runs `sql` as the server's owner on `url`; its error message ("" when it succeeded).
  std::string admin(const std::string& sql, const std::string& url = {}) {
    const char* keys[] = {"dbname", "password", nullptr};
    const std::string target = url.empty() ? url_ : url;
    const char* values[] = {target.c_str(), password_.c_str(), nullptr};
    PGconn* c = PQconnectdbParams(keys, values, 1);
    PQsetNoticeProcessor(c, [](void*, const char*) {}, nullptr);  // a TRUNCATE's cascade notices
    std::string message;
    if (PQstatus(c) != CONNECTION_OK) {
      message = PQerrorMessage(c);
    } else {
      PGresult* r = PQexec(c, sql.c_str());
      if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK) message = PQresultErrorMessage(r);
      PQclear(r);
    }
    PQfinish(c);
    return message;
  }

  // Stops the server, waits `down_s`, starts it again (in the background when `wait` is false).
  void restart(double down_s) {
    const std::string command = script_ + " restart " + dir_ + " " + std::to_string(down_s) + " >/dev/null 2>&1";
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
  }

 private:
  pg_server() {
    dir_ = (std::filesystem::temp_directory_path() / ("baton-pg-" + std::to_string(::getpid()))).string();
    script_ = std::string("/usr/bin/python3 ") + BATON_SOURCE_DIR + "/tests/support/pg_cluster.py";
    const std::string command = script_ + " start " + dir_ + " 2>&1";
    FILE* p = ::popen(command.c_str(), "r");
    std::string out;
    char buffer[512];
    while (p && std::fgets(buffer, sizeof buffer, p)) out += buffer;
    const int status = p ? ::pclose(p) : -1;
    if (status != 0) {
      problem_ = "cannot start PostgreSQL (" + command + "): " + out;
      return;
    }
    url_ = out.substr(0, out.find('\n'));
    std::ifstream in(dir_ + "/password");
    std::getline(in, password_);
  }
  ~pg_server() {
    const std::string command = script_ + " stop " + dir_ + " >/dev/null 2>&1";
    [[maybe_unused]] const int ignored = std::system(command.c_str());
  }

  std::string dir_, script_, url_, password_, problem_;
  int databases_ = 0;
};

escalation_record escalation(const std::string& id, const std::string& decision_id) {
  escalation_record e;
  e.id = id;
  e.decision = decision_id;
  e.session = "ticket-1";
  e.turn = 1;
  e.created_ms = 1700000002000;
  e.deadline_ms = 1700000602000;
  e.on_deadline = "deny";
  e.reason = "rule:always_escalate";
  e.question = "Refund twice?";
  e.tool = "refund";
  e.arguments = test::parse(R"({"reason":"duplicate"})");
  e.confidence = 0.31;
  e.candidates = test::parse(R"([{"tool":"refund","description":"Refund","probability":0.31}])");
  e.state = "the customer wrote refund";
  e.registry_hash = "sha256:reg";
  e.policy_hash = "sha256:pol";
  return e;
}

resolution_record resolution(const std::string& id, const std::string& escalation_id, const std::string& reviewer) {
  resolution_record r;
  r.id = id;
  r.escalation = escalation_id;
  r.created_ms = 1700000003000;
  r.outcome = "deny";
  r.reason = "not twice";
  r.reviewer = reviewer;
  r.by = "reviewer";
  r.registry_hash = "sha256:reg";
  r.policy_hash = "sha256:pol";
  return r;
}

// Appends `rows` and waits for each one's outcome.
std::vector<result<void>> write_all(decision_log& log, std::vector<log_row> rows) {
  std::mutex mutex;
  std::condition_variable done;
  std::vector<std::optional<result<void>>> outcomes(rows.size());
  std::size_t left = rows.size();
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto queued = log.append(std::move(rows[i]), [&, i](result<void> r) {
      std::lock_guard lock(mutex);
      outcomes[i] = r;
      --left;
      done.notify_all();
    });
    if (!queued) {
      std::lock_guard lock(mutex);
      outcomes[i] = queued;
      --left;
    }
  }
  std::unique_lock lock(mutex);
  EXPECT_TRUE(done.wait_for(lock, std::chrono::seconds(60), [&] { return left == 0; }));
  std::vector<result<void>> out;
  for (auto& o : outcomes) out.push_back(o ? *o : result<void>(make_error(500, "TEST", "no outcome")));
  return out;
}

class postgres_log_test : public ::testing::Test {
 protected:
  void SetUp() override {
    pg_server& s = pg_server::get();
    ASSERT_TRUE(s.running()) << s.problem();
    options_.url = s.fresh_database();
    options_.password = s.password();
    options_.instance = "a";
    options_.store_state = true;
  }

  log_options as(const std::string& instance) const {
    log_options o = options_;
    o.instance = instance;
    return o;
  }

  std::unique_ptr<log_reader> reader() const {
    auto r = log_reader::open(options_);
    EXPECT_TRUE(r) << (r ? "" : r.error().message);
    return r ? std::move(*r) : nullptr;
  }

  // The first column of each row of `sql`, as text.
  std::vector<std::string> column(const std::string& sql) const {
    std::vector<std::string> out;
    auto r = reader()->sql(sql, [](auto) {}, [&](std::span<const cell> row) {
      if (const auto* t = std::get_if<std::string_view>(&row[0])) {
        out.emplace_back(*t);
      } else if (const auto* n = std::get_if<std::int64_t>(&row[0])) {
        out.push_back(std::to_string(*n));
      } else if (const auto* d = std::get_if<double>(&row[0])) {
        std::string text;
        render_double(*d, text);
        out.push_back(text);
      } else {
        out.emplace_back("null");
      }
    });
    EXPECT_TRUE(r) << (r ? "" : r.error().message);
    return out;
  }

  log_options options_;
};

TEST_F(postgres_log_test, rows_are_written_and_read_back_as_from_sqlite) {
  {
    auto log = decision_log::open(options_);
    const auto written = write_all(*log, {decision(1), tool_run(1, "d-1"), escalation("e-1", "d-1"),
                                          resolution("v-1", "e-1", "ops"), delivery_record{"v-1", 1700000004000}});
    for (const auto& w : written) EXPECT_TRUE(w) << w.error().message;
  }
  auto r = reader();
  auto shown = r->decision("d-1");
  ASSERT_TRUE(shown && *shown);
  const json& d = **shown;
  EXPECT_EQ(d["session"], "ticket-1");
  EXPECT_EQ(d["instance"], "a");
  EXPECT_EQ(d["confidence"], 0.31);
  EXPECT_EQ(d["total_ms"], 2.625);
  EXPECT_EQ(d["arguments"], test::parse(R"({"reason":"duplicate","notify":true})"));
  EXPECT_EQ(d["state"], "the customer wrote \"refund\" ünïcode");
  ASSERT_EQ(d["tool_runs"].size(), 1u);
  EXPECT_EQ(d["tool_runs"][0]["output"], test::parse(R"({"refunded":true})"));

  auto e = r->escalation("e-1");
  ASSERT_TRUE(e && *e);
  EXPECT_EQ((*e)->row.escalation.question, "Refund twice?");
  ASSERT_TRUE((*e)->resolution);
  EXPECT_EQ((*e)->resolution->reviewer, "ops");
  EXPECT_EQ((*e)->resolution->by, "reviewer");
  auto session = r->acknowledged_session("v-1");
  ASSERT_TRUE(session && *session);
  EXPECT_EQ(**session, "ticket-1");

  const auto report = r->verify();
  ASSERT_TRUE(report);
  EXPECT_FALSE(report->broken) << *report->broken;
  ASSERT_EQ(report->counts.size(), 6u);
  EXPECT_EQ(report->counts[0], (std::pair<std::string, std::size_t>{"decisions", 1}));
  ASSERT_EQ(report->chains.size(), 5u);  // no reloads
  EXPECT_EQ(report->chains[0].instance, "a");

  // The views are there, in PostgreSQL's SQL.
  EXPECT_EQ(column("SELECT id FROM resolved_escalations"), std::vector<std::string>{"e-1"});
  EXPECT_EQ(column("SELECT bucket FROM confidence_by_model"), std::vector<std::string>{"0.3"});
  EXPECT_EQ(column("SELECT count FROM decisions_per_lane_per_day"), std::vector<std::string>{"1"});
}

TEST_F(postgres_log_test, each_instance_appends_to_its_own_chains_concurrently) {
  constexpr int per_instance = 400;
  {
    auto a = decision_log::open(as("a"));
    auto b = decision_log::open(as("b"));
    std::atomic<int> failed = 0;
    auto writer = [&](decision_log& log, int offset) {
      std::vector<log_row> rows;
      for (int i = 0; i < per_instance; ++i) rows.push_back(decision(offset + i));
      for (const auto& w : write_all(log, std::move(rows))) failed += !w;
    };
    std::thread ta(writer, std::ref(*a), 0);
    std::thread tb(writer, std::ref(*b), 100000);
    ta.join();
    tb.join();
    EXPECT_EQ(failed.load(), 0);
  }
  const auto report = reader()->verify();
  ASSERT_TRUE(report);
  EXPECT_FALSE(report->broken) << *report->broken;
  EXPECT_EQ(report->counts[0].second, 2u * per_instance);
  ASSERT_EQ(report->chains.size(), 2u);
  EXPECT_EQ(report->chains[0].instance, "a");
  EXPECT_EQ(report->chains[0].rows, std::size_t{per_instance});
  EXPECT_EQ(report->chains[1].instance, "b");
  // A chain continues after a restart of its instance.
  {
    auto a = decision_log::open(as("a"));
    ASSERT_TRUE(write_all(*a, {decision(5000)})[0]);
  }
  const auto again = reader()->verify();
  ASSERT_TRUE(again);
  EXPECT_FALSE(again->broken);
  EXPECT_EQ(again->chains[0].rows, std::size_t{per_instance + 1});
}

TEST_F(postgres_log_test, one_process_per_instance_name) {
  auto a = decision_log::open(as("a"));
  try {
    auto twin = decision_log::open(as("a"));
    FAIL() << "a second writer of instance a was let in";
  } catch (const error_exception& e) {
    EXPECT_EQ(e.err().code, "LOG_OPEN_FAILED");
    EXPECT_NE(e.err().message.find("instance a"), std::string::npos) << e.err().message;
  }
}

TEST_F(postgres_log_test, one_resolution_per_escalation_across_instances) {
  {
    auto a = decision_log::open(as("a"));
    ASSERT_TRUE(write_all(*a, {decision(1), escalation("e-1", "d-1")})[1]);
  }
  // Both instances resolve at once, again and again: the database takes exactly one.
  auto a = decision_log::open(as("a"));
  auto b = decision_log::open(as("b"));
  std::vector<result<void>> from_a, from_b;
  std::thread ta([&] { from_a = write_all(*a, {resolution("v-a", "e-1", "alice")}); });
  std::thread tb([&] { from_b = write_all(*b, {resolution("v-b", "e-1", "bob")}); });
  ta.join();
  tb.join();
  ASSERT_EQ(from_a.size(), 1u);
  ASSERT_EQ(from_b.size(), 1u);
  EXPECT_NE(bool(from_a[0]), bool(from_b[0]));
  const auto& lost = from_a[0] ? from_b[0] : from_a[0];
  ASSERT_FALSE(lost);
  EXPECT_EQ(lost.error().code, "DUPLICATE_ROW");
  EXPECT_EQ(column("SELECT reviewer FROM resolutions").size(), 1u);
  const auto report = reader()->verify();
  ASSERT_TRUE(report);
  EXPECT_FALSE(report->broken) << *report->broken;
}

TEST_F(postgres_log_test, a_row_refused_on_its_own_leaves_the_rest_of_its_batch) {
  auto log = decision_log::open(options_);
  tool_run_record orphan = tool_run(9, "d-missing");
  const auto w = write_all(*log, {decision(1), decision(1), orphan, decision(2), tool_run(2, "d-2")});
  EXPECT_TRUE(w[0]);
  ASSERT_FALSE(w[1]);
  EXPECT_EQ(w[1].error().code, "DUPLICATE_ROW");
  ASSERT_FALSE(w[2]);
  EXPECT_EQ(w[2].error().code, "LOG_WRITE_FAILED");
  EXPECT_NE(w[2].error().message.find("d-missing"), std::string::npos);
  EXPECT_TRUE(w[3]);
  EXPECT_TRUE(w[4]);
  log->close();
  const auto report = reader()->verify();
  ASSERT_TRUE(report);
  EXPECT_FALSE(report->broken) << *report->broken;
  EXPECT_EQ(report->counts[0].second, 2u);
}

TEST_F(postgres_log_test, a_batch_that_fails_in_the_database_is_written_again_row_by_row) {
  auto log = decision_log::open(options_);
  ASSERT_TRUE(write_all(*log, {decision(1)})[0]);
  // Nothing the writer can see before the database does: a key already in the log, a reference to
  // a row that is not. The batch's one statement fails; nothing of it may stay.
  const auto w = write_all(*log, {decision(2), decision(1), tool_run(3, "d-missing"), decision(3)});
  EXPECT_TRUE(w[0]);
  ASSERT_FALSE(w[1]);
  EXPECT_EQ(w[1].error().code, "DUPLICATE_ROW");
  ASSERT_FALSE(w[2]);
  EXPECT_EQ(w[2].error().code, "LOG_WRITE_FAILED");
  EXPECT_TRUE(w[3]);
  log->close();
  EXPECT_EQ(column("SELECT id FROM decisions ORDER BY seq"), (std::vector<std::string>{"d-1", "d-2", "d-3"}));
  const auto report = reader()->verify();
  ASSERT_TRUE(report);
  EXPECT_FALSE(report->broken) << *report->broken;
}

TEST_F(postgres_log_test, rows_cannot_be_changed_and_verify_finds_what_was) {
  {
    auto log = decision_log::open(options_);
    ASSERT_TRUE(write_all(*log, {decision(1), decision(2), decision(3)})[2]);
  }
  pg_server& s = pg_server::get();
  EXPECT_NE(s.admin("UPDATE decisions SET tool = 'reset' WHERE id = 'd-2'", options_.url).find("append-only"),
            std::string::npos);
  EXPECT_NE(s.admin("DELETE FROM decisions", options_.url).find("append-only"), std::string::npos);
  EXPECT_NE(s.admin("TRUNCATE decisions CASCADE", options_.url).find("append-only"), std::string::npos);
  // Someone who drops the trigger can change a row; the chain shows it.
  EXPECT_EQ(s.admin("ALTER TABLE decisions DISABLE TRIGGER decisions_no_update; "
                    "UPDATE decisions SET tool = 'reset' WHERE id = 'd-2'",
                    options_.url),
            "");
  const auto report = reader()->verify();
  ASSERT_TRUE(report);
  ASSERT_TRUE(report->broken);
  EXPECT_NE(report->broken->find("\"d-2\""), std::string::npos) << *report->broken;
  EXPECT_NE(report->broken->find("a column was changed"), std::string::npos) << *report->broken;
}

TEST_F(postgres_log_test, the_auditors_sql_only_reads) {
  {
    auto log = decision_log::open(options_);
    ASSERT_TRUE(write_all(*log, {decision(1)})[0]);
  }
  auto r = reader();
  const auto nothing = [](auto) {};
  auto insert = r->sql("INSERT INTO reloads (id) VALUES ('x')", nothing, nothing);
  ASSERT_FALSE(insert);
  EXPECT_EQ(insert.error().code, "SQL_REFUSED");
  auto two = r->sql("SELECT 1; SELECT 2", nothing, nothing);
  ASSERT_FALSE(two);
  EXPECT_EQ(two.error().code, "SQL_REFUSED");
  auto empty = r->sql("  ", nothing, nothing);
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().code, "SQL_REFUSED");
  auto bad = r->sql("SELECT nope FROM decisions", nothing, nothing);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, "SQL_FAILED");
  EXPECT_NE(bad.error().message.find("nope"), std::string::npos);
  // The reader goes on after refusals.
  EXPECT_EQ(column("SELECT id FROM decisions"), std::vector<std::string>{"d-1"});
}

TEST_F(postgres_log_test, baton_log_reads_it_by_url) {
  {
    auto log = decision_log::open(options_);
    ASSERT_TRUE(write_all(*log, {decision(1), decision(2)})[1]);
  }
  ::setenv("PGPASSWORD", options_.password.c_str(), 1);
  const auto verify = cli({"log", "verify", "--db", options_.url});
  EXPECT_EQ(verify.code, 0) << verify.err;
  EXPECT_NE(verify.out.find("ok: 2 decisions"), std::string::npos) << verify.out;
  EXPECT_NE(verify.out.find("decisions of a: 2 rows, last sha256:"), std::string::npos) << verify.out;
  const auto tail = cli({"log", "tail", "--db", options_.url, "-n", "1"});
  EXPECT_EQ(tail.code, 0) << tail.err;
  EXPECT_NE(tail.out.find("d-2"), std::string::npos) << tail.out;
  const auto show = cli({"log", "show", "--db", options_.url, "d-1"});
  EXPECT_EQ(show.code, 0) << show.err;
  EXPECT_NE(show.out.find("\"instance\": \"a\""), std::string::npos) << show.out;
  const auto sql = cli({"log", "sql", "--db", options_.url, "SELECT id, instance FROM decisions ORDER BY seq"});
  EXPECT_EQ(sql.code, 0) << sql.err;
  EXPECT_EQ(lines(sql.out), (std::vector<std::string>{R"({"id":"d-1","instance":"a"})", R"({"id":"d-2","instance":"a"})"}));
  const auto no_log = cli({"log", "verify", "--db", pg_server::get().fresh_database()});
  EXPECT_EQ(no_log.code, 66) << no_log.err;
  EXPECT_NE(no_log.err.find("no decision log"), std::string::npos) << no_log.err;
  ::unsetenv("PGPASSWORD");
  const auto no_password = cli({"log", "verify", "--db", options_.url});
  EXPECT_NE(no_password.code, 0);
  EXPECT_NE(no_password.err.find("password"), std::string::npos) << no_password.err;
}

TEST_F(postgres_log_test, a_url_with_a_password_is_refused) {
  log_options o = options_;
  o.url = "postgresql://baton:secret@127.0.0.1:1/baton";
  try {
    decision_log::open(o);
    FAIL() << "opened";
  } catch (const error_exception& e) {
    EXPECT_NE(e.err().message.find("never in the URL"), std::string::npos) << e.err().message;
    EXPECT_EQ(e.err().message.find("secret"), std::string::npos) << e.err().message;
  }
}

TEST_F(postgres_log_test, copy_moves_a_sqlite_log_and_its_hashes_hold) {
  test::scratch_dir dir("baton-copy");
  log_options file;
  file.path = dir / "baton.db";
  {
    auto log = decision_log::open(file);
    std::vector<log_row> rows;
    for (int i = 0; i < 1200; ++i) rows.push_back(decision(i));
    rows.push_back(tool_run(1, "d-1"));
    rows.push_back(escalation("e-1", "d-1"));
    rows.push_back(resolution("v-1", "e-1", "ops"));
    for (const auto& w : write_all(*log, std::move(rows))) ASSERT_TRUE(w);
  }
  ::setenv("PGPASSWORD", options_.password.c_str(), 1);
  const auto copied = cli({"log", "copy", "--from", file.path.string(), "--to", options_.url});
  EXPECT_EQ(copied.code, 0) << copied.err;
  EXPECT_NE(copied.out.find("copied and verified: 1200 decisions, 1 tool runs, 1 escalations, 1 resolutions"),
            std::string::npos)
      << copied.out;
  // The same hashes, byte for byte, and the chain ends `baton log verify` prints for each.
  const auto sqlite_verify = cli({"log", "verify", "--db", file.path.string()});
  const auto pg_verify = cli({"log", "verify", "--db", options_.url});
  EXPECT_EQ(sqlite_verify.out, pg_verify.out);
  // Into a log that holds rows: refused, nothing added.
  const auto again = cli({"log", "copy", "--from", file.path.string(), "--to", options_.url});
  EXPECT_EQ(again.code, 1);
  EXPECT_NE(again.err.find("already holds"), std::string::npos) << again.err;
  ::unsetenv("PGPASSWORD");
  // An instance goes on from there with a chain of its own.
  {
    auto log = decision_log::open(options_);
    ASSERT_TRUE(write_all(*log, {decision(5000), tool_run(5000, "d-1")})[1]);
  }
  const auto report = reader()->verify();
  ASSERT_TRUE(report);
  EXPECT_FALSE(report->broken) << *report->broken;
  EXPECT_EQ(report->counts[0].second, 1201u);
}

TEST_F(postgres_log_test, global_chains_take_turns_and_the_mode_is_fixed) {
  options_.chains = log_options::chain_mode::global;
  {
    auto a = decision_log::open(as("a"));
    auto b = decision_log::open(as("b"));
    std::thread ta([&] {
      std::vector<log_row> rows;
      for (int i = 0; i < 200; ++i) rows.push_back(decision(i));
      for (const auto& w : write_all(*a, std::move(rows))) EXPECT_TRUE(w);
    });
    std::vector<log_row> rows;
    for (int i = 0; i < 200; ++i) rows.push_back(decision(1000 + i));
    for (const auto& w : write_all(*b, std::move(rows))) EXPECT_TRUE(w);
    ta.join();
  }
  const auto report = reader()->verify();
  ASSERT_TRUE(report);
  EXPECT_FALSE(report->broken) << *report->broken;
  ASSERT_EQ(report->chains.size(), 1u);
  EXPECT_EQ(report->chains[0].rows, 400u);
  options_.chains = log_options::chain_mode::instance;
  try {
    decision_log::open(as("c"));
    FAIL() << "opened a global-chain log with instance chains";
  } catch (const error_exception& e) {
    EXPECT_EQ(e.err().code, "LOG_CHAINS_MISMATCH");
  }
}

TEST_F(postgres_log_test, rows_wait_out_a_database_restart_and_are_written_once) {
  // The restart (pg_ctl stop, 1.5 s down, pg_ctl start) took over the default 10 s once, on a
  // machine whose two cores were also compiling: a wider window still has the rows wait it out.
  options_.retry_ms = 60'000;
  auto log = decision_log::open(options_);
  ASSERT_TRUE(write_all(*log, {decision(1)})[0]);
  // Rows appended while the server is down are written when it is back.
  std::thread restart([] { pg_server::get().restart(1.5); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::vector<log_row> rows;
  for (int i = 2; i < 50; ++i) rows.push_back(decision(i));
  const auto written = write_all(*log, std::move(rows));
  restart.join();
  for (const auto& w : written) EXPECT_TRUE(w) << w.error().message;
  log->close();
  EXPECT_EQ(column("SELECT count(*) FROM decisions"), std::vector<std::string>{"49"});
  const auto report = reader()->verify();
  ASSERT_TRUE(report);
  EXPECT_FALSE(report->broken) << *report->broken;
}

TEST_F(postgres_log_test, a_database_down_past_retry_ms_refuses_with_log_unavailable) {
  options_.retry_ms = 300;
  auto log = decision_log::open(options_);
  ASSERT_TRUE(write_all(*log, {decision(1)})[0]);
  std::thread restart([] { pg_server::get().restart(2.5); });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto refused = write_all(*log, {decision(2)});
  ASSERT_FALSE(refused[0]);
  EXPECT_EQ(refused[0].error().code, "LOG_UNAVAILABLE");
  EXPECT_EQ(refused[0].error().status, 503);
  restart.join();
  // Back: the next row is written, after the first, and nothing of the refused one is there.
  for (int attempt = 0; attempt < 50; ++attempt) {
    if (write_all(*log, {decision(3)})[0]) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  log->close();
  EXPECT_EQ(column("SELECT id FROM decisions ORDER BY seq"), (std::vector<std::string>{"d-1", "d-3"}));
}

}  // namespace
}  // namespace baton::log
