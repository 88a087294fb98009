// Bad input on every endpoint gets a clear error and never takes the server down (issue 15): frames
// of the wrong shape on /v1/review, bytes after a NUL, a turn past 2^53, a second ack, and handlers
// that throw on purpose. Real servers on 127.0.0.1, real clients.
#include <gtest/gtest.h>

#include <boost/asio/post.hpp>

#include <stdexcept>
#include <chrono>
#include <future>
#include <thread>

#include "adapters/runtime/agent_service.hpp"
#include "adapters/runtime/metrics.hpp"
#include "adapters/runtime/systemone_service.hpp"
#include "adapters/server/auth.hpp"
#include "adapters/runtime/handler_guard.hpp"
#include "adapters/server/http_api.hpp"
#include "adapters/server/listener.hpp"
#include "engine/scheduler.hpp"
#include "tools/schema_compiler.hpp"

#include "support/http_client.hpp"
#include "support/server_fixture.hpp"

namespace baton {
namespace {

using namespace test_server;
using namespace std::string_literals;
namespace websocket = boost::beast::websocket;

constexpr std::int64_t two_53 = std::int64_t(1) << 53;

class bad_input_test : public server_test {
 protected:
  // An escalated decision on `session`: the tool question unsure (p 0.3 < fallback 0.5).
  static json unsure(const std::string& session) {
    return decide(session, {user("please look at order 5"), script({{"tool", "lookup_order"}, {"p", 0.3}})},
                  {{"id", "d1"}, {"proposal", {{"tool", "lookup_order"}, {"arguments", {{"order_id", "5"}}}}}});
  }

  std::int64_t count(const std::string& table) { return sql("SELECT count(*) AS n FROM " + table)[0]["n"]; }
};

// The first frame of an issue's detail, for the assertions below.
json first_loc(const json& error_frame) {
  return error_frame["detail"].empty() ? json() : error_frame["detail"][0]["loc"];
}

TEST_F(bad_input_test, review_frames_of_any_shape_get_an_error_frame_and_the_server_goes_on) {
  const unsigned short port = start();
  ws_client reviewer(port, "/v1/review");
  ASSERT_EQ(reviewer.read().value("type", ""), "snapshot");
  struct bad_frame {
    std::string text;
    json ref;
    const char* code;
    json loc;  // detail[0].loc; null: no detail expected
  };
  const std::vector<bad_frame> cases = {
      // `type` of every JSON kind but a string: nlohmann's value("type", "") used to throw here.
      {R"({"type":5,"id":5})", 5, "UNKNOWN_TYPE", nullptr},
      {R"({"type":null,"id":6})", 6, "UNKNOWN_TYPE", nullptr},
      {R"({"type":["resolve"],"id":7})", 7, "UNKNOWN_TYPE", nullptr},
      {R"({"type":{},"id":8})", 8, "UNKNOWN_TYPE", nullptr},
      {R"({"type":true,"id":"t"})", "t", "UNKNOWN_TYPE", nullptr},
      {R"({"id":9})", 9, "UNKNOWN_TYPE", nullptr},
      {R"({"type":"approve","id":10})", 10, "UNKNOWN_TYPE", nullptr},
      {R"({"type":"resolve","id":11,"outcome":"deny","reason":"x"})", 11, "INVALID_FRAME", json::array({"escalation"})},
      {R"({"type":"resolve","id":12,"escalation":5})", 12, "INVALID_FRAME", json::array({"escalation"})},
      {R"({"type":"resolve","id":13,"escalation":{"id":"e-1"}})", 13, "INVALID_FRAME", json::array({"escalation"})},
      {R"({"type":"resolve","id":14,"escalation":"e-1","outcome":5,"reason":"x"})", 14, "INVALID_RESOLUTION", json::array({"outcome"})},
      {R"({"type":"resolve","id":15,"escalation":"e-1","outcome":"deny","reason":{}})", 15, "INVALID_RESOLUTION", json::array({"reason"})},
      {R"({"type":"resolve","id":16,"escalation":"e-1","outcome":"deny","reason":"x","force":"yes"})", 16,
       "INVALID_RESOLUTION", json::array({"force"})},
      {R"({"type":"resolve","id":17,"escalation":"e-1","outcome":"execute","tool":7,"reason":"x"})", 17,
       "INVALID_RESOLUTION", json::array({"tool"})},
      {R"(["resolve"])", nullptr, "INVALID_JSON", nullptr},
      {R"("resolve")", nullptr, "INVALID_JSON", nullptr},
      {"{not json", nullptr, "INVALID_JSON", nullptr},
  };
  for (const bad_frame& c : cases) {
    const json answer = reviewer.request_text(c.text);
    ASSERT_EQ(answer.value("type", ""), "error") << c.text << " -> " << answer;
    EXPECT_EQ(answer["code"], c.code) << c.text << " -> " << answer;
    EXPECT_EQ(answer["ref"], c.ref) << c.text;
    EXPECT_FALSE(answer["error"].get<std::string>().empty()) << answer;
    if (!c.loc.is_null()) {
      EXPECT_EQ(first_loc(answer), c.loc) << answer;
    }
  }

  // The same connection still resolves, and the server still decides.
  ws_client agent(port);
  const json d = agent.request(unsure("review-bad"));
  ASSERT_EQ(d.value("action", ""), "escalate") << d;
  ASSERT_EQ(reviewer.read_type("escalation")["escalation"]["id"], d["escalation"]);
  reviewer.send(json{{"type", "resolve"}, {"id", 20}, {"escalation", d["escalation"]}, {"outcome", "deny"}, {"reason", "no"}});
  const json answer = reviewer.read_type("resolve_result");
  EXPECT_EQ(answer["ref"], 20) << answer;
  EXPECT_EQ(answer["resolution"]["outcome"], "deny");
  EXPECT_EQ(agent.read_type("resolution")["resolution"]["escalation"], d["escalation"]);
}

TEST_F(bad_input_test, bytes_after_a_nul_are_refused_on_every_endpoint) {
  const unsigned short port = start();
  const std::string request =
      R"({"model":"jev-latest","state":"I was charged twice","questions":{"billing":{"type":"noul"}}})";
  const std::string tail = "\0{\"garbage\": true}"s;
  const std::string at_byte = "at byte " + std::to_string(request.size() + 1);

  // POST /v1/systemone: 400, nothing decided, nothing logged.
  test::http_client h(port);
  auto r = h.post("/v1/systemone", request + tail);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.body_json()["code"], "INVALID_JSON");
  EXPECT_NE(r.body_json()["error"].get<std::string>().find(at_byte), std::string::npos) << r.body;
  // A NUL escaped inside a string is still a value, and whitespace may still follow the object.
  EXPECT_EQ(h.post("/v1/systemone", R"({"state":"a\u0000b","questions":{"billing":{"type":"noul"}}})" " \r\n").status, 200);

