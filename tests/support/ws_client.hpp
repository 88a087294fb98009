// A blocking WebSocket client for the end-to-end tests: a real Beast client on 127.0.0.1 whose
// reads give up after a few seconds, so a server that never answers fails a test instead of
// hanging it.
#pragma once

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <sys/socket.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <vector>
#include <string>

#include "support/files.hpp"

namespace baton::test {

namespace beast = boost::beast;
namespace websocket = beast::websocket;
namespace http = beast::http;
using tcp = boost::asio::ip::tcp;

inline void set_read_timeout(tcp::socket& s, int seconds) {
  timeval tv{seconds, 0};
  ::setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

class ws_client {
 public:
  // Throws boost::system::system_error when the server refuses the upgrade (e.g. 401 without `key`).
  // `subprotocols` (a browser's way to send a key) is offered instead of an Authorization header.
  explicit ws_client(unsigned short port, const std::string& target = "/v1/agent", const std::string& key = {},
                     const std::string& subprotocols = {})
      : ws_(io_) {
    ws_.next_layer().connect(tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), port));
    set_read_timeout(ws_.next_layer(), 10);
    if (!subprotocols.empty()) {
      ws_.set_option(websocket::stream_base::decorator(
          [subprotocols](websocket::request_type& req) { req.set(http::field::sec_websocket_protocol, subprotocols); }));
    } else if (!key.empty()) {
      ws_.set_option(websocket::stream_base::decorator(
          [key](websocket::request_type& req) { req.set(http::field::authorization, "Bearer " + key); }));
    }
    ws_.handshake(handshake_response, "127.0.0.1:" + std::to_string(port), target);
  }

  void send(const std::string& text) {
    ws_.text(true);
    ws_.write(boost::asio::buffer(text));
  }
  void send(const json& frame) { send(render_json(frame, false)); }
  // Writes the frames in order without reading, until they are all out or none went out for
  // `stall`; a write still pending goes on during later reads. How many went out.
  std::size_t send_without_reading(std::vector<std::string> frames, std::chrono::milliseconds stall) {
    struct state {
      std::vector<std::string> frames;
      std::size_t written = 0;
      bool failed = false;
    };
    auto st = std::make_shared<state>();
    st->frames = std::move(frames);
    auto next = std::make_shared<std::function<void()>>();
    *next = [this, st, w = std::weak_ptr<std::function<void()>>(next)] {
      if (st->written == st->frames.size()) return;
      ws_.text(true);
      ws_.async_write(boost::asio::buffer(st->frames[st->written]), [st, w](beast::error_code ec, std::size_t) {
        if (ec) {
          st->failed = true;
          return;
        }
        ++st->written;
        if (auto n = w.lock()) (*n)();
      });
    };
    next_write_ = next;
    (*next)();
    std::size_t last = 0;
    io_.restart();
    while (st->written < st->frames.size() && !st->failed) {
      io_.run_for(stall);
      if (st->written == last) break;
      last = st->written;
    }
    return st->written;
  }

  // Beast splits a message into 4 KiB frames by default; most clients send one frame per message.
  void auto_fragment(bool on) { ws_.auto_fragment(on); }
  void send_binary(const std::string& bytes) {
    ws_.binary(true);
    ws_.write(boost::asio::buffer(bytes));
  }

  // The next frame, or null when the connection closed or timed out (close_code() says which).
  // SO_RCVTIMEO alone does not bound a read: Asio's sync_recv answers EAGAIN with poll(-1). The
  // read runs asynchronously for at most 10 s instead.
  json read() {
    beast::flat_buffer buffer;
    beast::error_code ec;
    bool done = false;
    ws_.async_read(buffer, [&](beast::error_code e, std::size_t) {
      ec = e;
      done = true;
    });
    io_.restart();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done && io_.run_one_until(deadline) > 0) {
    }
    if (!done) {
      beast::error_code ignored;
      ws_.next_layer().cancel(ignored);
      io_.restart();
      io_.run();
      ec = beast::error::timeout;
    }
    if (ec) {
      error_ = ec;
      return nullptr;
    }
    return parse(beast::buffers_to_string(buffer.data()));
  }

  // Reads until a frame of `type` arrives (frames of other types are kept in `skipped`).
  json read_type(const std::string& type) {
    for (int i = 0; i < 100; ++i) {
      json f = read();
      if (f.is_null() || f.value("type", "") == type) return f;
      skipped.push_back(std::move(f));
    }
    return nullptr;
  }

  json request(const json& frame) {
    send(frame);
    return read();
  }
  json request_text(const std::string& text) {
    send(text);
    return read();
  }

  websocket::close_reason close_reason() const { return ws_.reason(); }
  beast::error_code last_error() const { return error_; }

  void close() {
    beast::error_code ec;
    ws_.close(websocket::close_code::normal, ec);
  }

  std::vector<json> skipped;
  websocket::response_type handshake_response;  // the server's 101

 private:
  boost::asio::io_context io_;
  websocket::stream<tcp::socket> ws_;
  std::shared_ptr<std::function<void()>> next_write_;  // send_without_reading's chain
  beast::error_code error_;
};

// One plain HTTP GET; {status, body}.
inline std::pair<int, std::string> http_get(unsigned short port, const std::string& target) {
  boost::asio::io_context io;
  tcp::socket s(io);
  s.connect(tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), port));
  set_read_timeout(s, 10);
  http::request<http::empty_body> req(http::verb::get, target, 11);
  req.set(http::field::host, "127.0.0.1");
  http::write(s, req);
  beast::flat_buffer b;
  http::response<http::string_body> res;
  http::read(s, b, res);
  return {static_cast<int>(res.result_int()), res.body()};
}

}  // namespace baton::test
