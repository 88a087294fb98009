#include "engine/systemone/systemone_engine.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <variant>

#include "core/http_url.hpp"
#include "core/sha256.hpp"
#include "core/tls_client.hpp"
#include "engine/systemone/workers_ai.hpp"

namespace baton {

namespace net = boost::asio;
namespace ssl = net::ssl;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using clock_type = std::chrono::steady_clock;
using tls_stream = beast::ssl_stream<beast::tcp_stream>;
// A pooled connection: plain, or TLS over TCP. Timeouts are the TCP layer's either way.
using connection = std::variant<beast::tcp_stream, tls_stream>;

namespace {

error bad_response(std::string message) { return make_error(502, "BAD_UPSTREAM_RESPONSE", std::move(message)); }

// Retry-After as the SDKs read it, retry-after-ms first, then whole seconds; at most `cap`.
std::optional<std::chrono::milliseconds> retry_after(const http::response<http::string_body>& res,
                                                     std::chrono::milliseconds cap) {
  auto number = [](std::string_view s) -> std::optional<double> {
    double v = 0;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || !(v >= 0)) return std::nullopt;
    return v;
  };
  std::optional<double> ms;
  if (const auto it = res.find("retry-after-ms"); it != res.end()) ms = number(it->value());
  if (!ms) {
    if (const auto it = res.find(http::field::retry_after); it != res.end()) {
      if (const auto seconds = number(it->value())) ms = *seconds * 1000;
    }
  }
  if (!ms) return std::nullopt;
  // Clamped before the cast: "inf" or 1e300 must not overflow it.
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::min(*ms, double(cap.count()))));
}

// A kept-alive connection the server closed while it sat in the pool fails like this, before
// any answer: not the server's failure, so not an attempt.
bool stale(const beast::error_code& ec) {
  return ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset ||
         ec == net::error::broken_pipe || ec == ssl::error::stream_truncated;
}

beast::tcp_stream& tcp_of(connection& c) {
  return std::visit([](auto& s) -> beast::tcp_stream& { return beast::get_lowest_layer(s); }, c);
}

// Cloudflare's id of the call, which its support asks for: cf-ai-req-id, else the edge's cf-ray.
std::string request_id_of(const http::response<http::string_body>& res) {
  for (const char* name : {"cf-ai-req-id", "cf-ray"}) {
    if (const auto it = res.find(name); it != res.end() && !it->value().empty()) return std::string(it->value());
  }
  return {};
}

// The decision in a SystemOne server's reply that is not retried, or its refusal.
result<decision> systemone_answer(const request& req, int status, const std::string& body) {
  json parsed;
  json_parse_error perr;
  const bool is_json = parse_json(body, parsed, perr);
  if (status != 200) {
    std::optional<error> refused;
    if (is_json) {
      if (auto e = error_from_json(parsed, status)) refused = std::move(*e);
    }
    const std::string what = refused ? refused->message : body.substr(0, 200);
    if (status == 400 || status == 404 || status == 413 || status == 422) {
      // The server refused this request: the caller's to know, with the server's issues.
      if (refused) return *refused;
      return make_error(status, "UPSTREAM_REFUSED", "the server answered " + std::to_string(status) + ": " + what);
    }
    return make_error(502, "UPSTREAM_REFUSED", "the server answered " + std::to_string(status) + ": " + what);
  }
  if (!is_json) return bad_response("the answer is not JSON: " + perr.message);
  auto answered = response_from_json(parsed);
  if (!answered) return answered.error();
  return decision_from_response(req, *answered);
}

// Interim answers (100 Continue, 103 Early Hints) come before the final one and are skipped, as
// RFC 9110 §15.2 asks of a client; taking one as the answer would leave the real one on the
// connection for the next request. After `max_interim` of them the last is returned as it is.
constexpr int max_interim = 8;

template <class Stream>
net::awaitable<void> exchange(Stream& s, const http::request<http::string_body>& msg, beast::flat_buffer& buffer,
                              http::response<http::string_body>& res, beast::error_code& ec) {
  co_await http::async_write(s, msg, net::redirect_error(net::use_awaitable, ec));
  for (int interim = 0; !ec; ++interim) {
    http::response_parser<http::string_body> parser;
    parser.body_limit(std::size_t(64) << 20);
    co_await http::async_read(s, buffer, parser, net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return;
    res = parser.release();
    const unsigned code = res.result_int();
    if (code < 100 || code >= 200 || code == 101 || interim == max_interim) co_return;
  }
}

// Whether a connection has bytes no request asked for: what the last exchange left in its buffer,
// or, for one in the pool, anything the server sent since. Such a connection is closed, never
// reused: its next answer would belong to another request.
bool has_unread(connection& c, std::size_t buffered) {
  if (buffered > 0) return true;
  // TLS: records OpenSSL holds, decrypted or not (bytes Asio's TLS engine buffered before
  // OpenSSL saw them are out of reach; the socket check below sees what is still to come).
  if (auto* s = std::get_if<tls_stream>(&c); s && SSL_has_pending(s->native_handle())) return true;
  beast::error_code ec;
  const std::size_t waiting = tcp_of(c).socket().available(ec);
  return ec || waiting > 0;
}

}  // namespace

