// Hot reload of the registry and policy (POST /v1/admin/reload; SIGHUP is tests/processes'): a
// real server, agents over WebSocket, the reload over HTTP, and the rows in SQLite. What serves
// changes in one step, a turn in flight finishes on what it started with, a reload that fails
// changes nothing, and pending escalations whose tool no longer fits are denied.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <thread>

#include "support/http_client.hpp"
#include "support/server_fixture.hpp"

namespace baton {
namespace {

using namespace test_server;

// The fixture's policy with the default lane's execute threshold at 0.6 (was 0.8).
std::string lower_lanes() {
  std::string p = policy_yaml;
  p.replace(p.find("execute: 0.8"), 12, "execute: 0.6");
  return p;
}

// The fixture's registry without `echo_cmd`.
std::string without_echo() {
  std::string r = registry_yaml;
  const auto from = r.find("  - id: echo_cmd");
  r.erase(from, r.find("  - id: broken_http") - from);
  return r;
}

class reload_test : public server_test {
 protected:
  json reload(const std::string& key = {}) {
    test::http_client h(server_->port());
    const auto r = h.post("/v1/admin/reload", "{}", key);
    last_status_ = r.status;
    return r.body_json();
  }

  json get(const std::string& target) {
    test::http_client h(server_->port());
    const auto r = h.get(target);
    last_status_ = r.status;
    return r.body_json();
  }

  // A turn whose tool question the engine answers with `p` for `tool`.
  static json turn(const std::string& session, const std::string& tool, double p, int sleep_ms = 0) {
    json s = {{"tool", tool}, {"p", p}};
    if (sleep_ms) s["sleep_ms"] = sleep_ms;
    return decide(session, {user("please look at order 5"), script(s)},
                  {{"id", session}, {"proposal", {{"tool", tool}, {"arguments", {{"order_id", "5"}}}}}});
  }

