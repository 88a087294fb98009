// The fixture of the end-to-end server tests: a real server on an ephemeral 127.0.0.1 port, real
// WebSocket clients, a scripted engine whose answers each test sets through the history, and the
// SQLite log read back.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <spdlog/spdlog.h>

#include "adapters/cli/cli.hpp"
#include "adapters/server/running_server.hpp"
#include "support/cli_run.hpp"
#include "support/files.hpp"
#include "support/scratch_dir.hpp"
#include "support/ws_client.hpp"

namespace baton::test_server {

using test::ws_client;


// Answers from the last {"role":"script",…} event of the history: `tool` gets probability `p`
// (the rest shared), `needs_person` P(true), `fail` an engine error, `sleep_ms` a slow engine,
// `cached_tokens` what its prefix cache served. A state is 10 tokens an event; a window of
// set_window() events (none by default) makes longer states overflow.
class scripted_engine : public decision_engine {
 public:
  // `limits`: text only by default; a test of media gives it some.
  explicit scripted_engine(request_limits limits = request_limits::text_only()) {
    description_.model_id = "scripted-1";
    description_.fingerprint = "sha256:scripted";
    description_.limits = limits;
  }
  const engine_description& describe() const noexcept override { return description_; }

  // The state an engine reads, as one value: an agent turn's request refers to its session's history.
  static json state_of(const request& r) {
    if (!r.history) return r.state;
    json events = json::array();
    r.history.for_each([&](const json& e) { events.push_back(e); });
    return events;
  }

  std::vector<result<decision>> decide(std::span<const request> batch) override {
    std::vector<result<decision>> out;
    for (const request& r : batch) {
      const json state = state_of(r);
      json script = json::object();
      for (const json& e : state) {
        if (e.is_object() && e.value("role", "") == "script") script = e;
      }
      {
        std::lock_guard lock(mutex_);
        last_state_ = state;
        // Kept past the turn, which holds the history the request refers to: a copy holds its state.
        last_request_ = r;
        last_request_.history = {};
        last_request_.state = state;
        scopes_.push_back(r.cache_scope);
        ++calls_;
      }
      if (const int ms = script.value("sleep_ms", 0); ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      if (script.contains("fail")) {
        out.emplace_back(boost::system::in_place_error, make_error(500, script["fail"].get<std::string>(), "scripted failure"));
        continue;
      }
      decision d;
      d.input_tokens = state.is_array() ? 10 * std::int64_t(state.size()) : 10;
      d.cached_tokens = script.value("cached_tokens", std::int64_t{0});
      for (const question& q : r.questions) {
        const std::size_t n = q.option_count();
        std::vector<double> p(n, 1.0 / double(n));
        if (q.id == "tool" && script.contains("tool")) {
          // The script's tool gets `p`; in a two-stage first question (options are groups), its
          // `group` gets `group_p`.
          std::string top_option = script["tool"].get<std::string>();
          double top = script.value("p", 0.9);
          bool offered = false;
          for (std::size_t i = 0; i < n; ++i) offered = offered || q.option_id(i) == top_option;
          if (!offered && script.contains("group")) {
            top_option = script["group"].get<std::string>();
            top = script.value("group_p", top);
          }
          for (std::size_t i = 0; i < n; ++i) {
            p[i] = q.option_id(i) == top_option ? top : (1 - top) / double(n - 1);
          }
        } else if (q.id == "needs_person") {
          const double yes = script.value("needs_person", 0.1);
          p = {yes, 1 - yes};
        } else if (q.type == question_type::choice && n == 2) {
          p = {0.3, 0.7};
        }
        d.probabilities.push_back(std::move(p));
      }
      out.push_back(std::move(d));
    }
    return out;
  }

  result<std::size_t> state_overflow(const request& r) override {
    std::lock_guard lock(mutex_);
    const std::size_t events = r.history ? r.history.size() : r.state.is_array() ? r.state.size() : 1;
    return result<std::size_t>(boost::system::in_place_value, window_ && events > *window_ ? 10 * (events - *window_) : 0);
  }
  std::optional<prefix_cache_stats> cache_stats() const override {
    std::lock_guard lock(mutex_);
    return cache_stats_;
  }

  json last_state() {
    std::lock_guard lock(mutex_);
    return last_state_;
  }
  // The last request decided, its media included.
  request last_request() {
    std::lock_guard lock(mutex_);
    return last_request_;
  }
  // The cache_scope of every request decided, in order.
  std::vector<std::string> scopes() {
    std::lock_guard lock(mutex_);
    return scopes_;
  }
  void set_window(std::optional<std::size_t> events) {
    std::lock_guard lock(mutex_);
    window_ = events;
  }
  void set_cache_stats(std::optional<prefix_cache_stats> s) {
    std::lock_guard lock(mutex_);
    cache_stats_ = s;
  }
  int calls() {
    std::lock_guard lock(mutex_);
    return calls_;
  }

 private:
  engine_description description_;
  mutable std::mutex mutex_;
  json last_state_;
  request last_request_;
  std::vector<std::string> scopes_;
  std::optional<std::size_t> window_;
  std::optional<prefix_cache_stats> cache_stats_;
  int calls_ = 0;
};

inline const char* registry_yaml = R"(tools:
  - id: lookup_order
    description: Look up an order by its number
    executor: {type: agent}
    parameters:
      order_id: {type: text}
      priority: {type: choice, instructions: "How urgent is the lookup?", values: {low: Not urgent, high: Urgent}}
  - id: echo_cmd
    description: Echo the call back
    executor: {type: command, argv: [/bin/cat], timeout_ms: 5000}
  - id: broken_http
    description: Call a service that is down
    executor: {type: http, url: "http://127.0.0.1:1/down", timeout_ms: 500, retries: 0}
  - id: wipe_disk
    description: Wipe the disk
    risk: high
finish: {description: Nothing more to do}
questions:
  needs_person: {type: noul, instructions: "Does this need a person?"}
)";

inline const char* policy_yaml = R"(confidence: p_max
rules:
  deny: [wipe_disk]
  escalate_when:
    - {question: needs_person, noul_above: 0.9}
lanes:
  default: {execute: 0.8, fallback: 0.5}
on_engine_error: escalate
)";

