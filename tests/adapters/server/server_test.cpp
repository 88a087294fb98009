// End-to-end: a real server on an ephemeral 127.0.0.1 port, real WebSocket clients, a scripted
// engine whose answers each test sets through the history, and the SQLite log read back.
#include <gtest/gtest.h>

#include <sqlite3.h>

#include <filesystem>
#include <thread>

#include "support/server_fixture.hpp"

namespace baton {
namespace {

using namespace test_server;

TEST_F(server_test, execute_lane_with_an_agent_run_tool_and_its_tool_result) {
  ws_client c(start());
  const json d = c.request(decide("s1", {user("where is order 77?"), script({{"tool", "lookup_order"}, {"p", 0.95}})},
                                  {{"id", 41}, {"proposal", {{"tool", "lookup_order"}, {"arguments", {{"order_id", "77"}}}}}}));
  ASSERT_EQ(d.value("type", ""), "decision") << d;
  EXPECT_EQ(d["id"], 41);
  EXPECT_EQ(d["action"], "execute");
  EXPECT_EQ(d["tool"], "lookup_order");
  EXPECT_EQ(d["lane"], "lane:default");
  EXPECT_EQ(d["executor"], "agent");
  EXPECT_EQ(d["turn"], 1);
  EXPECT_DOUBLE_EQ(d["confidence"].get<double>(), 0.95);
  EXPECT_EQ(d["arguments"], json::parse(R"({"priority":"high","order_id":"77"})"));
  EXPECT_EQ(d["answers"]["tool"]["choice"], "lookup_order");
  EXPECT_EQ(d["model"], "scripted-1");
  for (const char* k : {"queue", "compile", "engine", "policy", "log", "total"}) EXPECT_TRUE(d["timings_ms"].contains(k)) << k;

  const std::string id = d["decision"];
  const json ack = c.request({{"type", "tool_result"}, {"id", "r1"}, {"decision", id}, {"ok", true},
                              {"output", {{"status", "shipped"}}}});
  EXPECT_EQ(ack, json({{"type", "ack"}, {"ref", "r1"}, {"decision", id}}));
  const json again = c.request({{"type", "tool_result"}, {"id", "r2"}, {"decision", id}, {"ok", true}});
  EXPECT_EQ(again["code"], "DUPLICATE_TOOL_RESULT");
  EXPECT_EQ(again["ref"], "r2");

  const auto rows = sql("SELECT id, session, turn, action, tool, lane, engine, model FROM decisions");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["id"], id);
  EXPECT_EQ(rows[0]["action"], "execute");
  EXPECT_EQ(rows[0]["model"], "scripted-1");
  const auto runs = sql("SELECT decision, tool, executor, ok FROM tool_runs");
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0]["decision"], id);
  EXPECT_EQ(runs[0]["executor"], "agent");
}

TEST_F(server_test, fallback_escalate_deny_and_finish) {
  ws_client c(start());
  struct lane_case {
    json script;
    const char* action;
    const char* lane;
  };
  const std::vector<lane_case> cases = {
      {{{"tool", "lookup_order"}, {"p", 0.6}}, "fallback", "lane:default"},
      {{{"tool", "lookup_order"}, {"p", 0.3}}, "escalate", "lane:default"},
      {{{"tool", "lookup_order"}, {"p", 0.95}, {"needs_person", 0.97}}, "escalate", "rule:escalate_when:needs_person"},
      {{{"tool", "wipe_disk"}, {"p", 0.99}}, "deny", "rule:deny"},
      {{{"tool", "finish"}, {"p", 0.9}}, "finish", "lane:default"},
  };
  int n = 0;
  for (const lane_case& k : cases) {
    const json d = c.request(decide("lanes-" + std::to_string(n++), {script(k.script)}));
    ASSERT_EQ(d.value("type", ""), "decision") << d;
    EXPECT_EQ(d["action"], k.action) << k.script;
    EXPECT_EQ(d["lane"], k.lane) << k.script;
  }
  // Neither fallback nor escalation runs a tool: no tool_result frame, no tool run.
  EXPECT_TRUE(sql("SELECT * FROM tool_runs").empty());
  EXPECT_EQ(sql("SELECT count(*) AS n FROM decisions")[0]["n"], 5);
}

TEST_F(server_test, baton_runs_a_command_tool_and_appends_its_result_to_the_history) {
  ws_client c(start());
  const json d = c.request(decide("cmd", {script({{"tool", "echo_cmd"}, {"p", 0.9}})}));
  ASSERT_EQ(d["action"], "execute") << d;
  EXPECT_EQ(d["executor"], "command");
  const json r = c.read();
  ASSERT_EQ(r.value("type", ""), "tool_result") << r;
  EXPECT_EQ(r["decision"], d["decision"]);
  EXPECT_EQ(r["ok"], true) << r;
  // /bin/cat echoes the call it was given on stdin.
  EXPECT_EQ(r["output"]["decision"], d["decision"]);
  EXPECT_EQ(r["output"]["tool"], "echo_cmd");
  EXPECT_EQ(r["event"]["role"], "tool");

  const json next = c.request({{"type", "decide"},
                               {"session", "cmd"},
                               {"append", {user("thanks"), script({{"tool", "finish"}, {"p", 0.9}})}}});
  ASSERT_EQ(next.value("type", ""), "decision") << next;
  EXPECT_EQ(next["turn"], 2);
  EXPECT_EQ(next["action"], "finish");
  const json state = engine_->last_state();
  ASSERT_EQ(state.size(), 4u) << state;
  EXPECT_EQ(state[1], r["event"]);
  EXPECT_EQ(state[2], user("thanks"));
  const auto runs = sql("SELECT tool, executor, ok FROM tool_runs WHERE decision = '" + d["decision"].get<std::string>() + "'");
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0]["executor"], "command");
  EXPECT_EQ(runs[0]["ok"], 1);
}