  // Waits until the engine has been handed `n` requests (a slow one is then being decided).
  void engine_called(int n) {
    for (int i = 0; i < 500 && engine_->calls() < n; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_GE(engine_->calls(), n);
  }

  int last_status_ = 0;
};

TEST_F(reload_test, a_reload_swaps_the_policy_for_the_next_turn_and_health_shows_it) {
  ws_client agent(start());
  const json before = get("/health");
  EXPECT_EQ(before["reloads"], 0);
  EXPECT_FALSE(before.contains("reloaded_at"));
  // 0.7 is below the execute threshold 0.8 and above the fallback one: without a fallback engine
  // the fallback goes to the agent as it is.
  EXPECT_EQ(agent.request(turn("r-1", "lookup_order", 0.7))["action"], "fallback");

  write("policy.yaml", lower_lanes());
  const json r = reload();
  ASSERT_EQ(last_status_, 200) << r;
  EXPECT_EQ(r["id"].get<std::string>().substr(0, 2), "l-");
  EXPECT_EQ(r["old"]["registry_hash"], before["registry_hash"]);
  EXPECT_EQ(r["old"]["policy_hash"], before["policy_hash"]);
  EXPECT_EQ(r["new"]["registry_hash"], before["registry_hash"]);  // the registry did not change
  EXPECT_NE(r["new"]["policy_hash"], before["policy_hash"]);
  EXPECT_EQ(r["escalations_resolved"], 0);

  const json after = get("/health");
  EXPECT_EQ(after["policy_hash"], r["new"]["policy_hash"]);
  EXPECT_EQ(after["registry_hash"], before["registry_hash"]);
  EXPECT_EQ(after["reloads"], 1);
  EXPECT_EQ(after["reloads_failed"], 0);
  EXPECT_TRUE(after.contains("reloaded_at")) << after;

  // The same answer, now above the new threshold.
  const json d = agent.request(turn("r-2", "lookup_order", 0.7));
  EXPECT_EQ(d["action"], "execute") << d;
  EXPECT_EQ(d["lane"], "lane:default");
  agent.close();
  server_.reset();

  const auto decisions = sql("SELECT session, policy_hash FROM decisions ORDER BY seq");
  ASSERT_EQ(decisions.size(), 2u);
  EXPECT_EQ(decisions[0]["policy_hash"], before["policy_hash"]);
  EXPECT_EQ(decisions[1]["policy_hash"], r["new"]["policy_hash"]);
  const auto rows = sql("SELECT id, who, outcome, reason, registry_file, policy_file, old_registry_hash, old_policy_hash, "
                        "new_registry_hash, new_policy_hash FROM reloads");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["id"], r["id"]);
  EXPECT_EQ(rows[0]["who"], "anonymous");
  EXPECT_EQ(rows[0]["outcome"], "ok");
  EXPECT_EQ(rows[0]["reason"], "");
  EXPECT_EQ(rows[0]["registry_file"], (dir_ / "tools.yaml").string());
  EXPECT_EQ(rows[0]["policy_file"], (dir_ / "policy.yaml").string());
  EXPECT_EQ(rows[0]["old_policy_hash"], r["old"]["policy_hash"]);
  EXPECT_EQ(rows[0]["new_policy_hash"], r["new"]["policy_hash"]);
  EXPECT_EQ(rows[0]["old_registry_hash"], rows[0]["new_registry_hash"]);
  EXPECT_EQ(cli({"log", "verify", "--db", db()}).out,
            "ok: 2 decisions, 0 tool runs, 0 escalations, 0 resolutions, 0 deliveries, 1 reloads\n");
}

TEST_F(reload_test, a_reload_that_fails_changes_nothing_says_where_and_is_logged) {
  ws_client agent(start());
  const json before = get("/health");

  // A threshold out of range on line 7.
  std::string bad = policy_yaml;
  bad.replace(bad.find("execute: 0.8"), 12, "execute: 1.5");
  write("policy.yaml", bad);
  json r = reload();
  EXPECT_EQ(last_status_, 422) << r;
  EXPECT_EQ(r["code"], "INVALID_POLICY");
  EXPECT_NE(r["error"].get<std::string>().find("policy.yaml:7:"), std::string::npos) << r;

  // A registry that is fine alone, but the policy denies a tool it no longer has: checked
  // together, so neither changes.
  write("policy.yaml", lower_lanes());
  std::string registry = registry_yaml;
  registry.erase(registry.find("  - id: wipe_disk"), registry.find("finish:") - registry.find("  - id: wipe_disk"));
  write("tools.yaml", registry);
  r = reload();
  EXPECT_EQ(last_status_, 422) << r;
  EXPECT_EQ(r["code"], "INVALID_POLICY");
  EXPECT_NE(r["error"].get<std::string>().find("policy.yaml:3:"), std::string::npos) << r;
  EXPECT_NE(r["error"].get<std::string>().find("wipe_disk"), std::string::npos) << r;

  // YAML that does not parse.
  write("tools.yaml", "tools:\n  - id: [unclosed\n");
  r = reload();
  EXPECT_EQ(last_status_, 422) << r;
  EXPECT_EQ(r["code"], "INVALID_REGISTRY");
  EXPECT_NE(r["error"].get<std::string>().find("tools.yaml:"), std::string::npos) << r;

  const json after = get("/health");
  EXPECT_EQ(after["registry_hash"], before["registry_hash"]);
  EXPECT_EQ(after["policy_hash"], before["policy_hash"]);
  EXPECT_EQ(after["schema_hash"], before["schema_hash"]);
  EXPECT_EQ(after["reloads"], 0);
  EXPECT_EQ(after["reloads_failed"], 3);
  // Decided as before: 0.7 falls back under the old lanes (the new file would execute it).
  EXPECT_EQ(agent.request(turn("f-1", "lookup_order", 0.7))["action"], "fallback");
  // wipe_disk is still a tool, still denied.
  EXPECT_EQ(agent.request(turn("f-2", "wipe_disk", 0.95))["lane"], "rule:deny");
  agent.close();
  server_.reset();

  const auto rows = sql("SELECT outcome, reason, new_registry_hash IS NULL AS no_new_registry, "
                        "new_policy_hash IS NULL AS no_new_policy, old_policy_hash FROM reloads ORDER BY seq");
  ASSERT_EQ(rows.size(), 3u);
  for (const json& row : rows) {
    EXPECT_EQ(row["outcome"], "failed");
    EXPECT_EQ(row["no_new_registry"], 1);
    EXPECT_EQ(row["no_new_policy"], 1);
    EXPECT_EQ(row["old_policy_hash"], before["policy_hash"]);
  }
  EXPECT_NE(rows[0]["reason"].get<std::string>().find("policy.yaml:7:"), std::string::npos) << rows[0];
  EXPECT_EQ(sql("SELECT DISTINCT policy_hash FROM decisions").size(), 1u);
  EXPECT_EQ(cli({"log", "verify", "--db", db()}).out,
            "ok: 2 decisions, 0 tool runs, 0 escalations, 0 resolutions, 0 deliveries, 3 reloads\n");
}

TEST_F(reload_test, only_an_admin_key_reloads) {
  ::setenv("BATON_TEST_AGENT_KEY", "agent-secret-0123456789", 1);
  ::setenv("BATON_TEST_REVIEWER_KEY", "reviewer-secret-0123456789", 1);
  ::setenv("BATON_TEST_ADMIN_KEY", "admin-secret-0123456789", 1);
  config_ = parse_config("server: {listen: 127.0.0.1:0, io_threads: 2}\n"
                         "log: {path: decisions.db, synchronous: normal}\n"
                         "auth:\n  keys:\n"
                         "    - {name: bot, role: agent, env: BATON_TEST_AGENT_KEY}\n"
                         "    - {name: alice, role: reviewer, env: BATON_TEST_REVIEWER_KEY}\n"
                         "    - {name: ops, role: admin, env: BATON_TEST_ADMIN_KEY}\n");
  start();
  write("policy.yaml", lower_lanes());
  json r = reload();
  EXPECT_EQ(last_status_, 401) << r;
  EXPECT_EQ(r["code"], "UNAUTHORIZED");
  r = reload("agent-secret-0123456789");
  EXPECT_EQ(last_status_, 403) << r;
  EXPECT_EQ(r["code"], "FORBIDDEN");
  r = reload("reviewer-secret-0123456789");
  EXPECT_EQ(last_status_, 403) << r;
  EXPECT_NE(r["error"].get<std::string>().find("POST /v1/admin/reload"), std::string::npos) << r;
  EXPECT_EQ(get("/health")["reloads"], 0);
  r = reload("admin-secret-0123456789");
  ASSERT_EQ(last_status_, 200) << r;
  EXPECT_EQ(get("/health")["policy_hash"], r["new"]["policy_hash"]);
  server_.reset();
  const auto rows = sql("SELECT who, outcome FROM reloads");
  ASSERT_EQ(rows.size(), 1u);  // the refused callers never reached the reload
  EXPECT_EQ(rows[0]["who"], "ops");
  EXPECT_EQ(rows[0]["outcome"], "ok");
}

TEST_F(reload_test, a_turn_in_flight_finishes_on_the_policy_it_started_with) {
  ws_client slow(start());
  const json before = get("/health");
  // The engine takes 1.5 s on this one; the reload is applied meanwhile.
  slow.send(turn("in-flight", "lookup_order", 0.7, 1500));
  engine_called(1);
  write("policy.yaml", lower_lanes());
  const json r = reload();
  ASSERT_EQ(last_status_, 200) << r;
  ws_client next(server_->port());
  const json fresh = next.request(turn("after", "lookup_order", 0.7));
  EXPECT_EQ(fresh["action"], "execute") << fresh;  // the new lanes
  const json old = slow.read_type("decision");
  EXPECT_EQ(old["action"], "fallback") << old;  // the lanes it started with
  slow.close();
  next.close();
  server_.reset();

  const auto rows = sql("SELECT d.session, d.policy_hash, d.created_ms > r.created_ms AS after_reload "
                        "FROM decisions d, reloads r ORDER BY d.seq");
  ASSERT_EQ(rows.size(), 2u);
  std::map<std::string, json> by_session;
  for (const json& row : rows) by_session[row["session"]] = row;
  EXPECT_EQ(by_session["in-flight"]["policy_hash"], before["policy_hash"]);
  EXPECT_EQ(by_session["in-flight"]["after_reload"], 1);  // decided after the reload, on the old policy
  EXPECT_EQ(by_session["after"]["policy_hash"], r["new"]["policy_hash"]);
}

TEST_F(reload_test, a_turn_in_flight_runs_a_tool_the_reload_removed) {
  ws_client agent(start());
  agent.send(turn("run-it", "echo_cmd", 0.95, 1500));
  engine_called(1);
  write("tools.yaml", without_echo());
  const json r = reload();
  ASSERT_EQ(last_status_, 200) << r;
  EXPECT_NE(r["new"]["registry_hash"], r["old"]["registry_hash"]);
  for (const json& t : get("/v1/tools")["tools"]) EXPECT_NE(t["id"], "echo_cmd");

  // Decided and carried out with the registry and executors it started with.
  const json d = agent.read_type("decision");
  EXPECT_EQ(d["action"], "execute") << d;
  EXPECT_EQ(d["tool"], "echo_cmd");
  EXPECT_EQ(d["executor"], "command");
  const json ran = agent.read_type("tool_result");
  EXPECT_EQ(ran["decision"], d["decision"]) << ran;
  EXPECT_EQ(ran["ok"], true) << ran;
  // The next turn's engine is no longer offered echo_cmd.
  const json next = agent.request(turn("later", "echo_cmd", 0.95));
  EXPECT_NE(next.value("tool", ""), "echo_cmd") << next;
  agent.close();
  server_.reset();
  const auto runs = sql("SELECT tool, executor, ok FROM tool_runs");
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0]["tool"], "echo_cmd");
  EXPECT_EQ(runs[0]["ok"], 1);
}