  // A /v1/agent frame: the protocol's error frame for invalid JSON; the session is not created.
  ws_client agent(port);
  const std::string frame = render_json(decide("nul-1", {user("hello"), script({{"tool", "lookup_order"}, {"p", 0.3}})}), false);
  const json refused = agent.request_text(frame + tail);
  EXPECT_EQ(refused.value("type", ""), "error") << refused;
  EXPECT_EQ(refused["code"], "INVALID_JSON");
  EXPECT_NE(refused["error"].get<std::string>().find("at byte " + std::to_string(frame.size() + 1)), std::string::npos)
      << refused;
  const json escalated = agent.request(unsure("nul-2"));
  ASSERT_EQ(escalated.value("action", ""), "escalate") << escalated;
  const std::string escalation = escalated["escalation"];

  // POST /v1/escalations/{id}/resolve: 400 and still pending.
  const std::string deny = R"({"outcome":"deny","reason":"no"})";
  r = h.post("/v1/escalations/" + escalation + "/resolve", deny + tail);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.body_json()["code"], "INVALID_JSON");
  EXPECT_NE(r.body_json()["error"].get<std::string>().find("at byte " + std::to_string(deny.size() + 1)),
            std::string::npos)
      << r.body;
  EXPECT_EQ(h.get("/v1/escalations/" + escalation).body_json()["status"], "pending");

