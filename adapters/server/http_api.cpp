#include "adapters/server/http_api.hpp"

#include <boost/algorithm/string/case_conv.hpp>
#include <boost/asio/post.hpp>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <charconv>

#include "adapters/server/inbox_assets.hpp"
#include "core/error_codes.hpp"
#include "core/ids.hpp"

namespace baton {

namespace http = boost::beast::http;

namespace {

// A header value or path as an error message quotes it: printable ASCII only (the JSON answer stays
// valid UTF-8 whatever bytes were sent) and at most 200 of them.
std::string quoted(std::string_view v) {
  constexpr std::size_t most = 200;
  std::string out;
  out.reserve(std::min(v.size(), most + 3));
  for (const char c : v.substr(0, most)) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  if (v.size() > most) out += "...";
  return out;
}

// A query parameter's value (no decoding: the values read here are plain words and numbers).
std::string_view query_param(std::string_view target, std::string_view name) {
  const auto q = target.find('?');
  if (q == std::string_view::npos) return {};
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    const auto amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    const auto eq = pair.find('=');
    if (pair.substr(0, eq) == name) return eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
    if (amp == std::string_view::npos) break;
    rest.remove_prefix(amp + 1);
  }
  return {};
}

// The body of a `Content-Encoding: gzip` request, inflated to at most `limit` bytes (413 beyond).
result<std::string> gunzip(std::string_view in, std::size_t limit) {
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return make_error(500, codes::internal, "zlib could not start");
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
    return make_error(413, codes::request_too_large, "the gzip body inflates to more than " + std::to_string(limit) +
                                                    " bytes (server.max_body_bytes)");
  }
  if (!ended) return make_error(400, codes::invalid_json, "the body is not valid gzip (Content-Encoding: gzip)");
  return out;
}

std::string_view path_of(std::string_view target) { return target.substr(0, target.find('?')); }

// GET /v1/tools: the registry's tools and their parameters, for a reviewer's edited arguments.
protocol::tools_list tools_list_of(const routing_snapshot& routing) {
  protocol::tools_list list;
  for (const tools::tool& t : routing.registry.tools) {
    protocol::tool_entry& entry = list.tools.emplace_back();
    entry.id = t.id;
    entry.description = t.description;
    entry.risk = tools::to_string(t.risk);
    entry.executor = executor_kind(routing, t.id);
    for (const tools::parameter& p : t.parameters) {
      protocol::tool_parameter& param = entry.parameters.emplace_back();
      param.name = p.name;
      param.type = tools::to_string(p.type);
      param.instructions = p.instructions;
      for (const auto& [label, description] : p.values.items()) {
        param.values.push_back({label, description.get<std::string>()});
      }
      param.fixed = p.value;
    }
  }
  list.finish = routing.registry.finish;
  list.registry_hash = routing.registry.hash;
  return list;
}

// POST /v1/admin/reload's answer.
std::string reload_json(const routing_reloader::report& r) {
  const json body = {{"id", r.id},
                     {"old", {{"registry_hash", r.old_registry_hash}, {"policy_hash", r.old_policy_hash}}},
                     {"new", {{"registry_hash", r.new_registry_hash}, {"policy_hash", r.new_policy_hash}}},
                     {"escalations_resolved", r.escalations_resolved}};
  return render_json(body, false);
}

std::string_view bearer(const http_api::head& h) {
  const auto it = h.find(http::field::authorization);
  return it == h.end() ? std::string_view() : std::string_view(it->value());
}

