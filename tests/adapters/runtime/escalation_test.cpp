// Escalations end to end (docs/escalations.md): a real server, agents and reviewers over
// WebSocket and HTTP, and the rows in SQLite; restarts of the server on the same log.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/ids.hpp"

#include "support/http_client.hpp"
#include "support/server_fixture.hpp"

namespace baton {
namespace {

using namespace test_server;

class escalation_test : public server_test {
 protected:
  // An escalated decision on `session`: the tool question unsure (p 0.3 < fallback 0.5).
  static json unsure(const std::string& session, const std::string& tool = "lookup_order") {
    return decide(session, {user("please look at order 5"), script({{"tool", tool}, {"p", 0.3}})},
                  {{"id", "d1"}, {"proposal", {{"tool", tool}, {"arguments", {{"order_id", "5"}}}}}});
  }

  json get(const std::string& target, const std::string& key = {}) {
    test::http_client h(server_->port());
    const auto r = h.get(target, key);
    last_status_ = r.status;
    return r.body.empty() ? json() : r.body_json();
  }

  json resolve(const std::string& id, const json& body, const std::string& key = {}) {
    test::http_client h(server_->port());
    const auto r = h.post("/v1/escalations/" + id + "/resolve", render_json(body, false), key);
    last_status_ = r.status;
    return r.body_json();
  }

  // Stops the server and starts it again on the same log and configuration.
  void restart() {
    server_.reset();
    start();
  }

  // Starts the stopped server on `file` changed to `text`, once 1 s deadlines have passed.
  void start_changed(const std::string& file, const std::string& text) {
    write(file, text);
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    start();
  }

  // Escalation `id` denied by baton (`by: deadline`), its reason holding `why`.
  void expect_denied(const std::string& id, const std::string& why) {
    const json e = get("/v1/escalations/" + id);
    EXPECT_EQ(e["status"], "resolved") << e;
    EXPECT_EQ(e["resolution"]["outcome"], "deny");
    EXPECT_EQ(e["resolution"]["by"], "deadline");
    EXPECT_NE(e["resolution"]["reason"].get<std::string>().find(why), std::string::npos) << e;
  }

  int last_status_ = 0;
};

TEST_F(escalation_test, an_escalation_is_durable_listed_resolved_once_and_sent_to_the_session) {
  ws_client agent(start());
  const json d = agent.request(unsure("esc-1"));
  ASSERT_EQ(d.value("type", ""), "decision") << d;
  EXPECT_EQ(d["action"], "escalate");
  const std::string escalation = d.value("escalation", "");
  ASSERT_EQ(escalation.substr(0, 2), "e-") << d;
  EXPECT_TRUE(d.contains("deadline_at"));

  // In SQLite before the frame went out, linked to its decision.
  const auto rows = sql("SELECT e.id, e.decision, e.session, e.tool, e.on_deadline, d.action FROM escalations e "
                        "JOIN decisions d ON d.id = e.decision");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["id"], escalation);
  EXPECT_EQ(rows[0]["decision"], d["decision"]);
  EXPECT_EQ(rows[0]["on_deadline"], "deny");
  EXPECT_EQ(rows[0]["action"], "escalate");

  const json pending = get("/v1/escalations?status=pending");
  ASSERT_EQ(last_status_, 200) << pending;
  ASSERT_EQ(pending["escalations"].size(), 1u);
  const json& e = pending["escalations"][0];
  EXPECT_EQ(e["id"], escalation);
  EXPECT_EQ(e["status"], "pending");
  EXPECT_EQ(e["tool"], "lookup_order");
  EXPECT_EQ(e["reason"], "lane:default");
  EXPECT_EQ(e["arguments"]["order_id"], "5");
  EXPECT_EQ(e["state"][0]["content"], "please look at order 5");
  EXPECT_TRUE(e["resolution"].is_null());
  // Every option of the tool question, most likely first.
  ASSERT_EQ(e["candidates"].size(), 5u);  // four tools and finish
  EXPECT_EQ(e["candidates"][0]["tool"], "lookup_order");
  EXPECT_DOUBLE_EQ(e["candidates"][0]["probability"].get<double>(), 0.3);
  EXPECT_EQ(e["candidates"][0]["description"], "Look up an order by its number");
  for (std::size_t i = 1; i < e["candidates"].size(); ++i) {
    EXPECT_LE(e["candidates"][i]["probability"].get<double>(), e["candidates"][i - 1]["probability"].get<double>());
  }
  EXPECT_EQ(get("/v1/escalations/" + escalation)["id"], escalation);

  const json res = resolve(escalation, {{"outcome", "execute"}, {"arguments", {{"order_id", "5"}, {"priority", "low"}}},
                                        {"reason", "checked: the order exists"}});
  ASSERT_EQ(last_status_, 200) << res;
  EXPECT_EQ(res["outcome"], "execute");
  EXPECT_EQ(res["tool"], "lookup_order");
  EXPECT_EQ(res["reviewer"], "anonymous");
  EXPECT_EQ(res["by"], "reviewer");
  EXPECT_EQ(res["executor"], "agent");
  EXPECT_EQ(res["decision"], d["decision"]);

  // The connected session hears of it at once.
  const json frame = agent.read_type("resolution");
  ASSERT_EQ(frame.value("type", ""), "resolution") << frame;
  EXPECT_EQ(frame["resolution"]["id"], res["id"]);
  EXPECT_EQ(frame["resolution"]["arguments"]["priority"], "low");
  EXPECT_EQ(frame["resolution"]["reason"], "checked: the order exists");

  // Exactly once.
  const json again = resolve(escalation, {{"outcome", "deny"}, {"reason", "too late"}});
  EXPECT_EQ(last_status_, 409);
  EXPECT_EQ(again["code"], "ALREADY_RESOLVED");
  EXPECT_NE(again["error"].get<std::string>().find("anonymous"), std::string::npos) << again;
  const json resolved = get("/v1/escalations/" + escalation);
  EXPECT_EQ(resolved["status"], "resolved");
  EXPECT_EQ(resolved["resolution"]["id"], res["id"]);
  EXPECT_TRUE(get("/v1/escalations")["escalations"].empty());
  EXPECT_EQ(get("/v1/escalations?status=resolved")["escalations"].size(), 1u);