// tests/mcp/failing_server.mjs where tests/mcp is installed (scripts/setup.sh), else empty.
std::string failing_mcp_server() {
  const std::string mcp = std::string(BATON_SOURCE_DIR) + "/tests/mcp/";
  return std::filesystem::exists(mcp + "node_modules/@modelcontextprotocol/sdk") ? mcp + "failing_server.mjs" : "";
}

// A tool of an MCP server (registry `mcp_servers`): chosen like any other, run by baton over the
// server's stdio connection, its content sent back as the tool_result and logged as a tool run.
TEST_F(server_test, baton_runs_an_mcp_servers_tool) {
  const std::string server = failing_mcp_server();
  if (server.empty()) GTEST_SKIP() << "tests/mcp is not installed (scripts/setup.sh runs npm ci there)";
  write("tools.yaml", std::string(registry_yaml) + "mcp_servers:\n  failing: {command: node, args: [\"" + server +
                          "\"], include: [echo, fail]}\n");
  const unsigned short port = start();
  ws_client c(port);
  const json d = c.request(decide("mcp", {script({{"tool", "failing.echo"}, {"p", 0.9}})},
                                  {{"proposal", {{"tool", "failing.echo"}, {"arguments", {{"text", "hello over stdio"}}}}}}));
  ASSERT_EQ(d.value("type", ""), "decision") << d;
  ASSERT_EQ(d["action"], "execute") << d;
  EXPECT_EQ(d["executor"], "mcp");
  EXPECT_EQ(d["arguments"], json({{"text", "hello over stdio"}}));
  const json r = c.read();
  ASSERT_EQ(r.value("type", ""), "tool_result") << r;
  EXPECT_EQ(r["ok"], true) << r;
  EXPECT_EQ(r["output"]["content"][0]["text"], "hello over stdio") << r;
  const json e = c.request(decide("mcp-2", {script({{"tool", "failing.fail"}, {"p", 0.9}})}));
  ASSERT_EQ(e["action"], "execute") << e;
  const json f = c.read();
  EXPECT_EQ(f["ok"], false) << f;
  EXPECT_EQ(f["error_code"], "EXECUTOR_TOOL_ERROR") << f;
  // echo's `text` is required and the agent proposed none: baton does not run it, a person decides.
  const json m = c.request(decide("mcp-3", {script({{"tool", "failing.echo"}, {"p", 0.9}})}));
  EXPECT_EQ(m["action"], "escalate") << m;
  EXPECT_EQ(m["lane"], "rule:missing_argument:text") << m;
  // /health and /metrics say how the server is.
  const json health = test::parse(test::http_get(port, "/health").second);
  EXPECT_EQ(health["mcp_servers"]["failing"]["up"], true) << health;
  EXPECT_EQ(health["mcp_servers"]["failing"]["starts"], 1) << health;
  const std::string metrics = test::http_get(port, "/metrics").second;
  EXPECT_NE(metrics.find("baton_mcp_server_up{server=\"failing\"} 1.0\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("baton_mcp_server_starts_total{server=\"failing\"} 1.0\n"), std::string::npos);
  const auto runs = sql("SELECT tool, executor, ok, error_code FROM tool_runs ORDER BY tool");
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0]["tool"], "failing.echo");
  EXPECT_EQ(runs[0]["executor"], "mcp");
  EXPECT_EQ(runs[0]["ok"], 1);
  EXPECT_EQ(runs[1]["error_code"], "EXECUTOR_TOOL_ERROR");
}

// A server that says its tools changed (notifications/tools/list_changed) is listed again, by its
// running process, and the registry reloads as a hot reload does, logged as the server's: the tool
// it added can then be chosen and run.
TEST_F(server_test, an_mcp_servers_changed_tool_list_reloads_the_registry) {
  const std::string server = failing_mcp_server();
  if (server.empty()) GTEST_SKIP() << "tests/mcp is not installed (scripts/setup.sh runs npm ci there)";
  write("tools.yaml", std::string(registry_yaml) + "mcp_servers:\n  failing: {command: node, args: [\"" + server +
                          "\"], exclude: [crash]}\n");
  ws_client c(start());
  const json d = c.request(decide("mcp-add", {script({{"tool", "failing.add_tool"}, {"p", 0.9}})}));
  ASSERT_EQ(d["action"], "execute") << d;
  EXPECT_EQ(c.read()["ok"], true);
  std::vector<json> reloads;
  for (int i = 0; i < 100 && reloads.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    reloads = sql("SELECT who, outcome FROM reloads");
  }
  ASSERT_EQ(reloads.size(), 1u);
  EXPECT_EQ(reloads[0]["who"], "mcp:failing");
  EXPECT_EQ(reloads[0]["outcome"], "ok");
  const json e = c.request(decide("mcp-after", {script({{"tool", "failing.added"}, {"p", 0.9}})}));
  ASSERT_EQ(e["action"], "execute") << e;
  EXPECT_EQ(e["tool"], "failing.added");
  EXPECT_EQ(c.read()["output"]["content"][0]["text"], "added");
}

