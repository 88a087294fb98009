// The HTTP side of `baton serve`: routes, API keys and roles, per-key rate limits, gzip bodies,
// the request id on every response, and the count of every answer for /metrics. The WebSocket
// upgrade to /v1/agent is checked here too; ws_server owns the connections.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/beast/http.hpp>

#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "adapters/agent_service.hpp"
#include "adapters/auth.hpp"
#include "adapters/metrics.hpp"
#include "adapters/systemone_service.hpp"

namespace baton {

class http_api {
 public:
  using request = boost::beast::http::request<boost::beast::http::string_body>;
  using response = boost::beast::http::response<boost::beast::http::string_body>;

  http_api(const server_config& config, authenticator& auth, metrics& m, systemone_service& systemone,
           agent_service& agents, std::function<std::vector<metrics::gauge>()> gauges);

  // Answers a request that is not a WebSocket upgrade. `done` runs once, on `strand` (inline for
  // everything but a decision).
  void handle(request&& req, boost::asio::any_io_executor strand, std::function<void(response)> done);

  // A WebSocket upgrade: the caller's key name when it may open an agent connection (empty
  // without keys), else the answer that refuses it.
  std::variant<std::string, response> upgrade(const request& req);

  // The answer to a request that could not be read whole: its body is over server.max_body_bytes
  // (413) or its head is malformed (400). The connection is closed after it.
  response unreadable(unsigned version, bool too_large);

 private:
  response make(const request& req, std::string_view route, http_reply&& r, const std::string& id);

  const server_config& config_;
  authenticator& auth_;
  metrics& metrics_;
  systemone_service& systemone_;
  agent_service& agents_;
  std::function<std::vector<metrics::gauge>()> gauges_;
};

}  // namespace baton
