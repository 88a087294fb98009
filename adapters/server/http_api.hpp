// The HTTP side of `baton serve`: routes, the browser checks (Host, Origin, Content-Type), API
// keys and roles, per-key rate limits and per-address failure limits, gzip bodies, the request id
// on every response, and the count of every answer for /metrics. A request is admitted on its
// head alone (host, origin, route, method, key, role, rate, declared size), so nothing is read
// for a caller that would be refused. The WebSocket upgrade to /v1/agent is admitted here too;
// the listener and its sessions own the connections.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "adapters/runtime/agent_service.hpp"
#include "adapters/runtime/mcp_gateway.hpp"
#include "adapters/runtime/metrics.hpp"
#include "adapters/runtime/systemone_service.hpp"
#include "adapters/server/auth.hpp"

namespace baton {

class http_api {
 public:
  static constexpr std::size_t small_body_bytes = 64 * 1024;  // what a GET may carry; what a refusal drops

  using head = boost::beast::http::request_header<>;
  using request = boost::beast::http::request<boost::beast::http::string_body>;
  using response = boost::beast::http::response<boost::beast::http::string_body>;

  // One endpoint: what it answers, who may call it and how (http_api.cpp's route table).
  struct route;

  // A request whose head was admitted: its body may be read.
  struct ticket {
    std::string id;                 // x-typesafe-request-id
    const route* to = nullptr;      // what answers it
    std::string_view name;          // the route's path, for the metrics
    bool decide = false;            // a decision (POST /v1/systemone or /v1/decisions): its body is read whole
    bool mcp = false;               // /mcp: answered by handle_mcp(), its body (a POST's) read whole
    std::string escalation;         // the {id} of /v1/escalations/{id}[/resolve]
    const caller* who = nullptr;    // null for /health
    std::chrono::steady_clock::time_point received;  // when the head arrived: deadlines count from it
  };

  // An admitted WebSocket upgrade: its caller (for the key's sessions and rate) and request id.
  struct upgrade_ticket {
    const caller* who = nullptr;
    std::string owner;  // the key's name, scoping its sessions; empty without keys
    std::string id;
    bool review = false;      // /v1/review rather than /v1/agent
    std::string subprotocol;  // to answer with ("baton.review" when the browser offered it)
  };

  http_api(const server_config& config, authenticator& auth, metrics& m, systemone_service& systemone,
           agent_service& agents, mcp_gateway& gateway, std::function<metrics::scraped()> scrape);

  // Decides on a request's head. `content_length` is the declared body size (none: chunked);
  // `keep_alive` whether the client keeps the connection (the parser's reading of the head);
  // `from` the client's address, whose failed authentications are counted.
  std::variant<ticket, response> admit(const head& h, std::optional<std::uint64_t> content_length, bool keep_alive,
                                       const boost::asio::ip::address& from);

  // Answers an admitted request whose body has been read, through its route's handler. `done`
  // runs once, on `strand`: inline for what memory answers, later for a decision, a reload and
  // what the decision log answers.
  void handle(ticket t, request&& req, boost::asio::any_io_executor strand, std::function<void(response)> done);

  // Answers an admitted /mcp request whose body has been read, through the gateway, on `reply`
  // (which the session implements: one response, or an event stream).
  void handle_mcp(const ticket& t, request&& req, std::shared_ptr<mcp_reply> reply);
  // /mcp's answers as the session writes them: a whole one, with the Mcp-Session-Id it names (none
  // when empty), or an event stream's head (200, text/event-stream, chunked).
  response mcp_answer(const ticket& t, unsigned version, bool keep_alive, unsigned status, std::string body,
                      const std::string& session);
  boost::beast::http::response<boost::beast::http::empty_body> mcp_stream_head(const ticket& t, unsigned version,
                                                                              bool keep_alive);

  // Decides on a WebSocket upgrade's head, and checks the handshake itself, so that every
  // refusal has the one error body (Beast's would be plain text).
  std::variant<upgrade_ticket, response> upgrade(const head& h, bool keep_alive, const boost::asio::ip::address& from);

  // Takes one request from the caller's bucket (a WebSocket frame): how long to wait, when empty.
  std::optional<std::chrono::milliseconds> admit_frame(const caller& c) { return auth_.admit(c); }

  // The answer to a request that cannot be read (the connection closes after it): 413 for a body
  // over server.max_body_bytes, 431 for a head over the header limit, 400 for a malformed head,
  // 503 when the server's connection or buffer budget is spent, 500 INTERNAL when a handler of the
  // request threw (the sessions' last guard).
  enum class unreadable_reason { body_too_large, head_too_large, malformed, busy, internal };
  response unreadable(unsigned version, unreadable_reason why);

 private:
  static const route routes_[];
  // The route of `path`, and the escalation id it names; null for none.
  static const route* match(std::string_view path, std::string& escalation);

  response make(unsigned version, bool keep_alive, bool head_only, std::string_view route, http_reply&& r,
                const std::string& id);
  // The routes' handlers: each answers an admitted request once, through `done`, on `strand`.
  using reply = std::function<void(http_reply)>;
  void health(const ticket& t, request& req, boost::asio::any_io_executor strand, reply done);
  void models(const ticket& t, request& req, boost::asio::any_io_executor strand, reply done);
  void metrics_text(const ticket& t, request& req, boost::asio::any_io_executor strand, reply done);
  void tools(const ticket& t, request& req, boost::asio::any_io_executor strand, reply done);
  void reload(const ticket& t, request& req, boost::asio::any_io_executor strand, reply done);
  void list_escalations(const ticket& t, request& req, boost::asio::any_io_executor strand, reply done);
  void get_escalation(const ticket& t, request& req, boost::asio::any_io_executor strand, reply done);
  void resolve_escalation(const ticket& t, request& req, boost::asio::any_io_executor strand, reply done);
  void decide(const ticket& t, request& req, boost::asio::any_io_executor strand, reply done);
  // 403 HOST_REFUSED for a Host that does not name this server (DNS rebinding), 403
  // ORIGIN_REFUSED for an Origin that is neither the server's own nor allowed.
  std::optional<error> host_refusal(const head& h) const;
  std::optional<error> origin_refusal(const head& h) const;

  const server_config& config_;
  authenticator& auth_;
  metrics& metrics_;
  systemone_service& systemone_;
  agent_service& agents_;
  mcp_gateway& gateway_;
  std::function<metrics::scraped()> scrape_;
  std::optional<boost::asio::ip::address> listen_address_;  // server.host when it is an address
};

}  // namespace baton