  // The agent runs the tool it was allowed and reports it; then acknowledges the resolution.
  const json ack = agent.request({{"type", "tool_result"}, {"id", "t1"}, {"decision", d["decision"]}, {"ok", true}});
  EXPECT_EQ(ack.value("type", ""), "ack") << ack;
  agent.send(json{{"type", "ack"}, {"resolution", res["id"]}});
  const json resumed = agent.request({{"type", "resume"}, {"id", 9}, {"session", "esc-1"}});
  EXPECT_EQ(resumed, json({{"type", "resumed"}, {"ref", 9}, {"session", "esc-1"}, {"pending", json::array()},
                           {"resolutions", 0}}));
  agent.close();
  server_.reset();
  EXPECT_EQ(sql("SELECT count(*) AS n FROM deliveries")[0]["n"], 1);
  EXPECT_EQ(cli({"log", "verify", "--db", db()}).out,
            "ok: 1 decisions, 1 tool runs, 1 escalations, 1 resolutions, 1 deliveries, 0 reloads\n");
}

// Escalations raised within the same millisecond keep the order they were raised in: in the
// list, the reviewer's snapshot, and after a restart (from the log's row order).
TEST_F(escalation_test, pending_escalations_are_listed_in_the_order_they_were_raised) {
  ws_client agent(start());
  std::vector<std::string> raised;
  for (int i = 0; i < 12; ++i) {
    const json d = agent.request(unsure("order-" + std::to_string(i)));
    ASSERT_EQ(d.value("action", ""), "escalate") << d;
    raised.push_back(d["escalation"].get<std::string>());
  }
  auto ids_of = [](const json& escalations) {
    std::vector<std::string> ids;
    for (const json& e : escalations) ids.push_back(e["id"].get<std::string>());
    return ids;
  };
  EXPECT_EQ(ids_of(get("/v1/escalations")["escalations"]), raised);
  {
    ws_client reviewer(server_->port(), "/v1/review");
    EXPECT_EQ(ids_of(reviewer.read()["escalations"]), raised);
    reviewer.close();
  }
  agent.close();
  restart();
  EXPECT_EQ(ids_of(get("/v1/escalations?status=pending")["escalations"]), raised);
  ws_client reviewer(server_->port(), "/v1/review");
  EXPECT_EQ(ids_of(reviewer.read()["escalations"]), raised);
}

TEST_F(escalation_test, bad_resolutions_get_clear_errors) {
  ws_client agent(start());
  const std::string id = agent.request(unsure("esc-bad"))["escalation"];
  struct bad_case {
    json body;
    int status;
    const char* code;
    json loc;  // the field the refusal names, as the agent API names a frame's
  };
  const std::vector<bad_case> cases = {
      {{{"outcome", "deny"}}, 422, "INVALID_RESOLUTION", json::array({"reason"})},
      {{{"outcome", "maybe"}, {"reason", "x"}}, 422, "INVALID_RESOLUTION", json::array({"outcome"})},
      {{{"reason", "x"}}, 422, "INVALID_RESOLUTION", json::array({"outcome"})},
      {{{"outcome", "execute"}, {"tool", "launch_rocket"}, {"reason", "x"}}, 422, "INVALID_RESOLUTION", json::array({"tool"})},
      {{{"outcome", "execute"}, {"arguments", {{"priority", "urgent"}}}, {"reason", "x"}}, 422, "INVALID_RESOLUTION",
       json::array({"arguments", "priority"})},
      {{{"outcome", "execute"}, {"arguments", {{"colour", "red"}}}, {"reason", "x"}}, 422, "INVALID_RESOLUTION",
       json::array({"arguments", "colour"})},
      {{{"outcome", "deny"}, {"tool", "lookup_order"}, {"reason", "x"}}, 422, "INVALID_RESOLUTION", json::array({"tool"})},
      {{{"outcome", "deny"}, {"reason", "x"}, {"extra", 1}}, 422, "INVALID_RESOLUTION", json::array({"extra"})},
      {{{"outcome", "deny"}, {"reason", "x"}, {"force", "yes"}}, 422, "INVALID_RESOLUTION", json::array({"force"})},
      {{{"outcome", "deny"}, {"reason", std::string(2001, 'x')}}, 422, "INVALID_RESOLUTION", json::array({"reason"})},
  };
  for (const bad_case& k : cases) {
    const json r = resolve(id, k.body);
    EXPECT_EQ(last_status_, k.status) << k.body << " " << r;
    EXPECT_EQ(r["code"], k.code) << k.body << " " << r;
    ASSERT_FALSE(r["detail"].empty()) << k.body << " " << r;
    EXPECT_EQ(r["detail"][0]["loc"], k.loc) << k.body << " " << r;
  }
  // An argument refusal names its field as the agent API does: {loc: ["arguments", NAME], msg, type}.
  struct argument_case {
    json arguments;
    const char* name;
    const char* type;
    const char* msg;
  };
  const std::vector<argument_case> argument_cases = {
      {{{"priority", "urgent"}}, "priority", "literal_error", "Input should be 'low' or 'high'"},
      {{{"priority", 1}}, "priority", "literal_error", "Input should be 'low' or 'high'"},
      {{{"priority", "high"}, {"colour", "red"}}, "colour", "extra_forbidden",
       "Extra inputs are not permitted (`lookup_order` has no such parameter)"},
      {{{"priority", "high"}, {"order_id", 5}}, "order_id", "string_type", "Input should be a valid string"},
      {json::object(), "priority", "missing", "Field required (a choice)"},
  };
  for (const argument_case& k : argument_cases) {
    const json r = resolve(id, {{"outcome", "execute"}, {"arguments", k.arguments}, {"reason", "x"}});
    EXPECT_EQ(last_status_, 422) << r;
    EXPECT_EQ(r["code"], "INVALID_RESOLUTION") << r;
    ASSERT_EQ(r["detail"].size(), 1u) << k.arguments << " " << r;
    EXPECT_EQ(r["detail"][0]["loc"], json::array({"arguments", k.name})) << r;
    EXPECT_EQ(r["detail"][0]["type"], k.type) << r;
    EXPECT_EQ(r["detail"][0]["msg"], k.msg) << r;
    EXPECT_EQ(r["error"], std::string("arguments.") + k.name + ": " + k.msg) << r;
  }
  const json literal = resolve(id, {{"outcome", "execute"}, {"arguments", {{"priority", "urgent"}}}, {"reason", "x"}});
  EXPECT_EQ(literal["detail"][0]["ctx"], json({{"expected", "'low' or 'high'"}})) << literal;
  // Every bad field at once, each at its own loc.
  const json both = resolve(id, {{"outcome", "execute"}, {"arguments", {{"colour", "red"}, {"order_id", false}}}, {"reason", "x"}});
  ASSERT_EQ(both["detail"].size(), 3u) << both;
  EXPECT_EQ(both["detail"][2]["loc"], json::array({"arguments", "priority"})) << both;
  const json not_object = resolve(id, {{"outcome", "execute"}, {"arguments", "high"}, {"reason", "x"}});
  EXPECT_EQ(not_object["detail"], json::parse(R"([{"loc":["arguments"],"msg":"Input should be a valid dictionary","type":"dict_type"}])"))
      << not_object;
  EXPECT_EQ(resolve("e-000000000000-00000000", {{"outcome", "deny"}, {"reason", "x"}})["code"], "NOT_FOUND");
  EXPECT_EQ(last_status_, 404);
  test::http_client h(server_->port());
  EXPECT_EQ(h.post("/v1/escalations/" + id + "/resolve", "{not json").status, 400);
  EXPECT_EQ(get("/v1/escalations?status=lost")["code"], "INVALID_REQUEST");
  EXPECT_EQ(get("/v1/escalations?status=resolved&limit=0")["code"], "INVALID_REQUEST");
  EXPECT_EQ(get("/v1/escalations/not%20an%20id")["code"], "NOT_FOUND");
  // Still pending after all that.
  EXPECT_EQ(get("/v1/escalations/" + id)["status"], "pending");
  const json bad_frame = agent.request({{"type", "ack"}, {"id", 3}, {"resolution", "v-nope"}});
  EXPECT_EQ(bad_frame["code"], "UNKNOWN_RESOLUTION");
}

TEST_F(escalation_test, a_disconnected_agent_gets_its_resolution_when_it_resumes) {
  const unsigned short port = start();
  std::string id;
  {
    ws_client agent(port);
    id = agent.request(unsure("esc-away"))["escalation"];
    agent.close();
  }
  const json res = resolve(id, {{"outcome", "deny"}, {"reason", "not ours to answer"}});
  ASSERT_EQ(last_status_, 200) << res;

  ws_client back(port);
  const json resumed = back.request({{"type", "resume"}, {"id", 1}, {"session", "esc-away"}});
  EXPECT_EQ(resumed["resolutions"], 1) << resumed;
  const json frame = back.read();
  EXPECT_EQ(frame["type"], "resolution");
  EXPECT_EQ(frame["resolution"]["outcome"], "deny");
  EXPECT_TRUE(frame["resolution"]["tool"].is_null());
  // Not acknowledged: sent again on the next resume; acknowledged: not any more.
  EXPECT_EQ(back.request({{"type", "resume"}, {"session", "esc-away"}})["resolutions"], 1);
  EXPECT_EQ(back.read()["resolution"]["id"], res["id"]);
  back.send(json{{"type", "ack"}, {"resolution", res["id"]}});
  EXPECT_EQ(back.request({{"type", "resume"}, {"session", "esc-away"}})["resolutions"], 0);
}

// A resolved decision's agent-run tool has one result, whichever connection reports it: a resume
// on another connection, or after a restart, awaits it again but takes no second one.
TEST_F(escalation_test, a_resolved_decisions_tool_result_is_taken_once_across_connections_and_restarts) {
  const unsigned short port = start();
  ws_client agent(port);
  const json d = agent.request(unsure("esc-once"));
  ASSERT_EQ(d["action"], "escalate") << d;
  const json res = resolve(d["escalation"], {{"outcome", "execute"}, {"reason", "fine"}});
  ASSERT_EQ(last_status_, 200) << res;
  ASSERT_EQ(agent.read_type("resolution")["resolution"]["id"], res["id"]);
  const json first = agent.request({{"type", "tool_result"}, {"id", "t1"}, {"decision", d["decision"]}, {"ok", true}});
  EXPECT_EQ(first.value("type", ""), "ack") << first;

  // Not acknowledged, so a resume elsewhere gets the resolution again; the result is in already.
  ws_client other(port);
  EXPECT_EQ(other.request({{"type", "resume"}, {"session", "esc-once"}})["resolutions"], 1);
  EXPECT_EQ(other.read()["type"], "resolution");
  const json second = other.request({{"type", "tool_result"}, {"id", "t2"}, {"decision", d["decision"]}, {"ok", true}});
  EXPECT_EQ(second["code"], "DUPLICATE_TOOL_RESULT") << second;
  // Acknowledged (durably: a resume is answered after the ack's row), the resolution waits no
  // more; the connection that resumed before still may not add a result.
  agent.send(json{{"type", "ack"}, {"resolution", res["id"]}});
  EXPECT_EQ(agent.request({{"type", "resume"}, {"session", "esc-once"}})["resolutions"], 0);
  const json late = other.request({{"type", "tool_result"}, {"id", "t2b"}, {"decision", d["decision"]}, {"ok", true}});
  EXPECT_EQ(late["code"], "DUPLICATE_TOOL_RESULT") << late;

  // Reported, not acknowledged, then a restart: the next process reads the result from the log.
  const json d2 = agent.request(unsure("esc-twice"));
  ASSERT_EQ(d2["action"], "escalate") << d2;
  ASSERT_EQ(resolve(d2["escalation"], {{"outcome", "execute"}, {"reason", "fine"}})["outcome"], "execute");
  agent.read_type("resolution");
  EXPECT_EQ(agent.request({{"type", "tool_result"}, {"id", "t4"}, {"decision", d2["decision"]}, {"ok", true}})["type"], "ack");
  agent.close();
  other.close();
  restart();
  ws_client after(server_->port());
  EXPECT_EQ(after.request({{"type", "resume"}, {"session", "esc-twice"}})["resolutions"], 1);
  EXPECT_EQ(after.read()["type"], "resolution");
  const json third = after.request({{"type", "tool_result"}, {"id", "t5"}, {"decision", d2["decision"]}, {"ok", true}});
  EXPECT_EQ(third["code"], "DUPLICATE_TOOL_RESULT") << third;
  after.close();
  server_.reset();
  EXPECT_EQ(sql("SELECT count(*) AS n FROM tool_runs")[0]["n"], 2);
}

TEST_F(escalation_test, deadlines_resolve_with_the_configured_outcome_also_across_a_restart) {
  write("policy.yaml", std::string(policy_yaml) +
                           "escalation:\n  deadline_s: 1\n  tools:\n    lookup_order: {on_deadline: execute}\n"
                           "    echo_cmd: {deadline_s: 3600}\n");
  const unsigned short port = start();
  ws_client agent(port);
  const json d = agent.request(unsure("esc-late"));
  ASSERT_EQ(d["action"], "escalate") << d;
  // Nobody answers: a second later baton resolves it as configured for the tool.
  const json frame = agent.read_type("resolution");
  ASSERT_EQ(frame.value("type", ""), "resolution") << frame;
  EXPECT_EQ(frame["resolution"]["by"], "deadline");
  EXPECT_EQ(frame["resolution"]["reviewer"], "baton");
  EXPECT_EQ(frame["resolution"]["outcome"], "execute");
  EXPECT_EQ(frame["resolution"]["tool"], "lookup_order");
  {
    test::http_client h(port);
    EXPECT_NE(h.get("/metrics").body.find("baton_resolutions_total{outcome=\"execute\",by=\"deadline\"} 1\n"),
              std::string::npos);
  }

  // One that would run past a restart, one still waiting for a person (an hour).
  const std::string late = agent.request(unsure("esc-down", "broken_http"))["escalation"];
  const std::string waiting = agent.request(unsure("esc-wait", "echo_cmd"))["escalation"];
  ASSERT_FALSE(late.empty());
  ASSERT_FALSE(waiting.empty());
  agent.close();
  server_.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  const std::int64_t restarted_ms = unix_ms();
  start();
  // Passed while down: resolved at start-up, denied by default.
  const json was_late = get("/v1/escalations/" + late);
  EXPECT_EQ(was_late["status"], "resolved") << was_late;
  EXPECT_GE(was_late["resolution"]["created_ms"].get<std::int64_t>(), restarted_ms);
  EXPECT_EQ(was_late["resolution"]["by"], "deadline");
  EXPECT_EQ(was_late["resolution"]["outcome"], "deny");
  {
    // Counted by the baton that resolved it, at start-up.
    test::http_client h(server_->port());
    EXPECT_NE(h.get("/metrics").body.find("baton_resolutions_total{outcome=\"deny\",by=\"deadline\"} 1\n"),
              std::string::npos);
  }
  const json still = get("/v1/escalations?status=pending");
  ASSERT_EQ(still["escalations"].size(), 1u) << still;
  EXPECT_EQ(still["escalations"][0]["id"], waiting);

  // The late one's session gets it when it resumes.
  ws_client again(server_->port());
  EXPECT_EQ(again.request({{"type", "resume"}, {"session", "esc-down"}})["resolutions"], 1);
  EXPECT_EQ(again.read()["resolution"]["escalation"], late);
}

// The audit lane (policies/README.md, "Audit"): every would-execute decision drawn (rate 1) goes
// to a person as lane `audit`, and one nobody answers runs as the policy decided.
TEST_F(escalation_test, the_audit_lane_escalates_would_be_executions_and_runs_them_at_the_deadline) {
  write("policy.yaml", std::string(policy_yaml) + "audit: {rate: 1, deadline_s: 1}\n");
  const unsigned short port = start();
  ws_client agent(port);
  const json d = agent.request(decide("audit-1", {user("please look at order 5"), script({{"tool", "lookup_order"}, {"p", 0.95}})},
                                      {{"id", "a1"}, {"proposal", {{"tool", "lookup_order"}, {"arguments", {{"order_id", "5"}}}}}}));
  ASSERT_EQ(d.value("type", ""), "decision") << d;
  EXPECT_EQ(d["action"], "escalate");
  EXPECT_EQ(d["lane"], "audit");
  EXPECT_EQ(d["tool"], "lookup_order");
  const json e = get("/v1/escalations/" + d["escalation"].get<std::string>());
  EXPECT_EQ(e["reason"], "audit") << e;
  EXPECT_EQ(e["on_deadline"], "execute");
  EXPECT_NE(e.value("question", "").find("Audit: the policy would have run lookup_order at confidence 0.95"),
            std::string::npos) << e;
  EXPECT_EQ(e["evidence"]["rule"], "audit");
  EXPECT_EQ(e["evidence"]["inputs"]["audit_rate"], 1);
  EXPECT_EQ(e["evidence"]["inputs"]["lane"], "default");
  // Not drawn by the audit: below the execute threshold nothing changes.
  const json unsure_one = agent.request(unsure("audit-2"));
  EXPECT_EQ(unsure_one["lane"], "lane:default") << unsure_one;
  // Nobody answers the audit: at its deadline the decision runs.
  const json frame = agent.read_type("resolution");
  ASSERT_EQ(frame.value("type", ""), "resolution") << frame;
  EXPECT_EQ(frame["resolution"]["by"], "deadline");
  EXPECT_EQ(frame["resolution"]["outcome"], "execute");
  EXPECT_EQ(frame["resolution"]["tool"], "lookup_order");
  const auto rows = sql("SELECT action, lane, confidence FROM decisions WHERE session = 'audit-1'");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["action"], "escalate");
  EXPECT_EQ(rows[0]["lane"], "audit");
  EXPECT_EQ(rows[0]["confidence"], 0.95);
}

