// The WebSocket side of the server: what both kinds of session do with their stream (the
// handshake answered with baton's headers, a write queue with one write in flight, a close that
// waits for the frames already queued), and the start of each kind once http_session has admitted
// an upgrade: the agent API (agent_session.cpp) and the reviewers' (review_session.cpp).
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <spdlog/spdlog.h>

#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "adapters/protocol/agent_protocol.hpp"
#include "adapters/runtime/handler_guard.hpp"
#include "adapters/server/http_api.hpp"
#include "adapters/server/shared_state.hpp"
#include "core/error_codes.hpp"

namespace baton {

namespace websocket = beast::websocket;

inline constexpr std::size_t max_queued_frames = 4096;  // a peer that stops reading is closed past this
inline constexpr std::size_t max_queued_bytes = 64u << 20;  // … or past this many bytes (frames echo ids, carry tool output)

// What both WebSocket sessions do with their stream, on its strand (a peer that leaves too much
// unread is dropped). `Derived` is the session class (for its shared_from_this).
template <class Derived>
class ws_stream_session : public closable_session, public guard_target {
 public:
  void shut_down() override {
    net::post(guarded_strand(), [self = derived().shared_from_this()] {
      self->close(websocket::close_code::going_away, "the server is shutting down");
    });
  }

  // A handler of this connection threw: the peer hears why, and the connection closes (1011).
  void handler_failed() noexcept override {
    try {
      enqueue(protocol::render_error_frame(
          nullptr, make_error(500, codes::internal, "the server failed on this connection (logged); it closes")));
      close(websocket::close_code::internal_error, "internal error");
    } catch (...) {
      closing_ = true;
      beast::error_code ec;
      beast::get_lowest_layer(ws_).socket().close(ec);
    }
  }

 protected:
  ws_stream_session(tcp::socket&& socket, std::shared_ptr<session_hub> hub, connection_slot slot)
      : ws_(std::move(socket)), hub_(std::move(hub)), slot_(std::move(slot)) {}
  ~ws_stream_session() override { hub_->remove(this); }

  // Answers the upgrade (with `subprotocol` when not empty), then calls the session's on_open().
  void accept(http::request<http::string_body> req, const std::string& request_id, const std::string& subprotocol) {
    ws_.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
    ws_.set_option(websocket::stream_base::decorator([request_id, subprotocol](websocket::response_type& res) {
      res.set(http::field::server, "baton");
      res.set("x-typesafe-request-id", request_id);
      res.set("X-Request-Id", request_id);
      if (!subprotocol.empty()) res.set(http::field::sec_websocket_protocol, subprotocol);
    }));
    ws_.async_accept(req, [self = derived().shared_from_this()](beast::error_code ec) {
      if (ec) return;
      run_guarded("a WebSocket session's start", [&] {
        self->hub_->add(self);
        self->on_open();
      }, self.get());
    });
  }

  // The connection's strand, for whatever runs on its behalf (posted completions, timers).
  net::any_io_executor guarded_strand() { return guarded_executor(ws_.get_executor(), derived().weak_from_this()); }

  void enqueue(std::string frame) {
    if (closing_) return;
    if (queue_.size() >= max_queued_frames || queued_bytes_ + frame.size() > max_queued_bytes) {
      // A peer that does not read takes no close frame either: drop the connection. The write in
      // flight then fails, which clears the queue.
      spdlog::warn("closing a connection whose client left {} frames ({} bytes) unread", queue_.size(), queued_bytes_);
      closing_ = true;
      beast::error_code ec;
      beast::get_lowest_layer(ws_).socket().close(ec);
      return;
    }
    queued_bytes_ += frame.size();
    queue_.push_back(std::move(frame));
    if (queue_.size() == 1) write();
  }

  // Closes once the frames already queued (such as the error that explains it) are written.
  void close(websocket::close_code code, std::string reason) {
    if (close_code_) return;
    close_code_ = code;
    close_reason_ = std::move(reason);
    if (queue_.empty()) finish_close();
  }

  // Closing: read no more frames (async_close reads the peer's close).
  bool reading_stopped() const noexcept { return closing_ || close_code_.has_value(); }

  websocket::stream<beast::tcp_stream> ws_;
  std::shared_ptr<session_hub> hub_;

 private:
  Derived& derived() noexcept { return static_cast<Derived&>(*this); }

  void write() {
    ws_.text(true);
    ws_.async_write(net::buffer(queue_.front()), [self = derived().shared_from_this()](beast::error_code ec, std::size_t) {
      ws_stream_session& s = *self;
      if (ec) {
        s.queue_.clear();
        s.queued_bytes_ = 0;
        s.hub_->remove(&s);
        return;
      }
      s.queued_bytes_ -= s.queue_.front().size();
      s.queue_.pop_front();
      run_guarded("a WebSocket write's completion", [&] {
        if (!s.queue_.empty()) {
          s.write();
        } else if (s.close_code_) {
          s.finish_close();
        }
      }, &s);
    });
  }

  void finish_close() {
    if (closing_) return;
    closing_ = true;
    ws_.async_close(websocket::close_reason(*close_code_, close_reason_),
                    [self = derived().shared_from_this()](beast::error_code) {
                      ws_stream_session& s = *self;
                      s.hub_->remove(&s);
                    });
  }

  connection_slot slot_;
  std::deque<std::string> queue_;
  std::size_t queued_bytes_ = 0;
  std::optional<websocket::close_code> close_code_;
  std::string close_reason_;
  bool closing_ = false;
};

// The session of an admitted upgrade to /v1/agent and to /v1/review: answers the handshake, then
// serves the connection until it closes.
void start_agent_session(tcp::socket&& socket, std::shared_ptr<session_hub> hub, connection_slot slot,
                         http_api::upgrade_ticket ticket, http::request<http::string_body>&& upgrade);
void start_review_session(tcp::socket&& socket, std::shared_ptr<session_hub> hub, connection_slot slot,
                          http_api::upgrade_ticket ticket, http::request<http::string_body>&& upgrade);

}  // namespace baton