bool all_digits(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The host a Host header value names, in lower case, without its port, an IPv6 address's
// brackets or a final dot; none when the value is not host[:port].
std::optional<std::string> host_of(std::string_view v) {
  std::string_view host = v;
  std::string_view port;
  if (v.starts_with('[')) {
    const auto close = v.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    host = v.substr(1, close - 1);
    port = v.substr(close + 1);
  } else if (const auto colon = v.find(':'); colon != std::string_view::npos) {
    host = v.substr(0, colon);
    port = v.substr(colon);
  }
  if (!port.empty() && (port.front() != ':' || !all_digits(port.substr(1)))) return std::nullopt;
  if (host.ends_with('.')) host.remove_suffix(1);
  if (host.empty()) return std::nullopt;
  return boost::algorithm::to_lower_copy(std::string(host));
}

// Whether a request declares a JSON body (`application/json`, with or without parameters).
bool declares_json(const http_api::head& h) {
  const auto it = h.find(http::field::content_type);
  if (it == h.end()) return false;
  std::string_view type = it->value();
  type = type.substr(0, type.find(';'));
  while (!type.empty() && (type.back() == ' ' || type.back() == '\t')) type.remove_suffix(1);
  while (!type.empty() && (type.front() == ' ' || type.front() == '\t')) type.remove_prefix(1);
  return boost::beast::iequals(type, "application/json");
}

// What Beast's accept would refuse with a plain-text body (RFC 6455 §4.2.1), refused here with
// the one error body instead.
std::optional<http_reply> handshake_refusal(const http_api::head& h) {
  if (h.find(http::field::host) == h.end()) {
    return error_reply(make_error(400, codes::invalid_handshake, "a WebSocket upgrade needs a Host header"));
  }
  // 16 bytes in base64: 22 characters of the alphabet, then "==".
  const auto key = h.find(http::field::sec_websocket_key);
  const std::string_view k = key == h.end() ? std::string_view() : std::string_view(key->value());
  if (k.size() != 24 || !k.ends_with("==") || !std::all_of(k.begin(), k.end() - 2, [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '/';
      })) {
    return error_reply(make_error(400, codes::invalid_handshake,
                                  "Sec-WebSocket-Key must be 16 random bytes in base64 (RFC 6455 §4.1)"));
  }
  const auto version = h.find(http::field::sec_websocket_version);
  if (version == h.end() || version->value() != "13") {
    http_reply r = error_reply(make_error(426, codes::unsupported_websocket_version,
                                          "the server speaks WebSocket version 13 (Sec-WebSocket-Version)"));
    r.headers.emplace_back("Sec-WebSocket-Version", "13");
    return r;
  }
  return std::nullopt;
}

}  // namespace

// One endpoint. Adding one is a row here and its handler: admit() (the method, the role, the body's
// size), handle() and upgrade() read the row, and /metrics counts it under its path. Anything else
// is counted as "other", so that a scan of random paths cannot grow the metrics without bound.
struct http_api::route {
  enum class kind {
    http,       // a request answered by `answer`; a body of at most small_body_bytes (dropped)
    decision,   // the same, its body a decision of up to server.max_body_bytes (refused while draining)
    websocket,  // only an upgrade (upgrade()); a plain request is 426
    mcp,        // the MCP gateway (handle_mcp): POST a JSON-RPC message of up to server.max_body_bytes, DELETE a session, GET (Last-Event-ID) a stream resumed
  };
  std::string_view path;  // "{id}": an escalation id (what new_id makes: letters, digits, dashes)
  http::verb method;      // GET routes answer HEAD too
  kind how;
  std::optional<endpoint> role;  // what the caller's role must may_use; none: open to everyone
  void (http_api::*answer)(const ticket&, request&, boost::asio::any_io_executor, reply);  // null for a websocket or mcp
};

using route_kind = http_api::route::kind;

const http_api::route http_api::routes_[] = {
    {"/v1/systemone", http::verb::post, route_kind::decision, endpoint::decide, &http_api::decide},
    {"/v1/decisions", http::verb::post, route_kind::decision, endpoint::decide, &http_api::decide},
    {"/v1/models", http::verb::get, route_kind::http, endpoint::models, &http_api::models},
    {"/health", http::verb::get, route_kind::http, std::nullopt, &http_api::health},
    {"/metrics", http::verb::get, route_kind::http, endpoint::metrics, &http_api::metrics_text},
    {"/v1/agent", http::verb::get, route_kind::websocket, endpoint::agent_ws, nullptr},
    {"/v1/review", http::verb::get, route_kind::websocket, endpoint::review_ws, nullptr},
    {"/mcp", http::verb::post, route_kind::mcp, endpoint::agent_ws, nullptr},
    {"/v1/escalations", http::verb::get, route_kind::http, endpoint::escalations, &http_api::list_escalations},
    {"/v1/tools", http::verb::get, route_kind::http, endpoint::escalations, &http_api::tools},
    {"/v1/admin/reload", http::verb::post, route_kind::http, endpoint::admin, &http_api::reload},
    {"/v1/escalations/{id}", http::verb::get, route_kind::http, endpoint::escalations, &http_api::get_escalation},
    {"/v1/escalations/{id}/resolve", http::verb::post, route_kind::http, endpoint::resolve, &http_api::resolve_escalation},
};

