// `baton replay` and `baton calibrate` (adapters/cli/replay_cli, calibrate_cli) on logs written
// here row by row through decision_log, and on logs a real server wrote.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "adapters/cli/exit_codes.hpp"
#include "adapters/cli/replay_cli.hpp"
#include "adapters/log/decision_log.hpp"
#include "support/http_client.hpp"
#include "policies/calibration.hpp"
#include "policies/policy.hpp"
#include "support/server_fixture.hpp"
#include "support/files.hpp"
#include "support/scratch_dir.hpp"
#include "tools/registry.hpp"

namespace baton {
namespace {

using test::cli;
namespace fs = std::filesystem;

const char* registry_yaml = R"(tools:
  - {id: lookup, description: Look up an order}
  - {id: refund, description: Refund an order, risk: medium}
  - {id: wipe, description: Wipe the disk, risk: high}
finish: {description: Nothing more to do}
)";

const char* old_policy_yaml = R"(confidence: p_max
rules:
  deny: [wipe]
lanes:
  default: {execute: 0.8, fallback: 0.5}
on_engine_error: escalate
)";

// Lower thresholds, and refund's lane of its own (same numbers, another lane name).
const char* new_policy_yaml = R"(confidence: p_max
rules:
  deny: [wipe]
lanes:
  default: {execute: 0.6, fallback: 0.4}
  tools:
    refund: {execute: 0.6, fallback: 0.4}
on_engine_error: escalate
)";

// The answers object the log keeps: `tool` gets p, the three other options share the rest.
std::string answers(const std::string& tool, double p) {
  json probabilities = json::object();
  for (const char* option : {"lookup", "refund", "wipe", "finish"}) {
    probabilities[option] = option == tool ? p : (1 - p) / 3;
  }
  json a = {{"tool", {{"type", "choice"}, {"choice", tool}, {"confidence", p}, {"probabilities", probabilities}}}};
  return render_json(a, false);
}

// A log written row by row, with the registry and policies it is replayed against.
class log_test : public ::testing::Test {
 protected:
  void SetUp() override {
    write("tools.yaml", registry_yaml);
    write("old.yaml", old_policy_yaml);
    write("new.yaml", new_policy_yaml);
    auto r = tools::load_registry(dir_ / "tools.yaml", request_limits{});
    ASSERT_TRUE(r) << r.error().message;
    registry_ = std::move(*r);
    auto p = policies::load_policy(dir_ / "old.yaml", registry_);
    ASSERT_TRUE(p) << p.error().message;
    old_ = std::move(*p);
    log::log_options o;
    o.path = dir_ / "decisions.db";
    o.synchronous = log::log_options::sync_mode::off;
    log_ = log::decision_log::open(o);
  }

  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  void append(log::log_row r) { ASSERT_TRUE(log_->append(std::move(r), nullptr)); }

  // A decision under the old policy and the fixture's registry.
  log::decision_record decision(const std::string& id, const std::string& tool, double p, const std::string& action,
                                const std::string& lane, const std::string& fallback_of = "") {
    log::decision_record d;
    d.id = id;
    d.session = "s-" + id;
    d.turn = 1;
    d.created_ms = base_ms + (++rows_);
    d.engine = "keyword";
    d.model = "baton-keyword-1";
    d.fingerprint = "sha256:fp";
    d.registry_hash = registry_.hash;
    d.policy_hash = old_.hash;
    d.schema_hash = "sha256:schema";
    d.state_hash = "sha256:state";
    d.answers = answers(tool, p);
    d.action = action;
    d.tool = tool;
    d.lane = lane;
    d.confidence = p;
    d.fallback_of = fallback_of;
    return d;
  }

  void add(log::decision_record d) { append(std::move(d)); }

  // An escalation of `decision`, and when `outcome` is given its resolution.
  void escalate(const std::string& decision, const std::string& tool, const std::string& outcome = "",
                const std::string& resolved_tool = "", const std::string& by = "reviewer") {
    log::escalation_record e;
    e.id = "e-" + decision;
    e.decision = decision;
    e.session = "s-" + decision;
    e.turn = 1;
    e.created_ms = base_ms + (++rows_);
    e.deadline_ms = e.created_ms + 900000;
    e.on_deadline = "deny";
    e.reason = "lane:default";
    e.question = "?";
    e.tool = tool;
    e.state = "[]";
    e.registry_hash = registry_.hash;
    e.policy_hash = old_.hash;
    append(e);
    if (outcome.empty()) return;
    log::resolution_record r;
    r.id = "r-" + decision;
    r.escalation = e.id;
    r.created_ms = base_ms + (++rows_);
    r.outcome = outcome;
    r.tool = resolved_tool;
    r.reviewer = by == "deadline" ? "baton" : "alice";
    r.by = by;
    r.registry_hash = registry_.hash;
    r.policy_hash = old_.hash;
    append(r);
  }

  void close() { log_->close(); }

  static constexpr std::int64_t base_ms = 1714521600000;  // 2024-05-01T00:00:00Z
  const test::scratch_dir dir_{"baton-replay-test"};
  tools::registry registry_;
  policies::policy old_;
  std::unique_ptr<log::decision_log> log_;
  std::int64_t rows_ = 0;
};