TEST_F(escalation_test, a_changed_policy_refuses_a_resolution_unless_forced) {
  ws_client agent(start());
  const std::string id = agent.request(unsure("esc-ver"))["escalation"];
  agent.close();
  write("policy.yaml", std::string(policy_yaml) + "escalation: {deadline_s: 600}\n");
  restart();
  json r = resolve(id, {{"outcome", "deny"}, {"reason", "old question"}});
  EXPECT_EQ(last_status_, 409);
  EXPECT_EQ(r["code"], "VERSION_CHANGED");
  EXPECT_EQ(get("/v1/escalations/" + id)["evidence"]["why"],
            "lane:default (the policy changed since this was raised: its thresholds then are not shown)");
  EXPECT_NE(r["error"].get<std::string>().find("the policy"), std::string::npos) << r;
  r = resolve(id, {{"outcome", "deny"}, {"reason", "old question"}, {"force", true}});
  ASSERT_EQ(last_status_, 200) << r;
  EXPECT_EQ(r["forced"], true);
  resolve(id, {{"outcome", "deny"}, {"reason", "twice"}, {"force", true}});
  EXPECT_EQ(last_status_, 409);
}

TEST_F(escalation_test, a_tool_baton_runs_runs_once_resolved) {
  ws_client agent(start());
  const json d = agent.request(unsure("esc-run", "echo_cmd"));
  const json res = resolve(d["escalation"], {{"outcome", "execute"}, {"reason", "fine"}});
  ASSERT_EQ(last_status_, 200) << res;
  EXPECT_EQ(res["executor"], "command");
  const json result = agent.read_type("tool_result");
  ASSERT_EQ(result.value("type", ""), "tool_result") << result;
  EXPECT_EQ(result["decision"], d["decision"]);
  EXPECT_EQ(result["ok"], true);
  agent.close();
  server_.reset();
  const auto runs = sql("SELECT decision, tool, executor, ok FROM tool_runs");
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0]["decision"], d["decision"]);
  EXPECT_EQ(runs[0]["executor"], "command");
}

