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

#include <optional>
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
  explicit ws_client(unsigned short port, const std::string& target = "/v1/agent") : ws_(io_) {
    ws_.next_layer().connect(tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), port));
    set_read_timeout(ws_.next_layer(), 10);
    ws_.handshake("127.0.0.1:" + std::to_string(port), target);
  }

  void send(const std::string& text) {
    ws_.text(true);
    ws_.write(boost::asio::buffer(text));
  }
  void send(const json& frame) { send(render_json(frame, false)); }
  void send_binary(const std::string& bytes) {
    ws_.binary(true);
    ws_.write(boost::asio::buffer(bytes));
  }

  // The next frame, or null when the connection closed or timed out (close_code() says which).
  json read() {
    beast::flat_buffer buffer;
    beast::error_code ec;
    ws_.read(buffer, ec);
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

 private:
  boost::asio::io_context io_;
  websocket::stream<tcp::socket> ws_;
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