  // A /v1/review frame: refused, and nothing resolved.
  ws_client reviewer(port, "/v1/review");
  ASSERT_EQ(reviewer.read().value("type", ""), "snapshot");
  const std::string resolve = render_json(
      json{{"type", "resolve"}, {"id", 1}, {"escalation", escalation}, {"outcome", "deny"}, {"reason", "no"}}, false);
  const json review_refused = reviewer.request_text(resolve + tail);
  EXPECT_EQ(review_refused["code"], "INVALID_JSON") << review_refused;
  EXPECT_NE(review_refused["error"].get<std::string>().find("at byte " + std::to_string(resolve.size() + 1)),
            std::string::npos)
      << review_refused;
  EXPECT_EQ(h.get("/v1/escalations/" + escalation).body_json()["status"], "pending");

  agent.close();
  server_.reset();
  // Logged: the escaped-NUL SystemOne request and the escalation; neither request with a NUL after it.
  EXPECT_EQ(count("decisions"), 2);
  EXPECT_EQ(sql("SELECT count(*) AS n FROM decisions WHERE session = 'nul-1'")[0]["n"], 0);
  EXPECT_EQ(count("resolutions"), 0);
}

TEST_F(bad_input_test, a_turn_past_2_53_is_refused_whether_the_frame_names_it_or_not) {
  ws_client agent(start());
  // An explicit turn past the limit.
  json r = agent.request(decide("big-turn", {user("hi")}, {{"id", 1}, {"turn", two_53 + 1}}));
  EXPECT_EQ(r["code"], "INVALID_FRAME") << r;
  EXPECT_EQ(first_loc(r), json::array({"turn"}));
  EXPECT_EQ(r["detail"][0]["type"], "less_than_equal") << r;
  EXPECT_EQ(r["detail"][0]["ctx"]["le"], two_53) << r;
  r = agent.request_text(R"({"type":"decide","id":2,"session":"big-turn","history":[],"turn":100000000000000000000000})");
  EXPECT_EQ(r["detail"][0]["type"], "less_than_equal") << r;
  r = agent.request_text(R"({"type":"decide","id":3,"session":"big-turn","history":[],"turn":-100000000000000000000000})");
  EXPECT_EQ(r["detail"][0]["type"], "greater_than_equal") << r;

  // The last turn there is.
  r = agent.request(decide("big-turn", {user("hi")}, {{"id", 4}, {"turn", two_53}}));
  ASSERT_EQ(r.value("type", ""), "decision") << r;
  EXPECT_EQ(r["turn"], two_53);
  // The next one, implicit, with append or a full history: the same error as an explicit one.
  r = agent.request({{"type", "decide"}, {"id", 5}, {"session", "big-turn"}, {"append", {user("more")}}});
  EXPECT_EQ(r.value("type", ""), "error") << r;
  EXPECT_EQ(r["ref"], 5);
  EXPECT_EQ(r["code"], "INVALID_FRAME");
  EXPECT_EQ(first_loc(r), json::array({"turn"}));
  EXPECT_EQ(r["detail"][0]["type"], "less_than_equal") << r;
  EXPECT_NE(r["error"].get<std::string>().find(std::to_string(two_53 + 1)), std::string::npos) << r;
  r = agent.request(decide("big-turn", {user("hi"), user("more")}, {{"id", 6}}));
  EXPECT_EQ(r["code"], "INVALID_FRAME") << r;
  EXPECT_EQ(r["detail"][0]["type"], "less_than_equal") << r;
  // The refusals left the session as it was: its last turn is still 2^53.
  r = agent.request(decide("big-turn", {user("hi")}, {{"id", 7}, {"turn", two_53}}));
  EXPECT_EQ(r["code"], "TURN_OUT_OF_ORDER") << r;
  server_.reset();
  EXPECT_EQ(sql("SELECT max(turn) AS t, count(*) AS n FROM decisions")[0], json({{"t", two_53}, {"n", 1}}));
}

