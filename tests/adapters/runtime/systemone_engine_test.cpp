// The systemone engine against real servers: another baton (in-process, a replay engine behind
// it) and a small misbehaving server of the same wire for the fault cases, also over TLS.
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <boost/asio/ssl.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <functional>
#include <mutex>
#include <thread>

#include "adapters/cli/cli.hpp"
#include "adapters/server/running_server.hpp"
#include "engine/systemone/systemone_engine.hpp"
#include "engine/systemone/workers_ai.hpp"
#include "support/http_client.hpp"
#include "support/env_var.hpp"
#include "support/files.hpp"
#include "support/scratch_dir.hpp"
#include "support/test_certificates.hpp"
#include "support/ws_client.hpp"

namespace baton {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using namespace std::chrono_literals;

// Chooses `tool` with probability `p` for the `tool` question (the rest shared), flat elsewhere.
class tool_engine : public decision_engine {
 public:
  tool_engine(std::string model, std::string tool, double p, request_limits limits = request_limits::text_only())
      : tool_(std::move(tool)), p_(p) {
    description_.model_id = std::move(model);
    description_.fingerprint = "sha256:" + description_.model_id;
    description_.limits = limits;
  }
  const engine_description& describe() const noexcept override { return description_; }
  std::vector<result<decision>> decide(std::span<const request> batch) override {
    std::vector<result<decision>> out;
    for (const request& r : batch) {
      {
        std::lock_guard lock(mutex_);
        images_.clear();
        for (const media_item& m : r.images) images_.push_back(m.data);
      }
      decision d;
      d.input_tokens = 42;
      for (const question& q : r.questions) {
        const std::size_t n = q.option_count();
        std::vector<double> p(n, 1.0 / double(n));
        if (q.id == "tool") {
          for (std::size_t i = 0; i < n; ++i) p[i] = q.option_id(i) == tool_ ? p_ : (1 - p_) / double(n - 1);
        }
        d.probabilities.push_back(std::move(p));
      }
      out.push_back(std::move(d));
    }
    return out;
  }
  // The images of the last request decided, as sent.
  std::vector<std::string> images() {
    std::lock_guard lock(mutex_);
    return images_;
  }

 private:
  std::string tool_;
  double p_;
  engine_description description_;
  std::mutex mutex_;
  std::vector<std::string> images_;
};

// A server of the wire that answers each request with the next scripted reply (status, headers,
// body), or sleeps first; counts what it got. With a TLS context it speaks https.
class scripted_server {
 public:
  struct reply {
    int status = 200;
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;
    std::chrono::milliseconds sleep{0};
    bool close_after = false;  // closes the connection without saying so (a kept-alive timeout)
    std::function<std::string(const std::string&)> body_of{};  // when set: the body, from the request's
    std::string before{};  // raw bytes sent before the reply (interim responses)
    std::string after{};   // raw bytes sent after it (a response no request asked for)
  };

  explicit scripted_server(std::vector<reply> script, net::ssl::context* tls = nullptr)
      : script_(std::move(script)), tls_(tls), acceptor_(io_, {net::ip::make_address("127.0.0.1"), 0}) {
    thread_ = std::thread([this] { serve(); });
  }
  ~scripted_server() {
    stopping_ = true;
    beast::error_code ec;
    tcp::socket wake(io_);
    wake.connect(acceptor_.local_endpoint(), ec);
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port()); }
  unsigned short port() const { return acceptor_.local_endpoint().port(); }
  int requests() const { return requests_; }
  int connections() const { return connections_; }
  std::string server_name() const {  // SNI of the last TLS connection
    std::lock_guard lock(mutex_);
    return server_name_;
  }
  std::string last_retry_count() const {
    std::lock_guard lock(mutex_);
    return last_retry_;
  }
  std::string last_body() const {
    std::lock_guard lock(mutex_);
    return last_body_;
  }
  std::string last_target() const {
    std::lock_guard lock(mutex_);
    return last_target_;
  }
  std::string last_authorization() const {
    std::lock_guard lock(mutex_);
    return last_authorization_;
  }

 private:
  void serve() {
    while (!stopping_) {
      tcp::socket s(io_);
      beast::error_code ec;
      acceptor_.accept(s, ec);
      if (ec || stopping_) return;
      ++connections_;
      if (!tls_) {
        talk(s);
        continue;
      }
      net::ssl::stream<tcp::socket> tls(std::move(s), *tls_);
      tls.handshake(net::ssl::stream_base::server, ec);
      if (ec) continue;  // the client refused the certificate
      {
        std::lock_guard lock(mutex_);
        const char* name = SSL_get_servername(tls.native_handle(), TLSEXT_NAMETYPE_host_name);
        server_name_ = name ? name : "";
      }
      talk(tls);
    }
  }

  template <class Stream>
  void talk(Stream& s) {
    beast::error_code ec;
    beast::flat_buffer buffer;
    for (;;) {  // one connection at a time, kept alive
      http::request<http::string_body> req;
      http::read(s, buffer, req, ec);
      if (ec) return;
      {
        std::lock_guard lock(mutex_);
        last_retry_ = std::string(req["X-TypeSafe-Retry-Count"]);
        last_body_ = req.body();
        last_target_ = std::string(req.target());
        last_authorization_ = std::string(req[http::field::authorization]);
      }
      const reply r = script_[std::min<std::size_t>(requests_++, script_.size() - 1)];
      std::this_thread::sleep_for(r.sleep);
      http::response<http::string_body> res{static_cast<http::status>(r.status), 11};
      for (const auto& [k, v] : r.headers) res.set(k, v);
      res.body() = r.body_of ? r.body_of(req.body()) : r.body;
      res.prepare_payload();
      // In one write, so that what comes after the reply is there when the client reads it.
      std::ostringstream raw;
      raw << r.before << res << r.after;
      net::write(s, net::buffer(raw.str()), ec);
      if (ec || r.close_after) return;
    }
  }

  std::vector<reply> script_;
  net::ssl::context* tls_;
  net::io_context io_;
  tcp::acceptor acceptor_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> requests_{0};
  std::atomic<int> connections_{0};
  mutable std::mutex mutex_;
  std::string server_name_;
  std::string last_retry_;
  std::string last_body_;
  std::string last_target_;
  std::string last_authorization_;
};

request sample_request() {
  auto r = parse_request(R"({"model":"big","state":"please refund my charge","questions":{
      "tool":{"type":"choice","criteria":{"refund":"Refund a charge","search":null}},
      "person":{"type":"noul"},"urgency":{"type":"score","criteria":["low","high"]}}})",
                         request_limits{});
  EXPECT_TRUE(r) << r.error().message;
  return std::move(*r);
}

std::unique_ptr<systemone_engine> engine_for(const std::string& url, std::function<void(systemone_engine_options&)> tune = {}) {
  systemone_engine_options o;
  o.url = url;
  o.model = "big";
  o.backoff = 10ms;
  o.timeout = 500ms;
  if (tune) tune(o);
  auto e = systemone_engine::make(o);
  EXPECT_TRUE(e) << e.error().message;
  return std::move(*e);
}