result<decision> decision_from_response(const request& req, const response& r) {
  if (r.answers.size() != req.questions.size()) {
    return bad_response("the server answered " + std::to_string(r.answers.size()) + " questions of " +
                        std::to_string(req.questions.size()));
  }
  decision d;
  d.input_tokens = r.usage.input_tokens;
  d.state_truncated = r.usage.state_truncated.value_or(false);
  d.cached_tokens = r.usage.cached_tokens.value_or(0);
  for (const question& q : req.questions) {
    const auto a = std::find_if(r.answers.begin(), r.answers.end(), [&](const auto& x) { return x.first == q.id; });
    if (a == r.answers.end()) return bad_response("question `" + q.id + "` has no answer");
    const std::size_t n = q.option_count();
    std::vector<double> p(n, -1);
    if (const auto* noul = std::get_if<noul_answer>(&a->second)) {
      if (q.type != question_type::noul) return bad_response("question `" + q.id + "` got a noul answer");
      p = {noul->noul, 1 - noul->noul};
    } else {
      const bool choice = std::holds_alternative<choice_answer>(a->second);
      if ((choice && q.type != question_type::choice) || (!choice && q.type != question_type::score)) {
        return bad_response("question `" + q.id + "` got an answer of another type");
      }
      const probability_list& given =
          choice ? std::get<choice_answer>(a->second).probabilities : std::get<score_answer>(a->second).probabilities;
      if (given.size() != n) {
        return bad_response("question `" + q.id + "` has " + std::to_string(n) + " options; the answer gives " +
                            std::to_string(given.size()));
      }
      for (const auto& [option, value] : given) {
        std::size_t i = 0;
        while (i < n && q.option_id(i) != option) ++i;
        if (i == n || p[i] >= 0) return bad_response("question `" + q.id + "`: `" + option + "` is not one of its options, or twice");
        p[i] = value;
      }
    }
    double sum = 0;
    for (double x : p) {
      if (!std::isfinite(x) || x < 0 || x > 1) return bad_response("question `" + q.id + "`: a probability outside [0, 1]");
      sum += x;
    }
    if (std::abs(sum - 1) > 1e-3 + 5e-5 * double(n)) {
      return bad_response("question `" + q.id + "`: the probabilities sum to " + std::to_string(sum));
    }
    d.probabilities.push_back(std::move(p));
  }
  return d;
}

struct systemone_engine::impl {
  systemone_engine_options options;
  http_url url;
  engine_description description;
  net::io_context io;  // driven by decide(), on the scheduler's worker thread only
  tcp::resolver::results_type endpoints;  // resolved once, at start-up
  std::optional<ssl::context> tls;        // https: the peer verified against its CAs
  std::vector<std::unique_ptr<connection>> idle;
  int failures_in_row = 0;
  clock_type::time_point open_until{};

  bool cloudflare() const { return options.flavor == systemone_flavor::workers_ai; }

  // Workers AI: the outcome goes to the log with Cloudflare's request id (in the message of a
  // failure), which is what its support asks for.
  result<decision> logged(result<decision> r, const std::string& request_id) const {
    if (!cloudflare()) return r;
    if (r) {
      spdlog::debug("Workers AI {} answered (request id {})", options.model, request_id.empty() ? "none" : request_id);
    } else {
      spdlog::warn("Workers AI {} failed: {} {}", options.model, r.error().code, r.error().message);
    }
    return r;
  }

  // SNI and the certificate checked for the URL's host; the caller bounds it in time.
  net::awaitable<void> handshake(tls_stream& s, beast::error_code& ec) {
    tls_client::expect_host(s, url.host, ec);
    if (!ec) co_await s.async_handshake(ssl::stream_base::client, net::redirect_error(net::use_awaitable, ec));
  }

