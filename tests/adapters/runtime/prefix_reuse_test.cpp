// Prefix reuse (issue 19) end to end: each caller's requests carry its own cache scope, /metrics
// shows the engine's prefix cache, and an agent's history that overflows the engine's window loses
// its oldest events (in the frame and the log), while a SystemOne request is sent as it came.
#include <gtest/gtest.h>

#include <cstdlib>

#include "support/http_client.hpp"
#include "support/server_fixture.hpp"

namespace baton {
namespace {

using namespace test_server;
using test::http_client;

const char* alpha_key = "prefix-alpha-0123456789abcdef";
const char* beta_key = "prefix-beta-0123456789abcdef01";

const std::string systemone_body =
    R"({"state":"where is my order?","questions":{"late":{"type":"noul","instructions":"Is it late?"}}})";

class prefix_reuse_test : public server_test {
 protected:
  // `events` events: a user message each, the last one the script.
  static json history(std::size_t events, json last_script = json::object()) {
    json h = json::array();
    for (std::size_t i = 0; i + 1 < events; ++i) h.push_back(user("message " + std::to_string(i)));
    h.push_back(script(std::move(last_script)));
    return h;
  }
  static std::vector<std::string> contents(const json& state) {
    std::vector<std::string> out;
    for (const json& e : state) out.push_back(e.value("content", "script"));
    return out;
  }
  // The first event, then messages `from` .. `to`, then the script.
  static std::vector<std::string> kept(std::size_t from, std::size_t to) {
    std::vector<std::string> out = {"message 0"};
    for (std::size_t i = from; i <= to; ++i) out.push_back("message " + std::to_string(i));
    out.push_back("script");
    return out;
  }
};

TEST_F(prefix_reuse_test, each_api_key_is_its_own_cache_scope) {
  ::setenv("BATON_PREFIX_ALPHA_KEY", alpha_key, 1);
  ::setenv("BATON_PREFIX_BETA_KEY", beta_key, 1);
  config_ = parse_config("server: {listen: 127.0.0.1:0, io_threads: 2}\n"
                         "log: {path: decisions.db, synchronous: normal}\n"
                         "auth:\n"
                         "  keys:\n"
                         "    - {name: alpha, role: agent, env: BATON_PREFIX_ALPHA_KEY}\n"
                         "    - {name: beta, role: agent, env: BATON_PREFIX_BETA_KEY}\n");
  const unsigned short port = start();
  {
    ws_client a(port, "/v1/agent", alpha_key);
    ASSERT_EQ(a.request(decide("s1", history(2)))["type"], "decision");
    ws_client b(port, "/v1/agent", beta_key);
    // The same session name and history: still another caller's.
    ASSERT_EQ(b.request(decide("s1", history(2)))["type"], "decision");
  }
  http_client h(port);
  ASSERT_EQ(h.post("/v1/systemone", systemone_body, beta_key).status, 200);
  ASSERT_EQ(h.post("/v1/systemone", systemone_body, alpha_key).status, 200);
  EXPECT_EQ(engine_->scopes(), (std::vector<std::string>{"alpha", "beta", "beta", "alpha"}));
}

TEST_F(prefix_reuse_test, without_keys_every_caller_is_anonymous) {
  const unsigned short port = start();
  ws_client a(port);
  ASSERT_EQ(a.request(decide("s1", history(2)))["type"], "decision");
  http_client h(port);
  ASSERT_EQ(h.post("/v1/systemone", systemone_body).status, 200);
  EXPECT_EQ(engine_->scopes(), (std::vector<std::string>{"anonymous", "anonymous"}));
}

TEST_F(prefix_reuse_test, metrics_show_the_engines_prefix_cache_when_it_keeps_one) {
  const unsigned short port = start();
  http_client h(port);
  const auto without = h.get("/metrics");
  ASSERT_EQ(without.status, 200);
  EXPECT_EQ(without.body.find("baton_prefix_cache"), std::string::npos) << without.body;

  engine_->set_cache_stats(prefix_cache_stats{12, 5, 2, 3072, 7, 1 << 20, 1 << 30});
  const std::string text = h.get("/metrics").body;
  for (const char* line : {"# TYPE baton_prefix_cache_hits_total counter\nbaton_prefix_cache_hits_total 12\n",
                           "# TYPE baton_prefix_cache_misses_total counter\nbaton_prefix_cache_misses_total 5\n",
                           "# TYPE baton_prefix_cache_evictions_total counter\nbaton_prefix_cache_evictions_total 2\n",
                           "# TYPE baton_prefix_cache_cached_tokens_total counter\nbaton_prefix_cache_cached_tokens_total 3072\n",
                           "# TYPE baton_prefix_cache_entries gauge\nbaton_prefix_cache_entries 7\n",
                           "# TYPE baton_prefix_cache_bytes gauge\nbaton_prefix_cache_bytes 1048576\n",
                           "# TYPE baton_prefix_cache_max_bytes gauge\nbaton_prefix_cache_max_bytes 1073741824\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\nin\n" << text;
  }
}

TEST_F(prefix_reuse_test, an_overflowing_history_loses_its_oldest_events_in_chunks) {
  config_.log.store_state = true;
  ws_client c(start());
  engine_->set_window(40);
  // 50 events in a window of 40: at least 10 must go. A quarter of the 38 droppable events that
  // then fit is 10, rounded down to a chunk of 8: two chunks, 16 events, go.
  const json d = c.request(decide("s1", history(50, {{"cached_tokens", 120}})));
  ASSERT_EQ(d["type"], "decision") << d;
  EXPECT_EQ(contents(engine_->last_state()), kept(17, 48));
  EXPECT_EQ(d["usage"], json::parse(R"({"input_tokens":340,"cached_tokens":120,"state_truncated":false,"events_dropped":16,"media_dropped":0})"));

  // The next turn needs one event more to go: the chunk already dropped covers it, so the state
  // sent starts where it started.
  const json next = c.request({{"type", "decide"}, {"session", "s1"}, {"append", json::array({script({{"cached_tokens", 330}})})}});
  ASSERT_EQ(next["type"], "decision") << next;
  std::vector<std::string> second = kept(17, 48);
  second.push_back("script");
  EXPECT_EQ(contents(engine_->last_state()), second);
  EXPECT_EQ(next["usage"]["events_dropped"], 16);
  EXPECT_EQ(next["usage"]["cached_tokens"], 330);

  // The session kept every event: with room, the engine gets them all again.
  engine_->set_window(std::nullopt);
  const json all = c.request({{"type", "decide"}, {"session", "s1"}, {"append", json::array({script(json::object())})}});
  ASSERT_EQ(all["type"], "decision") << all;
  EXPECT_EQ(engine_->last_state().size(), 52u);
  EXPECT_EQ(all["usage"]["events_dropped"], 0);

  const auto rows = sql("SELECT turn, cached_tokens, events_dropped, json_array_length(state) AS events FROM decisions ORDER BY seq");
  ASSERT_EQ(rows.size(), 3u);
  // The log keeps the whole history each turn decided on, and says what the engine was not sent.
  EXPECT_EQ(rows[0], json::parse(R"({"turn":1,"cached_tokens":120,"events_dropped":16,"events":50})"));
  EXPECT_EQ(rows[1], json::parse(R"({"turn":2,"cached_tokens":330,"events_dropped":16,"events":51})"));
  EXPECT_EQ(rows[2], json::parse(R"({"turn":3,"cached_tokens":0,"events_dropped":0,"events":52})"));
}

TEST_F(prefix_reuse_test, a_systemone_request_is_sent_as_it_came) {
  const unsigned short port = start();
  engine_->set_window(40);
  json body = json::parse(systemone_body);
  body["state"] = history(50);
  http_client h(port);
  const auto r = h.post("/v1/systemone", render_json(body, false));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(engine_->last_state().size(), 50u);  // the engine cuts it, as the reference does
  EXPECT_EQ(test::parse(r.body)["usage"]["cached_tokens"], 0);
  const auto rows = sql("SELECT cached_tokens, events_dropped FROM decisions");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0], json::parse(R"({"cached_tokens":0,"events_dropped":null})"));
}

}  // namespace
}  // namespace baton
