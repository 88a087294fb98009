// The http executor: POST the call as JSON with a Beast client, per-attempt timeout, retries.
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include <optional>

#include "core/http_url.hpp"
#include "tools/executor_kinds.hpp"

namespace baton::tools::detail {

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using clock_type = std::chrono::steady_clock;
using beast::error_code;

struct http_config {
  http_url url;
  std::chrono::milliseconds timeout;
  int retries = 0;
  std::size_t max_output_bytes = 0;
};

// How far a failed attempt got decides whether another one may follow.
struct attempt_failure {
  std::string code;
  std::string detail;
  bool retry = false;
};

// One call. It owns its strand, sockets and timers, so it outlives the executor that started it
// (a registry reload does not cut runs short).
class http_run : public std::enable_shared_from_this<http_run> {
 public:
  http_run(std::shared_ptr<const http_config> config, net::any_io_executor io, const tool_call& call,
           std::function<void(tool_outcome)> done)
      : config_(std::move(config)),
        strand_(net::make_strand(io)),
        resolver_(strand_),
        resolve_deadline_(strand_),
        backoff_(strand_),
        stream_(strand_),
        done_(std::move(done)) {
    request_.method(http::verb::post);
    request_.target(config_->url.target);
    request_.version(11);
    request_.set(http::field::host, config_->url.host_header);
    request_.set(http::field::user_agent, "baton");
    request_.set(http::field::content_type, "application/json");
    request_.keep_alive(false);
    request_.body() = call_body(call);
    request_.prepare_payload();
  }

  void start() {
    net::post(strand_, [self = shared_from_this()] { self->attempt(); });
  }

 private:
  void attempt() {
    ++outcome_.attempts;
    deadline_ = clock_type::now() + config_->timeout;
    // The resolver cannot be cancelled once getaddrinfo runs: the deadline ends the wait for it.
    resolving_ = true;
    resolve_deadline_.expires_at(deadline_);
    resolve_deadline_.async_wait([self = shared_from_this(), n = outcome_.attempts](error_code ec) {
      if (ec || !self->resolving_ || n != self->outcome_.attempts) return;
      self->resolving_ = false;
      self->resolver_.cancel();
      self->failed(self->timed_out());
    });
    auto on_resolved = [self = shared_from_this(), n = outcome_.attempts](error_code ec,
                                                                          tcp::resolver::results_type r) {
      if (!self->resolving_ || n != self->outcome_.attempts) return;
      self->resolving_ = false;
      self->resolve_deadline_.cancel();
      self->on_resolve(ec, r);
    };
    resolver_.async_resolve(config_->url.host, config_->url.port, std::move(on_resolved));
  }

  void on_resolve(error_code ec, const tcp::resolver::results_type& endpoints) {
    if (ec) return failed({"EXECUTOR_UNREACHABLE", "cannot resolve " + config_->url.host + ": " + ec.message(), true});
    // One deadline for the whole attempt: connect, write and read share what is left of it.
    stream_.expires_at(deadline_);
    stream_.async_connect(endpoints, [self = shared_from_this()](error_code ec, const tcp::endpoint&) {
      if (ec == beast::error::timeout) return self->failed(self->timed_out());
      if (ec) {
        const std::string where = self->config_->url.host_header;
        return self->failed({"EXECUTOR_UNREACHABLE", "cannot connect to " + where + ": " + ec.message(), true});
      }
      http::async_write(self->stream_, self->request_, [self](error_code ec, std::size_t) { self->on_write(ec); });
    });
  }

