// The browser checks (Host, Origin, Content-Type), the per-address limit on failed
// authentications, the headers every API answer carries, and the WebSocket handshake refusals,
// against a real server on 127.0.0.1 over raw HTTP. tests/browser/security_test.mjs drives the
// same attacks from a real Chromium page.
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

#include "adapters/server/auth.hpp"
#include "support/http_client.hpp"
#include "support/server_fixture.hpp"

namespace baton {
namespace {

using test::http_client;
using test::http_response;
using test_server::server_test;
namespace http = boost::beast::http;
using headers = std::vector<std::pair<std::string, std::string>>;

const char* agent_key = "security-agent-0123456789abcdef";
const char* reviewer_key = "security-reviewer-0123456789abcdef";

const std::string decide_body =
    R"({"model":"jev-latest","state":"I was charged twice","questions":{"billing":{"type":"noul","instructions":"Is this about billing?"}}})";
const std::string resolve_body = R"({"outcome":"execute","reason":"looks fine"})";

// An upgrade's head as a browser sends it, with `extra` set over it.
headers upgrade_headers(headers extra = {}) {
  headers h = {{"Connection", "Upgrade"},
               {"Upgrade", "websocket"},
               {"Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="},
               {"Sec-WebSocket-Version", "13"}};
  for (auto& [k, v] : extra) {
    std::erase_if(h, [&](const auto& p) { return p.first == k; });
    if (!v.empty()) h.emplace_back(k, v);
  }
  return h;
}

// A refusal in the one error body, with `code`.
void expect_refusal(const http_response& r, int status, const std::string& code) {
  EXPECT_EQ(r.status, status) << r.body;
  EXPECT_EQ(r.header("content-type"), "application/json") << r.body;
  json body;
  json_parse_error err;
  ASSERT_TRUE(parse_json(r.body, body, err)) << "not JSON: " << r.body;
  EXPECT_EQ(body.value("code", ""), code) << r.body;
  EXPECT_TRUE(body.contains("error")) << r.body;
  EXPECT_TRUE(body.contains("detail")) << r.body;
  for (const auto& [name, value] : r.headers) EXPECT_FALSE(name.starts_with("access-control-")) << name << ": " << value;
}

class security_test : public server_test {
 protected:
  void SetUp() override {
    server_test::SetUp();
    ::setenv("BATON_SECURITY_AGENT_KEY", agent_key, 1);
    ::setenv("BATON_SECURITY_REVIEWER_KEY", reviewer_key, 1);
  }

  unsigned short start_with(const std::string& server_extra, const std::string& rest = {}) {
    config_ = parse_config("server: {listen: 127.0.0.1:0, io_threads: 2" + server_extra + "}\n" +
                           "log: {path: decisions.db, synchronous: normal}\n" + rest);
    return start();
  }

