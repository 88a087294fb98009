// core's one HTTP client against a server of the test's own on 127.0.0.1: what each failure is
// typed as (a refused connection, an untrusted or misnamed certificate, a deadline, a body over
// its limit), interim responses skipped, and bytes no request asked for seen before reuse.
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>

#include <fstream>
#include <optional>
#include <thread>

#include "core/http_client.hpp"
#include "support/scratch_dir.hpp"
#include "support/test_certificates.hpp"

namespace baton::http_client {
namespace {

namespace net = boost::asio;
namespace http = boost::beast::http;
using namespace std::chrono_literals;

// What the test's server does with the one connection it takes on 127.0.0.1: reads a request,
// answers `raw` as it is and closes it; over TLS with a context; `hang`: answers nothing and
// waits for the client to give up.
struct script {
  std::string raw;
  net::ssl::context* tls = nullptr;
  bool hang = false;
};

template <class Stream>
net::awaitable<void> answer(Stream& s, const script& sc) {
  boost::system::error_code ec;
  boost::beast::flat_buffer buffer;
  http::request<http::string_body> req;
  co_await http::async_read(s, buffer, req, net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return;
  if (sc.hang) {
    char c;
    co_await net::async_read(s, net::buffer(&c, 1), net::redirect_error(net::use_awaitable, ec));
  } else {
    co_await net::async_write(s, net::buffer(sc.raw), net::redirect_error(net::use_awaitable, ec));
  }
}

net::awaitable<void> serve_once(net::ip::tcp::acceptor& acceptor, script sc) {
  auto socket = co_await acceptor.async_accept(net::use_awaitable);
  if (!sc.tls) {
    co_await answer(socket, sc);
    co_return;
  }
  net::ssl::stream<net::ip::tcp::socket> tls(std::move(socket), *sc.tls);
  boost::system::error_code ec;
  co_await tls.async_handshake(net::ssl::stream_base::server, net::redirect_error(net::use_awaitable, ec));
  if (!ec) co_await answer(tls, sc);  // else the client refused the certificate
}

request get(const std::string& host) {
  request req(http::verb::get, "/", 11);
  req.set(http::field::host, host);
  return req;
}

// Connects to a server following `sc` (none: a port nothing listens on), sends one GET and reads
// its response within `limit` bytes and `within`; `unread`: whether anything is left after it.
outcome<response> exchange_once(std::optional<script> sc, const std::string& host, net::ssl::context* tls,
                                std::uint64_t limit = 1 << 20, clock_type::duration within = 2s, bool* unread = nullptr) {
  net::io_context io;
  net::ip::tcp::acceptor acceptor(io, {net::ip::make_address("127.0.0.1"), 0});
  const auto to = net::ip::tcp::resolver(io).resolve("127.0.0.1", std::to_string(acceptor.local_endpoint().port()));
  if (sc) {
    net::co_spawn(io, serve_once(acceptor, std::move(*sc)), [](std::exception_ptr e) {
      if (e) std::rethrow_exception(e);
    });
  } else {
    acceptor.close();
  }
  std::optional<outcome<response>> out;
  net::co_spawn(
      io,
      [&]() -> net::awaitable<outcome<response>> {
        connection c(io.get_executor(), tls);
        if (auto r = co_await c.connect(to, host, clock_type::now() + within); !r) co_return r.error();
        auto res = co_await c.exchange(get(host), limit);
        if (unread) *unread = c.has_unread();
        co_return res;
      },
      [&](std::exception_ptr e, outcome<response> r) {
        if (e) std::rethrow_exception(e);
        out = std::move(r);
      });
  io.run();
  return std::move(*out);
}

void expect_failure(const outcome<response>& r, step at, fault why, const std::string& phrase) {
  ASSERT_FALSE(r) << r->body();
  EXPECT_EQ(r.error().at, at) << r.error().detail;
  EXPECT_EQ(r.error().why, why) << r.error().detail;
  EXPECT_NE(r.error().detail.find(phrase), std::string::npos) << r.error().detail;
}

const std::string ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

TEST(http_client, a_response_and_what_follows_it) {
  auto r = exchange_once(script{ok}, "127.0.0.1", nullptr);
  ASSERT_TRUE(r) << r.error().detail;
  EXPECT_EQ(r->result_int(), 200u);
  EXPECT_EQ(r->body(), "ok");

  r = exchange_once(script{"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + ok},
                    "127.0.0.1", nullptr);
  ASSERT_TRUE(r) << r.error().detail;
  EXPECT_EQ(r->body(), "ok");

  bool unread = false;
  r = exchange_once(script{ok + "HTTP/1.1 200 OK\r\n"}, "127.0.0.1", nullptr, 1 << 20, 2s, &unread);
  ASSERT_TRUE(r) << r.error().detail;
  EXPECT_TRUE(unread);
}

TEST(http_client, transport_failures_are_typed) {
  expect_failure(exchange_once(std::nullopt, "127.0.0.1", nullptr), step::connect, fault::failed, "refused");
  expect_failure(exchange_once(script{ok}, "127.0.0.1", nullptr, 1), step::read_header, fault::too_large, "body limit");
  expect_failure(exchange_once(script{"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nok"}, "127.0.0.1", nullptr),
                 step::read_body, fault::failed, "partial message");
  // Closed before a byte of the answer: how a kept-alive connection the server dropped fails.
  expect_failure(exchange_once(script{""}, "127.0.0.1", nullptr), step::read_header, fault::closed, "end of stream");
  const auto start = clock_type::now();
  expect_failure(exchange_once(script{"", nullptr, true}, "127.0.0.1", nullptr, 1 << 20, 200ms), step::read_header,
                 fault::timeout, "timeout");
  EXPECT_LT(clock_type::now() - start, 2s);
}

TEST(http_client, names_resolve_within_the_deadline) {
  net::io_context io;
  std::optional<outcome<endpoints>> found;
  net::co_spawn(io, resolve("127.0.0.1", "80", clock_type::now() + 2s), [&](std::exception_ptr e, outcome<endpoints> r) {
    if (e) std::rethrow_exception(e);
    found = std::move(r);
  });
  io.run();
  ASSERT_TRUE(*found) << found->error().detail;
  EXPECT_EQ((*found)->begin()->endpoint().port(), 80);
}

// The lookup runs on a thread of its own: a caller whose io_context goes while it waits (or that
// stopped waiting at its deadline) leaves the lookup to finish alone, touching nothing of the
// caller's. An address resolves at once, so the lookups here end before, during and after the
// io_contexts' destruction.
TEST(http_client, a_lookup_outlives_a_caller_that_stopped_waiting) {
  for (int i = 0; i < 50; ++i) {
    net::io_context io;
    net::co_spawn(io, resolve("127.0.0.1", "80", clock_type::now() + (i % 2 == 0 ? 10s : -1s)),
                  [&](std::exception_ptr e, outcome<endpoints> r) {
                    if (e) std::rethrow_exception(e);
                    if (!r) {
                      EXPECT_EQ(r.error().at, step::resolve);
                      EXPECT_EQ(r.error().why, fault::timeout);
                    }
                  });
    io.poll();  // started: the thread looks up, the coroutine waits (a past deadline: not for long)
  }
  std::this_thread::sleep_for(200ms);  // the lookups left behind end, with no io_context to wake
}

TEST(http_client, a_request_to_a_url) {
  std::string reason;
  const auto url = parse_http_url("http://[::1]:8080/v1/x?y=1", reason);
  ASSERT_TRUE(url) << reason;
  const request req = request_to(http::verb::post, *url);
  EXPECT_EQ(req.method(), http::verb::post);
  EXPECT_EQ(req.target(), "/v1/x?y=1");
  EXPECT_EQ(req.version(), 11u);
  EXPECT_EQ(req[http::field::host], "[::1]:8080");
  EXPECT_EQ(std::distance(req.begin(), req.end()), 1);  // the Host alone: the rest is the caller's
}

class http_client_tls : public ::testing::Test {
 protected:
  void SetUp() override { std::ofstream(dir_ / "ca.pem") << ca_.cert_pem(); }
  net::ssl::context* server_for(const std::string& alt_names) {
    const test::key_pair leaf = ca_.leaf(alt_names);
    server_.use_certificate_chain(net::buffer(leaf.cert_pem));
    server_.use_private_key(net::buffer(leaf.key_pem), net::ssl::context::pem);
    return &server_;
  }
  const test::scratch_dir dir_{"baton-http-client"};
  test::test_ca ca_;
  net::ssl::context server_{net::ssl::context::tls_server};
};

TEST_F(http_client_tls, the_certificate_is_verified_for_the_host) {
  const script sc{ok, server_for("DNS:localhost")};
  auto trusted = tls_context(dir_ / "ca.pem");
  ASSERT_TRUE(trusted) << trusted.error().message();
  const auto r = exchange_once(sc, "localhost", &*trusted);
  ASSERT_TRUE(r) << r.error().detail;
  EXPECT_EQ(r->body(), "ok");
  // By address, the certificate names another host.
  expect_failure(exchange_once(sc, "127.0.0.1", &*trusted), step::handshake, fault::untrusted,
                 "certificate verify failed: IP address mismatch");
  // The system's CAs do not know the test's.
  auto system = tls_context({});
  ASSERT_TRUE(system) << system.error().message();
  expect_failure(exchange_once(sc, "localhost", &*system), step::handshake, fault::untrusted,
                 "certificate verify failed: ");
}

TEST(http_client, ca_files_that_do_not_load_say_why) {
  EXPECT_FALSE(tls_context("/nonexistent/ca.pem"));
}

}  // namespace
}  // namespace baton::http_client