const std::string good_answer =
    R"({"model":"big-1","answers":{"tool":{"type":"choice","choice":"refund","confidence":0.9,"probabilities":{"refund":0.9,"search":0.1}},
        "person":{"type":"noul","noul":0.25},
        "urgency":{"type":"score","score":0.5,"confidence":0.5,"legend":{"0":"low","1":"high"},"probabilities":{"0":0.5,"1":0.5}}},
        "usage":{"input_tokens":7,"output_tokens":0}})";

TEST(systemone_engine, another_baton_answers_and_its_key_is_sent) {
  spdlog::set_level(spdlog::level::err);
  const test::scratch_dir dir("baton-upstream");
  ::setenv("BATON_UPSTREAM_TEST_KEY", "upstream-key-0123456789", 1);
  auto c = parse_server_config("server: {listen: 127.0.0.1:0}\nregistry: " + (test::source_dir() / "config/tools.yaml").string() +
                                   "\npolicy: " + (test::source_dir() / "config/policy.yaml").string() +
                                   "\nlog: {path: decisions.db}\nsystemone: {model_aliases: [big]}\n"
                                   "auth: {keys: [{name: front, role: agent, env: BATON_UPSTREAM_TEST_KEY}]}\n",
                               dir / "baton.yaml");
  ASSERT_TRUE(c) << c.error().message;
  auto upstream = running_server::start(*c, std::make_unique<tool_engine>("big-1", "refund", 0.9));
  const std::string url = "http://127.0.0.1:" + std::to_string(upstream->port());

  auto engine = engine_for(url, [](auto& o) { o.api_key = "upstream-key-0123456789"; });
  EXPECT_EQ(engine->describe().model_id, "big");
  const std::vector<request> batch(5, sample_request());
  const auto out = engine->decide(batch);
  ASSERT_EQ(out.size(), 5u);
  for (const auto& r : out) {
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->probabilities[0], (std::vector<double>{0.9, 0.1}));
    EXPECT_EQ(r->probabilities[1], (std::vector<double>{0.5, 0.5}));
    EXPECT_EQ(r->input_tokens, 42);
  }
  // Without the key the other baton refuses: an engine error, not a decision.
  auto keyless = engine_for(url);
  const auto refused = keyless->decide(batch);
  ASSERT_FALSE(refused[0]);
  EXPECT_EQ(refused[0].error().code, "UPSTREAM_REFUSED");
  EXPECT_NE(refused[0].error().message.find("401"), std::string::npos) << refused[0].error().message;

  // A baton whose engine is the other one: SystemOne clients of the front get the upstream's answers.
  auto front_config = parse_server_config("server: {listen: 127.0.0.1:0}\nregistry: " +
                                              (test::source_dir() / "config/tools.yaml").string() + "\npolicy: " +
                                              (test::source_dir() / "config/policy.yaml").string() +
                                              "\nlog: {path: front.db}\nsystemone: {model_aliases: [jev-latest]}\n"
                                              "engine: {name: systemone, url: \"" + url + "\", model: big, "
                                              "key_env: BATON_UPSTREAM_TEST_KEY, connections: 2, retries: 1}\n",
                                          dir / "front.yaml");
  ASSERT_TRUE(front_config) << front_config.error().message;
  auto front = running_server::start(*front_config);
  test::http_client client(front->port());
  const auto res = client.post("/v1/systemone", R"({"state":"refund please","questions":{"tool":{"type":"choice","criteria":{"refund":null,"search":null}}}})");
  ASSERT_EQ(res.status, 200) << res.body;
  EXPECT_EQ(res.body_json()["model"], "big");
  EXPECT_EQ(res.body_json()["answers"]["tool"]["probabilities"], json::parse(R"({"refund":0.9,"search":0.1})"));
  front.reset();
  upstream.reset();
}

// Pixels and samples from the C++ API have no wire form: refused before any call, and the circuit
// does not count the refusal as an answer or a failure of the server.
TEST(systemone_engine, raw_media_is_refused_without_a_call) {
  scripted_server server({{200, good_answer, {}}});
  auto engine = engine_for(server.url());
  request with_raw = sample_request();
  raw_media pcm;
  pcm.audio = {0.0f, 0.25f};
  with_raw.audio.push_back(raw_item(std::move(pcm)));
  const auto out = engine->decide(std::vector<request>{with_raw, sample_request()});
  ASSERT_FALSE(out[0]);
  EXPECT_EQ(out[0].error().status, 422);
  EXPECT_EQ(out[0].error().code, "MEDIA_SOURCE_REFUSED");
  ASSERT_TRUE(out[1]) << out[1].error().message;
  EXPECT_EQ(server.requests(), 1);
}

TEST(systemone_engine, retries_honour_retry_after_then_answer) {
  scripted_server server({{429, R"({"error":"slow down","code":"RATE_LIMITED","detail":[]})", {{"retry-after-ms", "30"}}},
                          {503, "{}", {}},
                          {200, good_answer, {}}});
  auto engine = engine_for(server.url());
  const auto t0 = std::chrono::steady_clock::now();
  const auto out = engine->decide(std::vector<request>{sample_request()});
  ASSERT_TRUE(out[0]) << out[0].error().message;
  EXPECT_EQ(server.requests(), 3);
  EXPECT_EQ(server.last_retry_count(), "2");
  // The request as sent: the configured model, the questions in order, as the caller wrote them.
  const json sent = test::parse(server.last_body());
  EXPECT_EQ(sent["model"], "big");
  EXPECT_EQ(sent["state"], "please refund my charge");
  std::vector<std::string> ids;
  for (const auto& [k, v] : sent["questions"].items()) ids.push_back(k);
  EXPECT_EQ(ids, (std::vector<std::string>{"tool", "person", "urgency"}));
  EXPECT_EQ(sent["questions"]["tool"]["criteria"], json::parse(R"({"refund":"Refund a charge","search":null})"));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 30ms);
  EXPECT_EQ(out[0]->probabilities[1], (std::vector<double>{0.25, 0.75}));
  EXPECT_EQ(out[0]->input_tokens, 7);
}

TEST(systemone_engine, a_pooled_connection_the_server_closed_is_no_failed_attempt) {
  scripted_server server({{200, good_answer, {}, 0ms, true}});
  auto engine = engine_for(server.url(), [](auto& o) { o.retries = 0; });
  for (int i = 0; i < 3; ++i) {
    const auto out = engine->decide(std::vector<request>{sample_request()});
    ASSERT_TRUE(out[0]) << i << ": " << out[0].error().message;
  }
  EXPECT_EQ(server.requests(), 3);
}