// A registry with more tools than routing.max_options is routed in two stages on the same history:
// which group, then which of its tools; the policy reads P(group)·P(tool | group).
TEST_F(server_test, a_large_registry_is_routed_in_two_stages) {
  write("tools.yaml", R"(tools:
  - {id: a.one, group: a, description: First tool of a}
  - {id: a.two, group: a, description: Second tool of a}
  - {id: a.three, group: a, description: Third tool of a}
  - {id: b.one, group: b, description: First tool of b}
  - {id: b.two, group: b, description: Second tool of b}
  - {id: solo, description: The only tool of its group}
finish: {description: Nothing more to do}
questions:
  needs_person: {type: noul, instructions: "Does this need a person?"}
)");
  write("policy.yaml", "confidence: p_max\nlanes:\n  default: {execute: 0.5, fallback: 0.3}\non_engine_error: escalate\n");
  config_ = parse_config("server: {listen: 127.0.0.1:0, io_threads: 2}\nengine: {timeout_ms: 2000}\n"
                         "log: {path: decisions.db, synchronous: normal}\nrouting: {max_options: 4}\n");
  ws_client c(start());
  const json d = c.request(decide("staged", {script({{"tool", "a.two"}, {"p", 0.9}, {"group", "a"}, {"group_p", 0.8}})}));
  ASSERT_EQ(d.value("type", ""), "decision") << d;
  EXPECT_EQ(d["action"], "execute");
  EXPECT_EQ(d["tool"], "a.two");
  EXPECT_NEAR(d["confidence"].get<double>(), 0.72, 1e-4);
  EXPECT_EQ(engine_->calls(), 2);
  // The second stage asked group a's tools only, on the same history.
  EXPECT_EQ(engine_->last_request().questions[0].option_count(), 3u);
  EXPECT_EQ(engine_->last_state().size(), 1u);
  const std::string answers = d["answers"].dump();
  EXPECT_NE(answers.find("group:b"), std::string::npos) << answers;
  EXPECT_NE(answers.find("needs_person"), std::string::npos) << answers;
  // A group of one tool needs no second stage; nor does finish.
  const json solo = c.request(decide("staged-solo", {script({{"tool", "solo"}, {"group", "default"}, {"p", 0.9}})}));
  EXPECT_EQ(solo["tool"], "solo") << solo;
  EXPECT_NEAR(solo["confidence"].get<double>(), 0.9, 1e-4);
  EXPECT_EQ(engine_->calls(), 3);
  const json done = c.request(decide("staged-finish", {script({{"tool", "finish"}, {"p", 0.95}})}));
  EXPECT_EQ(done["action"], "finish") << done;
  EXPECT_EQ(engine_->calls(), 4);
  // A frame's extra questions are asked in the first stage and answered with the rest.
  const json extra = c.request(decide("staged-extra", {script({{"tool", "b.two"}, {"group", "b"}, {"p", 0.9}})},
                                      {{"questions", {{"is_urgent", {{"type", "noul"}, {"instructions", "Is it urgent?"}}}}}}));
  ASSERT_EQ(extra.value("type", ""), "decision") << extra;
  EXPECT_EQ(extra["tool"], "b.two");
  EXPECT_TRUE(extra["answers"].contains("is_urgent")) << extra["answers"];
  EXPECT_EQ(engine_->calls(), 6);
  // One row a decision, its answers the merged ones.
  const auto rows = sql("SELECT tool, schema_hash FROM decisions ORDER BY seq");
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0]["tool"], "a.two");
}

TEST_F(server_test, a_failing_executor_is_reported_and_logged) {
  ws_client c(start());
  const json d = c.request(decide("down", {script({{"tool", "broken_http"}, {"p", 0.9}})}));
  ASSERT_EQ(d["action"], "execute") << d;
  const json r = c.read();
  ASSERT_EQ(r.value("type", ""), "tool_result") << r;
  EXPECT_EQ(r["ok"], false);
  EXPECT_EQ(r["error_code"], "EXECUTOR_UNREACHABLE") << r;
  const auto runs = sql("SELECT ok, error_code FROM tool_runs");
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0]["ok"], 0);
  EXPECT_EQ(runs[0]["error_code"], "EXECUTOR_UNREACHABLE");
}

TEST_F(server_test, engine_errors_and_timeouts_fail_closed) {
  config_.engine.timeout = std::chrono::milliseconds(300);
  ws_client c(start());
  const json failed = c.request(decide("e1", {script({{"fail", "INFERENCE_FAILED"}})}));
  ASSERT_EQ(failed.value("type", ""), "decision") << failed;
  EXPECT_EQ(failed["action"], "escalate");
  EXPECT_EQ(failed["lane"], "on_engine_error");
  EXPECT_EQ(failed["error_code"], "INFERENCE_FAILED");
  EXPECT_TRUE(failed["answers"].is_null());

  const json slow = c.request(decide("e2", {script({{"tool", "lookup_order"}, {"sleep_ms", 800}})}));
  ASSERT_EQ(slow.value("type", ""), "decision") << slow;
  EXPECT_EQ(slow["action"], "escalate");
  EXPECT_EQ(slow["error_code"], "ENGINE_TIMEOUT");
  // The session stays busy until the engine hands its turn back, then takes the next turn.
  const json busy = c.request({{"type", "decide"}, {"session", "e2"}, {"append", {user("more")}}});
  EXPECT_EQ(busy["code"], "SESSION_BUSY") << busy;
  std::this_thread::sleep_for(std::chrono::milliseconds(900));
  const json later = c.request({{"type", "decide"}, {"session", "e2"}, {"append", {user("more")}}});
  EXPECT_EQ(later["turn"], 2) << later;
  EXPECT_EQ(sql("SELECT error_code FROM decisions WHERE session = 'e2' AND turn = 1")[0]["error_code"],
            "ENGINE_TIMEOUT");
}