  // One request, with its retries, on a connection from the pool.
  net::awaitable<result<decision>> call(const request& req) {
    if (req.has_raw_media()) {
      co_return make_error(422, "MEDIA_SOURCE_REFUSED",
                           "raw media (decoded pixels or samples) has no wire form: it cannot be sent to another SystemOne server");
    }
    std::string body;
    render_request(req, body, options.model);
    http::request<http::string_body> msg(http::verb::post, url.target, 11);
    msg.set(http::field::host, url.host_header);
    msg.set(http::field::content_type, "application/json");
    msg.set(http::field::accept, "application/json");
    msg.set(http::field::user_agent, "baton");
    if (!options.api_key.empty()) msg.set(http::field::authorization, "Bearer " + options.api_key);
    msg.keep_alive(true);
    msg.body() = std::move(body);
    msg.prepare_payload();

    std::string last = "no attempt";
    std::string request_id;  // Workers AI: the last reply's
    auto delay = options.backoff;
    bool wait = false;
    for (int attempt = 0; attempt <= options.retries; ++attempt) {
      if (attempt > 0) msg.set("X-TypeSafe-Retry-Count", std::to_string(attempt));
      if (wait) {
        net::steady_timer timer(io, delay);
        co_await timer.async_wait(net::use_awaitable);
        delay = std::clamp(delay * 2, options.backoff, options.backoff_max);
      }
      wait = true;
      std::unique_ptr<connection> conn;
      while (!conn && !idle.empty()) {
        conn = std::move(idle.back());
        idle.pop_back();
        if (has_unread(*conn, 0)) conn.reset();
      }
      const bool reused = conn != nullptr;
      beast::error_code ec;
      if (!conn) {
        conn = tls ? std::make_unique<connection>(std::in_place_type<tls_stream>, io, *tls)
                   : std::make_unique<connection>(std::in_place_type<beast::tcp_stream>, io);
        beast::tcp_stream& link = tcp_of(*conn);
        link.expires_after(options.connect_timeout);  // for the TLS handshake too
        co_await link.async_connect(endpoints, net::redirect_error(net::use_awaitable, ec));
        if (ec) {
          last = "cannot connect to " + url.host_header + ": " + ec.message();
          continue;
        }
        link.socket().set_option(tcp::no_delay(true), ec);
        if (auto* s = std::get_if<tls_stream>(conn.get())) {
          co_await handshake(*s, ec);
          if (ec) {
            const std::string untrusted = tls_client::verify_failure(s->native_handle());
            const std::string why = ec == beast::error::timeout
                                        ? "no answer within " + std::to_string(options.connect_timeout.count()) + " ms"
                                    : !untrusted.empty() ? untrusted
                                                         : ec.message();
            last = "TLS handshake with " + url.host_header + " failed: " + why;
            // A certificate this client does not trust will not become trusted by trying again.
            if (!untrusted.empty()) co_return logged(make_error(502, "UPSTREAM_UNREACHABLE", last), request_id);
            continue;
          }
        }
      }
      tcp_of(*conn).expires_after(options.timeout);
      beast::flat_buffer buffer;
      http::response<http::string_body> res;
      co_await std::visit([&](auto& s) { return exchange(s, msg, buffer, res, ec); }, *conn);
      if (ec && reused && stale(ec)) {
        --attempt;  // on a new connection (or the next pooled one) at once; the pool is finite
        wait = false;
        continue;
      }
      if (ec) {
        last = ec == beast::error::timeout ? "no answer within " + std::to_string(options.timeout.count()) + " ms"
                                           : "the connection failed: " + ec.message();
        continue;
      }
      const int status = static_cast<int>(res.result_int());
      if (res.keep_alive() && status >= 200 && idle.size() < options.connections && !has_unread(*conn, buffer.size())) {
        idle.push_back(std::move(conn));
      }
      if (cloudflare()) request_id = request_id_of(res);
      if (status == 408 || status == 429 || status >= 500) {
        last = cloudflare() ? workers_ai::retried_reply(status, res.body(), request_id)
                            : "the server answered " + std::to_string(status);
        if (const auto asked = retry_after(res, options.backoff_max)) delay = *asked;
        continue;
      }
      if (!cloudflare()) co_return systemone_answer(req, status, res.body());
      co_return logged(workers_ai::answer(req, status, res.body(), {request_id, options.model, options.key_env, options.account_env}),
                       request_id);
    }
    co_return logged(make_error(502, "UPSTREAM_UNREACHABLE",
                                url.host_header + ": " + last + " (" + std::to_string(options.retries + 1) + " attempts)"),
                     request_id);
  }
};