// Interim responses (RFC 9110 §15.2) come before the answer: they are skipped, and the answer
// read is the request's own, not left on the connection for the next request.
TEST(systemone_engine, interim_responses_are_skipped) {
  const std::string other = std::string(good_answer).replace(good_answer.find("0.25"), 4, "0.75");
  scripted_server server({{200, good_answer, {}, 0ms, false, {},
                           "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n"},
                          {200, other, {}}});
  auto engine = engine_for(server.url(), [](auto& o) { o.retries = 0; });
  for (const double person : {0.25, 0.75}) {
    const auto out = engine->decide(std::vector<request>{sample_request()});
    ASSERT_TRUE(out[0]) << out[0].error().message;
    EXPECT_EQ(out[0]->probabilities[1][0], person);
  }
  EXPECT_EQ(server.connections(), 1);
}

// A connection with bytes no request asked for (here a second response after the answer) is
// closed: the next request must not read them as its answer.
TEST(systemone_engine, a_connection_with_unasked_bytes_is_not_reused) {
  const std::string stale = std::string(good_answer).replace(good_answer.find("0.25"), 4, "0.99");
  const std::string extra = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                            std::to_string(stale.size()) + "\r\n\r\n" + stale;
  scripted_server server({{200, good_answer, {}, 0ms, false, {}, {}, extra}, {200, good_answer, {}}});
  auto engine = engine_for(server.url(), [](auto& o) { o.retries = 0; });
  for (int i = 0; i < 2; ++i) {
    const auto out = engine->decide(std::vector<request>{sample_request()});
    ASSERT_TRUE(out[0]) << i << ": " << out[0].error().message;
    EXPECT_EQ(out[0]->probabilities[1][0], 0.25) << i;
  }
  EXPECT_EQ(server.connections(), 2);
}

TEST(systemone_engine, retry_after_values_are_bounded) {
  // "inf" and a huge number are capped at backoff_max; 0 retries at once, then backs off again.
  scripted_server server({{503, "{}", {{"retry-after-ms", "inf"}}},
                          {503, "{}", {{"Retry-After", "1e300"}}},
                          {503, "{}", {{"Retry-After", "0"}}},
                          {200, good_answer, {}}});
  auto engine = engine_for(server.url(), [](auto& o) {
    o.retries = 3;
    o.backoff_max = 40ms;
  });
  const auto t0 = std::chrono::steady_clock::now();
  const auto out = engine->decide(std::vector<request>{sample_request()});
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(out[0]) << out[0].error().message;
  EXPECT_EQ(server.requests(), 4);
  EXPECT_GE(took, 80ms);
  EXPECT_LT(took, 2s);
}

TEST(systemone_engine, the_circuit_closes_again_after_a_good_trial) {
  scripted_server server({{503, "{}", {}}, {200, good_answer, {}}});
  auto engine = engine_for(server.url(), [](auto& o) {
    o.retries = 0;
    o.breaker_failures = 1;
    o.breaker_open = 100ms;
  });
  const std::vector<request> batch(3, sample_request());
  auto out = engine->decide(batch);  // one failed call, however many requests
  ASSERT_FALSE(out[0]);
  out = engine->decide(batch);
  ASSERT_FALSE(out[0]);
  EXPECT_EQ(out[0].error().code, "ENGINE_UNAVAILABLE");
  std::this_thread::sleep_for(150ms);
  // The trial (one request: this server takes one connection at a time): it answers now.
  const std::vector<request> one(1, sample_request());
  out = engine->decide(one);
  EXPECT_TRUE(out[0]) << out[0].error().message;
  out = engine->decide(one);
  EXPECT_TRUE(out[0]) << out[0].error().message;
}

TEST(systemone_engine, garbage_partial_and_refused_answers_are_errors) {
  const std::vector<std::pair<scripted_server::reply, std::string>> cases = {
      {{200, "not json", {}}, "BAD_UPSTREAM_RESPONSE"},
      {{200, R"({"model":"m","answers":{},"usage":{"input_tokens":1,"output_tokens":0}})", {}}, "BAD_UPSTREAM_RESPONSE"},
      // A probability for an option the question does not have.
      {{200, std::string(good_answer).replace(good_answer.find("\"search\":0.1"), 12, "\"other\":0.1"), {}}, "BAD_UPSTREAM_RESPONSE"},
      // Probabilities that do not sum to 1.
      {{200, std::string(good_answer).replace(good_answer.find("\"refund\":0.9,\"search\""), 12, "\"refund\":0.7"), {}},
       "BAD_UPSTREAM_RESPONSE"},
      {{422, R"({"error":"questions.tool: bad","code":"INVALID_REQUEST","detail":[]})", {}}, "INVALID_REQUEST"},
      {{403, "forbidden", {}}, "UPSTREAM_REFUSED"},
  };
  for (const auto& [reply, code] : cases) {
    SCOPED_TRACE(reply.body);
    scripted_server server({reply});
    auto engine = engine_for(server.url());
    const auto out = engine->decide(std::vector<request>{sample_request()});
    ASSERT_FALSE(out[0]);
    EXPECT_EQ(out[0].error().code, code) << out[0].error().message;
    EXPECT_EQ(server.requests(), 1);  // not retried
  }
}

TEST(systemone_engine, a_slow_or_absent_server_fails_and_opens_the_circuit) {
  scripted_server slow({{200, good_answer, {}, 300ms}});
  auto engine = engine_for(slow.url(), [](auto& o) {
    o.timeout = 100ms;
    o.retries = 1;
    o.breaker_failures = 2;
    o.breaker_open = 10s;
  });
  auto out = engine->decide(std::vector<request>{sample_request()});
  ASSERT_FALSE(out[0]);
  EXPECT_EQ(out[0].error().code, "UPSTREAM_UNREACHABLE");
  EXPECT_NE(out[0].error().message.find("no answer within 100 ms (2 attempts)"), std::string::npos) << out[0].error().message;
  out = engine->decide(std::vector<request>{sample_request()});
  ASSERT_FALSE(out[0]);
  const int calls = slow.requests();
  // Two failures in a row: the circuit is open and the server is left alone.
  out = engine->decide(std::vector<request>{sample_request()});
  ASSERT_FALSE(out[0]);
  EXPECT_EQ(out[0].error().code, "ENGINE_UNAVAILABLE");
  EXPECT_EQ(out[0].error().status, 503);
  EXPECT_EQ(slow.requests(), calls);

  auto closed_port = [] {
    net::io_context io;
    tcp::acceptor a(io, {net::ip::make_address("127.0.0.1"), 0});
    return a.local_endpoint().port();
  }();
  auto absent = engine_for("http://127.0.0.1:" + std::to_string(closed_port));
  out = absent->decide(std::vector<request>{sample_request()});
  ASSERT_FALSE(out[0]);
  EXPECT_EQ(out[0].error().code, "UPSTREAM_UNREACHABLE");
  EXPECT_NE(out[0].error().message.find("cannot connect"), std::string::npos) << out[0].error().message;
}

