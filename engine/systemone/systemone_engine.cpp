#include "engine/systemone/systemone_engine.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/error_codes.hpp"
#include "core/http_client.hpp"
#include "core/http_url.hpp"
#include "core/sha256.hpp"
#include "engine/systemone/dialect.hpp"
#include "engine/systemone/workers_ai.hpp"

namespace baton {

namespace net = boost::asio;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;
using clock_type = std::chrono::steady_clock;
using http_client::connection;

namespace {

error bad_response(std::string message) { return make_error(502, codes::bad_upstream_response, std::move(message)); }

// Retry-After as the SDKs read it, retry-after-ms first, then whole seconds; at most `cap`.
std::optional<std::chrono::milliseconds> retry_after(const http_client::response& res,
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
  std::unique_ptr<const systemone_dialect> dialect;
  http_url url;
  engine_description description;
  net::io_context io;  // driven by decide(), on the scheduler's worker thread only
  http_client::endpoints endpoints;       // resolved once, at start-up
  std::optional<net::ssl::context> tls;   // https: the peer verified against its CAs
  std::vector<std::unique_ptr<connection>> idle;
  int failures_in_row = 0;
  clock_type::time_point open_until{};

  // A kept-alive connection from the pool with nothing unread on it, or none.
  std::unique_ptr<connection> pooled() {
    while (!idle.empty()) {
      auto conn = std::move(idle.back());
      idle.pop_back();
      if (!conn->has_unread()) return conn;
    }
    return nullptr;
  }

  // What a failed connect says, for the error when the retries run out.
  std::string connect_failure(const http_client::failure& f) const {
    if (f.at == http_client::step::connect) return "cannot connect to " + url.host_header + ": " + f.detail;
    const std::string why = f.why == http_client::fault::timeout
                                ? "no answer within " + std::to_string(options.connect_timeout.count()) + " ms"
                                : f.detail;
    return "TLS handshake with " + url.host_header + " failed: " + why;
  }

  // One request, with its retries, on a connection from the pool; its outcome as the dialect
  // returns it.
  net::awaitable<result<decision>> call(const request& req) {
    if (req.has_raw_media()) {
      co_return make_error(422, codes::media_source_refused,
                           "raw media (decoded pixels or samples) has no wire form: it cannot be sent to another SystemOne server");
    }
    auto [outcome, request_id] = co_await attempts(req);
    co_return dialect->returned(std::move(outcome), request_id);
  }

  struct called {
    result<decision> outcome;
    std::string request_id;  // the last reply's, when the dialect has one
  };

  // The request's attempts until one is answered, the retries run out or a failure ends them.
  net::awaitable<called> attempts(const request& req) {
    std::string body;
    render_request(req, body, options.model);
    auto msg = http_client::request_to(http::verb::post, url);
    msg.set(http::field::content_type, "application/json");
    msg.set(http::field::accept, "application/json");
    msg.set(http::field::user_agent, "baton");
    if (!options.api_key.empty()) msg.set(http::field::authorization, "Bearer " + options.api_key);
    msg.keep_alive(true);
    msg.body() = std::move(body);
    msg.prepare_payload();

    std::string last = "no attempt";
    std::string request_id;  // the last reply's, when the dialect has one
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
      auto conn = pooled();
      const bool reused = conn != nullptr;
      if (!conn) {
        conn = std::make_unique<connection>(io.get_executor(), tls ? &*tls : nullptr);
        if (auto c = co_await conn->connect(endpoints, url.host, clock_type::now() + options.connect_timeout); !c) {
          last = connect_failure(c.error());
          // A certificate this client does not trust will not become trusted by trying again.
          if (c.error().why == http_client::fault::untrusted) {
            co_return called{make_error(502, codes::upstream_unreachable, last), request_id};
          }
          continue;
        }
      }
      conn->expires_after(options.timeout);
      auto res = co_await conn->exchange(msg, std::uint64_t(64) << 20);
      if (!res) {
        // A kept-alive connection the server closed while it sat in the pool fails like this,
        // before any answer: not the server's failure, so not an attempt.
        if (reused && res.error().why == http_client::fault::closed) {
          --attempt;  // on a new connection (or the next pooled one) at once; the pool is finite
          wait = false;
          continue;
        }
        last = res.error().why == http_client::fault::timeout
                   ? "no answer within " + std::to_string(options.timeout.count()) + " ms"
                   : "the connection failed: " + res.error().detail;
        continue;
      }
      const int status = static_cast<int>(res->result_int());
      if (res->keep_alive() && status >= 200 && idle.size() < options.connections && !conn->has_unread()) {
        idle.push_back(std::move(conn));
      }
      request_id = dialect->request_id(*res);
      if (status == 408 || status == 429 || status >= 500) {
        last = "the server answered " + std::to_string(status) + dialect->retried(res->body(), request_id);
        if (const auto asked = retry_after(*res, options.backoff_max)) delay = *asked;
        continue;
      }
      co_return called{dialect->answer(req, status, res->body(), request_id), request_id};
    }
    co_return called{make_error(502, codes::upstream_unreachable,
                                url.host_header + ": " + last + " (" + std::to_string(options.retries + 1) + " attempts)"),
                     request_id};
  }
};

systemone_engine::systemone_engine(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
systemone_engine::~systemone_engine() = default;

result<std::unique_ptr<systemone_engine>> systemone_engine::make(systemone_engine_options options) {
  // The one place the flavor is read: its dialect decides the rest.
  auto dialect = options.flavor == systemone_flavor::workers_ai
                     ? workers_ai::make_dialect(options)
                     : result<std::unique_ptr<const systemone_dialect>>(make_systemone_dialect());
  if (!dialect) return dialect.error();
  std::string reason;
  auto base = options.url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  auto url = parse_http_url(base + (*dialect)->path, reason, true);
  if (!url) return make_error(400, codes::invalid_engine_url, "the systemone engine's url `" + options.url + "` " + reason);
  auto p = std::make_unique<impl>();
  p->url = std::move(*url);
  if (p->url.tls) {
    auto tls = http_client::tls_context(options.ca_file);
    if (!tls) {
      return make_error(400, codes::invalid_engine_ca_file,
                        "the systemone engine cannot load " +
                            (options.ca_file.empty() ? std::string("the system's CA certificates") : "the CA file " + options.ca_file.string()) +
                            ": " + tls.error().message());
    }
    p->tls.emplace(std::move(*tls));
  } else if (!options.ca_file.empty()) {
    return make_error(400, codes::invalid_engine_ca_file, "the systemone engine's ca_file is for https URLs; `" + options.url + "` is not one");
  }
  // Resolved once: a resolver has no timeout, and the scheduler's thread must not hang on one.
  boost::system::error_code ec;
  p->endpoints = tcp::resolver(p->io).resolve(p->url.host, p->url.port, ec);
  if (ec) {
    return make_error(400, codes::invalid_engine_url, "the systemone engine's host `" + p->url.host + "` does not resolve: " + ec.message());
  }
  options.connections = std::max<std::size_t>(1, options.connections);
  p->options = std::move(options);
  p->dialect = std::move(*dialect);
  engine_description& d = p->description;
  d.model_id = p->options.model.empty() ? "systemone" : p->options.model;
  d.fingerprint = sha256_hex(p->dialect->name + " " + base + " " + p->options.model);
  d.limits = request_limits{};  // the server checks its own; baton only bounds what it forwards
  d.description = p->dialect->description + " at " + base;
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
        batch.size(), make_error(503, codes::engine_unavailable, "the SystemOne server at " + p.url.host_header + " failed " +
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
        out[i] = make_error(500, codes::inference_failed, std::string("the SystemOne call failed: ") + e.what());
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
    const bool down = !r && (r.error().code == codes::upstream_unreachable || r.error().code == codes::bad_upstream_response);
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