TEST_F(server_test, sessions_append_turns_and_refuse_out_of_order_ones) {
  ws_client c(start());
  EXPECT_EQ(c.request({{"type", "decide"}, {"session", "t"}, {"append", {user("hi")}}})["code"], "UNKNOWN_SESSION");
  EXPECT_EQ(c.request(decide("t", {user("hi")}, {{"turn", 3}}))["turn"], 3);
  EXPECT_EQ(c.request({{"type", "decide"}, {"session", "t"}, {"turn", 5}, {"append", {user("x")}}})["code"],
            "TURN_OUT_OF_ORDER");
  EXPECT_EQ(c.request(decide("t", {user("restart")}, {{"turn", 2}}))["code"], "TURN_OUT_OF_ORDER");
  const json d = c.request({{"type", "decide"}, {"session", "t"}, {"turn", 4}, {"append", {user("again")}}});
  EXPECT_EQ(d["turn"], 4) << d;
  EXPECT_EQ(engine_->last_state(), json::array({user("hi"), user("again")}));
  // A full history replaces the session's.
  c.request(decide("t", {user("new start")}));
  EXPECT_EQ(engine_->last_state(), json::array({user("new start")}));
}

// The value of a line "NAME VALUE" of GET /metrics.
double metric(unsigned short port, const std::string& name) {
  std::istringstream lines(test::http_get(port, "/metrics").second);
  for (std::string l; std::getline(lines, l);) {
    if (l.rfind(name + " ", 0) == 0) return std::stod(l.substr(name.size() + 1));
  }
  ADD_FAILURE() << "no metric " << name;
  return -1;
}

TEST_F(server_test, end_forgets_a_session_and_its_log_rows_stay) {
  const unsigned short port = start();
  ws_client c(port);
  ASSERT_EQ(c.request(decide("s", {user("hi")}))["turn"], 1);
  EXPECT_EQ(metric(port, "baton_sessions"), 1);
  EXPECT_GT(metric(port, "baton_session_bytes"), 0);
  EXPECT_EQ(c.request({{"type", "end"}, {"id", 5}, {"session", "s"}}), json({{"type", "ended"}, {"ref", 5}, {"session", "s"}}));
  EXPECT_EQ(metric(port, "baton_sessions"), 0);
  EXPECT_EQ(metric(port, "baton_session_bytes"), 0);
  EXPECT_EQ(metric(port, "baton_sessions_ended_total"), 1);
  // Again: no error. An append is told why the session is gone; a full history starts it afresh.
  EXPECT_EQ(c.request({{"type", "end"}, {"id", 6}, {"session", "s"}})["type"], "ended");
  const json gone = c.request({{"type", "decide"}, {"session", "s"}, {"append", {user("more")}}});
  EXPECT_EQ(gone["code"], "UNKNOWN_SESSION");
  EXPECT_NE(gone["error"].get<std::string>().find("ended"), std::string::npos) << gone;
  EXPECT_EQ(c.request(decide("s", {user("again")}))["turn"], 1);
  EXPECT_EQ(sql("SELECT count(*) AS n FROM decisions WHERE session = 's'")[0]["n"], 2);
  // A session never held, and a frame without one.
  const json unknown = c.request({{"type", "end"}, {"id", 7}, {"session", "never"}});
  EXPECT_EQ(unknown["code"], "UNKNOWN_SESSION");
  EXPECT_EQ(unknown["ref"], 7);
  EXPECT_EQ(c.request({{"type", "end"}, {"id", 8}})["code"], "INVALID_FRAME");
  EXPECT_EQ(c.request({{"type", "end"}, {"session", "s"}, {"history", json::array()}})["code"], "INVALID_FRAME");
}

TEST_F(server_test, an_end_during_a_turn_is_answered_after_its_decision) {
  ws_client c(start());
  c.send(decide("slow", {script({{"tool", "lookup_order"}, {"p", 0.95}, {"sleep_ms", 300}})}, {{"id", 1}}));
  c.send(json{{"type", "end"}, {"id", 2}, {"session", "slow"}});
  const json first = c.read();
  EXPECT_EQ(first.value("type", ""), "decision") << first;
  EXPECT_EQ(first["id"], 1);
  EXPECT_EQ(c.read(), json({{"type", "ended"}, {"ref", 2}, {"session", "slow"}}));
  EXPECT_EQ(c.request({{"type", "decide"}, {"session", "slow"}, {"append", {user("x")}}})["code"], "UNKNOWN_SESSION");
}