TEST(systemone_engine, urls_it_cannot_call_are_refused_at_once) {
  for (const char* url : {"ftp://models.internal", "https://user@models.internal", "models.internal:8470"}) {
    systemone_engine_options o;
    o.url = url;
    const auto e = systemone_engine::make(o);
    ASSERT_FALSE(e) << url;
    EXPECT_EQ(e.error().code, "INVALID_ENGINE_URL") << url;
  }
}

// Workers AI (the workers-ai flavor): Cloudflare's hosted Clef-Omni, played by a local server
// that answers in Cloudflare's envelope.
json spec_example(const std::string& file) { return test::read_json(test::data_dir() / "spec-examples" / file); }

std::string envelope_of(const std::string& result) {
  return R"({"result":)" + result + R"(,"success":true,"errors":[],"messages":[]})";
}

std::string error_envelope(int code, const std::string& message) {
  return R"({"result":null,"success":false,"errors":[{"code":)" + std::to_string(code) + R"(,"message":")" + message +
         R"("}],"messages":[]})";
}

const std::string cf_path = "/client/v4/accounts/0123456789abcdef/ai/run/@cf/cloudflare/clef-omni";

std::unique_ptr<systemone_engine> workers_ai_engine(const scripted_server& server,
                                                    std::function<void(systemone_engine_options&)> tune = {}) {
  return engine_for(server.url(), [&](auto& o) {
    o.flavor = systemone_flavor::workers_ai;
    o.model.clear();  // Cloudflare's Clef-Omni
    o.account = "0123456789abcdef";
    o.api_key = "cf-token-0123456789";
    o.key_env = "CLOUDFLARE_API_TOKEN";
    o.account_env = "CLOUDFLARE_ACCOUNT_ID";
    if (tune) tune(o);
  });
}

TEST(workers_ai, the_documented_envelope_answers_as_its_result) {
  const json ex = spec_example("neurolink-cloudflare-clef__workers-ai-envelope.json");
  // Through baton's types: the result is the SystemOne answer, and nothing went wrong.
  const auto env = workers_ai::envelope_from_json(ex["response"]);
  ASSERT_TRUE(env) << env.error().message;
  EXPECT_TRUE(env->success);
  EXPECT_TRUE(env->errors.empty());
  EXPECT_EQ(env->result, ex["response"]["result"]);

  scripted_server server({{200, render_json(ex["response"], false), {{"cf-ai-req-id", "req-0001"}, {"cf-ray", "ray-0001"}}}});
  auto engine = workers_ai_engine(server);
  EXPECT_EQ(engine->describe().model_id, "@cf/cloudflare/clef-omni");
  auto req = parse_request(render_json(ex["request"], false), request_limits{});
  ASSERT_TRUE(req) << req.error().message;
  const auto out = engine->decide(std::vector<request>{*req});
  ASSERT_TRUE(out[0]) << out[0].error().message;
  EXPECT_EQ(server.last_target(), cf_path);
  EXPECT_EQ(server.last_authorization(), "Bearer cf-token-0123456789");
  // The body is the SystemOne request, with the model as the systemone flavor sends it.
  std::string sent;
  render_request(*req, sent, "@cf/cloudflare/clef-omni");
  EXPECT_EQ(server.last_body(), sent);
  // The decision answers as the vector's result does.
  EXPECT_EQ(out[0]->input_tokens, 346);
  const auto back = make_response(*req, *out[0], confidence_metric::p_max, "clef");
  ASSERT_TRUE(back);
  std::string answers;
  render_answers(*back, answers);
  EXPECT_EQ(test::parse(answers), ex["response"]["result"]["answers"]);
}

TEST(workers_ai, error_envelopes_map_to_batons_codes_with_the_request_id) {
  const json unauthorized = spec_example("neurolink-cloudflare-clef__401-envelope.json");
  const auto env = workers_ai::envelope_from_json(unauthorized["response"]);
  ASSERT_TRUE(env) << env.error().message;
  EXPECT_FALSE(env->success);
  ASSERT_EQ(env->errors.size(), 1u);
  ASSERT_TRUE(env->errors[0].code);
  EXPECT_EQ(*env->errors[0].code, 10000);
  EXPECT_EQ(env->errors[0].message, "Authentication error");

  struct expected {
    scripted_server::reply reply;
    int status;
    std::string code;
    std::vector<std::string> said;
  };
  const std::vector<expected> cases = {
      {{unauthorized["status"].get<int>(), render_json(unauthorized["response"], false), {{"cf-ray", "8f3a-LHR"}}},
       502, "UPSTREAM_AUTH_FAILED",
       {"10000 \"Authentication error\"", "HTTP 401, request id 8f3a-LHR", "set `CLOUDFLARE_API_TOKEN`"}},
      // A proxy's page: the status still says what is wrong.
      {{403, "<html>forbidden</html>", {}}, 502, "UPSTREAM_AUTH_FAILED", {"HTTP 403, no request id", "`CLOUDFLARE_API_TOKEN`"}},
      {{404, error_envelope(7003, "Could not route to /client/v4/accounts/0123456789abcdef/ai/run, perhaps your object identifier is invalid?"),
        {{"cf-ai-req-id", "req-404"}, {"cf-ray", "ray-404"}}},
       502, "UPSTREAM_NOT_FOUND",
       {"7003 \"Could not route", "request id req-404", "`CLOUDFLARE_ACCOUNT_ID`", "@cf/cloudflare/clef-omni"}},
      {{400, error_envelope(5006, "Error: required properties at '/' are 'state'"), {{"cf-ai-req-id", "req-400"}}},
       400, "UPSTREAM_REFUSED", {"5006 \"Error: required properties at '/' are 'state'\"", "request id req-400"}},
      // An HTTP 200 that says success: false is an error too.
      {{200, error_envelope(3043, "Internal server error"), {{"cf-ai-req-id", "req-200"}}},
       502, "UPSTREAM_REFUSED", {"success: false", "3043 \"Internal server error\"", "request id req-200"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.reply.body);
    scripted_server server({c.reply});
    auto engine = workers_ai_engine(server);
    const auto out = engine->decide(std::vector<request>{sample_request()});
    ASSERT_FALSE(out[0]);
    EXPECT_EQ(out[0].error().status, c.status);
    EXPECT_EQ(out[0].error().code, c.code) << out[0].error().message;
    for (const auto& s : c.said) EXPECT_NE(out[0].error().message.find(s), std::string::npos) << s << " in " << out[0].error().message;
    EXPECT_EQ(out[0].error().message.find("cf-token-0123456789"), std::string::npos);  // never the token
    EXPECT_EQ(server.requests(), 1);  // not retried
  }
}

TEST(workers_ai, rate_limits_are_retried_after_retry_after_and_quoted_when_they_last) {
  const std::string busy = error_envelope(3040, "Capacity temporarily exceeded, please try again.");
  {
    scripted_server server({{429, busy, {{"Retry-After", "0.1"}, {"cf-ai-req-id", "req-429"}}}, {200, envelope_of(good_answer), {}}});
    auto engine = workers_ai_engine(server);  // backoff 10 ms: only Retry-After waits 100
    const auto t0 = std::chrono::steady_clock::now();
    const auto out = engine->decide(std::vector<request>{sample_request()});
    ASSERT_TRUE(out[0]) << out[0].error().message;
    EXPECT_GE(std::chrono::steady_clock::now() - t0, 100ms);
    EXPECT_EQ(server.requests(), 2);
    EXPECT_EQ(server.last_target(), cf_path);
    EXPECT_EQ(out[0]->probabilities[0], (std::vector<double>{0.9, 0.1}));
    EXPECT_EQ(out[0]->probabilities[1], (std::vector<double>{0.25, 0.75}));
  }
  // Still limited (then down) after the retries: unreachable, with what Cloudflare said last.
  scripted_server server({{429, busy, {{"cf-ai-req-id", "req-a"}}},
                          {503, error_envelope(3001, "Unknown internal error"), {{"cf-ray", "ray-b"}}}});
  auto engine = workers_ai_engine(server, [](auto& o) { o.retries = 1; });
  const auto out = engine->decide(std::vector<request>{sample_request()});
  ASSERT_FALSE(out[0]);
  EXPECT_EQ(out[0].error().code, "UPSTREAM_UNREACHABLE");
  EXPECT_NE(out[0].error().message.find("the server answered 503: 3001 \"Unknown internal error\" (request id ray-b) (2 attempts)"),
            std::string::npos)
      << out[0].error().message;
}

TEST(workers_ai, garbled_answers_are_bad_upstream_responses) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"<html>502 Bad Gateway</html>", "not a Workers AI envelope: not JSON"},
      {good_answer, "not a Workers AI envelope: no boolean `success`"},  // a bare SystemOne answer
      {R"({"result":{},"success":true,"errors":[{"code":1}],"messages":[]})", "an `errors` item without a string `message`"},
      {R"({"result":null,"success":true,"errors":[],"messages":[]})", "not a SystemOne response"},
      // An answer, but not to this request: checked as every SystemOne answer is.
      {envelope_of(R"({"model":"m","answers":{},"usage":{"input_tokens":1,"output_tokens":0}})"), "answered 0 questions of 3"},
  };
  for (const auto& [body, said] : cases) {
    SCOPED_TRACE(body);
    scripted_server server({{200, body, {{"cf-ai-req-id", "req-garbled"}}}});
    auto engine = workers_ai_engine(server);
    const auto out = engine->decide(std::vector<request>{sample_request()});
    ASSERT_FALSE(out[0]);
    EXPECT_EQ(out[0].error().status, 502);
    EXPECT_EQ(out[0].error().code, "BAD_UPSTREAM_RESPONSE");
    EXPECT_NE(out[0].error().message.find(said), std::string::npos) << out[0].error().message;
    EXPECT_NE(out[0].error().message.find("(HTTP 200, request id req-garbled)"), std::string::npos) << out[0].error().message;
    EXPECT_EQ(server.requests(), 1);
  }
}