namespace {

bool valid_id(std::string_view id) {
  return !id.empty() && id.size() <= 64 &&
         std::all_of(id.begin(), id.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-'; });
}

}  // namespace

const http_api::route* http_api::match(std::string_view path, std::string& escalation) {
  for (const route& r : routes_) {
    const auto hole = r.path.find("{id}");
    if (hole == std::string_view::npos) {
      if (r.path == path) return &r;
      continue;
    }
    const std::string_view before = r.path.substr(0, hole), after = r.path.substr(hole + 4);
    if (path.size() < before.size() + after.size() || !path.starts_with(before) || !path.ends_with(after)) continue;
    const std::string_view id = path.substr(before.size(), path.size() - before.size() - after.size());
    if (!valid_id(id)) continue;
    escalation = std::string(id);
    return &r;
  }
  return nullptr;
}

http_api::http_api(const server_config& config, authenticator& auth, metrics& m, systemone_service& systemone,
                   agent_service& agents, mcp_gateway& gateway, std::function<metrics::scraped()> scrape)
    : config_(config), auth_(auth), metrics_(m), systemone_(systemone), agents_(agents), gateway_(gateway),
      scrape_(std::move(scrape)) {
  boost::system::error_code ec;
  const auto listening = boost::asio::ip::make_address(config_.server.host, ec);
  if (!ec) listen_address_ = listening;
}

namespace {

// What every answer's head says: the server, its type, the request's id; and, since answers are
// about this moment and this caller, that none is cached or read as anything but its type.
template <class Body>
void stamp(http::response<Body>& res, const char* content_type, const std::string& id) {
  res.set(http::field::server, "baton");
  res.set(http::field::content_type, content_type);
  res.set("x-typesafe-request-id", id);
  res.set("X-Request-Id", id);
  res.set(http::field::cache_control, "no-store");
  res.set("X-Content-Type-Options", "nosniff");
}

}  // namespace

http_api::response http_api::make(unsigned version, bool keep_alive, bool head_only, std::string_view route_name,
                                  http_reply&& r, const std::string& id) {
  metrics_.request(route_name, r.status);
  response res{static_cast<http::status>(r.status), version};
  stamp(res, "application/json", id);
  for (auto& [k, v] : r.headers) res.set(k, v);
  // A stopping server closes each connection after its answer.
  res.keep_alive(keep_alive && !r.close && !systemone_.draining());
  res.body() = std::move(r.body);
  res.prepare_payload();
  if (head_only) res.body().clear();  // Content-Length stays; a HEAD answer has no body
  return res;
}

std::optional<error> http_api::host_refusal(const head& h) const {
  // Two could name two servers, and checks that read one would pass the other (RFC 9112 §3.2).
  if (h.count(http::field::host) > 1) return make_error(400, codes::bad_request, "the request has more than one Host header");
  const auto it = h.find(http::field::host);
  if (it == h.end()) return std::nullopt;  // browsers always send one: only HTTP/1.0 tools do not
  if (const auto host = host_of(it->value())) {
    if (*host == "localhost" || host->ends_with(".localhost")) return std::nullopt;
    const std::string& listen = config_.server.host;
    if (boost::beast::iequals(*host, listen)) return std::nullopt;
    boost::system::error_code ec;
    const auto address = boost::asio::ip::make_address(*host, ec);
    // An address cannot be rebound: it names this server when the server listens on it (on
    // every address, for 0.0.0.0 or ::).
    if (!ec && (address.is_loopback() ||
                (listen_address_ && (listen_address_->is_unspecified() || *listen_address_ == address)))) {
      return std::nullopt;
    }
    const auto& allowed = config_.server.allowed_hosts;
    if (std::find(allowed.begin(), allowed.end(), *host) != allowed.end()) return std::nullopt;
  }
  return make_error(403, codes::host_refused, "Host `" + quoted(it->value()) +
                                             "` does not name this server; list it in server.allowed_hosts");
}

std::optional<error> http_api::origin_refusal(const head& h) const {
  // A browser sends one (RFC 6454 §7.3); with two, the one checked might not be the one that counts.
  if (h.count(http::field::origin) > 1) return make_error(400, codes::bad_request, "the request has more than one Origin header");
  const auto it = h.find(http::field::origin);
  if (it == h.end()) return std::nullopt;  // not a browser's request (curl, the SDKs, agents)
  const std::string origin = boost::algorithm::to_lower_copy(std::string(it->value()));
  const auto& allowed = config_.server.allowed_origins;
  if (std::find(allowed.begin(), allowed.end(), origin) != allowed.end()) return std::nullopt;
  // The server's own pages: the origin names the authority the request was sent to.
  if (const auto host = h.find(http::field::host); host != h.end()) {
    for (const std::string_view scheme : {"http://", "https://"}) {
      if (origin.starts_with(scheme) && boost::beast::iequals(std::string_view(origin).substr(scheme.size()), host->value())) {
        return std::nullopt;
      }
    }
  }
  return make_error(403, codes::origin_refused, "Origin `" + quoted(it->value()) +
                                               "` is not this server's own; list it in server.allowed_origins");
}

std::variant<http_api::ticket, http_api::response> http_api::admit(const head& h,
                                                                  std::optional<std::uint64_t> content_length,
                                                                  bool keep_alive, const boost::asio::ip::address& from) {
  const std::string_view path = path_of(h.target());
  ticket t;
  const route* found = match(path, t.escalation);
  t.received = std::chrono::steady_clock::now();
  t.to = found;
  t.decide = found && found->how == route::kind::decision;
  t.mcp = found && found->how == route::kind::mcp;
  t.id = new_id(t.decide ? 'd' : 'q');
  t.name = found ? found->path : "other";
  auto refuse = [&](http_reply r) {
    return make(h.version(), keep_alive, h.method() == http::verb::head, t.name, std::move(r), t.id);
  };

  const inbox_asset* a = find_inbox_asset(path);
  if (a) t.name = "/inbox";
  // A name that is not this server's is a DNS rebinding: a page of another site, which the
  // browser now sends here.
  if (auto e = host_refusal(h)) return refuse(error_reply(*e));
  // The inbox page is static and open: what it shows comes from the API, which needs a key.
  if (a) {
    if (h.method() != http::verb::get && h.method() != http::verb::head) {
      http_reply r = error_reply(make_error(405, codes::method_not_allowed, quoted(path) + " answers GET"));
      r.headers.emplace_back("Allow", "GET, HEAD");
      return refuse(std::move(r));
    }
    return refuse(http_reply{200,
                             std::string(a->body),
                             {{"Content-Type", std::string(a->content_type)},
                              {"Cache-Control", "no-cache"},
                              {"X-Content-Type-Options", "nosniff"},
                              {"Content-Security-Policy",
                               "default-src 'self'; connect-src 'self'; frame-ancestors 'none'"}},
                             false});
  }
  // A page of another site may send requests here (a form, fetch in no-cors mode) without
  // reading the answers: none is acted on.
  if (auto e = origin_refusal(h)) return refuse(error_reply(*e));
  if (!found) return refuse(error_reply(make_error(404, codes::not_found, "no endpoint at " + quoted(path))));
  const bool get_like = found->method == http::verb::get;
  // /mcp offers no stream of its own: the answers to a POST carry all it sends, and a GET only
  // resumes one of them (Last-Event-ID).
  const bool resumes = h.method() == http::verb::get && h.find("Last-Event-ID") != h.end();
  if (t.mcp && h.method() != http::verb::post && h.method() != http::verb::delete_ && !resumes) {
    http_reply r = error_reply(make_error(405, codes::method_not_allowed, quoted(path) + " answers POST and DELETE, and GET with Last-Event-ID"));
    r.headers.emplace_back("Allow", "POST, DELETE, GET");
    return refuse(std::move(r));
  }
  if (!t.mcp && h.method() != found->method && !(get_like && h.method() == http::verb::head)) {
    http_reply r = error_reply(make_error(405, codes::method_not_allowed,
                                          quoted(path) + " answers " + std::string(http::to_string(found->method))));
    r.headers.emplace_back("Allow", get_like ? "GET, HEAD" : "POST");
    return refuse(std::move(r));
  }
  // Only a decision (or an MCP message) has a body worth reading; the others may carry a small one, which is dropped.
  if (!t.decide && !t.mcp && content_length && *content_length > http_api::small_body_bytes) {
    return refuse(error_reply(make_error(413, codes::request_too_large, quoted(path) + " reads at most " +
                                                                      std::to_string(http_api::small_body_bytes) +
                                                                      " bytes of body")));
  }
  if (!found->role) return t;
  if (found->how == route::kind::websocket) {
    return refuse(error_reply(make_error(426, codes::upgrade_required, quoted(path) + " is a WebSocket endpoint")));
  }
  // An address that keeps sending wrong keys waits, whatever key it sends now: answering a right
  // one would tell a guesser which guess was right.
  if (const auto wait = auth_.failure_wait(from)) return refuse(error_reply(too_many_failures(*wait), *wait));
  auto who = auth_.authenticate(bearer(h), from);
  if (!who) return refuse(error_reply(who.error()));
  t.who = *who;
  if (!may_use(t.who->role, *found->role)) return refuse(error_reply(forbidden(*t.who, *found->role)));
  // A form or a no-cors fetch cannot send this type: with it, a browser asks first (CORS).
  if (h.method() == http::verb::post && !declares_json(h)) {
    return refuse(error_reply(make_error(415, codes::unsupported_media_type,
                                         quoted(path) + " reads JSON: send `Content-Type: application/json`")));
  }
  if (const auto wait = auth_.admit(*t.who)) {
    return refuse(error_reply(rate_limited(*t.who, *wait), *wait));
  }
  if (content_length && *content_length > config_.server.max_body_bytes) {
    return refuse(error_reply(make_error(413, codes::request_too_large,
                                         "a body of " + std::to_string(*content_length) + " bytes; the limit is " +
                                             std::to_string(config_.server.max_body_bytes) + " (server.max_body_bytes)")));
  }
  // A stream resumed while baton stops may still fetch the answer it lost (SHUTTING_DOWN, say).
  if ((t.decide || (t.mcp && !resumes)) && systemone_.draining()) {
    return refuse(error_reply(make_error(503, codes::shutting_down, "the server is shutting down")));
  }
  return t;
}

void http_api::handle(ticket t, request&& req, boost::asio::any_io_executor strand, std::function<void(response)> done) {
  const route& r = *t.to;
  auto answer = [this, version = req.version(), keep_alive = req.keep_alive(), head_only = req.method() == http::verb::head,
                 name = t.name, id = t.id, done = std::move(done)](http_reply reply) {
    done(make(version, keep_alive, head_only, name, std::move(reply), id));
  };
  (this->*r.answer)(t, req, std::move(strand), std::move(answer));
}

void http_api::handle_mcp(const ticket& t, request&& req, std::shared_ptr<mcp_reply> reply) {
  const std::string owner = auth_.open() ? std::string() : t.who->name;
  auto header = [&req](std::string_view name) {
    const auto it = req.find(name);
    return it == req.end() ? std::string() : std::string(it->value());
  };
  if (req.method() == http::verb::delete_) return gateway_.remove(header("Mcp-Session-Id"), owner, std::move(reply));
  // An event stream goes in chunks, which HTTP/1.0 has not.
  const bool chunks = req.version() >= 11;
  if (req.method() == http::verb::get) {
    return gateway_.resume(header("Mcp-Session-Id"), owner, header("Last-Event-ID"), chunks, std::move(reply));
  }
  mcp_post p;
  p.body = std::move(req.body());
  p.session = header("Mcp-Session-Id");
  p.protocol = header("MCP-Protocol-Version");
  // A client that does not list text/event-stream gets one JSON answer, without progress.
  const std::string accept = header("Accept");
  p.streams = chunks && (accept.empty() || accept.find("text/event-stream") != std::string::npos ||
                                       accept.find("*/*") != std::string::npos);
  p.owner = owner;
  p.caller = t.who->name;
  gateway_.post(std::move(p), std::move(reply));
}

http_api::response http_api::mcp_answer(const ticket& t, unsigned version, bool keep_alive, unsigned status, std::string body,
                                        const std::string& session) {
  http_reply r{static_cast<int>(status), std::move(body), {}, false};
  if (!session.empty()) r.headers.emplace_back("Mcp-Session-Id", session);
  return make(version, keep_alive, false, t.name, std::move(r), t.id);
}

http::response<http::empty_body> http_api::mcp_stream_head(const ticket& t, unsigned version, bool keep_alive) {
  metrics_.request(t.name, 200);
  http::response<http::empty_body> res{http::status::ok, version};
  stamp(res, "text/event-stream", t.id);
  res.keep_alive(keep_alive && !systemone_.draining());
  res.chunked(true);
  return res;
}

void http_api::health(const ticket&, request&, boost::asio::any_io_executor, reply done) {
  done(http_reply{200, agents_.health_json(), {}, false});
}

void http_api::models(const ticket&, request&, boost::asio::any_io_executor, reply done) {
  done(http_reply{200, systemone_.models_json(), {}, false});
}

void http_api::metrics_text(const ticket&, request&, boost::asio::any_io_executor, reply done) {
  done(http_reply{200, metrics_.render(scrape_()), {{"Content-Type", "text/plain; version=0.0.4; charset=utf-8"}}, false});
}

void http_api::tools(const ticket&, request&, boost::asio::any_io_executor, reply done) {
  done(http_reply{200, protocol::render(tools_list_of(*agents_.routing())), {}, false});
}

namespace {

// An answer that another thread gives (a reload, a read of the log, a durable resolution), put
// back on the connection's strand: the value's body as a 200, an error as its error body.
template <class T, class Body>
std::function<void(result<T>)> on_strand(boost::asio::any_io_executor strand, std::function<void(http_reply)> done, Body body) {
  return [strand = std::move(strand), done = std::move(done), body](result<T> r) {
    boost::asio::post(strand, [r = std::move(r), done, body]() mutable {
      done(r ? http_reply{200, body(std::move(*r)), {}, false} : error_reply(r.error()));
    });
  };
}

std::string as_is(std::string body) { return body; }

}  // namespace

void http_api::reload(const ticket& t, request&, boost::asio::any_io_executor strand, reply done) {
  // Answered once the reload is applied (or refused).
  agents_.reloader().reload(t.who->name, on_strand<routing_reloader::report>(std::move(strand), std::move(done), reload_json));
}

void http_api::list_escalations(const ticket&, request& req, boost::asio::any_io_executor strand, reply done) {
  const std::string_view status = query_param(req.target(), "status");
  const std::string_view limit_text = query_param(req.target(), "limit");
  std::size_t limit = 100;
  if (!limit_text.empty()) {
    const auto [end, ec] = std::from_chars(limit_text.data(), limit_text.data() + limit_text.size(), limit);
    if (ec != std::errc() || end != limit_text.data() + limit_text.size() || limit < 1 || limit > 1000) {
      done(error_reply(make_error(422, codes::invalid_request, "limit must be a whole number from 1 to 1000")));
      return;
    }
  }
  agents_.escalations().list(status.empty() ? "pending" : status, limit, on_strand<std::string>(std::move(strand), std::move(done), as_is));
}

void http_api::get_escalation(const ticket& t, request&, boost::asio::any_io_executor strand, reply done) {
  agents_.escalations().get(t.escalation, on_strand<std::string>(std::move(strand), std::move(done), as_is));
}

void http_api::resolve_escalation(const ticket& t, request& req, boost::asio::any_io_executor strand, reply done) {
  // Answered once the resolution is durable.
  agents_.desk().resolve_body(
      t.escalation, req.body(), t.who->name,
      on_strand<protocol::resolution_object>(std::move(strand), std::move(done),
                                             [](const protocol::resolution_object& r) { return protocol::render(r); }));
}

void http_api::decide(const ticket& t, request& req, boost::asio::any_io_executor strand, reply done) {
  std::string body = std::move(req.body());
  if (const auto enc = req.find(http::field::content_encoding); enc != req.end()) {
    const std::string_view coding = enc->value();
    if (boost::beast::iequals(coding, "gzip") || boost::beast::iequals(coding, "x-gzip")) {
      auto inflated = gunzip(body, config_.server.max_body_bytes);
      if (!inflated) return done(error_reply(inflated.error()));
      body = std::move(*inflated);
    } else if (!boost::beast::iequals(coding, "identity")) {
      return done(error_reply(make_error(415, codes::unsupported_media_type,
                                         "Content-Encoding " + quoted(coding) + ": only gzip and identity are read")));
    }
  }
  systemone_.decide(t.id, t.who->name, std::move(body), t.received, std::move(strand), std::move(done));
}

std::variant<http_api::upgrade_ticket, http_api::response> http_api::upgrade(const head& h, bool keep_alive,
                                                                            const boost::asio::ip::address& from) {
  const std::string_view path = path_of(h.target());
  const std::string id = new_id('q');
  std::string unused;
  const route* found = match(path, unused);
  if (found && found->how != route::kind::websocket) found = nullptr;
  const bool review = found && *found->role == endpoint::review_ws;
  const std::string_view name = found ? found->path : "other";
  // A browser cannot set headers on a WebSocket: the inbox offers its key as a subprotocol,
  // `bearer.KEY`, beside `baton.review`, which the answer then names.
  std::string authorization(bearer(h));
  std::string subprotocol;
  if (const auto offered = h.find(http::field::sec_websocket_protocol); review && offered != h.end()) {
    std::string_view list = offered->value();
    while (!list.empty()) {
      const auto comma = list.find(',');
      std::string_view item = list.substr(0, comma);
      while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
      while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
      if (item == "baton.review") subprotocol = item;
      if (item.starts_with("bearer.") && authorization.empty()) authorization = "Bearer " + std::string(item.substr(7));
      if (comma == std::string_view::npos) break;
      list.remove_prefix(comma + 1);
    }
  }
  http_reply refusal;
  if (auto host = host_refusal(h)) {
    refusal = error_reply(*host);
  } else if (auto origin = origin_refusal(h)) {
    refusal = error_reply(*origin);
  } else if (!found) {
    refusal = error_reply(make_error(404, codes::not_found, "no WebSocket endpoint at " + quoted(path) +
                                                           " (the agent API is /v1/agent, reviewers' /v1/review)"));
  } else if (auto bad = handshake_refusal(h)) {
    refusal = std::move(*bad);
  } else if (const auto failed = auth_.failure_wait(from)) {
    refusal = error_reply(too_many_failures(*failed), *failed);
  } else if (auto who = auth_.authenticate(authorization, from); !who) {
    refusal = error_reply(who.error());
  } else if (!may_use((*who)->role, *found->role)) {
    refusal = error_reply(forbidden(**who, *found->role));
  } else if (const auto wait = auth_.admit(**who)) {
    refusal = error_reply(rate_limited(**who, *wait), *wait);
  } else if (systemone_.draining()) {
    refusal = error_reply(make_error(503, codes::shutting_down, "the server is shutting down"));
  } else {
    metrics_.request(name, 101);
    return upgrade_ticket{*who, auth_.open() ? std::string() : (*who)->name, id, review, std::move(subprotocol)};
  }
  return make(h.version(), keep_alive, false, name, std::move(refusal), id);
}

http_api::response http_api::unreadable(unsigned version, unreadable_reason why) {
  error e;
  switch (why) {
    case unreadable_reason::body_too_large:
      e = make_error(413, codes::request_too_large, "the body is larger than " + std::to_string(config_.server.max_body_bytes) +
                                                   " bytes (server.max_body_bytes)");
      break;
    case unreadable_reason::head_too_large:
      e = make_error(431, codes::headers_too_large, "the request's head is larger than the server reads");
      break;
    case unreadable_reason::malformed:
      e = make_error(400, codes::bad_request, "the request is not readable HTTP/1.1");
      break;
    case unreadable_reason::busy:
      e = make_error(503, codes::server_busy, "the server holds as many connections or request bytes as it may; retry later");
      break;
    case unreadable_reason::internal:
      e = make_error(500, codes::internal, "the server failed on this request (logged); the connection closes");
      break;
  }
  return make(version, false, false, "other", error_reply(e), new_id('q'));
}

}  // namespace baton