// Under pressure the least recently used idle session is forgotten, not the new one refused;
// TOO_MANY_SESSIONS only when every session held has a turn in flight.
TEST_F(server_test, a_full_server_evicts_the_least_recently_used_idle_session) {
  config_.server.max_sessions = 2;
  const unsigned short port = start();
  ws_client c(port);
  // Each turn finishes: no escalation pending, no tool result awaited, nothing in flight.
  const json finish = script({{"tool", "finish"}, {"p", 0.9}});
  ASSERT_EQ(c.request(decide("a", {user("1"), finish}))["turn"], 1);
  ASSERT_EQ(c.request(decide("b", {user("2"), finish}))["turn"], 1);
  ASSERT_EQ(c.request(decide("c", {user("3"), finish}))["turn"], 1);
  const json gone = c.request({{"type", "decide"}, {"session", "a"}, {"append", {user("more")}}});
  EXPECT_EQ(gone["code"], "UNKNOWN_SESSION");
  EXPECT_NE(gone["error"].get<std::string>().find("send the full history"), std::string::npos) << gone;
  EXPECT_EQ(c.request({{"type", "decide"}, {"session", "c"}, {"append", {user("more")}}})["turn"], 2);
  EXPECT_EQ(metric(port, "baton_sessions_evicted_total"), 1);
  EXPECT_EQ(metric(port, "baton_sessions"), 2);
  // The agent sends its full history: it evicts "b" in turn.
  EXPECT_EQ(c.request(decide("a", {user("1"), finish, user("more")}))["turn"], 1);
  // Both sessions busy: a third is refused.
  ws_client d(port);
  c.send(decide("a", {script({{"tool", "lookup_order"}, {"p", 0.95}, {"sleep_ms", 400}})}));
  d.send(decide("c", {script({{"tool", "lookup_order"}, {"p", 0.95}, {"sleep_ms", 400}})}));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ws_client e(port);
  EXPECT_EQ(e.request(decide("d", {user("4")}))["code"], "TOO_MANY_SESSIONS");
  EXPECT_EQ(c.read().value("type", ""), "decision");
  EXPECT_EQ(d.read().value("type", ""), "decision");
}

// A session whose escalation waits for a person stays; an idle one makes room instead.
TEST_F(server_test, a_session_with_an_escalation_pending_is_not_evicted) {
  config_.server.max_sessions = 2;
  ws_client c(start());
  ASSERT_EQ(c.request(decide("e", {script({{"tool", "lookup_order"}, {"p", 0.3}})}))["action"], "escalate");
  ASSERT_EQ(c.request(decide("f", {script({{"tool", "finish"}, {"p", 0.9}})}))["turn"], 1);
  ASSERT_EQ(c.request(decide("g", {script({{"tool", "finish"}, {"p", 0.9}})}))["turn"], 1);
  EXPECT_EQ(c.request({{"type", "decide"}, {"session", "e"}, {"append", {user("more")}}})["turn"], 2);
  EXPECT_EQ(c.request({{"type", "decide"}, {"session", "f"}, {"append", {user("more")}}})["code"], "UNKNOWN_SESSION");
}

TEST_F(server_test, a_key_cannot_end_another_keys_session) {
  ::setenv("BATON_SERVER_TEST_KEY_A", "agent-a-key-0123456789abcdef", 1);
  ::setenv("BATON_SERVER_TEST_KEY_B", "agent-b-key-0123456789abcdef", 1);
  config_ = parse_config("server: {listen: 127.0.0.1:0, io_threads: 2}\n"
                         "log: {path: decisions.db, synchronous: normal}\n"
                         "auth:\n  keys:\n"
                         "    - {name: a, role: agent, env: BATON_SERVER_TEST_KEY_A}\n"
                         "    - {name: b, role: agent, env: BATON_SERVER_TEST_KEY_B}\n");
  const unsigned short port = start();
  ws_client a(port, "/v1/agent", "agent-a-key-0123456789abcdef"), b(port, "/v1/agent", "agent-b-key-0123456789abcdef");
  ASSERT_EQ(a.request(decide("shared-name", {user("mine")}))["turn"], 1);
  EXPECT_EQ(b.request({{"type", "end"}, {"session", "shared-name"}})["code"], "UNKNOWN_SESSION");
  EXPECT_EQ(a.request({{"type", "decide"}, {"session", "shared-name"}, {"append", {user("still mine")}}})["turn"], 2);
  EXPECT_EQ(a.request({{"type", "end"}, {"session", "shared-name"}})["type"], "ended");
}

TEST_F(server_test, extra_questions_are_answered_in_the_same_pass) {
  ws_client c(start());
  const json q = json::parse(R"({"language": {"type": "choice", "instructions": "Which language?",
                                              "criteria": {"en": "English", "de": "German"}}})");
  const int calls = 0;
  const json d = c.request(decide("q", {user("hallo")}, {{"questions", q}}));
  ASSERT_EQ(d.value("type", ""), "decision") << d;
  EXPECT_EQ(d["answers"]["language"]["choice"], "de");
  EXPECT_EQ(engine_->calls(), calls + 1);
  const json clash = c.request(decide("q2", {user("x")}, {{"questions", {{"tool", {{"type", "noul"}}}}}}));
  EXPECT_EQ(clash["code"], "QUESTION_CONFLICT");
}