// The log of the replay tests (see each row's comment): old policy execute 0.8 / fallback 0.5,
// replayed under 0.6 / 0.4.
class replay_test : public log_test {
 protected:
  void SetUp() override {
    log_test::SetUp();
    add(decision("d1", "lookup", 0.9, "execute", "lane:default"));  // execute → execute
    // Fell back; the second pass escalated and a reviewer denied: now executed at once.
    add(decision("d2", "lookup", 0.7, "fallback", "lane:default"));
    add(decision("d2b", "lookup", 0.62, "escalate", "fallback:lane:default", "d2"));
    escalate("d2b", "lookup", "deny");
    add(decision("d3", "lookup", 0.45, "escalate", "lane:default"));  // approved; now falls back
    escalate("d3", "lookup", "execute", "lookup");
    add(decision("d4", "refund", 0.65, "fallback", "lane:default"));  // no fallback engine: now executed
    add(decision("d5", "refund", 0.3, "escalate", "lane:default"));  // the reviewer ran lookup instead
    escalate("d5", "refund", "execute", "lookup");
    add(decision("d6", "lookup", 0.35, "escalate", "lane:default"));  // approved; still escalated
    escalate("d6", "lookup", "execute", "lookup");
    // Fell back, the second pass escalated and its deadline denied: no judgement.
    add(decision("d7", "lookup", 0.61, "fallback", "lane:default"));
    add(decision("d7b", "lookup", 0.3, "escalate", "fallback:lane:default", "d7"));
    escalate("d7b", "lookup", "deny", "", "deadline");
    // Still falls back: its second pass is replayed, and escalates what the reviewer approved.
    add(decision("d8", "refund", 0.55, "fallback", "lane:default"));
    add(decision("d8b", "refund", 0.58, "escalate", "fallback:lane:default", "d8"));
    escalate("d8b", "refund", "execute", "refund");
    add(decision("d9", "wipe", 0.95, "deny", "rule:deny"));
    add(decision("d10", "lookup", 0.3, "escalate", "lane:default"));  // pending
    escalate("d10", "lookup");
    auto other = decision("d11", "lookup", 0.9, "execute", "lane:default");
    other.registry_hash = "sha256:another-registry";
    add(other);
    auto failed = decision("d12", "", 0, "escalate", "on_engine_error");
    failed.answers.clear();
    failed.error_code = "ENGINE_TIMEOUT";
    add(failed);
    auto systemone = decision("d13", "", 0.9, "answer", "systemone");
    systemone.registry_hash.clear();
    add(systemone);
    auto unreadable = decision("d14", "lookup", 0.9, "execute", "lane:default");
    unreadable.answers = "{\"tool\": 3}";
    add(unreadable);
    auto early = decision("d15", "lookup", 0.9, "execute", "lane:default");
    early.created_ms = 1000;
    add(early);
    close();
  }

  test::cli_result replay(std::vector<std::string_view> extra = {}) {
    std::vector<std::string_view> args = {"replay", "--db", db_, "--registry", registry_file_, "--policy", policy_file_};
    args.insert(args.end(), extra.begin(), extra.end());
    return cli(args);
  }

  json replay_json(std::vector<std::string_view> extra = {}) {
    extra.push_back("--json");
    const auto r = replay(extra);
    EXPECT_EQ(r.code, exit_ok) << r.err;
    return test::parse(r.out);
  }

  const std::string db_ = path("decisions.db");
  const std::string registry_file_ = path("tools.yaml");
  const std::string policy_file_ = path("new.yaml");
};

const json* table_row(const json& report, const std::string& tool, const std::string& old_action,
                      const std::string& new_action, const std::string& new_lane) {
  for (const json& row : report["table"]) {
    if (row["tool"] == tool && row["old"]["action"] == old_action && row["new"]["action"] == new_action &&
        row["new"]["lane"] == new_lane) {
      return &row;
    }
  }
  return nullptr;
}

TEST(replay_since, unix_ms_and_iso_dates_and_times) {
  EXPECT_EQ(parse_since("1714521600000"), 1714521600000);
  EXPECT_EQ(parse_since("2024-05-01"), 1714521600000);
  EXPECT_EQ(parse_since("2024-05-01T12:30:00Z"), 1714521600000 + 45000000);
  EXPECT_EQ(parse_since("2024-05-01T12:30"), 1714521600000 + 45000000);
  EXPECT_EQ(parse_since("2024-05-01 12:30+02:00"), 1714521600000 + 45000000 - 7200000);
  EXPECT_EQ(parse_since("2024-05-01T12:30:05.25-01:30"), 1714521600000 + 45005250 + 5400000);
  for (const char* bad : {"", "yesterday", "2024-02-30", "2024-05-01T25:00", "2024-5-1", "2024-05-01T12:30+2",
                          "-5", "2024-05-01T12:30:00ZZ"}) {
    EXPECT_FALSE(parse_since(bad)) << bad;
  }
}

TEST_F(replay_test, counts_each_old_to_new_transition_and_joins_the_reviewers) {
  const json r = replay_json();
  EXPECT_EQ(r["decisions"], 18);
  EXPECT_EQ(r["replayed"], 12);
  EXPECT_EQ(r["unreached"], 2);  // d2b, d7b: their first passes no longer fall back
  EXPECT_EQ(r["changed"], 4);    // d2, d3, d4, d7
  EXPECT_EQ(r["lane_changed"], 3);  // d5, d8, d8b: refund's own lane
  // Each of the 5 reviewer resolutions once: d8 still falls back and shares d8b's review, which
  // counts on d8b, the second pass whose escalation it was (d2's, whose second pass is not
  // reached, counts on d2). Counting it on both first and second pass made 6 and 4.
  EXPECT_EQ(r["reviewed"], 5);
  EXPECT_EQ(r["approved"], 3);
  EXPECT_EQ(r["changed_by_reviewer"], 1);
  EXPECT_EQ(r["denied"], 1);
  EXPECT_EQ(r["deadline"], 1);
  EXPECT_EQ(r["pending"], 1);
  EXPECT_EQ(r["executes_denied"], 1);  // d2
  EXPECT_EQ(r["executes_changed"], 0);
  EXPECT_EQ(r["executes_approved"], 0);
  EXPECT_EQ(r["escalates_approved"], 2);  // d6, d8b
  EXPECT_EQ(r["escalates_changed"], 1);   // d5
  EXPECT_EQ(r["escalates_denied"], 0);
  EXPECT_EQ(r["skipped_registry"], 1);
  EXPECT_EQ(r["systemone"], 1);
  EXPECT_EQ(r["engine_failures"], 1);
  EXPECT_EQ(r["unreadable"], 1);
  EXPECT_EQ(r["failed"], json::array());
  EXPECT_EQ(r["actions"]["execute"]["old"], 2);
  EXPECT_EQ(r["actions"]["execute"]["new"], 5);  // d1, d2, d4, d7, d15
  EXPECT_EQ(r["actions"]["fallback"]["old"], 4);
  EXPECT_EQ(r["actions"]["fallback"]["new"], 2);  // d3, d8

  const json* fallback_to_execute = table_row(r, "lookup", "fallback", "execute", "lane:default");
  ASSERT_TRUE(fallback_to_execute) << r["table"];
  EXPECT_EQ((*fallback_to_execute)["decisions"], 2);  // d2, d7
  EXPECT_EQ((*fallback_to_execute)["denied"], 1);
  EXPECT_EQ((*fallback_to_execute)["deadline"], 1);
  const json* second_pass = table_row(r, "refund", "escalate", "escalate", "fallback:lane:refund");
  ASSERT_TRUE(second_pass) << r["table"];
  EXPECT_EQ((*second_pass)["old"]["lane"], "fallback:lane:default");
  EXPECT_EQ((*second_pass)["approved"], 1);
  const json* first_pass = table_row(r, "refund", "fallback", "fallback", "lane:refund");
  ASSERT_TRUE(first_pass) << r["table"];
  EXPECT_EQ((*first_pass)["decisions"], 1);  // d8
  EXPECT_EQ((*first_pass)["approved"], 0);   // its review is d8b's
  const json* changed = table_row(r, "refund", "escalate", "escalate", "lane:refund");
  ASSERT_TRUE(changed);
  EXPECT_EQ((*changed)["changed"], 1);
  EXPECT_TRUE(table_row(r, "wipe", "deny", "deny", "rule:deny"));
  EXPECT_EQ(r["policy"]["hash"].get<std::string>().substr(0, 7), "sha256:");
}