TEST_F(bad_input_test, a_second_ack_of_the_same_resolution_is_no_error_even_after_it_is_durable_or_a_restart) {
  const unsigned short port = start();
  std::string resolution;
  {
    ws_client agent(port);
    const json d = agent.request(unsure("ack-twice"));
    ASSERT_EQ(d.value("action", ""), "escalate") << d;
    test::http_client h(port);
    const auto res = h.post("/v1/escalations/" + d["escalation"].get<std::string>() + "/resolve",
                            R"({"outcome":"deny","reason":"no"})");
    ASSERT_EQ(res.status, 200) << res.body;
    resolution = agent.read_type("resolution")["resolution"]["id"];

    agent.send(json{{"type", "ack"}, {"id", 1}, {"resolution", resolution}});
    // Frames are answered in order: an error for the ack would come before `resumed`.
    EXPECT_EQ(agent.request({{"type", "resume"}, {"id", 2}, {"session", "ack-twice"}}).value("type", ""), "resumed");
    // Once its delivery row is durable, the same ack again (a retry after a lost connection).
    for (int i = 0; i < 200 && count("deliveries") == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_EQ(count("deliveries"), 1);
    agent.send(json{{"type", "ack"}, {"id", 3}, {"resolution", resolution}});
    const json resumed = agent.request({{"type", "resume"}, {"id", 4}, {"session", "ack-twice"}});
    EXPECT_EQ(resumed.value("type", ""), "resumed") << resumed;
    EXPECT_EQ(resumed["resolutions"], 0);
  }
  // After a restart (the desk reloads only what was not acknowledged), from a new connection.
  server_.reset();
  ws_client agent(start());
  agent.send(json{{"type", "ack"}, {"id", 5}, {"resolution", resolution}});
  const json resumed = agent.request({{"type", "resume"}, {"id", 6}, {"session", "ack-twice"}});
  EXPECT_EQ(resumed.value("type", ""), "resumed") << resumed;
  EXPECT_EQ(resumed["resolutions"], 0);
  // An id that is no resolution of this caller's is still refused.
  EXPECT_EQ(agent.request({{"type", "ack"}, {"id", 7}, {"resolution", "v-000000000000-00000000"}})["code"],
            "UNKNOWN_RESOLUTION");
  agent.close();
  server_.reset();
  EXPECT_EQ(count("deliveries"), 1);  // one row however often it is acknowledged
}

// A test-only executor for a baton-run tool whose run() throws, as a buggy executor would, inside
// the I/O handler that starts the tool.
class throwing_executor : public tools::executor {
 public:
  std::string_view kind() const noexcept override { return "command"; }
  void run(tools::tool_call, std::function<void(tools::tool_outcome)>) override {
    throw std::runtime_error("a test executor that throws");
  }
};

// The server's parts put together as running_server does, with two handlers that throw on
// purpose: `echo_cmd`'s executor (a std::runtime_error in an agent connection's completion
// handler) and a /metrics gauge (an nlohmann type_error in an HTTP request's handler).
struct throwing_server {
  boost::asio::io_context ioc;
  server_config config;
  scripted_engine engine;
  std::unique_ptr<log::decision_log> log;
  baton::metrics m;
  std::unique_ptr<authenticator> auth;
  std::unique_ptr<scheduler> sched;
  std::unique_ptr<agent_service> service;
  std::unique_ptr<mcp_gateway> gateway;
  std::unique_ptr<systemone_service> systemone;
  std::unique_ptr<http_api> api;
  std::unique_ptr<listener> server;
  std::vector<std::thread> threads;

  explicit throwing_server(server_config c) : config(std::move(c)) {
    log = log::decision_log::open(config.log);
    auth = std::make_unique<authenticator>(config.auth);
    sched = std::make_unique<scheduler>(engine, scheduler_options{config.engine.max_batch, config.engine.queue_capacity, {}});
    auto r = std::make_shared<routing_snapshot>();
    r->registry = tools::load_registry(config.registry, engine.describe().limits).value();
    r->policy = policies::load_policy(config.policy, r->registry).value();
    for (const tools::tool& t : r->registry.tools) {
      std::unique_ptr<tools::executor> ex = t.id == "echo_cmd" ? std::make_unique<throwing_executor>()
                                                               : tools::make_executor(t, ioc.get_executor(), config.executors);
      r->executors.emplace(t.id, std::move(ex));
    }
    r->questions = tools::compile_questions(r->registry, engine.describe().limits).value();
    r->schema_hash = tools::schema_hash(r->questions);
    service = std::make_unique<agent_service>(config, engine, *sched, *log, m, std::move(r), ioc.get_executor());
    service->desk().start();
    systemone = std::make_unique<systemone_service>(config, engine, *sched, *log, m);
    gateway = std::make_unique<mcp_gateway>(config, *service, ioc.get_executor());
    api = std::make_unique<http_api>(config, *auth, m, *systemone, *service, *gateway, []() -> metrics::scraped {
      return {{{"baton_test_gauge", "A gauge whose value is not a number.", json("five").get<double>()}}, {}};
    });
    server = std::make_unique<listener>(ioc, config.server, *service, *systemone, *api);
    server->start();
    for (int i = 0; i < 2; ++i) threads.emplace_back([this] { run_io(ioc); });
  }
  ~throwing_server() {
    // The turn whose handler threw never finished: drain for a moment only.
    server->stop(std::chrono::milliseconds(200), [this] { ioc.stop(); });
    for (auto& t : threads) t.join();
    sched->stop();
    log->close();
  }
};

TEST_F(bad_input_test, a_handler_that_throws_fails_its_own_connection_and_the_server_goes_on) {
  throwing_server s(config_);
  const unsigned short port = s.server->port();
  ws_client bystander(port);
  ws_client victim(port);

  // echo_cmd is executed by baton: its executor throws in the handler that starts it.
  victim.send(decide("boom", {user("echo this"), script({{"tool", "echo_cmd"}, {"p", 0.95}})}, {{"id", 1}}));
  const json failed = victim.read_type("error");
  ASSERT_EQ(failed.value("type", ""), "error") << failed;
  EXPECT_EQ(failed["code"], "INTERNAL");
  EXPECT_TRUE(failed["detail"].is_array());
  EXPECT_TRUE(victim.read().is_null());
  EXPECT_EQ(victim.close_reason().code, websocket::close_code::internal_error);
  // The victim's session is handed back when its turn's handlers are gone: it is not busy for ever.
  ws_client again(port);
  json next;
  for (int i = 0; i < 100; ++i) {
    next = again.request(decide("boom", {user("echo this"), user("and again")}, {{"id", 4}}));
    if (next.value("code", "") != "SESSION_BUSY") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(next.value("type", ""), "decision") << next;

  // Every other connection goes on: one open before, one opened after.
  const json calm = decide("calm", {user("where is order 5"), script({{"tool", "lookup_order"}, {"p", 0.95}})}, {{"id", 2}});
  const json d = bystander.request(calm);
  EXPECT_EQ(d.value("type", ""), "decision") << d;
  EXPECT_EQ(d["action"], "execute");
  ws_client after(port);
  EXPECT_EQ(after.request(decide("calm-2", {user("hi")}, {{"id", 3}})).value("type", ""), "decision");

  // An HTTP handler that throws: one 500 INTERNAL error body, that connection closed.
  test::http_client h(port);
  const auto m = h.get("/metrics");
  EXPECT_EQ(m.status, 500) << m.body;
  const json body = m.body_json();
  EXPECT_EQ(body["code"], "INTERNAL");
  EXPECT_TRUE(body.contains("error") && body.contains("detail")) << body;
  EXPECT_TRUE(h.closed_by_server());
  test::http_client other(port);
  EXPECT_EQ(other.get("/health").status, 200);
  EXPECT_EQ(other.get("/metrics").status, 500);  // again, and still up
  test::http_client last(port);
  EXPECT_EQ(last.get("/v1/models").status, 200);
}

// The MCP gateway's session names are its own: what a restart settles of them is never an agent's.
TEST_F(bad_input_test, an_agent_may_not_name_a_session_as_the_mcp_gateway_names_its_own) {
  ws_client agent(start());
  const std::string gateway_like = "mcp-0123456789abcdef0123456789abcdef";
  for (const json& frame : {decide(gateway_like, {user("hi")}, {{"id", "g1"}}),
                            json{{"type", "resume"}, {"id", "g2"}, {"session", gateway_like}},
                            json{{"type", "end"}, {"id", "g3"}, {"session", gateway_like}}}) {
    const json refused = agent.request(frame);
    EXPECT_EQ(refused.value("type", ""), "error") << refused;
    EXPECT_EQ(refused["code"], "INVALID_FRAME");
    EXPECT_EQ(refused["ref"], frame["id"]);
    EXPECT_NE(refused["error"].get<std::string>().find("MCP gateway"), std::string::npos) << refused;
  }
  // Other names of the prefix are anyone's.
  EXPECT_EQ(agent.request(decide("mcp-tools", {user("hi")}, {{"id", "g4"}})).value("type", ""), "decision");
  EXPECT_EQ(count("decisions"), 1);
}

// An MCP client's call whose handler throws (echo_cmd's executor, on the MCP session's strand) is
// answered, INTERNAL, rather than left waiting; its session ends, and the gateway goes on.
TEST_F(bad_input_test, an_mcp_call_whose_handler_throws_is_answered_and_its_session_ends) {
  throwing_server s(config_);
  test::http_client h(s.server->port());
  const auto post = [&](const json& message, const std::string& session) {
    std::vector<std::pair<std::string, std::string>> headers = {{"Accept", "application/json"}};
    if (!session.empty()) headers.emplace_back("Mcp-Session-Id", session);
    return h.post("/mcp", message.dump(), {}, headers);
  };
  const json initialize = {{"jsonrpc", "2.0"}, {"id", 1}, {"method", "initialize"},
                           {"params", {{"protocolVersion", "2025-11-25"}, {"capabilities", json::object()},
                                       {"clientInfo", {{"name", "t"}, {"version", "1"}}}}}};
  const auto opened = post(initialize, {});
  ASSERT_EQ(opened.status, 200) << opened.body;
  const std::string session = opened.header("mcp-session-id");
  ASSERT_FALSE(session.empty());
  const json call = {{"jsonrpc", "2.0"}, {"id", 2}, {"method", "tools/call"},
                     {"params", {{"name", "echo_cmd"}, {"arguments", json::object()},
                                 {"_meta", {{"baton/context", json::array({script({{"tool", "echo_cmd"}, {"p", 0.95}})})}}}}}};
  const auto failed = post(call, session);
  ASSERT_EQ(failed.status, 200) << failed.body;
  const json body = failed.body_json();
  EXPECT_EQ(body["id"], 2);
  EXPECT_EQ(body["error"]["data"]["code"], "INTERNAL") << body;
  const json ping = {{"jsonrpc", "2.0"}, {"id", 3}, {"method", "ping"}};
  EXPECT_EQ(post(ping, session).status, 404);

  // A call waiting for a person when another's handler throws: answered too, its escalation
  // withdrawn (broken_http at 0.3 is under the fallback threshold 0.5: a person decides).
  const auto waiting_session = post(initialize, {}).header("mcp-session-id");
  const json unsure = {{"jsonrpc", "2.0"}, {"id", 4}, {"method", "tools/call"},
                       {"params", {{"name", "broken_http"}, {"arguments", json::object()},
                                   {"_meta", {{"baton/context", json::array({script({{"tool", "broken_http"}, {"p", 0.3}})})}}}}}};
  auto waiting = std::async(std::launch::async, [&] {
    test::http_client w(s.server->port());
    return w.post("/mcp", unsure.dump(), {}, {{"Accept", "application/json"}, {"Mcp-Session-Id", waiting_session}});
  });
  std::string escalation;
  for (int i = 0; i < 100 && escalation.empty(); ++i) {
    const json pending = h.get("/v1/escalations?status=pending").body_json();
    if (!pending["escalations"].empty()) escalation = pending["escalations"][0]["id"];
    else std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_FALSE(escalation.empty());
  json again_call = call;
  again_call["id"] = 5;
  EXPECT_EQ(post(again_call, waiting_session).body_json()["error"]["data"]["code"], "INTERNAL");
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  const auto answered = waiting.get();
  EXPECT_EQ(answered.body_json()["error"]["data"]["code"], "INTERNAL") << answered.body;
  json resolved;
  for (int i = 0; i < 100; ++i) {
    resolved = h.get("/v1/escalations/" + escalation).body_json();
    if (resolved.value("status", "") == "resolved") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(resolved["resolution"]["outcome"], "deny") << resolved;
  EXPECT_EQ(resolved["resolution"]["reason"], "baton failed on the MCP session");
  // A new session is served, and its calls of other tools run.
  const auto again = post(initialize, {});
  ASSERT_EQ(again.status, 200);
  EXPECT_EQ(post(ping, again.header("mcp-session-id")).status, 200);
}

TEST(run_io, a_handler_that_throws_past_every_guard_is_logged_and_the_loop_goes_on) {
  boost::asio::io_context ioc;
  int ran = 0;
  boost::asio::post(ioc, [] { throw std::runtime_error("a handler of no connection"); });
  boost::asio::post(ioc, [&] { ++ran; });
  boost::asio::post(ioc, [] { throw 42; });
  boost::asio::post(ioc, [&] { ++ran; });
  run_io(ioc);
  EXPECT_EQ(ran, 2);
}

}  // namespace
}  // namespace baton
