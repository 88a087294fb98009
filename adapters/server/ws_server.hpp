// The listener (DESIGN §7, after Beast's chat-multi example): one io_context, HTTP sessions that
// hand requests to http_api (SystemOne, models, health, metrics) and upgrade /v1/agent to
// WebSocket sessions, each on its own strand with a write queue so only one write is in flight.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "adapters/runtime/agent_service.hpp"
#include "adapters/server/http_api.hpp"
#include "adapters/runtime/server_config.hpp"
#include "adapters/runtime/systemone_service.hpp"

namespace baton {

// A WebSocket connection the server closes with 1001 when it stops (agent or reviewer).
class closable_session {
 public:
  virtual ~closable_session() = default;
  virtual void shut_down() = 0;  // from any thread
};

// What sessions share with the server (Beast chat-multi's shared_state): held by every session,
// so a session that outlives the server (its handler is destroyed with the io_context) is safe.
struct session_hub {
  server_options options;
  agent_service& service;
  systemone_service& systemone;
  http_api& api;
  std::mutex mutex;
  std::unordered_map<const closable_session*, std::weak_ptr<closable_session>> sessions;
  std::atomic<std::size_t> connections{0};     // open TCP connections, HTTP and WebSocket
  std::atomic<std::size_t> buffered_bytes{0};  // request bodies admitted and not yet answered
  std::atomic<std::size_t> http_requests{0};   // HTTP requests admitted and not yet answered

  void add(const std::shared_ptr<closable_session>& s);
  void remove(const closable_session* s);
  std::size_t size();
};

class ws_server {
 public:
  // Binds and listens at once; throws at start-up when the address is taken or malformed.
  ws_server(boost::asio::io_context& ioc, const server_options& options, agent_service& service,
            systemone_service& systemone, http_api& api);
  ~ws_server();

  unsigned short port() const noexcept { return port_; }
  void start();

  // Graceful: stop accepting, let in-flight decisions (agent and SystemOne) finish (at most
  // `drain_limit`), close every session with 1001, then call `done` (on an I/O thread) once they
  // are closed or after 2 s.
  void stop(std::chrono::milliseconds drain_limit, std::function<void()> done);

  std::size_t sessions() const { return hub_->size(); }

 private:
  struct stopper;
  void accept();
  void close_sessions();

  boost::asio::io_context& ioc_;
  std::shared_ptr<session_hub> hub_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer accept_retry_;  // on the acceptor's strand
  unsigned short port_ = 0;
};

}  // namespace baton