// Each bad frame gets its own error code and the connection stays open.
TEST_F(server_test, malformed_frames_get_exact_error_codes) {
  ws_client c(start());
  ASSERT_EQ(c.request(decide("known", {user("hi")}))["type"], "decision");
  const std::string long_session(129, 'x');
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "INVALID_JSON"},
      {"{", "INVALID_JSON"},
      {"not json", "INVALID_JSON"},
      {"[1,2]", "INVALID_JSON"},
      {"\"decide\"", "INVALID_JSON"},
      {"42", "INVALID_JSON"},
      {"null", "INVALID_JSON"},
      {R"({"type":"decide","session":"a","history":[]} trailing)", "INVALID_JSON"},
      {R"({"type":"decide","session":"\ud800","history":[]})", "INVALID_JSON"},
      {std::string(70, '[') + std::string(70, ']'), "INVALID_JSON"},
      {R"({})", "UNKNOWN_TYPE"},
      {R"({"type":"hello"})", "UNKNOWN_TYPE"},
      {R"({"type":7})", "UNKNOWN_TYPE"},
      {R"({"type":null,"session":"a"})", "UNKNOWN_TYPE"},
      {R"({"type":"decide"})", "INVALID_FRAME"},
      {R"({"type":"decide","history":[]})", "INVALID_FRAME"},
      {R"({"type":"decide","session":"a"})", "INVALID_FRAME"},
      {R"({"type":"decide","session":7,"history":[]})", "INVALID_FRAME"},
      {R"({"type":"decide","session":"a b","history":[]})", "INVALID_FRAME"},
      {R"({"type":"decide","session":")" + long_session + R"(","history":[]})", "INVALID_FRAME"},
      {R"({"type":"decide","session":"a","history":"hello"})", "INVALID_FRAME"},
      {R"({"type":"decide","session":"a","history":[1,2]})", "INVALID_FRAME"},
      {R"({"type":"decide","session":"a","history":[],"append":[]})", "INVALID_FRAME"},
      {R"({"type":"decide","session":"a","history":[],"turn":"1"})", "INVALID_FRAME"},
      {R"({"type":"decide","session":"a","history":[],"turn":0})", "INVALID_FRAME"},
      {R"({"type":"decide","session":"a","history":[],"turn":1.5})", "INVALID_FRAME"},
      {R"({"type":"decide","session":"a","history":[],"proposal":"refund"})", "INVALID_FRAME"},
      {R"({"type":"decide","session":"a","history":[],"proposal":{"arguments":{}}})", "INVALID_FRAME"},
      {R"({"type":"decide","session":"a","history":[],"questions":[1]})", "INVALID_FRAME"},
      {R"({"type":"decide","session":"a","history":[],"colour":"red"})", "INVALID_FRAME"},
      {R"({"type":"tool_result"})", "INVALID_FRAME"},
      {R"({"type":"tool_result","decision":"d-1","ok":"yes"})", "INVALID_FRAME"},
      {R"({"type":"tool_result","decision":7,"ok":true})", "INVALID_FRAME"},
      {R"({"type":"tool_result","decision":"d-nope","ok":true})", "UNKNOWN_DECISION"},
      {R"({"type":"decide","session":"never-seen","append":[{"role":"user"}]})", "UNKNOWN_SESSION"},
      {R"({"type":"decide","session":"known","turn":1,"append":[]})", "TURN_OUT_OF_ORDER"},
      {R"({"type":"decide","session":"a","history":[],"questions":{"tool":{"type":"noul"}}})", "QUESTION_CONFLICT"},
      {R"({"type":"decide","session":"a","history":[],"questions":{"x":{"type":"maybe"}}})", "INVALID_REQUEST"},
  };
  ASSERT_GE(cases.size(), 30u);
  int n = 0;
  for (const auto& [frame, code] : cases) {
    std::string text = frame;
    if (n % 2 == 0 && text.size() > 2 && text.front() == '{' && text.find("\"id\"") == std::string::npos &&
        code != "INVALID_JSON") {
      text.insert(1, "\"id\":" + std::to_string(n) + ",");
    }
    const json e = c.request_text(text);
    ASSERT_TRUE(e.is_object()) << text << ": no answer, " << c.last_error().message();
    ASSERT_EQ(e.value("type", ""), "error") << text << " → " << e;
    EXPECT_EQ(e["code"], code) << text << " → " << e;
    EXPECT_TRUE(e["error"].is_string() && !e["error"].get<std::string>().empty()) << e;
    EXPECT_TRUE(e["detail"].is_array()) << e;
    if (text.find("\"id\":" + std::to_string(n) + ",") != std::string::npos) {
      EXPECT_EQ(e["ref"], n) << e;
    }
    ++n;
  }
  c.send_binary(std::string("\x01\x02\x03", 3));
  EXPECT_EQ(c.read()["code"], "BINARY_FRAME");
  // Still open, and still deciding.
  const json d = c.request(decide("after", {user("hello")}, {{"id", "last"}}));
  EXPECT_EQ(d.value("type", ""), "decision") << d;
  EXPECT_EQ(d["id"], "last");
  EXPECT_EQ(engine_->calls(), 2);
}

TEST_F(server_test, an_oversized_frame_closes_with_1009_after_its_error) {
  config_.server.max_frame_bytes = 4096;
  ws_client c(start());
  c.send(decide("big", {user(std::string(10000, 'a'))}));
  const json e = c.read();
  EXPECT_EQ(e["code"], "FRAME_TOO_LARGE") << e;
  EXPECT_TRUE(c.read().is_null());
  EXPECT_EQ(c.close_reason().code, boost::beast::websocket::close_code::too_big);
  EXPECT_FALSE(c.close_reason().reason.empty());
}

