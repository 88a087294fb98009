#include "adapters/server/listener.hpp"

#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include "adapters/runtime/handler_guard.hpp"
#include "adapters/server/http_session.hpp"

namespace baton {

listener::listener(net::io_context& ioc, const server_options& options, agent_service& service,
                     systemone_service& systemone, http_api& api)
    : ioc_(ioc), hub_(std::make_shared<session_hub>(options, service, systemone, api)), acceptor_(net::make_strand(ioc)),
      accept_retry_(acceptor_.get_executor()) {
  const tcp::endpoint endpoint(net::ip::make_address(options.host == "localhost" ? "127.0.0.1" : options.host),
                               options.port);
  acceptor_.open(endpoint.protocol());
  acceptor_.set_option(net::socket_base::reuse_address(true));
  acceptor_.bind(endpoint);
  acceptor_.listen(net::socket_base::max_listen_connections);
  port_ = acceptor_.local_endpoint().port();
}

listener::~listener() = default;

void listener::start() { accept(); }

void listener::accept() {
  acceptor_.async_accept(net::make_strand(ioc_), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) {
      // EMFILE and the like repeat at once: accepting again straight away spins an I/O thread.
      spdlog::warn("accept failed: {}; retrying in 100 ms", ec.message());
      accept_retry_.expires_after(std::chrono::milliseconds(100));
      accept_retry_.async_wait([this](beast::error_code e) {
        if (!e && acceptor_.is_open()) accept();
      });
      return;
    }
    // A connection that fails to start is dropped (its socket closes with it); accepting goes on.
    run_guarded("the acceptor", [&] {
      if (hub_->connections.load() >= hub_->options.max_connections) {
        // Refused at once: a small blocking write into an empty send buffer, then close.
        const auto res = hub_->api.unreadable(11, http_api::unreadable_reason::busy);
        http::write(socket, res, ec);
        socket.shutdown(tcp::socket::shutdown_both, ec);
        socket.close(ec);
      } else {
        socket.set_option(tcp::no_delay(true), ec);
        start_http_session(std::move(socket), hub_, connection_slot(hub_));
      }
    }, nullptr);
    accept();
  });
}

void listener::close_sessions() {
  std::vector<std::shared_ptr<closable_session>> open;
  {
    std::lock_guard lock(hub_->mutex);
    for (auto& [p, w] : hub_->sessions) {
      if (auto s = w.lock()) open.push_back(std::move(s));
    }
  }
  for (auto& s : open) s->shut_down();
}

// Polls every 10 ms: first until no decision is in flight (or the drain limit), then until every
// session has closed (or 2 s).
struct listener::stopper : std::enable_shared_from_this<stopper> {
  listener& server;
  net::steady_timer timer;
  std::chrono::steady_clock::time_point drain_until;
  std::chrono::steady_clock::time_point close_until{};
  bool closing = false;
  std::function<void()> done;

  stopper(listener& s, std::chrono::milliseconds drain_limit, std::function<void()> d)
      : server(s), timer(s.ioc_), drain_until(std::chrono::steady_clock::now() + drain_limit), done(std::move(d)) {}

  void poll() {
    const auto now = std::chrono::steady_clock::now();
    const std::size_t in_flight =
        server.hub_->service.in_flight() + server.hub_->systemone.in_flight() + server.hub_->http_requests.load();
    if (!closing && (in_flight == 0 || now >= drain_until)) {
      if (in_flight > 0) spdlog::warn("{} decisions still in flight after the drain limit", in_flight);
      server.close_sessions();
      closing = true;
      close_until = now + std::chrono::seconds(2);
    } else if (closing && (server.sessions() == 0 || now >= close_until)) {
      done();
      return;
    }
    timer.expires_after(std::chrono::milliseconds(10));
    timer.async_wait([self = shared_from_this()](beast::error_code) { self->poll(); });
  }
};

void listener::stop(std::chrono::milliseconds drain_limit, std::function<void()> done) {
  net::post(acceptor_.get_executor(), [this] {
    beast::error_code ec;
    acceptor_.close(ec);
    accept_retry_.cancel();
  });
  hub_->service.drain();
  hub_->systemone.drain();
  auto s = std::make_shared<stopper>(*this, drain_limit, std::move(done));
  net::post(ioc_, [s] { s->poll(); });
}

}  // namespace baton
