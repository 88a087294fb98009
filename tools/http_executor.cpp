// The http executor: POST the call as JSON over core's http_client, per-attempt deadline, retries.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include <optional>

#include "core/error_codes.hpp"
#include "core/http_client.hpp"
#include "core/http_url.hpp"
#include "tools/executor_kinds.hpp"

namespace baton::tools::detail {

namespace {

namespace net = boost::asio;
namespace http = boost::beast::http;
using clock_type = std::chrono::steady_clock;

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

attempt_failure timed_out(const http_config& c) {
  return {codes::executor_timeout, "no answer within " + std::to_string(c.timeout.count()) + " ms", true};
}

attempt_failure failure_of(const http_config& c, const http_client::failure& f) {
  using http_client::step;
  if (f.why == http_client::fault::timeout) return timed_out(c);
  // No step::handshake: the executor makes no TLS connections.
  if (f.at == step::resolve) return {codes::executor_unreachable, "cannot resolve " + c.url.host + ": " + f.detail, true};
  if (f.at == step::connect) return {codes::executor_unreachable, "cannot connect to " + c.url.host_header + ": " + f.detail, true};
  // The server may have acted on part of a request: only a timeout or a 5xx is tried again.
  if (f.at == step::write) {
    return {codes::executor_unreachable, "the connection failed while sending the request: " + f.detail, false};
  }
  if (f.why == http_client::fault::too_large) {
    return {codes::executor_output_too_large, "the response body is over " + std::to_string(c.max_output_bytes) + " bytes", false};
  }
  return {codes::executor_unreachable, "the connection failed while reading the response: " + f.detail, false};
}

// One attempt on a new connection, within the attempt's deadline: the outcome's output, or how
// it failed.
net::awaitable<std::optional<attempt_failure>> attempt(const http_config& c, const http_client::request& req,
                                                      tool_outcome& outcome) {
  const auto deadline = clock_type::now() + c.timeout;
  const auto found = co_await http_client::resolve(c.url.host, c.url.port, deadline);
  if (!found) co_return failure_of(c, found.error());
  http_client::connection conn(co_await net::this_coro::executor, nullptr);
  if (auto open = co_await conn.connect(*found, c.url.host, deadline); !open) co_return failure_of(c, open.error());
  const auto response = co_await conn.exchange(req, c.max_output_bytes);
  if (!response) co_return failure_of(c, response.error());
  const unsigned status = response->result_int();
  if (status >= 200 && status < 300) {
    outcome.ok = true;
    outcome.output = output_from_text(response->body());
    co_return std::nullopt;
  }
  std::string detail = "HTTP " + std::to_string(status);
  if (!response->reason().empty()) detail += " " + std::string(response->reason());
  if (!response->body().empty()) {
    constexpr std::size_t excerpt = 200;
    detail += ": " + replace_invalid_utf8(std::string_view(response->body()).substr(0, excerpt));
    if (response->body().size() > excerpt) detail += "…";
  }
  co_return attempt_failure{codes::executor_http_status, std::move(detail), status >= 500};
}

// One call, its attempts and the backoff between them. It owns what it needs (the config, the
// request), so it outlives the executor that started it (a registry reload does not cut runs short).
net::awaitable<tool_outcome> post_call(std::shared_ptr<const http_config> config, std::string body, clock_type::time_point start) {
  const http_config& c = *config;
  auto req = http_client::request_to(http::verb::post, c.url);
  req.set(http::field::user_agent, "baton");
  req.set(http::field::content_type, "application/json");
  req.keep_alive(false);
  req.body() = std::move(body);
  req.prepare_payload();
  tool_outcome outcome;
  for (;;) {
    ++outcome.attempts;
    auto failed = co_await attempt(c, req, outcome);
    if (!failed) break;
    if (failed->retry && outcome.attempts <= c.retries) {
      net::steady_timer backoff(co_await net::this_coro::executor, std::chrono::milliseconds(100) * outcome.attempts);
      co_await backoff.async_wait(net::use_awaitable);
      continue;
    }
    outcome.error_code = std::move(failed->code);
    outcome.detail = std::move(failed->detail);
    if (outcome.attempts > 1) outcome.detail += " (" + std::to_string(outcome.attempts) + " attempts)";
    break;
  }
  outcome.duration_ms = ms_since(start);
  co_return outcome;
}

class http_executor final : public executor {
 public:
  http_executor(std::shared_ptr<const http_config> config, net::any_io_executor io)
      : config_(std::move(config)), io_(std::move(io)) {}

  std::string_view kind() const noexcept override { return "http"; }

  // co_spawn posts the start, so `done` never runs inside run(); each call has its own strand.
  void run(tool_call call, std::function<void(tool_outcome)> done) override {
    const auto start = clock_type::now();
    net::co_spawn(net::make_strand(io_), post_call(config_, call_body(call), start),
                  [done = std::move(done), start](std::exception_ptr e, tool_outcome outcome) {
                    if (e) {
                      // Errors are values in post(); an exception (out of memory) still ends the run once.
                      outcome = {};
                      outcome.error_code = codes::executor_unreachable;
                      outcome.detail = "the call failed unexpectedly";
                      outcome.duration_ms = ms_since(start);
                    }
                    done(std::move(outcome));
                  });
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
    return make_failing_executor("http", codes::executor_unreachable, "the url `" + url + "` " + reason, std::move(io));
  }
  c->url = std::move(*parsed);
  c->timeout = timeout_of(config, limits);
  c->retries = config.value("retries", 0);
  c->max_output_bytes = limits.max_output_bytes;
  return std::make_unique<http_executor>(std::move(c), std::move(io));
}

}  // namespace baton::tools::detail