  static constexpr const char* keys =
      "auth:\n"
      "  keys:\n"
      "    - {name: agent, role: agent, env: BATON_SECURITY_AGENT_KEY}\n"
      "    - {name: reviewer, role: reviewer, env: BATON_SECURITY_REVIEWER_KEY}\n";
};

// DNS rebinding: a page of attacker.example, now resolved to 127.0.0.1, calls its own origin.
TEST_F(security_test, a_host_that_does_not_name_the_server_is_refused) {
  const unsigned short port = start_with("");
  const std::string p = ":" + std::to_string(port);
  http_client c(port);
  const headers rebound = {{"Host", "attacker.example" + p}};
  expect_refusal(c.send(http::verb::get, "/v1/escalations", {}, rebound), 403, "HOST_REFUSED");
  expect_refusal(c.send(http::verb::get, "/health", {}, rebound), 403, "HOST_REFUSED");
  expect_refusal(c.send(http::verb::get, "/inbox", {}, rebound), 403, "HOST_REFUSED");
  expect_refusal(c.send(http::verb::post, "/v1/systemone", decide_body,
                        {{"Host", "attacker.example" + p}, {"Content-Type", "application/json"}}),
                 403, "HOST_REFUSED");
  // A name that merely starts like loopback, and a malformed value.
  expect_refusal(c.send(http::verb::get, "/v1/models", {}, {{"Host", "localhost.attacker.example" + p}}), 403,
                 "HOST_REFUSED");
  expect_refusal(c.send(http::verb::get, "/v1/models", {}, {{"Host", "127.0.0.1:80:80"}}), 403, "HOST_REFUSED");
  // Bytes that are not UTF-8 are not echoed into the JSON answer (expect_refusal parses it).
  expect_refusal(c.send(http::verb::get, "/v1/models", {}, {{"Host", "\xff\xfe.example" + p}}), 403, "HOST_REFUSED");
  expect_refusal(c.send(http::verb::get, "/v1/models", {}, {{"Origin", "http://\xff\xfe"}}), 403, "ORIGIN_REFUSED");
  expect_refusal(c.send(http::verb::get, "/v1/\xff\xfe", {}, {}), 404, "NOT_FOUND");
  // The upgrade of a rebound page is refused the same way.
  expect_refusal(c.send(http::verb::get, "/v1/review", {}, upgrade_headers({{"Host", "attacker.example" + p}})), 403,
                 "HOST_REFUSED");

  // Loopback names and addresses are this server.
  for (const std::string& host : std::vector<std::string>{"127.0.0.1" + p, "localhost" + p, "LOCALHOST", "app.localhost" + p,
                                                          "[::1]" + p, "127.0.0.2", "localhost." + p}) {
    EXPECT_EQ(c.send(http::verb::get, "/v1/escalations", {}, {{"Host", host}}).status, 200) << host;
  }
  EXPECT_EQ(c.send(http::verb::get, "/inbox", {}, {{"Host", "localhost" + p}}).status, 200);
}

TEST_F(security_test, configured_hosts_are_answered) {
  const unsigned short port = start_with(", allowed_hosts: [baton.internal.example, \"[fd00::1]\"]");
  http_client c(port);
  EXPECT_EQ(c.send(http::verb::get, "/v1/models", {}, {{"Host", "Baton.Internal.Example:8470"}}).status, 200);
  EXPECT_EQ(c.send(http::verb::get, "/v1/models", {}, {{"Host", "[fd00::1]:8470"}}).status, 200);
  expect_refusal(c.send(http::verb::get, "/v1/models", {}, {{"Host", "other.example"}}), 403, "HOST_REFUSED");
  // A private address is not this server unless it listens there (or everywhere).
  expect_refusal(c.send(http::verb::get, "/v1/models", {}, {{"Host", "192.168.1.20:8470"}}), 403, "HOST_REFUSED");
}

// A page of another origin (here http://localhost:OTHER) posting with fetch(…, {mode: "no-cors"}).
TEST_F(security_test, a_foreign_origin_may_not_change_state_nor_upgrade) {
  const unsigned short port = start_with("");
  const std::string self = "127.0.0.1:" + std::to_string(port);
  http_client c(port);
  const std::string foreign = "http://localhost:" + std::to_string(port + 1);
  const headers json_from_foreign = {{"Host", self}, {"Origin", foreign}, {"Content-Type", "application/json"}};
  expect_refusal(c.send(http::verb::post, "/v1/escalations/e-123/resolve", resolve_body, json_from_foreign), 403,
                 "ORIGIN_REFUSED");
  expect_refusal(c.send(http::verb::post, "/v1/systemone", decide_body, json_from_foreign), 403, "ORIGIN_REFUSED");
  expect_refusal(c.send(http::verb::get, "/v1/escalations", {}, {{"Host", self}, {"Origin", foreign}}), 403,
                 "ORIGIN_REFUSED");
  expect_refusal(c.send(http::verb::get, "/v1/escalations", {}, {{"Host", self}, {"Origin", "null"}}), 403,
                 "ORIGIN_REFUSED");
  // Same host, another scheme's default port: another origin too.
  expect_refusal(c.send(http::verb::get, "/v1/escalations", {}, {{"Host", self}, {"Origin", "http://127.0.0.1"}}), 403,
                 "ORIGIN_REFUSED");
  expect_refusal(c.send(http::verb::get, "/v1/review", {}, upgrade_headers({{"Host", self}, {"Origin", foreign}})), 403,
                 "ORIGIN_REFUSED");
  expect_refusal(c.send(http::verb::get, "/v1/agent", {}, upgrade_headers({{"Host", self}, {"Origin", foreign}})), 403,
                 "ORIGIN_REFUSED");
  // A CORS preflight gets nothing that would let the browser go on.
  const auto preflight = c.send(http::verb::options, "/v1/systemone", {},
                                {{"Host", self},
                                 {"Origin", foreign},
                                 {"Access-Control-Request-Method", "POST"},
                                 {"Access-Control-Request-Headers", "content-type"}});
  EXPECT_GE(preflight.status, 400);
  for (const auto& [name, value] : preflight.headers) EXPECT_FALSE(name.starts_with("access-control-")) << name;

  // The server's own pages (the inbox) and callers that send no Origin go on.
  const headers own = {{"Host", self}, {"Origin", "http://" + self}, {"Content-Type", "application/json"}};
  EXPECT_EQ(c.send(http::verb::post, "/v1/escalations/e-123/resolve", resolve_body, own).status, 404);
  EXPECT_EQ(c.send(http::verb::post, "/v1/systemone", decide_body, own).status, 200);
  EXPECT_EQ(c.post("/v1/systemone", decide_body).status, 200);
  EXPECT_EQ(c.send(http::verb::get, "/v1/review", {}, upgrade_headers({{"Host", self}, {"Origin", "http://" + self}})).status,
            101);
  http_client agent(port);
  EXPECT_EQ(agent.send(http::verb::get, "/v1/agent", {}, upgrade_headers()).status, 101);
}

TEST_F(security_test, configured_origins_may_call) {
  const unsigned short port = start_with(", allowed_origins: [\"https://Ops.Example.com\"]");
  http_client c(port);
  const headers from_ops = {{"Origin", "https://ops.example.com"}, {"Content-Type", "application/json"}};
  EXPECT_EQ(c.send(http::verb::post, "/v1/systemone", decide_body, from_ops).status, 200);
  expect_refusal(c.send(http::verb::post, "/v1/systemone", decide_body,
                        {{"Origin", "https://ops.example.com.attacker.example"}, {"Content-Type", "application/json"}}),
                 403, "ORIGIN_REFUSED");
  expect_refusal(c.send(http::verb::post, "/v1/systemone", decide_body,
                        {{"Origin", "http://ops.example.com"}, {"Content-Type", "application/json"}}),
                 403, "ORIGIN_REFUSED");
}

// A request with two Host or two Origin headers is refused: the checks read one, and something
// behind the server might read the other. No browser sends either twice.
TEST_F(security_test, a_second_host_or_origin_header_is_refused) {
  const unsigned short port = start_with("");
  const std::string self = "127.0.0.1:" + std::to_string(port);
  const std::string upgrade =
      "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
      "Sec-WebSocket-Version: 13\r\n";
  auto raw = [&](const std::string& target, const std::string& head_lines) {
    http_client c(port);
    EXPECT_TRUE(c.write_raw("GET " + target + " HTTP/1.1\r\n" + head_lines + "\r\n"));
    return c.read_response();
  };
  const std::string two_hosts = "Host: " + self + "\r\nHost: attacker.example\r\n";
  const std::string two_origins =
      "Host: " + self + "\r\nOrigin: http://" + self + "\r\nOrigin: https://attacker.example\r\n";
  for (const std::string target : {"/v1/escalations", "/health"}) {
    SCOPED_TRACE(target);
    expect_refusal(raw(target, two_hosts), 400, "BAD_REQUEST");
    expect_refusal(raw(target, two_origins), 400, "BAD_REQUEST");
  }
  expect_refusal(raw("/v1/agent", two_hosts + upgrade), 400, "BAD_REQUEST");
  expect_refusal(raw("/v1/review", two_origins + upgrade), 400, "BAD_REQUEST");
  // One of each is this server's own request.
  EXPECT_EQ(raw("/v1/escalations", "Host: " + self + "\r\nOrigin: http://" + self + "\r\n").status, 200);
  EXPECT_EQ(raw("/v1/agent", "Host: " + self + "\r\n" + upgrade).status, 101);
}

// Keys do not replace the checks: a browser may hold a reviewer's key (the inbox stores it).
TEST_F(security_test, the_checks_apply_with_keys) {
  const unsigned short port = start_with("", keys);
  const std::string self = "127.0.0.1:" + std::to_string(port);
  http_client c(port);
  const std::string bearer = std::string("Bearer ") + reviewer_key;
  expect_refusal(c.send(http::verb::post, "/v1/escalations/e-123/resolve", resolve_body,
                        {{"Origin", "http://localhost:1"}, {"Content-Type", "application/json"}, {"Authorization", bearer}}),
                 403, "ORIGIN_REFUSED");
  expect_refusal(c.send(http::verb::get, "/v1/escalations", {}, {{"Host", "attacker.example"}, {"Authorization", bearer}}),
                 403, "HOST_REFUSED");
  expect_refusal(c.send(http::verb::post, "/v1/escalations/e-123/resolve", resolve_body,
                        {{"Content-Type", "text/plain"}, {"Authorization", bearer}}),
                 415, "UNSUPPORTED_MEDIA_TYPE");
  expect_refusal(c.send(http::verb::get, "/v1/review", {},
                        upgrade_headers({{"Origin", "http://localhost:1"}, {"Authorization", bearer}})),
                 403, "ORIGIN_REFUSED");
  EXPECT_EQ(c.send(http::verb::post, "/v1/escalations/e-123/resolve", resolve_body,
                   {{"Host", self}, {"Origin", "http://" + self}, {"Content-Type", "application/json"}, {"Authorization", bearer}})
                .status,
            404);
}

// What a form or a no-cors fetch can send (text/plain, form encodings) is not read as JSON.
TEST_F(security_test, json_endpoints_need_a_json_content_type) {
  const unsigned short port = start_with("");
  http_client c(port);
  for (const std::string type : {"text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                                 "multipart/form-data; boundary=x", "application/jsonx"}) {
    expect_refusal(c.send(http::verb::post, "/v1/systemone", decide_body, {{"Content-Type", type}}), 415,
                   "UNSUPPORTED_MEDIA_TYPE");
    expect_refusal(c.send(http::verb::post, "/v1/escalations/e-1/resolve", resolve_body, {{"Content-Type", type}}), 415,
                   "UNSUPPORTED_MEDIA_TYPE");
  }
  expect_refusal(c.send(http::verb::post, "/v1/decisions", decide_body), 415, "UNSUPPORTED_MEDIA_TYPE");
  EXPECT_EQ(c.send(http::verb::post, "/v1/systemone", decide_body, {{"Content-Type", "Application/JSON; charset=utf-8"}}).status,
            200);
  EXPECT_EQ(c.send(http::verb::post, "/v1/escalations/e-1/resolve", resolve_body, {{"Content-Type", "application/json"}}).status,
            404);
}

// 300 wrong keys in a row used to be answered 401 at full speed.
TEST_F(security_test, failed_authentications_are_throttled_per_address) {
  const unsigned short port = start_with("", keys);
  http_client c(port);
  const int burst = static_cast<int>(failure_limit.burst);
  for (int i = 0; i < burst; ++i) {
    EXPECT_EQ(c.get("/v1/models", "wrong-key-" + std::to_string(i) + "-0123456789").status, 401) << i;
  }
  const auto throttled = c.get("/v1/models", "wrong-key-last-0123456789");
  expect_refusal(throttled, 429, "RATE_LIMITED");
  EXPECT_EQ(throttled.header("retry-after"), "1");
  const int wait_ms = std::atoi(throttled.header("retry-after-ms").c_str());
  EXPECT_GT(wait_ms, 0);
  EXPECT_LE(wait_ms, 1000);
  // A request without a key waits too, and so do upgrades; a right key waits like the rest: answering it
  // would tell a guesser which guess was right.
  expect_refusal(c.get("/v1/models"), 429, "RATE_LIMITED");
  expect_refusal(c.get("/v1/models", agent_key), 429, "RATE_LIMITED");
  expect_refusal(c.send(http::verb::get, "/v1/agent", {}, upgrade_headers({{"Authorization", std::string("Bearer ") + agent_key}})),
                 429, "RATE_LIMITED");
  // /health needs no key and is not throttled.
  EXPECT_EQ(c.get("/health").status, 200);
  // After the wait, the right key is served and the next wrong one is a 401 again.
  std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms + 50));
  EXPECT_EQ(c.get("/v1/models", agent_key).status, 200);
  EXPECT_EQ(c.get("/v1/models", "wrong-key-again-0123456789").status, 401);
  expect_refusal(c.get("/v1/models", agent_key), 429, "RATE_LIMITED");
}

TEST(failure_limit_test, addresses_are_counted_apart_and_the_table_is_bounded) {
  auth_options o;
  o.keys.push_back(api_key{"agent", role::agent, agent_key, "", std::nullopt});
  authenticator auth(o);
  namespace ip = boost::asio::ip;
  auto fail = [&](const ip::address& a, int times) {
    for (int i = 0; i < times; ++i) EXPECT_FALSE(auth.authenticate("Bearer wrong-key-0123456789", a));
  };
  const int burst = static_cast<int>(failure_limit.burst);
  const auto first = ip::make_address("10.0.0.1");
  fail(first, burst);
  EXPECT_TRUE(auth.failure_wait(first));
  EXPECT_FALSE(auth.failure_wait(ip::make_address("10.0.0.2")));
  // One IPv6 /64 is one machine; its v4-mapped form is the IPv4 address.
  fail(ip::make_address("2001:db8:1:2::1"), burst);
  EXPECT_TRUE(auth.failure_wait(ip::make_address("2001:db8:1:2::ffff")));
  EXPECT_FALSE(auth.failure_wait(ip::make_address("2001:db8:1:3::1")));
  EXPECT_TRUE(auth.failure_wait(ip::make_address("::ffff:10.0.0.1")));
  // Right keys are never counted.
  for (int i = 0; i < 2 * burst; ++i) EXPECT_TRUE(auth.authenticate(std::string("Bearer ") + agent_key, ip::make_address("10.0.0.3")));
  EXPECT_FALSE(auth.failure_wait(ip::make_address("10.0.0.3")));
  // A request without a key is refused but is no guess: it is not counted.
  const auto keyless = ip::make_address("10.0.0.4");
  for (int i = 0; i < 2 * burst; ++i) EXPECT_FALSE(auth.authenticate("", keyless));
  EXPECT_FALSE(auth.failure_wait(keyless));
  // Past max_failing_addresses the address nearest to being forgiven is forgotten: the table stays
  // bounded, the worst guessers keep their buckets, and an address that never failed waits for
  // nobody else's.
  for (std::size_t i = 0; i < max_failing_addresses; ++i) {
    fail(ip::address_v4(0x0b000000u + static_cast<unsigned>(i)), 1);
  }
  const auto late = ip::make_address("12.0.0.1");
  EXPECT_FALSE(auth.failure_wait(late));
  fail(late, burst);
  EXPECT_TRUE(auth.failure_wait(late));
  EXPECT_FALSE(auth.failure_wait(ip::make_address("12.0.0.2"))) << "never failed";
  EXPECT_TRUE(auth.failure_wait(first)) << "a counted address keeps its own bucket";
  EXPECT_FALSE(auth.failure_wait(ip::address_v4(0x0b000000u))) << "one failure leaves tokens";
}

TEST(failure_limit_test, without_keys_nothing_is_counted) {
  authenticator auth(auth_options{});
  const auto a = boost::asio::ip::make_address("127.0.0.1");
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(auth.authenticate("Bearer anything", a));
  EXPECT_FALSE(auth.failure_wait(a));
}

TEST_F(security_test, api_answers_are_not_cached_nor_sniffed) {
  const unsigned short port = start_with("");
  http_client c(port);
  for (const auto& r : {c.get("/v1/models"), c.get("/health"), c.get("/v1/escalations"), c.get("/nowhere"),
                        c.post("/v1/systemone", decide_body), c.post("/v1/systemone", "{")}) {
    EXPECT_EQ(r.header("cache-control"), "no-store") << r.status << " " << r.body;
    EXPECT_EQ(r.header("x-content-type-options"), "nosniff") << r.status << " " << r.body;
  }
  // The inbox page may be cached (revalidated), and may connect to its own origin only.
  const auto page = c.get("/inbox");
  EXPECT_EQ(page.status, 200);
  EXPECT_EQ(page.header("cache-control"), "no-cache");
  EXPECT_EQ(page.header("x-content-type-options"), "nosniff");
  const std::string csp = page.header("content-security-policy");
  EXPECT_NE(csp.find("connect-src 'self';"), std::string::npos) << csp;
  EXPECT_EQ(csp.find("ws:"), std::string::npos) << csp;
}

// Beast's own refusals are plain text; every refusal has the one error body.
TEST_F(security_test, websocket_handshake_refusals_are_json) {
  const unsigned short port = start_with("");
  http_client c(port);
  const auto version = c.send(http::verb::get, "/v1/agent", {}, upgrade_headers({{"Sec-WebSocket-Version", "8"}}));
  expect_refusal(version, 426, "UNSUPPORTED_WEBSOCKET_VERSION");
  EXPECT_EQ(version.header("sec-websocket-version"), "13");
  expect_refusal(c.send(http::verb::get, "/v1/review", {}, upgrade_headers({{"Sec-WebSocket-Version", ""}})), 426,
                 "UNSUPPORTED_WEBSOCKET_VERSION");
  expect_refusal(c.send(http::verb::get, "/v1/agent", {}, upgrade_headers({{"Sec-WebSocket-Key", ""}})), 400,
                 "INVALID_HANDSHAKE");
  expect_refusal(c.send(http::verb::get, "/v1/review", {}, upgrade_headers({{"Sec-WebSocket-Key", "short"}})), 400,
                 "INVALID_HANDSHAKE");
  expect_refusal(c.send(http::verb::get, "/v1/agent", {}, upgrade_headers({{"Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ!="}})),
                 400, "INVALID_HANDSHAKE");
  // The connection goes on after a refusal, and a right handshake is accepted.
  EXPECT_EQ(c.send(http::verb::get, "/v1/agent", {}, upgrade_headers()).status, 101);
}

TEST(security_config_test, allowed_origins_and_hosts_are_read_and_checked) {
  const auto ok = parse_server_config(
      "server:\n"
      "  allowed_origins: [\"https://Ops.Example.com\", \"http://localhost:3000\", \"http://[::1]:8080\", \"app://x\"]\n"
      "  allowed_hosts: [Baton.Example, \"10.0.0.5\", \"[fd00::1]\", \"fd00::2\", \"fqdn.example.\"]\n",
      "baton.yaml");
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(ok->server.allowed_origins,
            (std::vector<std::string>{"https://ops.example.com", "http://localhost:3000", "http://[::1]:8080", "app://x"}));
  EXPECT_EQ(ok->server.allowed_hosts, (std::vector<std::string>{"baton.example", "10.0.0.5", "fd00::1", "fd00::2", "fqdn.example"}));
  const auto defaults = parse_server_config("server: {listen: 127.0.0.1:0}\n", "baton.yaml");
  ASSERT_TRUE(defaults);
  EXPECT_TRUE(defaults->server.allowed_origins.empty());
  EXPECT_TRUE(defaults->server.allowed_hosts.empty());

  for (const std::string bad : {"allowed_origins: \"https://ops.example.com\"", "allowed_origins: [\"*\"]",
                                "allowed_origins: [\"https://*.example.com\"]", "allowed_origins: [\"https://ops.example.com/\"]",
                                "allowed_origins: [\"ops.example.com\"]", "allowed_origins: [\"https://ops.example.com:x\"]",
                                "allowed_origins: [\"https://\"]", "allowed_origins: [\"\"]", "allowed_origins: [null]",
                                "allowed_origins: [\"https://ops.example.com:443\"]", "allowed_origins: [\"http://ops.example.com:80\"]",
                                "allowed_hosts: baton.example", "allowed_hosts: [\"baton.example:8470\"]",
                                "allowed_hosts: [\"http://baton.example\"]", "allowed_hosts: [\"*\"]",
                                "allowed_hosts: [\"\"]", "allowed_hosts: [\"[nope]\"]", "allowed_hosts: [\"a b\"]"}) {
    const auto r = parse_server_config("server:\n  " + bad + "\n", "baton.yaml");
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, "INVALID_CONFIG") << bad;
    EXPECT_NE(r.error().message.find("baton.yaml:2"), std::string::npos) << bad << ": " << r.error().message;
    EXPECT_NE(r.error().message.find("server.allowed_"), std::string::npos) << bad << ": " << r.error().message;
  }
}

}  // namespace
}  // namespace baton