// RFC 6455 §8.1: a text frame that is not UTF-8 fails the connection.
TEST_F(server_test, a_text_frame_that_is_not_utf8_closes_with_1007) {
  ws_client c(start());
  c.send(std::string("{\"type\":\"decide\",\"session\":\"\xff\xfe\",\"history\":[]}"));
  EXPECT_TRUE(c.read().is_null());
  EXPECT_EQ(c.close_reason().code, boost::beast::websocket::close_code::bad_payload);
}

TEST_F(server_test, repeated_bad_frames_close_with_1008) {
  config_.server.max_bad_frames = 3;
  ws_client c(start());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(c.request_text("nope")["code"], "INVALID_JSON");
  EXPECT_TRUE(c.read().is_null());
  EXPECT_EQ(c.close_reason().code, boost::beast::websocket::close_code::policy_error);
}

TEST_F(server_test, session_refusals_do_not_count_as_bad_frames) {
  config_.server.max_bad_frames = 3;
  ws_client c(start());
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(c.request({{"type", "decide"}, {"session", "gone"}, {"append", {user("x")}}})["code"], "UNKNOWN_SESSION");
  }
  EXPECT_EQ(c.request(decide("gone", {user("x")})).value("type", ""), "decision");
}

TEST_F(server_test, frames_over_the_rate_limit_are_refused) {
  config_.server.max_frames_per_second = 5;
  ws_client c(start());
  int limited = 0;
  for (int i = 0; i < 8; ++i) {
    const json e = c.request_text(R"({"type":"hello"})");
    if (e.value("code", "") == "RATE_LIMITED") {
      ++limited;
      EXPECT_EQ(e["retry_after_ms"], 1000) << e;
    } else {
      EXPECT_EQ(e["code"], "UNKNOWN_TYPE") << e;
      EXPECT_FALSE(e.contains("retry_after_ms")) << e;
    }
  }
  EXPECT_GE(limited, 2);
  // A refused frame with an id gets it back as `ref`: the client knows which request to send again.
  bool echoed = false;
  for (int i = 0; i < 8 && !echoed; ++i) {
    const json e = c.request_text(R"({"type":"hello","id":"req-)" + std::to_string(i) + "\"}");
    if (e.value("code", "") != "RATE_LIMITED") continue;
    EXPECT_EQ(e["ref"], "req-" + std::to_string(i)) << e;
    echoed = true;
  }
  EXPECT_TRUE(echoed);
  // One that does not parse has none.
  for (int i = 0; i < 8; ++i) {
    const json e = c.request_text("{not json");
    if (e.value("code", "") == "RATE_LIMITED") {
      EXPECT_TRUE(e["ref"].is_null()) << e;
      break;
    }
  }
}

TEST_F(server_test, health_and_unknown_paths) {
  const unsigned short port = start();
  const auto [status, body] = test::http_get(port, "/health");
  EXPECT_EQ(status, 200);
  const json h = test::parse(body);
  EXPECT_EQ(h["status"], "ok");
  EXPECT_EQ(h["model"], "scripted-1");
  EXPECT_EQ(h["fingerprint"], "sha256:scripted");
  EXPECT_TRUE(h["registry_hash"].get<std::string>().starts_with("sha256:"));
  EXPECT_TRUE(h["policy_hash"].get<std::string>().starts_with("sha256:"));
  EXPECT_EQ(test::http_get(port, "/nowhere").first, 404);
  EXPECT_EQ(test::http_get(port, "/v1/agent").first, 426);
  EXPECT_THROW(ws_client(port, "/v1/other"), boost::system::system_error);
}

