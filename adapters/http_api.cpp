#include "adapters/http_api.hpp"

#include <zlib.h>

#include "core/ids.hpp"

namespace baton {

namespace http = boost::beast::http;

namespace {

// The routes; anything else is counted as "other" so that a scan of random paths cannot grow the
// metrics without bound.
struct route {
  std::string_view path;
  http::verb method;
};
constexpr route routes[] = {
    {"/v1/systemone", http::verb::post}, {"/v1/decisions", http::verb::post}, {"/v1/models", http::verb::get},
    {"/health", http::verb::get},        {"/metrics", http::verb::get},       {"/v1/agent", http::verb::get},
};

// The body of a `Content-Encoding: gzip` request, inflated to at most `limit` bytes (413 beyond).
result<std::string> gunzip(std::string_view in, std::size_t limit) {
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return make_error(500, "INTERNAL", "zlib could not start");
  std::string out;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  int rc = Z_OK;
  while (rc == Z_OK) {
    if (out.size() > limit) break;
    const std::size_t have = out.size();
    out.resize(have + std::min<std::size_t>(limit + 1 - have, 1u << 16));
    z.next_out = reinterpret_cast<Bytef*>(out.data() + have);
    z.avail_out = static_cast<uInt>(out.size() - have);
    rc = inflate(&z, Z_NO_FLUSH);
    out.resize(out.size() - z.avail_out);
    if (rc == Z_BUF_ERROR && z.avail_in == 0) break;  // the input ended before the stream did
  }
  const bool ended = rc == Z_STREAM_END && z.avail_in == 0;
  inflateEnd(&z);
  if (out.size() > limit) {
    return make_error(413, "REQUEST_TOO_LARGE", "the gzip body inflates to more than " + std::to_string(limit) +
                                                    " bytes (server.max_body_bytes)");
  }
  if (!ended) return make_error(400, "INVALID_JSON", "the body is not valid gzip (Content-Encoding: gzip)");
  return out;
}

std::string_view path_of(std::string_view target) { return target.substr(0, target.find('?')); }

std::string_view bearer(const http_api::request& req) {
  const auto it = req.find(http::field::authorization);
  return it == req.end() ? std::string_view() : std::string_view(it->value());
}

}  // namespace

http_api::http_api(const server_config& config, authenticator& auth, metrics& m, systemone_service& systemone,
                   agent_service& agents, std::function<std::vector<metrics::gauge>()> gauges)
    : config_(config), auth_(auth), metrics_(m), systemone_(systemone), agents_(agents), gauges_(std::move(gauges)) {}

http_api::response http_api::make(const request& req, std::string_view route_name, http_reply&& r,
                                  const std::string& id) {
  metrics_.request(route_name, r.status);
  response res{static_cast<http::status>(r.status), req.version()};
  res.set(http::field::server, "baton");
  res.set(http::field::content_type, route_name == "/metrics" && r.status == 200
                                         ? "text/plain; version=0.0.4; charset=utf-8"
                                         : "application/json");
  res.set("x-typesafe-request-id", id);
  res.set("X-Request-Id", id);
  for (auto& [k, v] : r.headers) res.set(k, v);
  res.keep_alive(req.keep_alive() && !r.close);
  res.body() = std::move(r.body);
  res.prepare_payload();
  if (req.method() == http::verb::head) res.body().clear();  // Content-Length stays; a HEAD answer has no body
  return res;
}

void http_api::handle(request&& req, boost::asio::any_io_executor strand, std::function<void(response)> done) {
  const std::string_view path = path_of(req.target());
  const route* found = nullptr;
  for (const route& r : routes) {
    if (r.path == path) found = &r;
  }
  const bool decide = found && found->method == http::verb::post;
  std::string id = new_id(decide ? 'd' : 'q');
  const std::string_view name = found ? found->path : "other";
  auto answer = [&](http_reply r) { done(make(req, name, std::move(r), id)); };

  if (!found) {
    answer(error_reply(make_error(404, "NOT_FOUND", "no endpoint at " + std::string(path))));
    return;
  }
  const bool head_ok = found->method == http::verb::get;
  if (req.method() != found->method && !(head_ok && req.method() == http::verb::head)) {
    http_reply r = error_reply(make_error(405, "METHOD_NOT_ALLOWED",
                                          std::string(path) + " answers " + std::string(http::to_string(found->method))));
    r.headers.emplace_back("Allow", head_ok ? "GET, HEAD" : "POST");
    answer(std::move(r));
    return;
  }
  if (path == "/health") {
    answer(http_reply{200, agents_.health_json(), {}, false});
    return;
  }
  if (path == "/v1/agent") {
    answer(error_reply(make_error(426, "UPGRADE_REQUIRED", "/v1/agent is a WebSocket endpoint")));
    return;
  }
  auto who = auth_.authenticate(bearer(req));
  if (!who) {
    answer(error_reply(who.error()));
    return;
  }
  const caller& c = **who;
  const endpoint e = decide ? endpoint::decide : path == "/metrics" ? endpoint::metrics : endpoint::models;
  if (!may_use(c.role, e)) {
    answer(error_reply(forbidden(c, e)));
    return;
  }
  if (const auto wait = auth_.admit(c)) {
    answer(error_reply(make_error(429, "RATE_LIMITED", "key `" + c.name + "` is over its rate limit; retry in " +
                                                           std::to_string(wait->count()) + " ms"),
                       *wait));
    return;
  }
  if (e == endpoint::models) {
    answer(http_reply{200, systemone_.models_json(), {}, false});
    return;
  }
  if (e == endpoint::metrics) {
    answer(http_reply{200, metrics_.render(gauges_()), {}, false});
    return;
  }

  std::string body = std::move(req.body());
  if (const auto enc = req.find(http::field::content_encoding); enc != req.end()) {
    const std::string_view coding = enc->value();
    if (boost::beast::iequals(coding, "gzip") || boost::beast::iequals(coding, "x-gzip")) {
      auto inflated = gunzip(body, config_.server.max_body_bytes);
      if (!inflated) {
        answer(error_reply(inflated.error()));
        return;
      }
      body = std::move(*inflated);
    } else if (!boost::beast::iequals(coding, "identity")) {
      answer(error_reply(make_error(415, "UNSUPPORTED_MEDIA_TYPE",
                                    "Content-Encoding " + std::string(coding) + ": only gzip and identity are read")));
      return;
    }
  }
  // The request goes on without `req`'s body; its head stays for the response.
  auto head = std::make_shared<request>(std::move(req));
  systemone_.decide(id, c.name, std::move(body), strand,
                    [this, head, id, name, done = std::move(done)](http_reply r) {
                      done(make(*head, name, std::move(r), id));
                    });
}

std::variant<std::string, http_api::response> http_api::upgrade(const request& req) {
  const std::string_view path = path_of(req.target());
  http_reply refusal;
  if (path != "/v1/agent") {
    refusal = error_reply(make_error(404, "NOT_FOUND", "no WebSocket endpoint at " + std::string(path) +
                                                           " (the agent API is /v1/agent)"));
  } else if (auto who = auth_.authenticate(bearer(req)); !who) {
    refusal = error_reply(who.error());
  } else if (!may_use((*who)->role, endpoint::agent_ws)) {
    refusal = error_reply(forbidden(**who, endpoint::agent_ws));
  } else {
    return auth_.open() ? std::string() : (*who)->name;
  }
  return make(req, path == "/v1/agent" ? "/v1/agent" : "other", std::move(refusal), new_id('q'));
}

http_api::response http_api::unreadable(unsigned version, bool too_large) {
  request req{http::verb::unknown, "", version};
  req.keep_alive(false);
  http_reply r = error_reply(
      too_large ? make_error(413, "REQUEST_TOO_LARGE",
                             "the body is larger than " + std::to_string(config_.server.max_body_bytes) +
                                 " bytes (server.max_body_bytes)")
                : make_error(400, "BAD_REQUEST", "the request is not readable HTTP/1.1"));
  r.close = true;
  return make(req, "other", std::move(r), new_id('q'));
}

}  // namespace baton