  void on_write(error_code ec) {
    if (ec == beast::error::timeout) return failed(timed_out());
    // The server may have acted on part of a request: only a timeout or a 5xx is tried again.
    if (ec) {
      return failed({"EXECUTOR_UNREACHABLE", "the connection failed while sending the request: " + ec.message(), false});
    }
    parser_.emplace();
    parser_->body_limit(config_->max_output_bytes);
    buffer_.clear();
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](error_code ec, std::size_t) { self->on_read(ec); });
  }

  void on_read(error_code ec) {
    if (ec == beast::error::timeout) return failed(timed_out());
    if (ec == http::error::body_limit) {
      return failed({"EXECUTOR_OUTPUT_TOO_LARGE",
                     "the response body is over " + std::to_string(config_->max_output_bytes) + " bytes", false});
    }
    if (ec) {
      return failed({"EXECUTOR_UNREACHABLE", "the connection failed while reading the response: " + ec.message(), false});
    }
    close();
    const auto& response = parser_->get();
    const unsigned status = response.result_int();
    if (status >= 200 && status < 300) {
      outcome_.ok = true;
      outcome_.output = output_from_text(response.body());
      return finish();
    }
    std::string detail = "HTTP " + std::to_string(status);
    if (!response.reason().empty()) detail += " " + std::string(response.reason());
    if (!response.body().empty()) {
      constexpr std::size_t excerpt = 200;
      detail += ": " + replace_invalid_utf8(std::string_view(response.body()).substr(0, excerpt));
      if (response.body().size() > excerpt) detail += "…";
    }
    failed({"EXECUTOR_HTTP_STATUS", std::move(detail), status >= 500});
  }

  attempt_failure timed_out() const {
    return {"EXECUTOR_TIMEOUT", "no answer within " + std::to_string(config_->timeout.count()) + " ms", true};
  }

  void failed(attempt_failure f) {
    close();
    if (f.retry && outcome_.attempts <= config_->retries) {
      backoff_.expires_after(std::chrono::milliseconds(100) * outcome_.attempts);
      backoff_.async_wait([self = shared_from_this()](error_code ec) {
        if (!ec) self->attempt();
      });
      return;
    }
    outcome_.error_code = std::move(f.code);
    outcome_.detail = std::move(f.detail);
    if (outcome_.attempts > 1) outcome_.detail += " (" + std::to_string(outcome_.attempts) + " attempts)";
    finish();
  }

  void close() {
    error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

  void finish() {
    outcome_.duration_ms = ms_since(start_);
    auto done = std::move(done_);
    done(std::move(outcome_));
  }

  std::shared_ptr<const http_config> config_;
  net::strand<net::any_io_executor> strand_;
  tcp::resolver resolver_;
  net::steady_timer resolve_deadline_;
  net::steady_timer backoff_;
  beast::tcp_stream stream_;
  http::request<http::string_body> request_;
  beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::string_body>> parser_;
  std::function<void(tool_outcome)> done_;
  tool_outcome outcome_;
  clock_type::time_point start_ = clock_type::now();
  clock_type::time_point deadline_;
  bool resolving_ = false;
};

class http_executor final : public executor {
 public:
  http_executor(std::shared_ptr<const http_config> config, net::any_io_executor io)
      : config_(std::move(config)), io_(std::move(io)) {}

  std::string_view kind() const noexcept override { return "http"; }

  void run(tool_call call, std::function<void(tool_outcome)> done) override {
    std::make_shared<http_run>(config_, io_, call, std::move(done))->start();
  }

 private:
  std::shared_ptr<const http_config> config_;
  net::any_io_executor io_;
};

}  // namespace

std::unique_ptr<executor> make_http_executor(const json& config, net::any_io_executor io,
                                             const executor_limits& limits) {
  auto c = std::make_shared<http_config>();
  const std::string url = config.value("url", "");
  std::string reason;
  auto parsed = parse_http_url(url, reason);
  if (!parsed) {
    return make_failing_executor("http", "EXECUTOR_UNREACHABLE", "the url `" + url + "` " + reason, std::move(io));
  }
  c->url = std::move(*parsed);
  c->timeout = timeout_of(config, limits);
  c->retries = config.value("retries", 0);
  c->max_output_bytes = limits.max_output_bytes;
  return std::make_unique<http_executor>(std::move(c), std::move(io));
}

}  // namespace baton::tools::detail