systemone_engine::systemone_engine(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
systemone_engine::~systemone_engine() = default;

result<std::unique_ptr<systemone_engine>> systemone_engine::make(systemone_engine_options options) {
  const bool cloudflare = options.flavor == systemone_flavor::workers_ai;
  std::string path = "/v1/systemone";
  if (cloudflare) {
    if (options.url.empty()) options.url = workers_ai_defaults::url;
    if (options.model.empty()) options.model = workers_ai_defaults::model;
    if (options.account.empty() || options.api_key.empty()) {
      return make_error(400, "ENGINE_NEEDS_CREDENTIALS", "the systemone engine's workers-ai flavor needs a Cloudflare account id and an API token");
    }
    auto run = workers_ai::run_path(options.account, options.model);
    if (!run) {
      return make_error(400, "INVALID_ENGINE_URL", "the workers-ai account id or the model `" + options.model +
                                                       "` holds characters a URL path cannot take as they are");
    }
    path = std::move(*run);
  }
  std::string reason;
  auto base = options.url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  auto url = parse_http_url(base + path, reason, true);
  if (!url) return make_error(400, "INVALID_ENGINE_URL", "the systemone engine's url `" + options.url + "` " + reason);
  auto p = std::make_unique<impl>();
  p->url = std::move(*url);
  boost::system::error_code ec;
  if (p->url.tls) {
    p->tls.emplace(ssl::context::tls_client);
    tls_client::configure(*p->tls, options.ca_file, ec);
    if (ec) {
      return make_error(400, "INVALID_ENGINE_CA_FILE",
                        "the systemone engine cannot load " +
                            (options.ca_file.empty() ? std::string("the system's CA certificates") : "the CA file " + options.ca_file.string()) +
                            ": " + ec.message());
    }
  } else if (!options.ca_file.empty()) {
    return make_error(400, "INVALID_ENGINE_CA_FILE", "the systemone engine's ca_file is for https URLs; `" + options.url + "` is not one");
  }
  // Resolved once: a resolver has no timeout, and the scheduler's thread must not hang on one.
  p->endpoints = tcp::resolver(p->io).resolve(p->url.host, p->url.port, ec);
  if (ec) {
    return make_error(400, "INVALID_ENGINE_URL", "the systemone engine's host `" + p->url.host + "` does not resolve: " + ec.message());
  }
  options.connections = std::max<std::size_t>(1, options.connections);
  p->options = std::move(options);
  engine_description& d = p->description;
  d.model_id = p->options.model.empty() ? "systemone" : p->options.model;
  d.fingerprint = sha256_hex((cloudflare ? "workers-ai " : "systemone ") + base + " " + p->options.model);
  d.limits = request_limits{};  // the server checks its own; baton only bounds what it forwards
  d.description = cloudflare ? "Workers AI's " + p->options.model + " at " + base : "the SystemOne server at " + base;
  d.release_date = "1970-01-01";  // unknown: another server's model
  return std::unique_ptr<systemone_engine>(new systemone_engine(std::move(p)));
}

const engine_description& systemone_engine::describe() const noexcept { return impl_->description; }

std::vector<result<decision>> systemone_engine::decide(std::span<const request> batch) {
  impl& p = *impl_;
  const auto now = clock_type::now();
  if (now < p.open_until) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(p.open_until - now).count();
    return std::vector<result<decision>>(
        batch.size(), make_error(503, "ENGINE_UNAVAILABLE", "the SystemOne server at " + p.url.host_header + " failed " +
                                                               std::to_string(p.failures_in_row) + " calls in a row; not called for " +
                                                               std::to_string(left) + " ms more"));
  }
  std::vector<result<decision>> out(batch.size());  // every slot is answered before io.run() returns
  // Up to `connections` workers, each taking the next request until none is left.
  std::size_t next = 0;
  auto worker = [&]() -> net::awaitable<void> {
    while (next < batch.size()) {
      const std::size_t i = next++;
      // call() answers errors as values; `detached` would swallow an exception and leave the slot
      // a default (empty) decision, so one is turned into the slot's error here.
      try {
        out[i] = co_await p.call(batch[i]);
      } catch (const std::exception& e) {
        out[i] = make_error(500, "INFERENCE_FAILED", std::string("the SystemOne call failed: ") + e.what());
      }
    }
  };
  for (std::size_t w = 0; w < std::min(batch.size(), p.options.connections); ++w) {
    net::co_spawn(p.io, worker(), net::detached);
  }
  p.io.restart();
  p.io.run();
  // The circuit counts calls, not requests: one outage fails a whole batch at once. Any answer
  // of the server's own (a decision, or a refusal of a request) shows it is there.
  bool answered = false, failed = false;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (batch[i].has_raw_media()) continue;  // refused here: the server was not called
    const auto& r = out[i];
    const bool down = !r && (r.error().code == "UPSTREAM_UNREACHABLE" || r.error().code == "BAD_UPSTREAM_RESPONSE");
    (down ? failed : answered) = true;
  }
  if (answered) {
    p.failures_in_row = 0;
  } else if (failed && ++p.failures_in_row >= p.options.breaker_failures) {
    p.open_until = clock_type::now() + p.options.breaker_open;
  }
  return out;
}

}  // namespace baton