// A tool baton ran on a resolution while its agent was away: a resume sends its tool_result after
// the resolution (no `event`: baton's history of the session is not changed), also after a restart
// (read back from the log), until the resolution is acknowledged; the answer to a resume after an
// ack comes once the ack's delivery row is in the log.
TEST_F(escalation_test, an_absent_agent_hears_of_the_tool_baton_ran_when_it_resumes) {
  const unsigned short port = start();
  json d;
  {
    ws_client agent(port);
    d = agent.request(unsure("esc-away-run", "echo_cmd"));
    agent.close();
  }
  const json res = resolve(d["escalation"], {{"outcome", "execute"}, {"reason", "fine"}});
  ASSERT_EQ(last_status_, 200) << res;
  for (int i = 0; i < 500 && sql("SELECT id FROM tool_runs").empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(sql("SELECT id FROM tool_runs").size(), 1u);

  auto resume_hears_both = [&](ws_client& agent) {
    const json resumed = agent.request({{"type", "resume"}, {"id", 1}, {"session", "esc-away-run"}});
    EXPECT_EQ(resumed["resolutions"], 1) << resumed;
    const json resolution = agent.read();
    ASSERT_EQ(resolution.value("type", ""), "resolution") << resolution;
    EXPECT_EQ(resolution["resolution"]["id"], res["id"]);
    const json run = agent.read();
    EXPECT_EQ(run["type"], "tool_result") << run;
    EXPECT_EQ(run["decision"], d["decision"]);
    EXPECT_EQ(run["tool"], "echo_cmd");
    EXPECT_EQ(run["ok"], true);
    EXPECT_FALSE(run.contains("event")) << run;
  };
  {
    ws_client agent(port);
    resume_hears_both(agent);
  }
  restart();
  ws_client agent(server_->port());
  resume_hears_both(agent);
  // Another connection holds the log's write lock for 400 ms: the ack's row waits for it, and so
  // must the answer to the resume behind the ack.
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(db().c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  std::thread release([other] {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    sqlite3_exec(other, "COMMIT", nullptr, nullptr, nullptr);
    sqlite3_close(other);
  });
  const auto sent = std::chrono::steady_clock::now();
  agent.send(json{{"type", "ack"}, {"resolution", res["id"]}});
  const json resumed = agent.request({{"type", "resume"}, {"id", 2}, {"session", "esc-away-run"}});
  const auto waited = std::chrono::steady_clock::now() - sent;
  release.join();
  EXPECT_EQ(resumed["resolutions"], 0) << resumed;
  EXPECT_GE(waited, std::chrono::milliseconds(300)) << "the resume was answered before the ack's row could be written";
  EXPECT_EQ(sql("SELECT resolution FROM deliveries").size(), 1u) << "the resume was answered before the ack's row";
  EXPECT_EQ(sql("SELECT id FROM tool_runs").size(), 1u) << "the tool ran again";
}

// An agent that acknowledges the resolution at once, before the tool baton runs for it is done,
// still gets the run's tool_result on its connection.
TEST_F(escalation_test, an_agent_that_acks_before_the_tool_is_done_still_hears_of_it) {
  std::string registry = registry_yaml;
  const std::string fast = "argv: [/bin/cat]";
  registry.replace(registry.find(fast), fast.size(), "argv: [/bin/sh, -c, \"sleep 0.3; cat\"]");
  write("tools.yaml", registry);
  ws_client agent(start());
  const json d = agent.request(unsure("esc-quick-ack", "echo_cmd"));
  const json res = resolve(d["escalation"], {{"outcome", "execute"}, {"reason", "fine"}});
  ASSERT_EQ(last_status_, 200) << res;
  const json resolution = agent.read_type("resolution");
  ASSERT_EQ(resolution["resolution"]["id"], res["id"]) << resolution;
  // No resume after the ack: it would attach the session to this connection again.
  agent.send(json{{"type", "ack"}, {"resolution", res["id"]}});
  const json run = agent.read_type("tool_result");
  ASSERT_EQ(run.value("type", ""), "tool_result") << "the run's frame was lost after the ack";
  EXPECT_EQ(run["decision"], d["decision"]);
  EXPECT_EQ(run["ok"], true);
}

TEST_F(escalation_test, concurrent_resolves_are_answered_once) {
  ws_client agent(start());
  const std::string id = agent.request(unsure("esc-race"))["escalation"];
  std::vector<int> statuses(16);
  std::vector<std::thread> reviewers;
  for (std::size_t i = 0; i < statuses.size(); ++i) {
    reviewers.emplace_back([&, i] {
      test::http_client h(server_->port());
      statuses[i] = h.post("/v1/escalations/" + id + "/resolve",
                           render_json(json{{"outcome", "deny"}, {"reason", "reviewer " + std::to_string(i)}}, false))
                        .status;
    });
  }
  for (auto& t : reviewers) t.join();
  EXPECT_EQ(std::count(statuses.begin(), statuses.end(), 200), 1);
  EXPECT_EQ(std::count(statuses.begin(), statuses.end(), 409), 15);
  agent.close();
  server_.reset();
  EXPECT_EQ(sql("SELECT count(*) AS n FROM resolutions")[0]["n"], 1);
}

TEST_F(escalation_test, a_deadline_whose_execute_no_longer_fits_the_registry_is_denied_at_start_up) {
  write("policy.yaml", std::string(policy_yaml) + "escalation:\n  deadline_s: 1\n  on_deadline: execute\n");
  ws_client agent(start());
  const json d = agent.request(unsure("esc-gone"));
  ASSERT_EQ(d["arguments"]["priority"], "high") << d;
  agent.close();
  server_.reset();
  // The registry changes while baton is down: `high` is no longer a priority.
  std::string registry = registry_yaml;
  registry.replace(registry.find("high: Urgent"), 12, "urgent: Now");
  start_changed("tools.yaml", registry);
  expect_denied(d["escalation"], "no longer fits the registry");
}

// A tool the policy denies since an escalation was raised is not run for it, whether baton was
// restarted (as a reload would deny it) or its deadline passed while baton was down.
TEST_F(escalation_test, a_tool_denied_while_baton_was_down_is_not_run_for_its_escalation) {
  const std::string escalation_policy = "escalation:\n  on_deadline: execute\n  tools:\n    lookup_order: {deadline_s: 1}\n";
  write("policy.yaml", std::string(policy_yaml) + escalation_policy);
  ws_client agent(start());
  const json late = agent.request(unsure("deny-late"));
  const json open = agent.request(unsure("deny-open", "echo_cmd"));
  ASSERT_EQ(late["action"], "escalate") << late;
  ASSERT_EQ(open["action"], "escalate") << open;
  agent.close();
  server_.reset();
  std::string policy = std::string(policy_yaml) + escalation_policy;
  policy.replace(policy.find("deny: [wipe_disk]"), 17, "deny: [wipe_disk, lookup_order, echo_cmd]");
  start_changed("policy.yaml", policy);
  expect_denied(late["escalation"], "the policy now denies `lookup_order`");
  expect_denied(open["escalation"], "denied at start-up");
  server_.reset();
  EXPECT_EQ(sql("SELECT count(*) AS n FROM tool_runs")[0]["n"], 0);
}

// The registry and policy of the evidence tests: a high-risk tool beyond max_risk, and a score
// question whose trigger fires on the scripted engine's flat answer (score 1 of 0–2).
class evidence_test : public escalation_test {
 protected:
  void SetUp() override {
    escalation_test::SetUp();
    std::string registry = registry_yaml;
    const std::string finish = "finish: {description: Nothing more to do}\n";
    registry.replace(registry.find(finish), finish.size(),
                     "  - id: rollback_deploy\n    description: Roll back the last deploy\n    risk: high\n" + finish);
    registry += "  severity: {type: score, instructions: \"How bad is it?\", criteria: [minor, major, critical]}\n";
    write("tools.yaml", registry);
    write("policy.yaml", "confidence: p_max\n"
                         "rules:\n  max_risk: medium\n"
                         "  escalate_when:\n    - {question: needs_person, noul_above: 0.9}\n"
                         "    - {question: severity, score_above: 0.8}\n"
                         "lanes:\n  default: {execute: 0.8, fallback: 0.5}\n"
                         "on_engine_error: escalate\n");
  }

  static const json* answer_of(const json& evidence, const std::string& question) {
    for (const json& a : evidence["answers"]) {
      if (a["question"] == question) return &a;
    }
    return nullptr;
  }
};

TEST_F(evidence_test, an_escalation_says_which_rule_fired_on_which_answers) {
  ws_client agent(start());
  const json risky = agent.request(decide("ev-risk", {user("roll it back"), script({{"tool", "rollback_deploy"}})}));
  ASSERT_EQ(risky.value("action", ""), "escalate") << risky;
  const json e = get("/v1/escalations/" + risky["escalation"].get<std::string>());
  ASSERT_EQ(last_status_, 200) << e;
  const json& ev = e["evidence"];
  EXPECT_EQ(ev["rule"], "rule:max_risk") << ev;
  EXPECT_EQ(ev["why"], "rollback_deploy is high risk; this policy allows at most medium");
  EXPECT_EQ(ev["inputs"], json({{"tool", "rollback_deploy"}, {"risk", "high"}, {"max_risk", "medium"}}));
  EXPECT_EQ(ev["tie"], false);
  // Every other question's answer, in words and numbers; the tool question is the candidates.
  const json* needs = answer_of(ev, "needs_person");
  ASSERT_NE(needs, nullptr) << ev;
  EXPECT_EQ((*needs)["type"], "noul");
  EXPECT_DOUBLE_EQ((*needs)["p_true"].get<double>(), 0.1);
  EXPECT_EQ((*needs)["instructions"], "Does this need a person?");
  const json* severity = answer_of(ev, "severity");
  ASSERT_NE(severity, nullptr) << ev;
  EXPECT_DOUBLE_EQ((*severity)["score"].get<double>(), 1.0);
  EXPECT_EQ((*severity)["level"], "major");
  // Another tool's parameters do not bear on this one: not shown.
  EXPECT_EQ(answer_of(ev, "lookup_order.priority"), nullptr) << ev;
  EXPECT_EQ(answer_of(ev, "tool"), nullptr);

  // The score trigger: its answer against its threshold.
  const json scored = agent.request(decide("ev-score", {user("order 5"), script({{"tool", "lookup_order"}})}));
  const json s = get("/v1/escalations/" + scored["escalation"].get<std::string>());
  EXPECT_EQ(s["evidence"]["rule"], "rule:escalate_when:severity") << s;
  EXPECT_EQ(s["evidence"]["why"], "severity scored 1, above the trigger 0.8 (score_above)");
  EXPECT_EQ(s["evidence"]["inputs"], json({{"question", "severity"}, {"score", 1.0}, {"score_above", 0.8}}));
  // The escalated tool's own parameters are.
  const json* priority = answer_of(s["evidence"], "lookup_order.priority");
  ASSERT_NE(priority, nullptr) << s;
  EXPECT_EQ((*priority)["choice"], "high");

  // The same evidence on the review socket and, after a restart, from the log.
  ws_client reviewer(server_->port(), "/v1/review");
  const json snapshot = reviewer.read();
  ASSERT_EQ(snapshot["escalations"].size(), 2u) << snapshot;
  EXPECT_EQ(snapshot["escalations"][0]["evidence"], ev);
  agent.close();
  reviewer.close();
  restart();
  EXPECT_EQ(get("/v1/escalations/" + risky["escalation"].get<std::string>())["evidence"], ev);
  EXPECT_EQ(get("/v1/escalations?status=pending")["escalations"][1]["evidence"], s["evidence"]);
}

TEST_F(escalation_test, a_low_confidence_lane_and_a_flat_tie_are_told_as_such) {
  ws_client agent(start());
  const json d = agent.request(unsure("ev-lane"));
  const json e = get("/v1/escalations/" + d["escalation"].get<std::string>());
  EXPECT_EQ(e["evidence"]["why"], "confidence 0.3 (p_max) is below the default lane's fallback 0.5") << e;
  EXPECT_EQ(e["evidence"]["inputs"]["fallback"], 0.5);
  EXPECT_EQ(e["evidence"]["tie"], false);
  // No tool in the script: every option equally likely, the first one proposed.
  const json flat = agent.request(decide("ev-tie", {user("hm")}));
  ASSERT_EQ(flat.value("action", ""), "escalate") << flat;
  const json t = get("/v1/escalations/" + flat["escalation"].get<std::string>());
  EXPECT_EQ(t["evidence"]["tie"], true) << t;
  EXPECT_EQ(t["evidence"]["rule"], "lane:default");
  // Resolved, it keeps its evidence.
  resolve(flat["escalation"], {{"outcome", "deny"}, {"reason", "unclear"}});
  ASSERT_EQ(last_status_, 200);
  EXPECT_EQ(get("/v1/escalations/" + flat["escalation"].get<std::string>())["evidence"], t["evidence"]);
  EXPECT_EQ(get("/v1/escalations?status=resolved")["escalations"][0]["evidence"], t["evidence"]);
}

// Each wording of the evidence, from the scripted engine's answers (the fixture's policy: needs_person
// over 0.9 escalates; the default lane executes at 0.8, falls back at 0.5; engine errors escalate).
TEST_F(escalation_test, every_evidence_wording_is_reached) {
  ws_client agent(start());
  auto why = [&](const std::string& session, const json& s) {
    const json d = agent.request(decide(session, {user("order 5"), script(s)}));
    EXPECT_EQ(d.value("action", ""), "escalate") << d;
    return get("/v1/escalations/" + d.value("escalation", "none"))["evidence"]["why"];
  };
  EXPECT_EQ(why("w-noul", {{"tool", "lookup_order"}, {"needs_person", 0.95}}),
            "needs_person: P(true) 0.95 is above the trigger 0.9 (noul_above)");
  // Just above: as many decimals as it takes to read above.
  EXPECT_EQ(why("w-close", {{"tool", "lookup_order"}, {"needs_person", 0.90001}}),
            "needs_person: P(true) 0.90001 is above the trigger 0.9 (noul_above)");
  // finish has no fallback: unsure of it between fallback and execute, a person decides.
  EXPECT_EQ(why("w-finish", {{"tool", "finish"}, {"p", 0.6}}), "confidence 0.6 (p_max) is below the default lane's execute 0.8");
  EXPECT_EQ(why("w-close-lane", {{"tool", "lookup_order"}, {"p", 0.49999}}),
            "confidence 0.49999 (p_max) is below the default lane's fallback 0.5");
  EXPECT_EQ(why("w-error", {{"fail", "ENGINE_BROKE"}}),
            "the engine could not decide (ENGINE_BROKE) and this policy escalates engine failures (on_engine_error: escalate)");
}

// The fallback engine's pass: another baton, over SystemOne, unsure too or down.
TEST_F(escalation_test, the_fallback_engines_pass_is_told_as_such) {
  auto back_config = parse_config("server: {listen: 127.0.0.1:0}\nlog: {path: back.db}\nsystemone: {model_aliases: [big]}\n");
  auto back = running_server::start(back_config, std::make_unique<scripted_engine>());
  auto front_with = [&](const std::string& url) {
    server_.reset();
    config_ = parse_config("server: {listen: 127.0.0.1:0}\nlog: {path: decisions.db}\nrouting: {fallback: {name: systemone, url: \"" +
                           url + "\", model: big, retries: 0, request_timeout_ms: 1000, timeout_ms: 2000}}\n");
    return start();
  };
  {
    ws_client agent(front_with("http://127.0.0.1:" + std::to_string(back->port())));
    const json d = agent.request(decide("w-fallback", {user("order 5"), script({{"tool", "lookup_order"}, {"p", 0.6}})}));
    ASSERT_EQ(d.value("lane", ""), "fallback:lane:default") << d;
    EXPECT_EQ(get("/v1/escalations/" + d["escalation"].get<std::string>())["evidence"]["why"],
              "the fallback engine's confidence 0.6 (p_max) is below the default lane's execute 0.8: a second unsure "
              "answer goes to a person");
  }
  back.reset();
  {
    ws_client agent(front_with("http://127.0.0.1:1"));
    const json d = agent.request(decide("w-down", {user("order 5"), script({{"tool", "lookup_order"}, {"p", 0.6}})}));
    ASSERT_EQ(d.value("lane", ""), "fallback:on_engine_error") << d;
    EXPECT_EQ(get("/v1/escalations/" + d["escalation"].get<std::string>())["evidence"]["why"],
              "the fallback engine could not decide (UPSTREAM_UNREACHABLE) and this policy escalates engine failures "
              "(on_engine_error: escalate)");
  }
}

// A registry in two stages falls back in two stages too: the larger engine is asked the first
// stage's questions again, a decide frame's extra questions among them.
TEST_F(escalation_test, a_fallback_in_two_stages_asks_the_extra_questions_again) {
  auto back_config = parse_config("server: {listen: 127.0.0.1:0}\nlog: {path: back.db}\nsystemone: {model_aliases: [big]}\n");
  auto back = running_server::start(back_config, std::make_unique<scripted_engine>());
  write("tools.yaml", R"(tools:
  - {id: a.one, group: a, description: First tool of a}
  - {id: a.two, group: a, description: Second tool of a}
  - {id: b.one, group: b, description: First tool of b}
  - {id: b.two, group: b, description: Second tool of b}
finish: {description: Nothing more to do}
)");
  write("policy.yaml", "confidence: p_max\nlanes:\n  default: {execute: 0.9, fallback: 0.3}\non_engine_error: escalate\n");
  config_ = parse_config("server: {listen: 127.0.0.1:0}\nlog: {path: decisions.db}\nrouting: {max_options: 4, fallback: "
                         "{name: systemone, url: \"http://127.0.0.1:" + std::to_string(back->port()) +
                         "\", model: big, retries: 0, request_timeout_ms: 2000, timeout_ms: 4000}}\n");
  ws_client agent(start());
  // P(a)·P(a.two | a) = 0.8 · 0.6: under execute 0.9, over fallback 0.3, for both engines.
  const json d = agent.request(decide("w-staged", {script({{"tool", "a.two"}, {"p", 0.6}, {"group", "a"}, {"group_p", 0.8}})},
                                      {{"questions", {{"is_urgent", {{"type", "noul"}, {"instructions", "Is it urgent?"}}}}}}));
  ASSERT_EQ(d.value("type", ""), "decision") << d;
  EXPECT_EQ(d["lane"], "fallback:lane:default") << d;
  EXPECT_TRUE(d["answers"].contains("is_urgent")) << d["answers"];
  EXPECT_NE(d["answers"].dump().find("group:b"), std::string::npos) << d["answers"];
}

// The registry's tools with their parameters, typed, for the inbox's argument fields.
TEST_F(escalation_test, the_tools_and_their_parameters_are_served_to_reviewers) {
  start();
  const json tools = get("/v1/tools");
  ASSERT_EQ(last_status_, 200) << tools;
  ASSERT_EQ(tools["tools"].size(), 4u) << tools;
  const json& lookup = tools["tools"][0];
  EXPECT_EQ(lookup["id"], "lookup_order");
  EXPECT_EQ(lookup["executor"], "agent");
  ASSERT_EQ(lookup["parameters"].size(), 2u);
  EXPECT_EQ(lookup["parameters"][0], json({{"name", "order_id"}, {"type", "text"}, {"instructions", ""},
                                           {"values", json::array()}, {"fixed", nullptr}}));
  EXPECT_EQ(lookup["parameters"][1]["type"], "choice");
  EXPECT_EQ(lookup["parameters"][1]["values"],
            json::parse(R"([{"value":"low","description":"Not urgent"},{"value":"high","description":"Urgent"}])"));
  EXPECT_EQ(tools["tools"][1]["executor"], "command");
  EXPECT_EQ(tools["finish"], "Nothing more to do");
}

// Waits, bounded, until the resolved escalation `id` shows its tool run.
json resolved_with_run(const std::function<json()>& read) {
  json e;
  for (int i = 0; i < 100; ++i) {
    e = read();
    if (e["resolution"].is_object() && e["resolution"]["tool_run"].is_object()) return e;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return e;
}

std::uint64_t metric(const std::string& text, const std::string& series) {
  const auto at = text.find(series + " ");
  return at == std::string::npos ? 0 : std::stoull(text.substr(at + series.size() + 1));
}

TEST_F(escalation_test, the_tool_run_of_an_execute_is_shown_and_counted) {
  ws_client agent(start());
  ws_client reviewer(server_->port(), "/v1/review");
  reviewer.read_type("snapshot");
  const std::string ok_id = agent.request(unsure("run-ok", "echo_cmd"))["escalation"];
  const std::string bad_id = agent.request(unsure("run-bad", "broken_http"))["escalation"];
  const std::string denied_id = agent.request(unsure("run-denied", "echo_cmd"))["escalation"];
  ASSERT_EQ(resolve(ok_id, {{"outcome", "execute"}, {"reason", "fine"}})["executor"], "command");
  ASSERT_EQ(resolve(bad_id, {{"outcome", "execute"}, {"reason", "try it"}})["executor"], "http");
  resolve(denied_id, {{"outcome", "deny"}, {"reason", "no"}});
  ASSERT_EQ(last_status_, 200);

  const json ok = resolved_with_run([&] { return get("/v1/escalations/" + ok_id); });
  ASSERT_TRUE(ok["resolution"]["tool_run"].is_object()) << ok;
  EXPECT_EQ(ok["resolution"]["tool_run"]["ok"], true);
  EXPECT_EQ(ok["resolution"]["tool_run"]["tool"], "echo_cmd");
  EXPECT_EQ(ok["resolution"]["tool_run"]["executor"], "command");
  EXPECT_TRUE(ok["resolution"]["tool_run"]["error_code"].is_null());
  const json bad = resolved_with_run([&] { return get("/v1/escalations/" + bad_id); });
  ASSERT_TRUE(bad["resolution"]["tool_run"].is_object()) << bad;
  EXPECT_EQ(bad["resolution"]["tool_run"]["ok"], false);
  EXPECT_EQ(bad["resolution"]["tool_run"]["error_code"], "EXECUTOR_UNREACHABLE");
  EXPECT_FALSE(bad["resolution"]["tool_run"]["detail"].get<std::string>().empty());
  EXPECT_TRUE(get("/v1/escalations/" + denied_id)["resolution"]["tool_run"].is_null());
  // The list says the same.
  for (const json& e : get("/v1/escalations?status=resolved")["escalations"]) {
    if (e["id"] == bad_id) {
      EXPECT_EQ(e["resolution"]["tool_run"], bad["resolution"]["tool_run"]);
    }
  }
  // Reviewers hear of each run.
  std::map<std::string, json> runs;
  for (int i = 0; i < 12 && runs.size() < 2; ++i) {
    const json f = reviewer.read();
    if (f.value("type", "") == "tool_run") runs[f["escalation"]] = f["tool_run"];
  }
  EXPECT_EQ(runs[ok_id], ok["resolution"]["tool_run"]);
  EXPECT_EQ(runs[bad_id], bad["resolution"]["tool_run"]);

  test::http_client h(server_->port());
  const std::string text = h.get("/metrics").body;
  EXPECT_EQ(metric(text, R"(baton_tool_runs_total{tool="echo_cmd",outcome="ok"})"), 1u) << text;
  EXPECT_EQ(metric(text, R"(baton_tool_runs_total{tool="broken_http",outcome="failed"})"), 1u) << text;
  EXPECT_EQ(metric(text, R"(baton_resolutions_total{outcome="execute",by="reviewer"})"), 2u) << text;
  EXPECT_EQ(metric(text, R"(baton_resolutions_total{outcome="deny",by="reviewer"})"), 1u) << text;
}

class reviewer_test : public escalation_test {
 protected:
  void SetUp() override {
    escalation_test::SetUp();
    ::setenv("BATON_TEST_AGENT_KEY", "agent-secret-0123456789", 1);
    ::setenv("BATON_TEST_REVIEWER_KEY", "reviewer-secret-0123456789", 1);
    ::setenv("BATON_TEST_AUDITOR_KEY", "auditor-secret-0123456789", 1);
    ::setenv("BATON_TEST_AGENT_EU_KEY", "agent-eu-secret-0123456789", 1);
    config_ = parse_config(
        "server: {listen: 127.0.0.1:0, io_threads: 2}\n"
        "engine: {timeout_ms: 2000}\n"
        "log: {path: decisions.db, synchronous: normal}\n"
        "auth:\n  keys:\n"
        "    - {name: bot, role: agent, env: BATON_TEST_AGENT_KEY}\n"
        "    - {name: alice, role: reviewer, env: BATON_TEST_REVIEWER_KEY}\n"
        "    - {name: audit, role: auditor, env: BATON_TEST_AUDITOR_KEY}\n"
        "    - {name: bot/eu, role: agent, env: BATON_TEST_AGENT_EU_KEY}\n");
  }
};

TEST_F(reviewer_test, roles_the_review_socket_and_resolving_by_frame) {
  const unsigned short port = start();
  // The browser's way: the key as a subprotocol, answered with baton.review.
  ws_client reviewer(port, "/v1/review", {}, "baton.review, bearer.reviewer-secret-0123456789");
  EXPECT_EQ(reviewer.handshake_response[boost::beast::http::field::sec_websocket_protocol], "baton.review");
  EXPECT_EQ(reviewer.read(), json({{"type", "snapshot"}, {"escalations", json::array()}}));
  EXPECT_THROW(ws_client(port, "/v1/review", "agent-secret-0123456789"), boost::system::system_error);  // 403
  EXPECT_THROW(ws_client(port, "/v1/review"), boost::system::system_error);                  // 401

  ws_client agent(port, "/v1/agent", "agent-secret-0123456789");
  const json d = agent.request(unsure("esc-rev"));
  const json pushed = reviewer.read();
  ASSERT_EQ(pushed.value("type", ""), "escalation") << pushed;
  const std::string id = pushed["escalation"]["id"];
  EXPECT_EQ(id, d["escalation"]);
  EXPECT_EQ(pushed["escalation"]["session"], "bot/esc-rev");  // scoped by the agent's key

  EXPECT_EQ(get("/v1/escalations", "agent-secret-0123456789")["code"], "FORBIDDEN");
  EXPECT_EQ(get("/v1/tools", "agent-secret-0123456789")["code"], "FORBIDDEN");
  EXPECT_EQ(get("/v1/tools", "reviewer-secret-0123456789")["tools"].size(), 4u);
  EXPECT_EQ(get("/v1/escalations", "auditor-secret-0123456789")["escalations"].size(), 1u);
  EXPECT_EQ(resolve(id, {{"outcome", "deny"}, {"reason", "x"}}, "auditor-secret-0123456789")["code"], "FORBIDDEN");
  EXPECT_EQ(resolve(id, {{"outcome", "deny"}, {"reason", "x"}})["code"], "UNAUTHORIZED");

  reviewer.send(json{{"type", "resolve"}, {"id", 5}, {"escalation", id}, {"outcome", "deny"}, {"reason", "no"}});
  // Every reviewer hears of it first, then this one gets its answer.
  const json resolved = reviewer.read();
  EXPECT_EQ(resolved.value("type", ""), "resolved") << resolved;
  const json answer = reviewer.read();
  ASSERT_EQ(answer.value("type", ""), "resolve_result") << answer;
  EXPECT_EQ(answer["ref"], 5);
  EXPECT_EQ(answer["resolution"]["reviewer"], "alice");
  EXPECT_EQ(resolved["escalation"]["resolution"]["reviewer"], "alice");

  const json frame = agent.read_type("resolution");
  EXPECT_EQ(frame["resolution"]["reviewer"], "alice");
  // Any connection of the session's key may acknowledge it.
  ws_client other(port, "/v1/agent", "agent-secret-0123456789");
  other.send(json{{"type", "ack"}, {"resolution", frame["resolution"]["id"]}});
  EXPECT_EQ(other.request({{"type", "resume"}, {"session", "esc-rev"}})["resolutions"], 0);
}

TEST_F(reviewer_test, a_key_acknowledges_only_its_own_sessions_resolutions) {
  const unsigned short port = start();
  ws_client eu(port, "/v1/agent", "agent-eu-secret-0123456789");
  const std::string id = eu.request(unsure("shared-name"))["escalation"];
  const json res = resolve(id, {{"outcome", "deny"}, {"reason", "no"}}, "reviewer-secret-0123456789");
  ASSERT_EQ(last_status_, 200) << res;
  EXPECT_EQ(res["session"], "bot/eu/shared-name");
  const std::string resolution = res["id"];
  ASSERT_EQ(eu.read_type("resolution")["resolution"]["id"], resolution);

  // Key `bot` (whose name prefixes `bot/eu`), same session name: neither its resolution nor its ack.
  ws_client bot(port, "/v1/agent", "agent-secret-0123456789");
  EXPECT_EQ(bot.request({{"type", "resume"}, {"session", "shared-name"}})["resolutions"], 0);
  EXPECT_EQ(bot.request({{"type", "ack"}, {"id", 1}, {"resolution", resolution}})["code"], "UNKNOWN_RESOLUTION");
  EXPECT_EQ(eu.request({{"type", "resume"}, {"session", "shared-name"}})["resolutions"], 1);
  eu.read();
  // Its own key acknowledges it, twice without harm.
  // (frames are answered in order: an error for either ack would come before `resumed`).
  eu.send(json{{"type", "ack"}, {"resolution", resolution}});
  eu.send(json{{"type", "ack"}, {"resolution", resolution}});
  const json resumed = eu.request({{"type", "resume"}, {"session", "shared-name"}});
  EXPECT_EQ(resumed.value("type", ""), "resumed") << resumed;
  EXPECT_EQ(resumed["resolutions"], 0);
}

}  // namespace
}  // namespace baton
