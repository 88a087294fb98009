// A blocking HTTP/1.1 client for the end-to-end tests: one keep-alive connection to 127.0.0.1
// whose exchanges give up after 10 s, so a server that never answers fails a test instead of
// hanging it.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "support/files.hpp"

namespace baton::test {

struct http_response {
  int status = 0;  // 0: no answer (closed or timed out)
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;

  json body_json() const { return parse(body); }
  std::string header(const std::string& lower_name) const {
    const auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

class http_client {
 public:
  explicit http_client(unsigned short port) : stream_(io_) {
    stream_.connect(boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), port));
  }

  http_response send(boost::beast::http::verb method, const std::string& target, std::string body = {},
                     const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    namespace http = boost::beast::http;
    http::request<http::string_body> req(method, target, 11);
    req.set(http::field::host, "127.0.0.1");
    for (const auto& [k, v] : headers) req.set(k, v);
    req.body() = std::move(body);
    if (method != http::verb::get || !req.body().empty()) req.prepare_payload();
    return exchange(req);
  }

  http_response post(const std::string& target, const std::string& body, const std::string& key = {},
                     std::vector<std::pair<std::string, std::string>> headers = {}) {
    if (!key.empty()) headers.emplace_back("Authorization", "Bearer " + key);
    headers.emplace_back("Content-Type", "application/json");
    return send(boost::beast::http::verb::post, target, body, headers);
  }
  http_response get(const std::string& target, const std::string& key = {}) {
    std::vector<std::pair<std::string, std::string>> headers;
    if (!key.empty()) headers.emplace_back("Authorization", "Bearer " + key);
    return send(boost::beast::http::verb::get, target, {}, headers);
  }

  // Whether the server has closed the connection (a read finds its end within a second).
  bool closed_by_server() {
    char byte;
    boost::beast::error_code ec;
    bool done = false;
    stream_.expires_after(std::chrono::seconds(1));
    stream_.async_read_some(boost::asio::buffer(&byte, 1), [&](boost::beast::error_code e, std::size_t) {
      ec = e;
      done = true;
    });
    io_.restart();
    while (!done && io_.run_one() > 0) {
    }
    return ec == boost::asio::error::eof || ec == boost::asio::error::connection_reset;
  }

  // Writes bytes as they are (a hand-made head, a body sent after `100 Continue`).
  bool write_raw(const std::string& bytes) {
    boost::beast::error_code ec;
    bool done = false;
    stream_.expires_after(std::chrono::seconds(10));
    boost::asio::async_write(stream_, boost::asio::buffer(bytes), [&](boost::beast::error_code e, std::size_t) {
      ec = e;
      done = true;
    });
    io_.restart();
    while (!done && io_.run_one() > 0) {
    }
    return !ec;
  }

  // The next response on the connection (an interim 100 Continue too).
  http_response read_response() {
    namespace http = boost::beast::http;
    http_response out;
    http::response<http::string_body> res;
    bool done = false;
    stream_.expires_after(std::chrono::seconds(10));
    http::async_read(stream_, buffer_, res, [&](boost::beast::error_code e, std::size_t) {
      if (!e) out.status = static_cast<int>(res.result_int());
      done = true;
    });
    io_.restart();
    while (!done && io_.run_one() > 0) {
    }
    if (out.status != 0) fill(out, res);
    return out;
  }

 private:
  static void fill(http_response& out, boost::beast::http::response<boost::beast::http::string_body>& res) {
    for (const auto& f : res) {
      std::string name(f.name_string());
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      out.headers[name] = std::string(f.value());
    }
    out.body = std::move(res.body());
  }

  template <class Request>
  http_response exchange(Request& req) {
    namespace http = boost::beast::http;
    bool written = false;
    bool done = false;
    stream_.expires_after(std::chrono::seconds(10));
    http::async_write(stream_, req, [&](boost::beast::error_code ec, std::size_t) {
      written = !ec;
      done = true;
    });
    io_.restart();
    while (!done && io_.run_one() > 0) {
    }
    return written ? read_response() : http_response{};
  }

  boost::asio::io_context io_;
  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
};

}  // namespace baton::test