TEST_F(replay_test, the_same_policy_changes_nothing) {
  const json r = replay_json({"--policy", path("old.yaml")});
  EXPECT_EQ(r["replayed"], 14);  // every first and second pass is reached again
  EXPECT_EQ(r["unreached"], 0);
  EXPECT_EQ(r["changed"], 0);
  EXPECT_EQ(r["lane_changed"], 0);
  for (const json& row : r["table"]) EXPECT_EQ(row["old"], row["new"]) << row;
  // Every turn that fell back falls back again: each review counts once, on the second pass.
  EXPECT_EQ(r["reviewed"], 5);  // d2b, d3, d5, d6, d8b
  EXPECT_EQ(r["denied"], 1);    // d2b
  EXPECT_EQ(r["deadline"], 1);  // d7b
  EXPECT_EQ(r["pending"], 1);   // d10
  const json* d2 = table_row(r, "lookup", "fallback", "fallback", "lane:default");
  ASSERT_TRUE(d2) << r["table"];
  EXPECT_EQ((*d2)["denied"], 0);
  EXPECT_EQ((*d2)["deadline"], 0);
}

TEST_F(replay_test, the_policys_audit_draws_the_same_decisions_from_the_logged_ids) {
  // Every would-execute decision audited: none executes, and d2 (denied) is escalated instead.
  write("audit_all.yaml", std::string(new_policy_yaml) + "audit: {rate: 1}\n");
  json r = replay_json({"--policy", path("audit_all.yaml")});
  EXPECT_EQ(r["actions"]["execute"]["new"], 0);
  EXPECT_EQ(r["executes_denied"], 0);
  EXPECT_EQ(r["escalates_denied"], 1);
  const json* audited = table_row(r, "lookup", "fallback", "escalate", "audit");
  ASSERT_TRUE(audited) << r["table"];
  EXPECT_EQ((*audited)["decisions"], 2);  // d2, d7

  // Half of them: exactly those whose id the audit draws.
  write("audit_half.yaml", std::string(new_policy_yaml) + "audit: {rate: 0.5}\n");
  r = replay_json({"--policy", path("audit_half.yaml")});
  int drawn = 0;
  for (const char* id : {"d1", "d2", "d4", "d7", "d15"}) drawn += policies::audit_sampled(0.5, id) ? 1 : 0;
  int in_audit_lane = 0;
  for (const json& row : r["table"]) {
    if (row["new"]["lane"] == "audit") in_audit_lane += row["decisions"].get<int>();
  }
  EXPECT_EQ(in_audit_lane, drawn);
  EXPECT_EQ(r["actions"]["execute"]["new"], 5 - drawn);
}