TEST_F(server_test, restart_with_the_same_database_continues_the_log) {
  std::vector<std::string> ids;
  for (int round = 0; round < 2; ++round) {
    ws_client c(start());
    for (int i = 0; i < 3; ++i) {
      const json d = c.request(decide("r" + std::to_string(i), {script({{"tool", "lookup_order"}, {"p", 0.7}})}));
      ASSERT_EQ(d.value("type", ""), "decision") << d;
      ids.push_back(d["decision"]);
    }
    c.close();
    server_->stop();
    server_.reset();
  }
  const auto rows = sql("SELECT id FROM decisions ORDER BY seq");
  ASSERT_EQ(rows.size(), 6u);
  for (std::size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(rows[i]["id"], ids[i]);
  const auto verify = cli({"log", "verify", "--db", db()});
  EXPECT_EQ(verify.code, 0) << verify.out << verify.err;
}

TEST_F(server_test, shutdown_answers_in_flight_decisions_then_closes_with_1001) {
  ws_client c(start());
  c.send(decide("slow", {script({{"tool", "lookup_order"}, {"sleep_ms", 400}})}));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::thread stopper([&] { server_->stop(); });
  const json d = c.read();
  EXPECT_EQ(d.value("type", ""), "decision") << d;
  EXPECT_TRUE(c.read().is_null());
  EXPECT_EQ(c.close_reason().code, boost::beast::websocket::close_code::going_away);
  stopper.join();
  EXPECT_EQ(sql("SELECT count(*) AS n FROM decisions")[0]["n"], 1);
}

TEST_F(server_test, keyword_engine_with_the_default_config) {
  auto c = load_server_config(test::source_dir() / "config/baton.yaml");
  ASSERT_TRUE(c) << c.error().message;
  c->server.port = 0;
  c->log.path = dir_ / "keyword.db";
  server_ = running_server::start(*c);
  ws_client client(server_->port());
  const json d = client.request(decide("kw", {user("Please search the documentation for how to rotate an API key")}));
  ASSERT_EQ(d.value("type", ""), "decision") << d;
  EXPECT_EQ(d["model"], "baton-keyword-1");
  EXPECT_EQ(d["answers"]["tool"]["choice"], "search_docs") << d;
}

// A decision the log refuses is not sent, and its turn is not the session's: the agent sends the
// same turn again.
TEST_F(server_test, a_turn_the_log_refused_can_be_retried) {
  config_.log.busy_timeout_ms = 100;
  ws_client c(start());
  ASSERT_EQ(c.request(decide("lk", {user("hi")}))["type"], "decision");
  sqlite3* h = nullptr;
  ASSERT_EQ(sqlite3_open(db().c_str(), &h), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(h, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
  const json next = {{"type", "decide"}, {"session", "lk"}, {"turn", 2}, {"append", {user("again")}}};
  const json refused = c.request(next);
  EXPECT_EQ(refused["code"], "LOG_WRITE_FAILED") << refused;
  sqlite3_exec(h, "COMMIT", nullptr, nullptr, nullptr);
  sqlite3_close(h);
  const json retry = c.request(next);
  EXPECT_EQ(retry.value("type", ""), "decision") << retry;
  EXPECT_EQ(engine_->last_state(), json::array({user("hi"), user("again")}));
}

// A frame whose header announces far more than the limit still gets FRAME_TOO_LARGE before 1009.
TEST_F(server_test, a_frame_far_over_the_limit_gets_its_error_before_1009) {
  config_.server.max_frame_bytes = 4096;
  ws_client c(start());
  c.auto_fragment(false);  // one frame whose header announces 200 kB
  try {
    c.send(decide("big", {user(std::string(200000, 'a'))}));
  } catch (const boost::system::system_error& e) {
    ADD_FAILURE() << "the server dropped the connection while the frame was being sent: " << e.what();
  }
  const json e = c.read();
  EXPECT_EQ(e.value("code", ""), "FRAME_TOO_LARGE") << e << " " << c.last_error().message();
  EXPECT_TRUE(c.read().is_null());
  EXPECT_EQ(c.close_reason().code, boost::beast::websocket::close_code::too_big);
}

// RFC 9110 §9.3.2: a HEAD answer has no body (a keep-alive client would read it as the next answer).
TEST_F(server_test, head_health_has_no_body) {
  const unsigned short port = start();
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket s(io);
  s.connect({boost::asio::ip::make_address("127.0.0.1"), port});
  test::set_read_timeout(s, 5);
  const std::string req = "HEAD /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  boost::asio::write(s, boost::asio::buffer(req));
  std::string all;
  boost::system::error_code ec;
  for (char buf[4096];;) {
    const std::size_t n = s.read_some(boost::asio::buffer(buf), ec);
    if (ec) break;
    all.append(buf, n);
  }
  const auto end = all.find("\r\n\r\n");
  ASSERT_NE(end, std::string::npos) << all;
  EXPECT_EQ(all.substr(end + 4), "") << all;
}

// The write queue is bounded in bytes too (64 MiB): frames echo the client's `id`, so a client that
// sends but never reads would otherwise pin gigabytes. The server drops it before 80 MB are queued.
TEST_F(server_test, a_client_that_never_reads_is_dropped_by_queued_bytes) {
  ws_client c(start());
  const std::string big_id(1000000, 'i');
  std::vector<std::string> frames;
  for (int i = 0; i < 80; ++i) {
    // Not `"q" + std::to_string(i)`: GCC 12 warns falsely (-Wrestrict) on that inlined concatenation.
    std::string session = std::to_string(i);
    session.insert(0, 1, 'q');
    frames.push_back(render_json(decide(session, {user("hi")}, {{"id", big_id}}), false));
  }
  const std::size_t sent = c.send_without_reading(std::move(frames), std::chrono::seconds(3));
  // Reading before the server has decided what it read would drain the queue: on a loaded machine
  // the decisions lag the writes. Wait until the agent decisions stop growing (or are all made).
  auto agent_decisions = [&] {
    const std::string text = test::http_get(server_->port(), "/metrics").second;
    double n = 0;
    for (std::size_t at = text.find("baton_decisions_total{source=\"agent\""); at != std::string::npos;
         at = text.find("baton_decisions_total{source=\"agent\"", at + 1)) {
      n += std::stod(text.substr(text.find("} ", at) + 2));
    }
    return n;
  };
  double made = -1;
  for (int still = 0, polls = 0; made < 80 && still < 20 && polls < 300; ++polls) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const double now = agent_decisions();
    still = now == made ? still + 1 : 0;
    made = now;
  }
  int decisions = 0;
  for (json f = c.read(); !f.is_null(); f = c.read()) decisions += f.value("type", "") == "decision";
  EXPECT_LT(decisions, 80) << "sent " << sent << " frames, read " << decisions << " decisions of ~1 MB each, then "
                            << c.last_error().message();
  EXPECT_TRUE(c.last_error()) << "the connection should have ended";
}

}  // namespace
}  // namespace baton
