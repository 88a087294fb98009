// POST /v1/systemone and GET /v1/models (docs/systemone.md): a SystemOne request from any
// Jev/SystemOne client, answered by the configured engine through the same scheduler as agent
// decisions, logged like them (session = the API key's name). Transport-free: the HTTP layer
// hands it a body and gets an http_reply back.
#pragma once

#include <boost/asio/any_io_executor.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "adapters/log/decision_log.hpp"
#include "adapters/runtime/metrics.hpp"
#include "adapters/runtime/server_config.hpp"
#include "engine/decision_engine.hpp"
#include "engine/scheduler.hpp"

namespace baton {

struct http_reply {
  int status = 200;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // besides Content-Type and the request id
  bool close = false;                                         // the connection cannot go on
};

// An error body {"error","code","detail"}, with Retry-After (and retry-after-ms) on 429 and 503.
http_reply error_reply(const error& e, std::chrono::milliseconds retry_after = std::chrono::seconds(1));

class systemone_service {
 public:
  systemone_service(const server_config& config, decision_engine& engine, scheduler& scheduler,
                    log::decision_log& log, metrics& m);

  // Answers one request body (`received`: when its head arrived). `done` runs exactly once, on
  // `strand` (the connection's; inline when the request is refused at once): with the response
  // once the decision is logged (or sent, without durable acks), or with an error; with 504
  // DEADLINE_EXCEEDED at received + server.request_deadline_ms if the engine has not answered.
  void decide(std::string id, std::string caller, std::string body, std::chrono::steady_clock::time_point received,
              boost::asio::any_io_executor strand, std::function<void(http_reply)> done);

  // {"models":[{"name","description","release_date"}, …]}: the served model, then its aliases.
  std::string models_json() const;

  // From now on requests get 503 SHUTTING_DOWN; in_flight() counts down to 0.
  void drain() noexcept { draining_ = true; }
  bool draining() const noexcept { return draining_; }
  std::size_t in_flight() const noexcept { return in_flight_.load(); }

 private:
  struct call;
  void on_engine(const std::shared_ptr<call>& c, scheduled_result&& r);
  void finish(const std::shared_ptr<call>& c, http_reply reply);
  bool serves(std::string_view model) const;

  const server_config& config_;
  decision_engine& engine_;
  scheduler& scheduler_;
  log::decision_log& log_;
  metrics& metrics_;
  std::atomic<bool> draining_{false};
  std::atomic<std::size_t> in_flight_{0};
};

}  // namespace baton