using test::cli;
using test::cli_result;

class server_test : public ::testing::Test {
 protected:
  void SetUp() override {
    spdlog::set_level(spdlog::level::warn);
    write("tools.yaml", registry_yaml);
    write("policy.yaml", policy_yaml);
    config_ = parse_config("server: {listen: 127.0.0.1:0, io_threads: 2, max_bad_frames: 1000}\n"
                           "engine: {timeout_ms: 2000}\n"
                           "log: {path: decisions.db, synchronous: normal}\n");
  }
  void TearDown() override { server_.reset(); }

  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }

  server_config parse_config(const std::string& yaml) {
    auto c = parse_server_config(yaml, dir_ / "baton.yaml");
    EXPECT_TRUE(c) << c.error().message;
    return c ? *c : server_config{};
  }

  unsigned short start() {
    auto engine = std::make_unique<scripted_engine>(engine_limits_);
    engine_ = engine.get();
    server_ = running_server::start(config_, std::move(engine));
    return server_->port();
  }

  std::string db() const { return (dir_ / "decisions.db").string(); }

  // Rows of a read-only query through `baton log sql`.
  std::vector<json> sql(const std::string& query) {
    const auto r = cli({"log", "sql", "--db", db(), query});
    EXPECT_EQ(r.code, 0) << r.err;
    std::vector<json> rows;
    std::istringstream lines(r.out);
    for (std::string l; std::getline(lines, l);) rows.push_back(test::parse(l));
    return rows;
  }

  static json decide(const std::string& session, json history, json extra = json::object()) {
    json f = {{"type", "decide"}, {"session", session}, {"history", std::move(history)}};
    f.update(extra);
    return f;
  }
  static json script(json s) {
    s["role"] = "script";
    return s;
  }
  static json user(const std::string& text) { return {{"role", "user"}, {"content", text}}; }

  const test::scratch_dir dir_{"baton-server-test"};
  server_config config_;
  request_limits engine_limits_ = request_limits::text_only();  // the scripted engine's, set before start()
  scripted_engine* engine_ = nullptr;
  std::unique_ptr<running_server> server_;
};

}  // namespace baton::test_server
