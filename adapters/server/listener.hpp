// The listener (after Beast's chat-multi example): accepts connections on one
// io_context and starts an http_session for each (http_session.hpp); stops gracefully.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <functional>
#include <memory>

#include "adapters/server/shared_state.hpp"

namespace baton {

class listener {
 public:
  // Binds and listens at once; throws at start-up when the address is taken or malformed.
  listener(boost::asio::io_context& ioc, const server_options& options, agent_service& service,
            systemone_service& systemone, http_api& api);
  ~listener();

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