TEST(workers_ai, accounts_models_and_credentials_are_checked_when_made) {
  EXPECT_EQ(workers_ai::run_path("0123abc", "@cf/cloudflare/clef-omni").value_or(""),
            "/client/v4/accounts/0123abc/ai/run/@cf/cloudflare/clef-omni");
  for (const auto& [account, model] : std::vector<std::pair<std::string, std::string>>{
           {"", "@cf/x"}, {"a/b", "@cf/x"}, {"a?b", "@cf/x"}, {"abc", ""}, {"abc", "../admin"}, {"abc", "@cf/x?y=1"}, {"abc", "/x"}}) {
    EXPECT_FALSE(workers_ai::run_path(account, model)) << account << " " << model;
  }
  const std::vector<std::pair<std::function<void(systemone_engine_options&)>, std::string>> cases = {
      {[](auto& o) { o.account.clear(); }, "ENGINE_NEEDS_CREDENTIALS"},
      {[](auto& o) { o.api_key.clear(); }, "ENGINE_NEEDS_CREDENTIALS"},
      {[](auto& o) { o.account = "../../zones"; }, "INVALID_ENGINE_URL"},
      {[](auto& o) { o.model = "@cf/x y"; }, "INVALID_ENGINE_URL"},
  };
  for (const auto& [tune, code] : cases) {
    systemone_engine_options o;
    o.flavor = systemone_flavor::workers_ai;
    o.url = "http://127.0.0.1:9";
    o.account = "0123456789abcdef";
    o.api_key = "cf-token-0123456789";
    tune(o);
    const auto e = systemone_engine::make(o);
    ASSERT_FALSE(e) << code;
    EXPECT_EQ(e.error().code, code) << e.error().message;
  }
}

TEST(workers_ai, a_baton_serves_it_as_its_engine) {
  spdlog::set_level(spdlog::level::err);
  scripted_server server({{200, envelope_of(good_answer), {{"cf-ai-req-id", "req-front"}}}});
  const test::scratch_dir dir("baton-workers-ai");
  const test::env_var account("BATON_TEST_CF_ACCOUNT", "0123456789abcdef"), token("BATON_TEST_CF_TOKEN", "cf-token-0123456789");
  auto c = parse_server_config("server: {listen: 127.0.0.1:0}\nregistry: " + (test::source_dir() / "config/tools.yaml").string() +
                                   "\npolicy: " + (test::source_dir() / "config/policy.yaml").string() +
                                   "\nlog: {path: front.db}\n"
                                   "engine: {name: systemone, flavor: workers-ai, url: \"" + server.url() + "\", "
                                   "account_env: BATON_TEST_CF_ACCOUNT, key_env: BATON_TEST_CF_TOKEN, retries: 0}\n",
                               dir / "front.yaml");
  ASSERT_TRUE(c) << c.error().message;
  auto front = running_server::start(*c);
  test::http_client client(front->port());
  const auto res = client.post("/v1/systemone", R"({"state":"please refund my charge","questions":{
      "tool":{"type":"choice","criteria":{"refund":"Refund a charge","search":null}},
      "person":{"type":"noul"},"urgency":{"type":"score","criteria":["low","high"]}}})");
  ASSERT_EQ(res.status, 200) << res.body;
  EXPECT_EQ(res.body_json()["model"], "@cf/cloudflare/clef-omni");
  EXPECT_EQ(res.body_json()["answers"]["person"]["noul"], 0.25);
  EXPECT_EQ(server.last_target(), cf_path);
  EXPECT_EQ(server.last_authorization(), "Bearer cf-token-0123456789");
  front.reset();
}

// https: a server with a certificate from a CA made for the test, which the engine trusts only
// through ca_file().
class tls_test : public ::testing::Test {
 protected:
  void SetUp() override {
    spdlog::set_level(spdlog::level::err);
    std::ofstream(ca_file()) << ca_.cert_pem();
  }