TEST_F(replay_test, the_text_report_has_the_table_and_the_summary) {
  const auto r = replay();
  ASSERT_EQ(r.code, exit_ok) << r.err;
  EXPECT_NE(r.out.find("18 decisions"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("TOOL"), std::string::npos);
  EXPECT_NE(r.out.find("fallback -> execute"), std::string::npos);
  EXPECT_NE(r.out.find("lane:default -> lane:refund"), std::string::npos);
  EXPECT_NE(r.out.find("the new policy executes 1 that a reviewer denied and 0 that a reviewer changed; it "
                       "escalates 2 that a reviewer approved"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("1 under another registry, 1 SystemOne answers, 1 engine failures, 1 unreadable, 2 second "
                       "passes not reached"),
            std::string::npos)
      << r.out;
}

TEST_F(replay_test, fail_if_gates_on_the_counters) {
  auto r = replay({"--fail-if", "executes_denied>0"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("executes_denied>0 (executes_denied = 1) holds"), std::string::npos) << r.err;
  EXPECT_EQ(replay({"--fail-if", "executes_denied>1"}).code, exit_ok);
  EXPECT_EQ(replay({"--fail-if=executes_denied >= 1"}).code, 1);
  EXPECT_EQ(replay({"--fail-if", "escalates_approved==2"}).code, 1);
  EXPECT_EQ(replay({"--fail-if", "changed!=4"}).code, exit_ok);
  EXPECT_EQ(replay({"--fail-if", "replayed<12"}).code, exit_ok);
  EXPECT_EQ(replay({"--fail-if", "replayed<=12"}).code, 1);
  // Several: any that holds fails; in one flag or repeated.
  EXPECT_EQ(replay({"--fail-if", "executes_changed>0, skipped_registry>0"}).code, 1);
  EXPECT_EQ(replay({"--fail-if", "executes_changed>0", "--fail-if", "unreadable>5"}).code, exit_ok);
  EXPECT_EQ(replay({"--fail-if", "executes_changed>0", "--fail-if", "pending>0"}).code, 1);
  // The failures are in the JSON too.
  r = replay({"--json", "--fail-if", "executes_denied>0"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(test::parse(r.out)["failed"].size(), 1u);

  for (const char* bad : {"executes_denied", "executes_denied>", "nonsense>0", "executes_denied=0", "a>b",
                          "executes_denied>0,", "drift.flips>0"}) {
    const auto u = replay({"--fail-if", bad});
    EXPECT_EQ(u.code, exit_usage) << bad;
    EXPECT_NE(u.err.find("--fail-if"), std::string::npos) << bad << ": " << u.err;
  }
}

TEST_F(replay_test, since_leaves_out_earlier_decisions) {
  EXPECT_EQ(replay_json({"--since", "1001"})["decisions"], 17);
  EXPECT_EQ(replay_json({"--since", "1970-01-01T00:00:01.001Z"})["decisions"], 17);
  EXPECT_EQ(replay_json({"--since", "2024-05-01"})["decisions"], 17);
  EXPECT_EQ(replay_json({"--since", "2024-05-02"})["decisions"], 0);
  EXPECT_EQ(replay({"--since", "last tuesday"}).code, exit_usage);
}

TEST_F(replay_test, rows_of_another_registry_are_skipped_and_counted) {
  write("other.yaml", std::string(registry_yaml) + "questions:\n  urgent: {type: noul, instructions: \"Urgent?\"}\n");
  const json r = replay_json({"--registry", path("other.yaml")});
  EXPECT_EQ(r["replayed"], 0);
  EXPECT_EQ(r["skipped_registry"], 17);  // all but the SystemOne answer
  EXPECT_EQ(r["systemone"], 1);
  EXPECT_EQ(r["table"], json::array());
}

TEST_F(replay_test, usage_and_missing_files) {
  EXPECT_EQ(cli({"replay", "--db", db_, "--registry", registry_file_}).code, exit_usage);  // no --policy
  EXPECT_EQ(replay({"--bogus"}).code, exit_usage);
  EXPECT_EQ(replay({"stray"}).code, exit_usage);
  EXPECT_EQ(replay({"--device", "cuda"}).code, exit_usage);  // a clef flag without --engine clef
  EXPECT_EQ(cli({"replay", "--db", path("none.db"), "--registry", registry_file_, "--policy", policy_file_}).code,
            exit_no_input);
  EXPECT_EQ(cli({"replay", "--db", db_, "--registry", registry_file_, "--policy", path("none.yaml")}).code,
            exit_no_input);
  write("bad.yaml", "confidence: p_max\nlanes: {default: {execute: 2}}\non_engine_error: escalate\n");
  const auto bad = cli({"replay", "--db", db_, "--registry", registry_file_, "--policy", path("bad.yaml")});
  EXPECT_EQ(bad.code, exit_config);
  EXPECT_NE(bad.err.find("bad.yaml:2"), std::string::npos) << bad.err;
  // The config gives what the flags leave out.
  write("baton.yaml", "registry: tools.yaml\npolicy: new.yaml\nlog: {path: decisions.db}\n");
  const auto from_config = cli({"replay", "--config", path("baton.yaml"), "--policy", policy_file_, "--json"});
  ASSERT_EQ(from_config.code, exit_ok) << from_config.err;
  EXPECT_EQ(test::parse(from_config.out)["replayed"], 12);
  EXPECT_EQ(cli({"replay", "--config", path("none.yaml"), "--policy", policy_file_}).code, exit_no_input);
  const auto help = cli({"replay", "--help"});
  EXPECT_EQ(help.code, exit_ok);
  for (const char* word : {"--policy", "--db", "--registry", "--since", "--json", "--fail-if", "--engine",
                           "executes_denied", "escalates_approved", "Exit status"}) {
    EXPECT_NE(help.out.find(word), std::string::npos) << word;
  }
}

// ---- calibrate ----

// Labels for calibrate: lookup's reviewers were right to approve from 0.6 up (400 labels from
// 0.30 to 0.99, denied or another tool below); refund has 10; deadlines, pending escalations and
// audit samples besides. Below 0.6 the confidences come in groups (0.30, 0.31, …, 0.59), so that
// the fit half cannot take in a single wrong label just below 0.6 and still reach the target: a
// threshold chosen there sits at the edge of its bound and the held-out half would not confirm it.
class calibrate_test : public log_test {
 protected:
  void SetUp() override {
    log_test::SetUp();
    write("base.yaml", "confidence: p_max\nrules:\n  deny: [wipe]\non_engine_error: escalate\n");
    for (int i = 0; i < 400; ++i) {
      double p = 0.30 + 0.69 * i / 400;
      if (p < 0.6) p = std::floor(p * 100 + 1e-9) / 100;
      const std::string id = "dl-" + std::to_string(i);
      add(decision(id, "lookup", p, "escalate", "lane:default"));
      if (p >= 0.6) {
        escalate(id, "lookup", "execute", "lookup");
      } else {
        escalate(id, "lookup", i % 2 ? "deny" : "execute", i % 2 ? "" : "refund");
      }
    }
    for (int i = 0; i < 10; ++i) {
      const std::string id = "dr-" + std::to_string(i);
      add(decision(id, "refund", 0.5 + 0.04 * i, "escalate", "lane:default"));
      escalate(id, "refund", "execute", "refund");
    }
    // Deadlines that executed: no judgement, not labels (they would all be right ones).
    for (int i = 0; i < 5; ++i) {
      const std::string id = "dd-" + std::to_string(i);
      add(decision(id, "lookup", 0.35, "escalate", "lane:default"));
      escalate(id, "lookup", "execute", "lookup", "deadline");
    }
    for (int i = 0; i < 3; ++i) {
      const std::string id = "dp-" + std::to_string(i);
      add(decision(id, "lookup", 0.4, "escalate", "lane:default"));
      escalate(id, "lookup");
    }
    // Under an auditing policy: 8 executed, 2 audited (right): a rate of 0.2, so each stands for 5.
    for (int i = 0; i < 10; ++i) {
      const std::string id = "da-" + std::to_string(i);
      auto d = decision(id, "lookup", 0.95, i < 2 ? "escalate" : "execute", i < 2 ? "audit" : "lane:default");
      d.policy_hash = "sha256:auditing";
      add(d);
      if (i < 2) escalate(id, "lookup", "execute", "lookup");
    }
    close();
  }

  test::cli_result calibrate(std::vector<std::string_view> extra = {}) {
    std::vector<std::string_view> args = {"calibrate", "--db", db_, "--registry", registry_file_, "--policy", policy_file_};
    args.insert(args.end(), extra.begin(), extra.end());
    return cli(args);
  }

  const json& tool(const json& report, const std::string& id) {
    for (const json& t : report["tools"]) {
      if (t["tool"] == id) return t;
    }
    ADD_FAILURE() << "no tool " << id;
    static const json none;
    return none;
  }

  const std::string db_ = path("decisions.db");
  const std::string registry_file_ = path("tools.yaml");
  const std::string policy_file_ = path("old.yaml");
};

TEST_F(calibrate_test, labels_weights_and_the_proposed_lanes) {
  const auto out = calibrate({"--json", "--out", path("lanes.yaml")});
  ASSERT_EQ(out.code, exit_ok) << out.err;
  const json r = test::parse(out.out);
  EXPECT_EQ(r["labels"], 412);  // 400 + 10 + 2 audit samples
  EXPECT_EQ(r["deadline"], 5);
  EXPECT_EQ(r["pending"], 3);
  EXPECT_EQ(r["audit_labels"], 2);
  EXPECT_DOUBLE_EQ(r["audit_rates"]["sha256:auditing"].get<double>(), 0.2);

  const json& lookup = tool(r, "lookup");
  EXPECT_EQ(lookup["labels"], 402);
  EXPECT_EQ(lookup["first_passes"], 418);
  EXPECT_EQ(lookup["status"], "proposed") << lookup["execute"];
  // All right from 0.6 up, nothing right below: 0.6 exactly, as the shortest decimal between the
  // last wrong labels (0.59) and the first right one (0.6002).
  EXPECT_DOUBLE_EQ(lookup["proposed"]["execute"].get<double>(), 0.6);
  EXPECT_GE(lookup["execute"]["fit"]["lower"].get<double>(), 0.95);
  EXPECT_GE(lookup["execute"]["held_out"]["lower"].get<double>(), 0.95);
  EXPECT_GE(lookup["fallback"]["held_out"]["lower"].get<double>(), 0.5);
  EXPECT_LT(lookup["proposed"]["fallback"].get<double>(), 0.6);
  EXPECT_GE(lookup["proposed"]["fallback"].get<double>(), 0.3);  // the lowest label
  EXPECT_EQ(lookup["current"]["execute"], 0.8);
  // The audit samples weigh 5 each in the reliability bins: 400 + 2·5.
  double weight = 0;
  for (const json& b : lookup["reliability"]) weight += b["weight"].get<double>();
  EXPECT_DOUBLE_EQ(weight, 410);
  EXPECT_GT(lookup["ece"].get<double>(), 0);
  EXPECT_GT(lookup["brier"].get<double>(), 0);

  // wipe is denied by rule: its lane never applies.
  EXPECT_EQ(tool(r, "wipe")["status"], "ruled");
  const json& refund = tool(r, "refund");
  EXPECT_EQ(refund["labels"], 10);
  EXPECT_EQ(refund["status"], "too_few");
  EXPECT_EQ(refund["proposed"], refund["current"]);

  // The fragment is YAML the policy loader reads: the policy with those lanes.
  const std::string fragment = test::read_file(path("lanes.yaml"));
  EXPECT_EQ(fragment, r["fragment"].get<std::string>());
  write("proposed.yaml", test::read_file(path("base.yaml")) + fragment);
  auto proposed = policies::load_policy(path("proposed.yaml"), registry_);
  ASSERT_TRUE(proposed) << proposed.error().message << "\n" << fragment;
  EXPECT_DOUBLE_EQ(policies::lane_for(*proposed, "lookup").thresholds.execute, 0.6);
  EXPECT_EQ(policies::lane_for(*proposed, "refund").name, "lane:default");  // kept: not written
  EXPECT_DOUBLE_EQ(proposed->default_lane.execute, 0.8);

  // The proposal replayed: what reviewers approved from 0.6 up now executes; nothing they denied.
  const json& replay = r["replay"];
  EXPECT_EQ(replay["policy"]["hash"], proposed->hash);
  EXPECT_EQ(replay["executes_denied"], 0);
  EXPECT_EQ(replay["executes_changed"], 0);
  EXPECT_GT(replay["executes_approved"].get<int>(), 100);
}

TEST_F(calibrate_test, a_target_no_threshold_reaches_keeps_the_lane) {
  const json r = test::parse(calibrate({"--json", "--target-precision", "0.99", "--fallback-precision", "0.98"}).out);
  const json& lookup = tool(r, "lookup");
  EXPECT_EQ(lookup["status"], "kept");
  EXPECT_EQ(lookup["proposed"], lookup["current"]);
  EXPECT_TRUE(lookup["execute"].is_null());
  // What the kept execute threshold lets run is measured against the target and reported: every
  // label above 0.8 is right, but too few of them for a lower bound of 0.99.
  EXPECT_DOUBLE_EQ(lookup["at_current_execute"]["precision"].get<double>(), 1.0);
  EXPECT_LT(lookup["at_current_execute"]["lower"].get<double>(), 0.99);
  EXPECT_EQ(lookup["at_current_execute"]["below_target"], true);
  const auto text = calibrate({"--target-precision", "0.99", "--fallback-precision", "0.98"});
  EXPECT_NE(text.out.find("warning: at the current execute 0.8 the precision is 1.000 (lower bound 0."), std::string::npos)
      << text.out;
  // Where a threshold qualifies there is nothing to warn about.
  EXPECT_FALSE(tool(test::parse(calibrate({"--json"}).out), "lookup").contains("at_current_execute"));
  // min-support: 403 labels needed, 402 there.
  EXPECT_EQ(tool(test::parse(calibrate({"--json", "--min-support", "403"}).out), "lookup")["status"], "too_few");
}

TEST_F(calibrate_test, the_text_report_and_usage) {
  const auto r = calibrate();
  ASSERT_EQ(r.code, exit_ok) << r.err;
  EXPECT_NE(r.out.find("labels: 412 from reviewers (2 audit samples; rate 0.2000"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("left out: 5 deadline resolutions, 3 pending"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("lookup: 418 first passes, 402 labels"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("proposed {execute: 0.6, fallback: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("10 labels, fewer than --min-support 30"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("replay of the proposed lanes:"), std::string::npos) << r.out;

  EXPECT_EQ(calibrate({"--target-precision", "1.5"}).code, exit_usage);
  EXPECT_EQ(calibrate({"--target-precision", "0.5", "--fallback-precision", "0.9"}).code, exit_usage);
  EXPECT_EQ(calibrate({"--min-support", "0"}).code, exit_usage);
  EXPECT_EQ(calibrate({"--out", path("no/such/dir/lanes.yaml")}).code, exit_cant_create);
  // An output that is one of the inputs is refused before anything is written (it replaced the
  // log with the HTML page, or the policy with the lanes, and exited 0).
  const std::string log_before = test::read_file(db_), policy_before = test::read_file(policy_file_);
  for (const std::string& input : {db_, policy_file_, registry_file_}) {
    for (const char* flag : {"--out", "--html"}) {
      const auto refused = calibrate({flag, input});
      EXPECT_EQ(refused.code, exit_cant_create) << flag << " " << input;
      EXPECT_NE(refused.err.find("is one of the files calibrate reads"), std::string::npos) << refused.err;
    }
  }
  EXPECT_EQ(test::read_file(db_), log_before);
  EXPECT_EQ(test::read_file(policy_file_), policy_before);
  const auto help = cli({"calibrate", "--help"});
  EXPECT_EQ(help.code, exit_ok);
  for (const char* word : {"--target-precision", "--min-support", "--out", "--html", "Wilson", "held-out", "audit",
                           "deadline", "Exit status"}) {
    EXPECT_NE(help.out.find(word), std::string::npos) << word;
  }
}

TEST_F(calibrate_test, the_html_page_is_self_contained) {
  ASSERT_EQ(calibrate({"--html", path("report.html")}).code, exit_ok);
  const std::string html = test::read_file(path("report.html"));
  EXPECT_NE(html.find("<svg class=\"reliability\" data-tool=\"lookup\""), std::string::npos);
  EXPECT_NE(html.find("<svg class=\"curve\" data-tool=\"lookup\""), std::string::npos);
  EXPECT_NE(html.find("<svg class=\"reliability\" data-tool=\"all tools\""), std::string::npos);
  EXPECT_NE(html.find("<rect class=\"bar\""), std::string::npos);
  EXPECT_NE(html.find("<polyline class=\"precision\""), std::string::npos);
  for (const char* outside : {"<script", "src=", "href=", "http:", "https:", "url(", "@import"}) {
    EXPECT_EQ(html.find(outside), std::string::npos) << outside;
  }
}

// A first pass that fell back is labelled by its second pass's escalation: when the audit drew the
// second pass ("fallback:audit"), the label is an audit sample and weighs 1/rate; the rate counts
// first and second passes together.
TEST_F(log_test, calibrate_weighs_a_label_from_an_audited_second_pass_by_the_audit_rate) {
  auto under_audit = [](log::decision_record d) {
    d.policy_hash = "sha256:auditing";
    return d;
  };
  // Four turns fell back; the audit drew one second pass (reviewed), the other three executed.
  for (int i = 0; i < 4; ++i) {
    const std::string id = "f-" + std::to_string(i);
    add(under_audit(decision(id, "lookup", 0.7, "fallback", "lane:default")));
    add(under_audit(decision(id + "b", "lookup", 0.9, i == 0 ? "escalate" : "execute",
                             i == 0 ? "fallback:audit" : "fallback:lane:default", id)));
  }
  escalate("f-0b", "lookup", "execute", "lookup");
  // A first pass the audit drew, and one that executed.
  add(under_audit(decision("g-0", "lookup", 0.95, "escalate", "audit")));
  escalate("g-0", "lookup", "execute", "lookup");
  add(under_audit(decision("g-1", "lookup", 0.95, "execute", "lane:default")));
  close();

  const auto out = cli({"calibrate", "--db", path("decisions.db"), "--registry", path("tools.yaml"), "--policy",
                        path("old.yaml"), "--json"});
  ASSERT_EQ(out.code, exit_ok) << out.err;
  const json r = test::parse(out.out);
  EXPECT_EQ(r["labels"], 2);  // f-0 (by f-0b's review) and g-0
  EXPECT_EQ(r["second_passes"], 4);
  // 2 audited (g-0, f-0b) of 6 that would have executed (and g-1, f-1b…f-3b): 1/3.
  EXPECT_DOUBLE_EQ(r["audit_rates"]["sha256:auditing"].get<double>(), 1.0 / 3);
  EXPECT_EQ(r["audit_labels"], 2);
  double weight = 0;
  for (const json& t : r["tools"]) {
    if (t["tool"] != "lookup") continue;
    for (const json& b : t["reliability"]) weight += b["weight"].get<double>();
  }
  EXPECT_DOUBLE_EQ(weight, 6);  // each stands for 3
}

// The threshold is chosen on the fit half and checked once on the held-out half: where the
// held-out half does not reach the target there, the lane is kept and both bounds are said.
TEST_F(log_test, calibrate_keeps_an_execute_threshold_the_held_out_half_does_not_confirm) {
  // 100 right labels from 0.70 up on each half; 10 wrong at 0.9 on the held-out half alone.
  int fit = 0, held = 0, wrong = 0;
  for (int i = 0; fit < 100 || held < 100 || wrong < 10; ++i) {
    const std::string id = "h-" + std::to_string(i);
    const bool in_held = policies::held_out(id);
    int& right = in_held ? held : fit;
    if (right < 100) {
      add(decision(id, "lookup", 0.70 + 0.29 * right / 100, "escalate", "lane:default"));
      escalate(id, "lookup", "execute", "lookup");
      ++right;
    } else if (in_held && wrong < 10) {
      add(decision(id, "lookup", 0.9, "escalate", "lane:default"));
      escalate(id, "lookup", "deny");
      ++wrong;
    }
  }
  close();
  const std::string db = path("decisions.db"), registry = path("tools.yaml"), policy = path("old.yaml");
  const std::vector<std::string_view> args = {"calibrate", "--db", db, "--registry", registry, "--policy", policy};
  auto with_json = args;
  with_json.push_back("--json");
  const auto out = cli(with_json);
  ASSERT_EQ(out.code, exit_ok) << out.err;
  const json r = test::parse(out.out);
  const json* lookup = nullptr;
  for (const json& t : r["tools"]) {
    if (t["tool"] == "lookup") lookup = &t;
  }
  ASSERT_TRUE(lookup);
  EXPECT_EQ((*lookup)["status"], "fallback_only");
  EXPECT_DOUBLE_EQ((*lookup)["execute"]["threshold"].get<double>(), 0.70);
  EXPECT_EQ((*lookup)["execute"]["confirmed"], false);
  EXPECT_GE((*lookup)["execute"]["fit"]["lower"].get<double>(), 0.95);
  EXPECT_EQ((*lookup)["execute"]["held_out"]["labels"], 110);
  EXPECT_LT((*lookup)["execute"]["held_out"]["lower"].get<double>(), 0.95);
  EXPECT_EQ((*lookup)["proposed"]["execute"], (*lookup)["current"]["execute"]);
  EXPECT_EQ((*lookup)["fallback"]["confirmed"], true);
  EXPECT_DOUBLE_EQ((*lookup)["proposed"]["fallback"].get<double>(), 0.7);

  const auto text = cli(args);
  ASSERT_EQ(text.code, exit_ok) << text.err;
  EXPECT_NE(text.out.find("execute: 0.7 reaches 0.95 on the fit half (lower bound 0.963 on 100 labels) but not on "
                          "the held-out half (0."),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find(" on 110): the current one is kept"), std::string::npos) << text.out;
}

// ---- on logs a real server wrote ----

using test::ws_client;
using test_server::server_test;

class replay_server_test : public server_test {
 protected:
  std::string write_policy(const std::string& name, const std::string& text) {
    write(name, text);
    return (dir_ / name).string();
  }
};

TEST_F(replay_server_test, the_live_policy_replayed_reproduces_every_logged_decision) {
  // With an audit: the replay must draw the same decisions the server drew.
  write("policy.yaml", std::string(test_server::policy_yaml) + "audit: {rate: 0.5}\n");
  ws_client agent(start());
  for (int i = 0; i < 20; ++i) {
    const json d = agent.request(decide("a" + std::to_string(i), {user("order 5"), script({{"tool", "lookup_order"}, {"p", 0.97}})}));
    ASSERT_EQ(d.value("type", ""), "decision") << d;
  }
  const double confidences[] = {0.95, 0.85, 0.7, 0.6, 0.3, 0.2};
  int n = 0;
  for (const double p : confidences) {
    const json d = agent.request(decide("s" + std::to_string(n++), {user("order 5"), script({{"tool", "lookup_order"}, {"p", p}})}));
    ASSERT_EQ(d.value("type", ""), "decision") << d;
  }
  ASSERT_EQ(agent.request(decide("s-deny", {user("wipe"), script({{"tool", "wipe_disk"}, {"p", 0.99}})}))["action"],
            "deny");
  ASSERT_EQ(agent.request(decide("s-person", {user("x"), script({{"tool", "lookup_order"}, {"p", 0.99}, {"needs_person", 0.95}})}))
                ["lane"],
            "rule:escalate_when:needs_person");
  // A reviewer approves one escalation.
  test::http_client h(server_->port());
  const json pending = h.get("/v1/escalations?status=pending").body_json();
  ASSERT_FALSE(pending["escalations"].empty());
  const std::string e = pending["escalations"][0]["id"];
  ASSERT_EQ(h.post("/v1/escalations/" + e + "/resolve", R"({"outcome":"execute","reason":"checked"})").status, 200);
  server_.reset();

  const auto r = cli({"replay", "--db", db(), "--registry", (dir_ / "tools.yaml").string(), "--policy",
                      (dir_ / "policy.yaml").string(), "--json", "--fail-if", "changed>0,lane_changed>0"});
  ASSERT_EQ(r.code, exit_ok) << r.err << r.out;
  const json j = test::parse(r.out);
  EXPECT_EQ(j["replayed"], 28);
  EXPECT_EQ(j["reviewed"], 1);
  EXPECT_EQ(j["approved"], 1);
  // About half of the 22 confident ones were audited (none: a chance of 2^-22).
  const json* audited = table_row(j, "lookup_order", "escalate", "escalate", "audit");
  ASSERT_TRUE(audited) << j["table"];
  EXPECT_GT((*audited)["decisions"].get<int>(), 0);
  EXPECT_GE(j["actions"]["escalate"]["new"].get<int>(), 3);

  // Without the audit, what it drew executes.
  const json s = test::parse(cli({"replay", "--db", db(), "--registry", (dir_ / "tools.yaml").string(), "--policy",
                                  write_policy("plain.yaml", test_server::policy_yaml), "--json"}).out);
  EXPECT_EQ(s["changed"], (*audited)["decisions"]);
  EXPECT_EQ(s["unreached"], 0);
}

TEST_F(replay_server_test, the_keyword_engine_decides_the_logged_states_again_without_drift) {
  config_ = parse_config("server: {listen: 127.0.0.1:0, io_threads: 2}\nengine: {name: keyword}\n"
                         "log: {path: decisions.db, synchronous: normal, store_state: true}\n");
  server_ = running_server::start(config_);
  {
    ws_client agent(server_->port());
    int n = 0;
    for (const char* text : {"please look up order 5", "wipe the disk now", "echo the call back", "nothing to do"}) {
      json d = agent.request(decide("k-" + std::to_string(n++), {user(text)}));
      // The echo turn's tool runs after its decision: its result may come before the next one.
      while (d.value("type", "") == "tool_result") d = agent.read();
      ASSERT_EQ(d.value("type", ""), "decision") << d;
    }
  }
  server_.reset();
  // The same log, served again without keeping states.
  config_.log.store_state = false;
  server_ = running_server::start(config_);
  {
    ws_client agent(server_->port());
    ASSERT_EQ(agent.request(decide("k-later", {user("look up order 7")})).value("type", ""), "decision");
  }
  server_.reset();

  const auto r = cli({"replay", "--db", db(), "--registry", (dir_ / "tools.yaml").string(), "--policy",
                      (dir_ / "policy.yaml").string(), "--engine", "keyword", "--json", "--fail-if",
                      "drift.flips>0,drift.actions_changed>0"});
  ASSERT_EQ(r.code, exit_ok) << r.err << r.out;
  const json j = test::parse(r.out);
  EXPECT_EQ(j["changed"], 0);
  const json& drift = j["drift"];
  EXPECT_EQ(drift["redecided"], 4);
  EXPECT_EQ(drift["no_state"], 1);
  EXPECT_EQ(drift["engine_errors"], 0);
  EXPECT_EQ(drift["flips"], 0);
  EXPECT_EQ(drift["flip_rate"], 0.0);
  EXPECT_EQ(drift["confidence_shift_mean_abs"], 0.0);
  EXPECT_EQ(drift["questions"]["tool"]["compared"], 4);
  EXPECT_EQ(drift["questions"]["lookup_order.priority"]["flipped"], 0);
  const auto text = cli({"replay", "--db", db(), "--registry", (dir_ / "tools.yaml").string(), "--policy",
                         (dir_ / "policy.yaml").string(), "--engine", "keyword"});
  EXPECT_NE(text.out.find("tool choice flipped: 0 (0.0%)"), std::string::npos) << text.out;
  EXPECT_EQ(cli({"replay", "--db", db(), "--registry", (dir_ / "tools.yaml").string(), "--policy",
                 (dir_ / "policy.yaml").string(), "--engine", "keyword", "--model", "x"}).code,
            exit_usage);
}

// A registry the server routes in two stages (routing.max_options): drift asks each logged state
// both stages, as the server did, and the keyword engine gives the same merged answers again.
TEST_F(replay_server_test, drift_asks_a_two_stage_registry_both_stages) {
  write("tools.yaml", R"(tools:
  - {id: lookup_order, description: Look up an order by its number, group: orders}
  - {id: cancel_order, description: Cancel an order by its number, group: orders}
  - {id: wipe_disk, description: Wipe the disk, group: disk}
  - {id: check_disk, description: Check the disk for errors, group: disk}
finish: {description: Nothing more to do}
)");
  write("policy.yaml", "confidence: p_max\nlanes:\n  default: {execute: 0.8, fallback: 0.5}\non_engine_error: escalate\n");
  const std::string config = "server: {listen: 127.0.0.1:0, io_threads: 2}\nengine: {name: keyword}\nrouting: {max_options: 4}\n"
                             "log: {path: decisions.db, synchronous: normal, store_state: true}\n";
  write("baton.yaml", config);
  config_ = parse_config(config);
  server_ = running_server::start(config_);
  {
    ws_client agent(server_->port());
    int n = 0;
    for (const char* text : {"please look up order 5", "cancel order 7", "check the disk for errors", "nothing to do"}) {
      const json d = agent.request(decide("st-" + std::to_string(n++), {user(text)}));
      ASSERT_EQ(d.value("type", ""), "decision") << d;
    }
  }
  server_.reset();
  // Routed in two stages: the logged tool answers list the other groups beside the group's tools.
  EXPECT_EQ(sql("SELECT count(*) AS n FROM decisions WHERE answers LIKE '%group:%'")[0]["n"], 4);
  // The config gives routing.max_options (and the registry); the policy replayed is named.
  const std::string config_file = (dir_ / "baton.yaml").string(), log_file = db(), policy = (dir_ / "policy.yaml").string();
  const std::vector<std::string_view> args = {"replay", "--config", config_file, "--db", log_file, "--policy", policy, "--engine",
                                              "keyword", "--json", "--fail-if", "drift.flips>0,drift.actions_changed>0"};
  const auto r = cli(args);
  ASSERT_EQ(r.code, exit_ok) << r.err << r.out;
  const json j = test::parse(r.out);
  EXPECT_EQ(j["changed"], 0);
  const json& drift = j["drift"];
  EXPECT_EQ(drift["redecided"], 4);
  EXPECT_EQ(drift["engine_errors"], 0);
  EXPECT_EQ(drift["flips"], 0);
  EXPECT_EQ(drift["confidence_shift_mean_abs"], 0.0);  // P(group)·P(tool | group) again, not one stage's P(tool)
  EXPECT_EQ(drift["questions"]["tool"]["compared"], 4);
}

}  // namespace
}  // namespace baton
