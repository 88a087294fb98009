#include "core/http_client.hpp"

#include <boost/asio/execution_context.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>

#include <memory>
#include <mutex>
#include <optional>
#include <thread>

namespace baton::http_client {

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;

constexpr int max_interim = 8;  // interim responses skipped before the last is taken as it is

fault fault_of(const error_code& ec) {
  if (ec == beast::error::timeout) return fault::timeout;
  if (ec == http::error::body_limit) return fault::too_large;
  if (ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset ||
      ec == net::error::broken_pipe || ec == net::ssl::error::stream_truncated) {
    return fault::closed;
  }
  return fault::failed;
}

// SNI for a host name (never an address, RFC 6066) and the certificate's check against `host`.
void expect_host(beast::ssl_stream<beast::tcp_stream>& s, const std::string& host, error_code& ec) {
  error_code not_address;
  net::ip::make_address(host, not_address);
  const bool address = !not_address;
  if (!address && !SSL_set_tlsext_host_name(s.native_handle(), host.c_str())) {
    ec = error_code(static_cast<int>(::ERR_get_error()), net::error::get_ssl_category());
    return;
  }
  // host_name_verification refuses a certificate for another host without saying why: the
  // verify result says it, for the failure's detail.
  s.set_verify_callback([check = net::ssl::host_name_verification(host), address](bool preverified, net::ssl::verify_context& ctx) {
    if (check(preverified, ctx)) return true;
    if (preverified) {
      X509_STORE_CTX_set_error(ctx.native_handle(), address ? X509_V_ERR_IP_ADDRESS_MISMATCH : X509_V_ERR_HOSTNAME_MISMATCH);
    }
    return false;
  });
}

// getaddrinfo cannot be cancelled or bounded in time, and Asio's resolver keeps its io_context
// busy until it returns: resolve() looks up on a thread of its own, which keeps what it finds in
// a `lookup` and, while the caller still waits, posts its wake-up to the caller's executor.
// After the deadline the thread finishes alone and holds nothing of the caller's.

// Whether a caller's execution context still takes wake-ups; it guards its lookups too.
struct lookup_gate {
  std::mutex m;
  bool open = true;
};

// Closes a context's gate when the context shuts down. A service made after the context's
// scheduler shuts down before it, so before the scheduler destroys the handlers it holds (a
// waiting coroutine among them), which it does without a lock that a post from another thread
// would respect.
class lookups final : public net::execution_context::service {
 public:
  using key_type = lookups;
  static inline net::execution_context::id id;
  explicit lookups(net::execution_context& context) : service(context) {}
  const std::shared_ptr<lookup_gate> gate = std::make_shared<lookup_gate>();

 private:
  void shutdown() override {
    const std::lock_guard lock(gate->m);
    gate->open = false;
  }
};

// One lookup, shared by its thread and its caller; all of it under gate->m.
struct lookup {
  std::shared_ptr<lookup_gate> gate;
  bool done = false;
  error_code ec;
  endpoints found;
  net::steady_timer* waiting = nullptr;        // the caller's timer, while the caller waits on it
  std::optional<net::any_io_executor> caller;  // where `waiting` may be touched, while it is set
};

}  // namespace

boost::system::result<net::ssl::context> tls_context(const std::filesystem::path& ca_file) {
  net::ssl::context ctx(net::ssl::context::tls_client);
  SSL_CTX_set_min_proto_version(ctx.native_handle(), TLS1_2_VERSION);
  ctx.set_verify_mode(net::ssl::verify_peer);
  error_code ec;
  if (ca_file.empty()) {
    ctx.set_default_verify_paths(ec);
  } else {
    ctx.load_verify_file(ca_file.string(), ec);
  }
  if (ec) return ec;
  return ctx;
}