  std::filesystem::path ca_file() const { return dir_ / "ca.pem"; }

  // The server's side: a certificate for `alt_names`, signed by the test CA.
  net::ssl::context* server_tls(const std::string& alt_names) {
    const test::key_pair leaf = ca_.leaf(alt_names);
    server_tls_ = std::make_unique<net::ssl::context>(net::ssl::context::tls_server);
    server_tls_->use_certificate_chain(net::buffer(leaf.cert_pem));
    server_tls_->use_private_key(net::buffer(leaf.key_pem), net::ssl::context::pem);
    return server_tls_.get();
  }

  std::unique_ptr<systemone_engine> trusting_engine(const std::string& url, std::function<void(systemone_engine_options&)> tune = {}) {
    return engine_for(url, [&](auto& o) {
      o.ca_file = ca_file();
      if (tune) tune(o);
    });
  }

  const test::scratch_dir dir_{"baton-tls"};
  test::test_ca ca_;
  std::unique_ptr<net::ssl::context> server_tls_;
};

TEST_F(tls_test, a_private_ca_is_trusted_and_the_connection_kept_alive) {
  scripted_server server({{200, good_answer, {}}}, server_tls("DNS:localhost,IP:127.0.0.1"));
  const std::string port = std::to_string(server.port());
  auto engine = trusting_engine("https://localhost:" + port);
  for (int i = 0; i < 2; ++i) {
    const auto out = engine->decide(std::vector<request>{sample_request()});
    ASSERT_TRUE(out[0]) << i << ": " << out[0].error().message;
    EXPECT_EQ(out[0]->probabilities[0], (std::vector<double>{0.9, 0.1}));
    EXPECT_EQ(out[0]->probabilities[1], (std::vector<double>{0.25, 0.75}));
    EXPECT_EQ(out[0]->input_tokens, 7);
  }
  EXPECT_EQ(server.requests(), 2);
  EXPECT_EQ(server.connections(), 1);  // the second call went over the first's connection
  EXPECT_EQ(server.server_name(), "localhost");
  engine.reset();  // closes it: this server serves one connection at a time

  // By address: the certificate names 127.0.0.1 too; SNI names hosts only.
  auto by_address = trusting_engine("https://127.0.0.1:" + port);
  const auto out = by_address->decide(std::vector<request>{sample_request()});
  ASSERT_TRUE(out[0]) << out[0].error().message;
  EXPECT_EQ(server.connections(), 2);
  EXPECT_EQ(server.server_name(), "");
}

TEST_F(tls_test, a_baton_configured_with_an_https_engine_and_its_ca_file) {
  scripted_server server({{200, good_answer, {}}}, server_tls("DNS:localhost"));
  // ca.pem relative to the config file, as every path in it.
  auto c = parse_server_config("server: {listen: 127.0.0.1:0}\nregistry: " + (test::source_dir() / "config/tools.yaml").string() +
                                   "\npolicy: " + (test::source_dir() / "config/policy.yaml").string() +
                                   "\nlog: {path: front.db}\nsystemone: {model_aliases: [big]}\n"
                                   "engine: {name: systemone, url: \"https://localhost:" + std::to_string(server.port()) +
                                   "\", ca_file: ca.pem, model: big, retries: 0}\n",
                               dir_ / "front.yaml");
  ASSERT_TRUE(c) << c.error().message;
  auto front = running_server::start(*c);
  test::http_client client(front->port());
  const auto res = client.post("/v1/systemone", R"({"model":"big","state":"please refund my charge","questions":{
      "tool":{"type":"choice","criteria":{"refund":"Refund a charge","search":null}},
      "person":{"type":"noul"},"urgency":{"type":"score","criteria":["low","high"]}}})");
  ASSERT_EQ(res.status, 200) << res.body;
  EXPECT_EQ(res.body_json()["answers"]["person"]["noul"], 0.25);
  EXPECT_EQ(server.requests(), 1);
  front.reset();
}

TEST_F(tls_test, without_the_ca_the_certificate_is_refused_at_once) {
  scripted_server server({{200, good_answer, {}}}, server_tls("DNS:localhost"));
  const std::string host = "localhost:" + std::to_string(server.port());
  auto engine = engine_for("https://" + host);  // the system's CAs, 2 retries
  const auto out = engine->decide(std::vector<request>{sample_request()});
  ASSERT_FALSE(out[0]);
  EXPECT_EQ(out[0].error().status, 502);
  EXPECT_EQ(out[0].error().code, "UPSTREAM_UNREACHABLE");
  EXPECT_NE(out[0].error().message.find("TLS handshake with " + host + " failed: certificate verify failed"), std::string::npos)
      << out[0].error().message;
  EXPECT_EQ(server.connections(), 1);  // a certificate it does not trust is not tried again
  EXPECT_EQ(server.requests(), 0);
}

TEST_F(tls_test, a_certificate_for_another_host_is_refused) {
  scripted_server server({{200, good_answer, {}}}, server_tls("DNS:models.internal,IP:10.0.0.7"));
  const std::string port = std::to_string(server.port());
  for (const auto& [host, why] : {std::pair{"localhost", "hostname mismatch"}, std::pair{"127.0.0.1", "IP address mismatch"}}) {
    auto engine = trusting_engine(std::string("https://") + host + ":" + port);
    const auto out = engine->decide(std::vector<request>{sample_request()});
    ASSERT_FALSE(out[0]) << host;
    EXPECT_EQ(out[0].error().code, "UPSTREAM_UNREACHABLE");
    EXPECT_NE(out[0].error().message.find(std::string("certificate verify failed: ") + why), std::string::npos)
        << out[0].error().message;
  }
  EXPECT_EQ(server.requests(), 0);
}

TEST_F(tls_test, a_pooled_tls_connection_the_server_closed_is_no_failed_attempt) {
  scripted_server server({{200, good_answer, {}, 0ms, true}}, server_tls("DNS:localhost"));
  auto engine = trusting_engine("https://localhost:" + std::to_string(server.port()), [](auto& o) { o.retries = 0; });
  for (int i = 0; i < 3; ++i) {
    const auto out = engine->decide(std::vector<request>{sample_request()});
    ASSERT_TRUE(out[0]) << i << ": " << out[0].error().message;
  }
  EXPECT_EQ(server.requests(), 3);
  EXPECT_EQ(server.connections(), 3);
}

TEST(systemone_engine, a_tls_handshake_counts_against_the_connect_timeout) {
  // Connections wait in this listener's backlog: connected, never answered.
  net::io_context io;
  tcp::acceptor silent(io, {net::ip::make_address("127.0.0.1"), 0});
  const std::string host = "127.0.0.1:" + std::to_string(silent.local_endpoint().port());
  auto engine = engine_for("https://" + host, [](auto& o) {
    o.connect_timeout = 100ms;
    o.retries = 1;
  });
  const auto t0 = std::chrono::steady_clock::now();
  const auto out = engine->decide(std::vector<request>{sample_request()});
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(out[0]);
  EXPECT_EQ(out[0].error().code, "UPSTREAM_UNREACHABLE");
  EXPECT_NE(out[0].error().message.find("TLS handshake with " + host + " failed: no answer within 100 ms (2 attempts)"),
            std::string::npos)
      << out[0].error().message;
  EXPECT_GE(took, 200ms);
  EXPECT_LT(took, 2s);
}