TEST_F(reload_test, pending_escalations_whose_tool_no_longer_fits_are_denied_at_the_reload) {
  // echo_cmd's escalations execute at their deadline: a removed tool is denied all the same.
  write("policy.yaml", std::string(policy_yaml) + "escalation:\n  deadline_s: 3600\n  tools:\n    echo_cmd: {on_deadline: execute}\n");
  ws_client agent(start());
  std::map<std::string, std::string> escalation;  // session → escalation id
  for (const auto& [session, tool] : std::map<std::string, std::string>{
           {"m-removed", "echo_cmd"}, {"m-args", "lookup_order"}, {"m-denied", "broken_http"}, {"m-finish", "finish"}}) {
    const json d = agent.request(turn(session, tool, 0.3));
    ASSERT_EQ(d["action"], "escalate") << d;
    escalation[session] = d["escalation"];
  }
  const json failed = agent.request(decide("m-failed", {user("hi"), script({{"fail", "ENGINE_BROKE"}})}, {{"id", 9}}));
  ASSERT_EQ(failed["action"], "escalate") << failed;
  escalation["m-failed"] = failed["escalation"];
  ASSERT_EQ(get("/v1/escalations/" + escalation["m-args"])["arguments"]["priority"], "high");

  // echo_cmd gone, lookup_order's priority `high` renamed, broken_http denied by the policy.
  std::string registry = without_echo();
  registry.replace(registry.find("high: Urgent"), 12, "urgent: Now");
  write("tools.yaml", registry);
  std::string policy = policy_yaml;
  policy.replace(policy.find("deny: [wipe_disk]"), 17, "deny: [wipe_disk, broken_http]");
  write("policy.yaml", policy);
  const json r = reload();
  ASSERT_EQ(last_status_, 200) << r;
  EXPECT_EQ(r["escalations_resolved"], 3);

  // Their agent hears of each as of a deadline's resolution.
  std::map<std::string, json> resolved;  // escalation id → resolution
  for (int i = 0; i < 3; ++i) {
    const json f = agent.read_type("resolution");
    ASSERT_EQ(f.value("type", ""), "resolution") << f;
    resolved[f["resolution"]["escalation"]] = f["resolution"];
  }
  const std::string reload_id = r["id"];
  auto reason_of = [&](const std::string& session) {
    const json& res = resolved[escalation[session]];
    EXPECT_EQ(res["outcome"], "deny") << res;
    EXPECT_EQ(res["by"], "deadline") << res;
    EXPECT_EQ(res["reviewer"], "baton") << res;
    EXPECT_EQ(res["forced"], true) << res;
    const std::string reason = res.value("reason", "");
    EXPECT_NE(reason.find("reload " + reload_id), std::string::npos) << reason;
    return reason;
  };
  EXPECT_NE(reason_of("m-removed").find("tool `echo_cmd` is no longer in the registry"), std::string::npos);
  EXPECT_NE(reason_of("m-args").find("its arguments no longer fit tool `lookup_order` (priority: "), std::string::npos);
  EXPECT_NE(reason_of("m-denied").find("the policy now denies `broken_http`"), std::string::npos);

  // What still fits waits for a person: a proposal of finish, and an engine failure's (no tool).
  const json pending = get("/v1/escalations?status=pending");
  ASSERT_EQ(pending["escalations"].size(), 2u) << pending;
  std::set<std::string> ids;
  for (const json& e : pending["escalations"]) ids.insert(e["id"]);
  EXPECT_EQ(ids, (std::set<std::string>{escalation["m-finish"], escalation["m-failed"]}));
  agent.close();
  server_.reset();

  const auto rows = sql("SELECT r.registry_hash, r.policy_hash, r.by FROM resolutions r ORDER BY r.seq");
  ASSERT_EQ(rows.size(), 3u);
  for (const json& row : rows) {
    EXPECT_EQ(row["registry_hash"], r["new"]["registry_hash"]);
    EXPECT_EQ(row["policy_hash"], r["new"]["policy_hash"]);
  }
  EXPECT_EQ(cli({"log", "verify", "--db", db()}).out,
            "ok: 5 decisions, 0 tool runs, 5 escalations, 3 resolutions, 0 deliveries, 1 reloads\n");
}

TEST_F(reload_test, an_escalation_decided_before_a_reload_and_raised_after_it_is_held_against_the_new_registry) {
  ws_client agent(start());
  // Escalated on the registry it started with, after the reload removed its tool.
  agent.send(turn("late", "echo_cmd", 0.3, 1500));
  engine_called(1);
  write("tools.yaml", without_echo());
  const json r = reload();
  ASSERT_EQ(last_status_, 200) << r;
  EXPECT_EQ(r["escalations_resolved"], 0);  // not raised yet
  const json d = agent.read_type("decision");
  ASSERT_EQ(d["action"], "escalate") << d;
  const json f = agent.read_type("resolution");
  ASSERT_EQ(f.value("type", ""), "resolution") << f;
  EXPECT_EQ(f["resolution"]["escalation"], d["escalation"]);
  EXPECT_EQ(f["resolution"]["outcome"], "deny");
  EXPECT_NE(f["resolution"]["reason"].get<std::string>().find("reload " + r["id"].get<std::string>()), std::string::npos) << f;
  EXPECT_TRUE(get("/v1/escalations?status=pending")["escalations"].empty());
}

}  // namespace
}  // namespace baton