net::awaitable<outcome<endpoints>> resolve(std::string host, std::string port, clock_type::time_point deadline) {
  const net::any_io_executor executor = co_await net::this_coro::executor;
  net::steady_timer timer(executor, deadline);
  const auto state = std::make_shared<lookup>();
  state->gate = net::use_service<lookups>(net::query(executor, net::execution::context_as<net::execution_context&>)).gate;
  state->waiting = &timer;
  state->caller = executor;
  // However the wait ends (its coroutine destroyed with the io_context included), the thread
  // touches nothing of the caller's from then on.
  struct stop_waiting {
    lookup& l;
    ~stop_waiting() {
      const std::lock_guard lock(l.gate->m);
      l.waiting = nullptr;
      l.caller.reset();
    }
  } const waited{*state};
  std::thread([state, host = std::move(host), port = std::move(port)] {
    net::io_context io;
    error_code ec;
    endpoints found = net::ip::tcp::resolver(io).resolve(host, port, ec);
    const std::lock_guard lock(state->gate->m);
    state->done = true;
    state->ec = ec;
    state->found = std::move(found);
    if (state->waiting == nullptr || !state->gate->open) return;
    net::post(*state->caller, [state] {
      const std::lock_guard lock(state->gate->m);
      if (state->waiting != nullptr) state->waiting->cancel();
    });
  }).detach();
  error_code ignored;
  co_await timer.async_wait(net::redirect_error(net::use_awaitable, ignored));
  const std::lock_guard lock(state->gate->m);
  if (!state->done) co_return failure{step::resolve, fault::timeout, make_error_code(beast::error::timeout).message()};
  if (state->ec) co_return failure{step::resolve, fault_of(state->ec), state->ec.message()};
  co_return std::move(state->found);
}

request request_to(http::verb verb, const http_url& url) {
  request req(verb, url.target, 11);
  req.set(http::field::host, url.host_header);
  return req;
}

connection::connection(const net::any_io_executor& executor, net::ssl::context* tls)
    : stream_(tls != nullptr ? decltype(stream_)(std::in_place_type<tls_stream>, executor, *tls)
                             : decltype(stream_)(std::in_place_type<beast::tcp_stream>, executor)) {}

beast::tcp_stream& connection::link() {
  return std::visit([](auto& s) -> beast::tcp_stream& { return beast::get_lowest_layer(s); }, stream_);
}

void connection::expires_after(clock_type::duration d) { link().expires_after(d); }
void connection::cancel() { link().cancel(); }

outcome<void> connection::checked(step at, const error_code& ec) {
  if (!ec) return {};
  return failure{at, fault_of(ec), ec.message()};
}

net::awaitable<outcome<void>> connection::connect(const endpoints& to, const std::string& host, clock_type::time_point deadline) {
  beast::tcp_stream& tcp_link = link();
  tcp_link.expires_at(deadline);  // for the TLS handshake too
  error_code ec;
  co_await tcp_link.async_connect(to, net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return checked(step::connect, ec);
  // Requests are written whole; Nagle would only hold back a kept-alive connection's next one.
  tcp_link.socket().set_option(net::ip::tcp::no_delay(true), ec);
  auto* s = std::get_if<tls_stream>(&stream_);
  if (s == nullptr) co_return outcome<void>{};
  ec = {};
  expect_host(*s, host, ec);
  if (!ec) co_await s->async_handshake(net::ssl::stream_base::client, net::redirect_error(net::use_awaitable, ec));
  if (!ec) co_return outcome<void>{};
  const long verified = SSL_get_verify_result(s->native_handle());
  if (ec != beast::error::timeout && verified != X509_V_OK) {
    co_return failure{step::handshake, fault::untrusted,
                      "certificate verify failed: " + std::string(X509_verify_cert_error_string(verified))};
  }
  co_return checked(step::handshake, ec);
}

net::awaitable<outcome<void>> connection::write(const request& req) {
  error_code ec;
  co_await std::visit([&](auto& s) { return http::async_write(s, req, net::redirect_error(net::use_awaitable, ec)); }, stream_);
  co_return checked(step::write, ec);
}

net::awaitable<outcome<response>> connection::exchange(const request& req, std::uint64_t body_limit) {
  if (auto w = co_await write(req); !w) co_return w.error();
  for (int interim = 0;; ++interim) {
    http::response_parser<http::string_body> parser;
    parser.body_limit(body_limit);
    if (auto r = co_await read_header(parser); !r) co_return r.error();
    if (auto r = co_await read_body(parser); !r) co_return r.error();
    const unsigned code = parser.get().result_int();
    if (code < 100 || code >= 200 || code == 101 || interim == max_interim) co_return parser.release();
  }
}

bool connection::has_unread() {
  if (buffer_.size() > 0) return true;
  // TLS: records OpenSSL holds, decrypted or not (bytes Asio's TLS engine buffered before
  // OpenSSL saw them are out of reach; the socket check below sees what is still to come).
  if (auto* s = std::get_if<tls_stream>(&stream_); s && SSL_has_pending(s->native_handle())) return true;
  error_code ec;
  const std::size_t waiting = link().socket().available(ec);
  return ec || waiting > 0;
}

}  // namespace baton::http_client