TEST(systemone_engine, ca_files_it_cannot_use_are_refused_at_once) {
  const test::scratch_dir scratch("baton-not-a-ca");
  const auto junk = scratch / "ca.pem";
  std::ofstream(junk) << "not a certificate\n";
  const std::vector<std::pair<std::string, std::filesystem::path>> cases = {
      {"https://localhost", "/nonexistent/ca.pem"},
      {"https://localhost", junk},
      {"http://localhost", junk},  // no TLS to trust it for
  };
  for (const auto& [url, ca] : cases) {
    systemone_engine_options o;
    o.url = url;
    o.ca_file = ca;
    const auto e = systemone_engine::make(o);
    ASSERT_FALSE(e) << url << " " << ca;
    EXPECT_EQ(e.error().code, "INVALID_ENGINE_CA_FILE") << e.error().message;
    EXPECT_NE(e.error().message.find(url.starts_with("https") ? ca.string() : url), std::string::npos) << e.error().message;
  }
}

TEST(systemone_engine, answers_are_checked_against_their_request) {
  const request req = sample_request();
  json body;
  json_parse_error err;
  ASSERT_TRUE(parse_json(good_answer, body, err));
  auto ok = response_from_json(body);
  ASSERT_TRUE(ok);
  EXPECT_TRUE(decision_from_response(req, *ok));
  // The noul answered as a choice.
  json wrong_type = body;
  wrong_type["answers"]["person"] = json::parse(R"({"type":"choice","choice":"true","confidence":1,"probabilities":{"true":1,"false":0}})");
  auto r = response_from_json(wrong_type);
  ASSERT_TRUE(r);
  EXPECT_EQ(decision_from_response(req, *r).error().code, "BAD_UPSTREAM_RESPONSE");
  // A question answered that was not asked, in place of one that was.
  json renamed = body;
  renamed["answers"]["other"] = renamed["answers"]["person"];
  renamed["answers"].erase("person");
  r = response_from_json(renamed);
  ASSERT_TRUE(r);
  EXPECT_NE(decision_from_response(req, *r).error().message.find("`person` has no answer"), std::string::npos);
  // Rounded to 4 decimals, 255 options may miss 1 by more than 1e-3; that is still an answer.
  json big = json::object();
  std::string probabilities = "{";
  for (int i = 0; i < 255; ++i) {
    big["o" + std::to_string(i)] = nullptr;
    probabilities += (i ? "," : "") + std::string("\"o") + std::to_string(i) + "\":0.0039";
  }
  probabilities += "}";
  auto wide = parse_request(render_json(json{{"state", "x"}, {"questions", {{"q", {{"type", "choice"}, {"criteria", big}}}}}}, false),
                            request_limits{});
  ASSERT_TRUE(wide);
  r = response_from_json(json::parse(R"({"model":"m","answers":{"q":{"type":"choice","choice":"o0","confidence":0.0039,"probabilities":)" +
                                     probabilities + R"(}},"usage":{"input_tokens":1,"output_tokens":0}})"));
  ASSERT_TRUE(r);
  EXPECT_TRUE(decision_from_response(*wide, *r));  // Σ = 0.9945
}

// A front baton whose engine is unsure (run_query at 0.6: the default lane falls back) and whose
// routing.fallback is the SystemOne server at `fallback_url`.
class fallback_test : public ::testing::Test {
 protected:
  void SetUp() override {
    spdlog::set_level(spdlog::level::err);
  }
  void TearDown() override {
    front_.reset();
    back_.reset();
  }

  std::string base_yaml(const std::string& log) const {
    return "server: {listen: 127.0.0.1:0}\nregistry: " + (test::source_dir() / "config/tools.yaml").string() +
           "\npolicy: " + (test::source_dir() / "config/policy.yaml").string() + "\nlog: {path: " + log + "}\n";
  }

  // A larger model: another baton whose engine picks run_query with probability `p`.
  std::string start_back(double p) {
    auto c = parse_server_config(base_yaml("back.db") + "systemone: {model_aliases: [big]}\n", dir_ / "back.yaml");
    EXPECT_TRUE(c) << c.error().message;
    back_ = running_server::start(*c, std::make_unique<tool_engine>("big-1", "run_query", p));
    return "http://127.0.0.1:" + std::to_string(back_->port());
  }

  // `keys`: more of the fallback's keys (", flavor: workers-ai, …"); `limits`: the front engine's.
  unsigned short start_front(const std::string& fallback_url, int timeout_ms = 2000, const std::string& keys = "",
                             request_limits limits = request_limits::text_only()) {
    auto c = parse_server_config(base_yaml("front.db") + "routing: {fallback: {name: systemone, url: \"" + fallback_url +
                                     "\", model: big, retries: 0, request_timeout_ms: 1000, timeout_ms: " +
                                     std::to_string(timeout_ms) + keys + "}}\n",
                                 dir_ / "front.yaml");
    EXPECT_TRUE(c) << c.error().message;
    front_ = running_server::start(*c, std::make_unique<tool_engine>("small-1", "run_query", 0.6, limits));
    return front_->port();
  }

  json decide(unsigned short port, json images = nullptr) {
    test::ws_client ws(port);
    json event = {{"role", "user"}, {"content", "how many signups last month?"}};
    if (!images.is_null()) event["images"] = std::move(images);
    return ws.request({{"type", "decide"}, {"session", "f1"}, {"history", json::array({event})}});
  }

  std::vector<json> rows() {
    front_->stop();
    std::istringstream in;
    std::ostringstream out, err;
    const std::string db = (dir_ / "front.db").string();
    const std::vector<std::string_view> args = {"log", "sql", "--db", db,
                                                "SELECT id, action, lane, model, error_code, fallback_of FROM decisions ORDER BY seq"};
    EXPECT_EQ(run_cli(args, in, out, err), 0) << err.str();
    std::vector<json> r;
    std::istringstream lines(out.str());
    for (std::string l; std::getline(lines, l);) r.push_back(test::parse(l));
    return r;
  }

  const test::scratch_dir dir_{"baton-fallback"};
  std::unique_ptr<running_server> back_, front_;
};

