// What every connection of one server shares (Beast chat-multi's shared_state): the options, the
// services it hands requests and frames to, the open WebSocket sessions (closed with 1001 when
// the server stops) and the counts its budgets are held against.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "adapters/runtime/agent_service.hpp"
#include "adapters/runtime/server_config.hpp"
#include "adapters/runtime/systemone_service.hpp"
#include "adapters/server/http_api.hpp"

namespace baton {

// The names the server's files use for Asio and Beast.
namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

// A WebSocket connection the server closes with 1001 when it stops (agent or reviewer).
class closable_session {
 public:
  virtual ~closable_session() = default;
  virtual void shut_down() = 0;  // from any thread
};

// Held by every session, so a session that outlives the server (its handler is destroyed with
// the io_context) is safe.
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

// One open TCP connection counted in the hub, from accept to close; moves from the HTTP session
// to the WebSocket session an upgrade makes.
class connection_slot {
 public:
  explicit connection_slot(std::shared_ptr<session_hub> hub) : hub_(std::move(hub)) { ++hub_->connections; }
  connection_slot(connection_slot&&) noexcept = default;
  connection_slot& operator=(connection_slot&&) = delete;
  ~connection_slot() {
    if (hub_) --hub_->connections;
  }

 private:
  std::shared_ptr<session_hub> hub_;
};

}  // namespace baton
