// baton's one HTTP/1.1 client, for every call it makes out (the systemone engine, media URLs, the
// hub client, the http executor): a connection, plain or TLS, to a resolved host within a
// deadline; TLS 1.2 or newer with SNI, the server's certificate chained to the given CAs and
// naming the host; a request written and a response read on it, whole with a body limit or head
// first and then the body (streamed with a buffer_body). A failure is a value: the step it
// happened at, what went wrong (a timeout, a certificate not trusted, a body over the limit, a
// connection the server closed, …) and the transport's own words, which each caller maps onto its
// own codes and messages. Policies (pools, redirects, retries, deadlines per attempt or per read)
// are the callers'. Use it on one strand: a connection is not safe to share between threads.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <boost/system/result.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <variant>

#include "core/http_url.hpp"

namespace baton::http_client {

using clock_type = std::chrono::steady_clock;
using endpoints = boost::asio::ip::tcp::resolver::results_type;
using request = boost::beast::http::request<boost::beast::http::string_body>;
using response = boost::beast::http::response<boost::beast::http::string_body>;

// Where a call failed.
enum class step { resolve, connect, handshake, write, read_header, read_body };

// What went wrong there.
enum class fault {
  failed,     // anything else: `detail` says what
  closed,     // the server closed or reset the connection (a kept-alive one it dropped fails so)
  timeout,    // the deadline passed
  untrusted,  // handshake: the server's certificate did not verify; `detail` says why
  too_large,  // read: the body is over the limit
};

struct failure {
  step at;
  fault why;
  std::string detail;  // the transport's message; for `untrusted` "certificate verify failed: …"
};

template <class T>
using outcome = boost::system::result<T, failure>;

// A client TLS context: TLS 1.2 or newer, peers verified against `ca_file` (PEM), or the
// system's CAs when it is empty; the error says why the CAs do not load.
boost::system::result<boost::asio::ssl::context> tls_context(const std::filesystem::path& ca_file);

// `host`'s addresses, or the failure at step::resolve (fault::timeout at `deadline`). The lookup
// (getaddrinfo, which cannot be cancelled) runs on a thread of its own that holds nothing of the
// caller's once the caller stops waiting: past the deadline it finishes alone, and a private
// io_context's run() returns without waiting for it.
boost::asio::awaitable<outcome<endpoints>> resolve(std::string host, std::string port, clock_type::time_point deadline);

// A request to `url`: `verb` on its target, HTTP/1.1 and its Host. The User-Agent and every
// other field are the caller's.
request request_to(boost::beast::http::verb verb, const http_url& url);

class connection {
 public:
  // Plain TCP, or TLS with `tls`, which must outlive the connection.
  connection(const boost::asio::any_io_executor& executor, boost::asio::ssl::context* tls);
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;

  // Connected to one of `endpoints` and, over TLS, through the handshake for `host` (SNI when it
  // is a name, never for an address; the certificate must name it), all before `deadline`, which
  // stays set for what follows until expires_after changes it.
  boost::asio::awaitable<outcome<void>> connect(const endpoints& to, const std::string& host, clock_type::time_point deadline);

  // The deadline of every operation started from now on: `d` from now.
  void expires_after(clock_type::duration d);
  // Ends what is pending on the connection (a signal, say): it fails with fault::failed.
  void cancel();

  // The request, then its final response with a body of at most `body_limit` bytes. Interim
  // responses (100 Continue, 103 Early Hints) are skipped, as RFC 9110 §15.2 asks of a client;
  // after 8 of them the last is returned as it is.
  boost::asio::awaitable<outcome<response>> exchange(const request& req, std::uint64_t body_limit);

  // The request alone, and the response in parts with a parser of the caller's (its body type and
  // limit): the head, then the body. Interim responses are the caller's to see here. With a
  // buffer_body, read_body returns each time the caller's buffer is full (parser.is_done() says
  // when the body is over).
  boost::asio::awaitable<outcome<void>> write(const request& req);
  template <class Body>
  boost::asio::awaitable<outcome<void>> read_header(boost::beast::http::response_parser<Body>& parser) {
    return read(step::read_header, parser);
  }
  template <class Body>
  boost::asio::awaitable<outcome<void>> read_body(boost::beast::http::response_parser<Body>& parser) {
    return read(step::read_body, parser);
  }
  // What of the body has come, at least one byte of it (an event stream's next event): with a
  // buffer_body, as much as has arrived, up to the caller's buffer.
  template <class Body>
  boost::asio::awaitable<outcome<void>> read_body_some(boost::beast::http::response_parser<Body>& parser) {
    return read(step::read_body, parser, true);
  }

  // Whether bytes no request asked for are on the connection: left after the last response, held
  // by TLS, or sent by the server since (or the connection is no longer open). A pool must not
  // reuse such a connection: its next response would belong to another request.
  bool has_unread();

 private:
  using tls_stream = boost::beast::ssl_stream<boost::beast::tcp_stream>;

  boost::beast::tcp_stream& link();  // the TCP layer, whose timer bounds every operation
  // The response's head (at step::read_header), or what is left of it.
  template <class Body>
  boost::asio::awaitable<outcome<void>> read(step at, boost::beast::http::response_parser<Body>& parser, bool some = false);
  // The failure of an operation at `at` that ended with `ec`, if it failed.
  static outcome<void> checked(step at, const boost::system::error_code& ec);

  std::variant<boost::beast::tcp_stream, tls_stream> stream_;
  boost::beast::flat_buffer buffer_;  // read ahead of the parser: kept for the next response
};

template <class Body>
boost::asio::awaitable<outcome<void>> connection::read(step at, boost::beast::http::response_parser<Body>& parser, bool some) {
  boost::system::error_code ec;
  co_await std::visit(
      [&](auto& s) {
        auto token = boost::asio::redirect_error(boost::asio::use_awaitable, ec);
        return at == step::read_header ? boost::beast::http::async_read_header(s, buffer_, parser, token)
               : some                  ? boost::beast::http::async_read_some(s, buffer_, parser, token)
                                       : boost::beast::http::async_read(s, buffer_, parser, token);
      },
      stream_);
  if (ec == boost::beast::http::error::need_buffer) ec = {};  // a buffer_body's buffer is full
  co_return checked(at, ec);
}

}  // namespace baton::http_client