TEST_F(fallback_test, the_larger_model_is_sure_and_the_tool_executes) {
  const json d = decide(start_front(start_back(0.95)));
  ASSERT_EQ(d.value("type", ""), "decision") << d;
  EXPECT_EQ(d["action"], "execute");
  EXPECT_EQ(d["tool"], "run_query");
  EXPECT_EQ(d["lane"], "fallback:lane:default");
  EXPECT_EQ(d["model"], "big");
  EXPECT_DOUBLE_EQ(d["confidence"].get<double>(), 0.95);
  const auto r = rows();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0]["action"], "fallback");
  EXPECT_EQ(r[0]["model"], "small-1");
  EXPECT_EQ(r[0]["fallback_of"], nullptr);
  EXPECT_EQ(r[1]["id"], d["decision"]);
  EXPECT_EQ(r[1]["fallback_of"], r[0]["id"]);
  EXPECT_EQ(d["fallback_of"], r[0]["id"]);
}

// A turn's media go to the larger model too, under its own limits; both rows say what they saw.
TEST_F(fallback_test, the_larger_model_gets_the_turns_media) {
  auto c = parse_server_config(base_yaml("back.db") + "systemone: {model_aliases: [big]}\n", dir_ / "back.yaml");
  ASSERT_TRUE(c) << c.error().message;
  auto back = std::make_unique<tool_engine>("big-1", "run_query", 0.95, request_limits{});
  tool_engine* big = back.get();
  back_ = running_server::start(*c, std::move(back));
  const unsigned short port = start_front("http://127.0.0.1:" + std::to_string(back_->port()), 2000, "", request_limits{});
  const json d = decide(port, json::array({"charts/signups.png"}));
  ASSERT_EQ(d.value("type", ""), "decision") << d;
  EXPECT_EQ(d["lane"], "fallback:lane:default");
  EXPECT_EQ(d["action"], "execute");
  EXPECT_EQ(big->images(), std::vector<std::string>{"charts/signups.png"});
  front_->stop();
  std::istringstream in;
  std::ostringstream out, err;
  const std::string db = (dir_ / "front.db").string();
  const std::vector<std::string_view> args = {"log", "sql", "--db", db, "SELECT media FROM decisions ORDER BY seq"};
  ASSERT_EQ(run_cli(args, in, out, err), 0) << err.str();
  const std::string row = R"({"media":"[{\"field\":\"images\",\"number\":1,\"event\":0,\"source\":\"path\",\"path\":\"charts/signups.png\"}]"})";
  EXPECT_EQ(out.str(), row + "\n" + row + "\n");
}

// A larger model that reads no images fails its pass as an engine failure would.
TEST_F(fallback_test, a_larger_model_that_reads_no_images_fails_its_pass) {
  const unsigned short port = start_front(start_back(0.95), 2000, "", request_limits{});
  const json d = decide(port, json::array({"charts/signups.png"}));
  ASSERT_EQ(d.value("type", ""), "decision") << d;
  EXPECT_EQ(d["lane"], "fallback:on_engine_error") << d;
  EXPECT_FALSE(d.value("error_code", "").empty()) << d;
}

TEST_F(fallback_test, the_larger_model_is_unsure_too_and_a_person_decides) {
  const json d = decide(start_front(start_back(0.6)));
  ASSERT_EQ(d.value("type", ""), "decision") << d;
  EXPECT_EQ(d["action"], "escalate");
  EXPECT_EQ(d["lane"], "fallback:lane:default");
  const auto r = rows();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[1]["action"], "escalate");
  EXPECT_EQ(r[1]["fallback_of"], r[0]["id"]);
}

// The larger model on Workers AI: Cloudflare's envelope around the answers of a sure engine.
TEST_F(fallback_test, the_larger_model_on_workers_ai_is_sure_and_the_tool_executes) {
  const test::env_var account("BATON_TEST_CF_ACCOUNT", "0123456789abcdef"), token("BATON_TEST_CF_TOKEN", "cf-token-0123456789");
  scripted_server::reply sure{200, "", {{"cf-ai-req-id", "req-fallback"}}};
  sure.body_of = [](const std::string& sent) {
    tool_engine big("big-1", "run_query", 0.95);
    auto req = parse_request(sent, request_limits{});
    EXPECT_TRUE(req) << req.error().message;
    const request r = std::move(*req);
    auto d = big.decide(std::span<const request>(&r, 1));
    auto res = make_response(r, *d[0], confidence_metric::p_max, "big");
    return envelope_of(render_response(*res));
  };
  scripted_server server({sure});
  // The front, and its kept-alive connection, go before the server, which serves one connection at
  // a time and would wait on it for ever, however the test ends.
  struct front_first {
    std::unique_ptr<running_server>& front;
    ~front_first() { front.reset(); }
  } order{front_};
  const json d = decide(start_front(server.url(), 2000,
                                    ", flavor: workers-ai, account_env: BATON_TEST_CF_ACCOUNT, key_env: BATON_TEST_CF_TOKEN"));
  ASSERT_EQ(d.value("type", ""), "decision") << d;
  EXPECT_EQ(d["action"], "execute");
  EXPECT_EQ(d["tool"], "run_query");
  EXPECT_EQ(d["lane"], "fallback:lane:default");
  EXPECT_EQ(d["model"], "big");
  EXPECT_EQ(server.last_target(), "/client/v4/accounts/0123456789abcdef/ai/run/big");
  EXPECT_EQ(server.last_authorization(), "Bearer cf-token-0123456789");
  const auto r = rows();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[1]["fallback_of"], r[0]["id"]);
}

TEST_F(fallback_test, a_fallback_that_is_down_slow_or_wrong_fails_closed_with_its_reason) {
  const unsigned short closed = [] {
    net::io_context io;
    tcp::acceptor a(io, {net::ip::make_address("127.0.0.1"), 0});
    return a.local_endpoint().port();
  }();
  scripted_server garbage({{200, R"({"model":"big","answers":{},"usage":{"input_tokens":1,"output_tokens":0}})", {}}});
  scripted_server slow({{200, "{}", {}, 1500ms}});
  const std::vector<std::tuple<std::string, int, std::string>> cases = {
      {"http://127.0.0.1:" + std::to_string(closed), 2000, "UPSTREAM_UNREACHABLE"},
      {garbage.url(), 2000, "BAD_UPSTREAM_RESPONSE"},
      {slow.url(), 300, "FALLBACK_TIMEOUT"},
  };
  for (const auto& [url, timeout_ms, code] : cases) {
    SCOPED_TRACE(url);
    const json d = decide(start_front(url, timeout_ms));
    ASSERT_EQ(d.value("type", ""), "decision") << d;
    EXPECT_EQ(d["action"], "escalate");  // config/policy.yaml: on_engine_error: escalate
    EXPECT_EQ(d["lane"], "fallback:on_engine_error");
    EXPECT_EQ(d["error_code"], code);
    const auto r = rows();
    ASSERT_EQ(r.size(), 2u);
    EXPECT_EQ(r[1]["error_code"], code);
    EXPECT_EQ(r[1]["fallback_of"], r[0]["id"]);
    front_.reset();
    std::filesystem::remove(dir_ / "front.db");
  }
}

}  // namespace
}  // namespace baton
