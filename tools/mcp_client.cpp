#include "tools/mcp_client.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <atomic>
#include <deque>
#include <iterator>
#include <map>
#include <mutex>

#include "core/error_codes.hpp"
#include "core/http_client.hpp"
#include "core/ids.hpp"
#include "tools/child_process.hpp"
#include "tools/executor_kinds.hpp"

namespace baton::tools {

namespace net = boost::asio;
using boost::system::error_code;

const std::vector<std::string>& mcp_protocol_versions() {
  static const std::vector<std::string> versions = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};
  return versions;
}

namespace {

constexpr std::size_t stderr_tail_bytes = 1024;
constexpr int max_list_pages = 1000;

// A server's JSON read without trusting its types: the string, bool or object at `key`, else `or_`.
std::string text_at(const json& j, const char* key, std::string or_ = {}) {
  if (!j.is_object()) return or_;
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : or_;
}
bool flag_at(const json& j, const char* key, bool or_) {
  if (!j.is_object()) return or_;
  const auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : or_;
}
// `value` with each ${NAME} replaced by that environment variable; none, with `missing` set, when
// one is not set.
std::optional<std::string> expand_env(std::string_view value, std::string& missing) {
  std::string out;
  while (true) {
    const auto open = value.find("${");
    const auto close = open == std::string_view::npos ? open : value.find('}', open);
    if (close == std::string_view::npos) break;
    out.append(value.substr(0, open));
    const std::string name(value.substr(open + 2, close - open - 2));
    const char* v = std::getenv(name.c_str());
    if (!v) {
      missing = name;
      return std::nullopt;
    }
    out.append(v);
    value.remove_prefix(close + 1);
  }
  out.append(value);
  return out;
}

json object_at(const json& j, const char* key) {
  if (!j.is_object()) return json::object();
  const auto it = j.find(key);
  return it != j.end() && it->is_object() ? *it : json::object();
}

}  // namespace

struct mcp_client::impl : std::enable_shared_from_this<mcp_client::impl> {
  // What an answer to a request goes to: the result, or a failure.
  using answer = std::function<void(json result, std::optional<mcp_failure> failure)>;
  struct pending {
    answer done;
    std::shared_ptr<net::steady_timer> timer;
    const char* error_code = codes::executor_unreachable;  // what a JSON-RPC error answer becomes
    std::function<void(json)> progress;                     // its notifications/progress (its id the token)
  };

  impl(mcp_server_config c, net::any_io_executor io, const executor_limits& limits)
      : config(std::move(c)),
        strand(net::make_strand(io)),
        out(strand),
        err(strand),
        exit(strand),
        grace(strand),
        max_line(limits.max_output_bytes),
        withheld(limits.withheld_env) {
    if (config.url.empty()) return;
    url = parse_http_url(config.url, url_error, true);
    if (url && url->tls) {
      auto context = http_client::tls_context({});
      if (context) {
        tls.emplace(std::move(*context));
      } else {
        url.reset();
        url_error = "no TLS: " + context.error().message();
      }
    }
  }

  ~impl() { detail::kill_and_reap(running ? pid : -1); }

  mcp_server_config config;
  net::strand<net::any_io_executor> strand;
  // stdin's socket, one per process: a write still under way for an earlier one goes on (and
  // fails) on that one's socket, never on the next process's.
  std::shared_ptr<net::local::stream_protocol::socket> in;
  net::posix::stream_descriptor out, err, exit;
  net::steady_timer grace;
  std::size_t max_line;
  std::vector<std::string> withheld;

  pid_t pid = -1;
  // Bumped by each spawn and shut: a handler of an earlier process finds it changed and does nothing.
  std::uint64_t generation = 0;
  // The process exited (reaped) and why: what is open fails once its stdout is read to the end.
  std::optional<std::string> exited;
  bool out_closed = false;  // stdout reached its end (the exit may come just after)
  bool stdin_dead = false;  // a write failed: nothing more is sent to this process
  // Read by ready() from any thread; written on the strand.
  std::atomic<bool> running{false}, initialized{false};
  std::string version;
  std::atomic<std::size_t> skipped{0};
  std::atomic<std::uint64_t> starts{0}, failed_starts{0};
  mutable std::mutex error_mutex;
  std::string last_error;  // under error_mutex
  void note_error(const std::string& e) {
    std::lock_guard lock(error_mutex);
    last_error = e;
  }
  // Starts asked for while one is under way (none: no start is), answered with its outcome.
  std::vector<std::function<void(std::optional<mcp_failure>)>> waiting;
  std::int64_t next_id = 1;
  std::map<std::int64_t, pending> open;
  std::deque<std::shared_ptr<const std::string>> writes;
  // Streamable HTTP (config.url): the endpoint, TLS for https, the headers as sent (their ${VAR}s
  // read when the connection starts), and the session the server gave at initialize.
  std::optional<http_url> url;
  std::string url_error;
  std::optional<net::ssl::context> tls;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string session;
  // The standalone GET stream's connection while one is open (the server's notifications come on
  // it): shut() cancels it.
  http_client::connection* listening = nullptr;
  std::chrono::seconds listen_backoff{1};
  std::array<char, 65536> out_buf{};
  std::array<char, 4096> err_buf{};
  std::string line, err_tail;
  std::function<void()> tools_changed;

  std::string name() const { return "MCP server `" + config.name + "`"; }

  // ---- the child ----

  // An HTTP server needs no process: starting is reading the headers; initialize does the rest.
  std::optional<mcp_failure> connect_http() {
    if (!url) return mcp_failure{codes::executor_spawn_failed, name() + ": bad url: " + url_error};
    headers.clear();
    for (const auto& [key, value] : config.headers) {
      std::string missing;
      auto expanded = expand_env(value, missing);
      if (!expanded) {
        return mcp_failure{codes::executor_spawn_failed, name() + ": header `" + key + "` names ${" + missing +
                                                          "}, which baton's environment does not set"};
      }
      headers.emplace_back(key, std::move(*expanded));
    }
    ++generation;
    running = true;
    exited.reset();
    session.clear();
    return std::nullopt;
  }

  std::optional<mcp_failure> spawn() {
    if (!config.url.empty()) return connect_http();
    // What an exited process left (calls whose answers were still being read) ends first.
    if (exited || out.is_open()) shut(exited.value_or("was replaced"));
    detail::child_spec spec;
    spec.argv = config.argv;
    spec.env = config.env;
    spec.cwd = config.cwd;
    spec.withheld_env = withheld;
    detail::child_process child;
    std::string why;
    if (!detail::spawn_child(spec, child, why)) return mcp_failure{codes::executor_spawn_failed, name() + ": " + why};
    pid = child.pid;
    running = true;
    ++generation;
    exited.reset();
    out_closed = false;
    stdin_dead = false;
    line.clear();  // what a previous process left
    err_tail.clear();
    in = std::make_shared<net::local::stream_protocol::socket>(strand);
    if (const error_code ec = detail::adopt(child, exit, *in, out, err)) {
      shut("cannot watch the child: " + ec.message());
      return mcp_failure{codes::executor_spawn_failed, name() + ": cannot watch the child: " + ec.message()};
    }
    read_out();
    read_err();
    wait_exit();
    return std::nullopt;
  }

  void read_out() {
    out.async_read_some(net::buffer(out_buf), [self = shared_from_this(), g = generation](error_code ec, std::size_t n) {
      if (g != self->generation) return;
      self->take_bytes(std::string_view(self->out_buf.data(), n));
      if (g != self->generation) return;  // shut while taking them
      if (!ec) return self->read_out();
      // End of stdout: an exited process's answers are all in. Its exit is usually a moment behind;
      // a process still running a second later closed its stdout and is stopped.
      if (self->exited) return self->shut(*self->exited);
      self->out_closed = true;
      self->stop_soon("closed its stdout");
    });
  }

  void read_err() {
    err.async_read_some(net::buffer(err_buf), [self = shared_from_this(), g = generation](error_code ec, std::size_t n) {
      if (g != self->generation) return;
      self->err_tail.append(self->err_buf.data(), n);
      if (self->err_tail.size() > 2 * stderr_tail_bytes) self->err_tail.erase(0, self->err_tail.size() - stderr_tail_bytes);
      if (!ec) self->read_err();
    });
  }

  void wait_exit() {
    exit.async_wait(net::posix::stream_descriptor::wait_read, [self = shared_from_this(), g = generation](error_code ec) {
      if (ec || g != self->generation) return;
      // What the process started (an npx wrapper's node) goes with it, before it is reaped: until
      // then its group id cannot be anyone else's.
      ::kill(-self->pid, SIGKILL);
      int status = 0;
      const pid_t r = ::waitpid(self->pid, &status, WNOHANG);
      if (r == 0) return self->wait_exit();
      self->running = false;  // reaped (or lost to someone else's waitpid)
      self->initialized = false;
      self->exited = r > 0 && WIFEXITED(status)     ? "exited with status " + std::to_string(WEXITSTATUS(status))
                     : r > 0 && WIFSIGNALED(status) ? "was killed by signal " + std::to_string(WTERMSIG(status))
                                                    : "exited";
      // Its last answers may still be in the pipe: read_out shuts at the end of stdout, or, where
      // something outside its group still holds stdout, a second from now.
      if (self->out_closed) return self->shut(*self->exited);
      self->stop_soon(*self->exited);
    });
  }

  // Ends the server: every open request fails with `code` ("… `why`"), descriptors closed.
  void shut(const std::string& why, const char* code = codes::executor_unreachable) {
    ++generation;
    if (running) {
      detail::kill_and_reap(pid);
      running = false;
    }
    initialized = false;
    grace.cancel();
    if (listening) listening->cancel();
    error_code ignored;
    if (in) in->close(ignored);
    out.close(ignored);
    err.close(ignored);
    exit.close(ignored);
    writes.clear();
    std::string tail = err_tail;
    while (!tail.empty() && (tail.back() == '\n' || tail.back() == '\r')) tail.pop_back();
    if (tail.size() > stderr_tail_bytes) tail = "…" + tail.substr(tail.size() - stderr_tail_bytes);
    const std::string detail = name() + " " + why + (tail.empty() ? "" : "; stderr: " + replace_invalid_utf8(tail));
    if (why != "was stopped") note_error(detail);
    auto failed = std::move(open);
    open.clear();
    for (auto& [id, p] : failed) {
      if (p.timer) p.timer->cancel();
      p.done(json(), mcp_failure{code, detail});
    }
  }

  // ---- messages ----

  // `within`: how long an HTTP exchange may take (a request's timeout; what stdio ignores).
  void send(const json& message, std::chrono::milliseconds within = std::chrono::seconds(10)) {
    if (!running || stdin_dead) return;
    if (url) return post_http(message, within);
    writes.push_back(std::make_shared<const std::string>(message.dump(-1, ' ', false, json::error_handler_t::replace) + "\n"));
    if (writes.size() == 1) write_next();
  }

  // The message and the socket are the handler's own: shut may drop the queue and the socket.
  void write_next() {
    auto socket = in;
    auto message = writes.front();
    net::async_write(*socket, net::buffer(*message), [self = shared_from_this(), g = generation, socket, message](error_code ec, std::size_t) {
      if (g != self->generation) return;  // shut meanwhile (the queue went with it)
      self->writes.pop_front();
      if (!ec) {
        if (!self->writes.empty()) self->write_next();
        return;
      }
      // It stopped reading: usually it is exiting, and its last answers are still to be read, so
      // what is open fails through its exit (or in a second, if it goes on running).
      self->writes.clear();
      self->stdin_dead = true;
      self->stop_soon("stopped reading its stdin (" + ec.message() + ")");
    });
  }

  // The process is to end: in a second, unless its exit and stdout's end come first.
  void stop_soon(std::string why) {
    grace.expires_after(std::chrono::seconds(1));
    grace.async_wait([self = shared_from_this(), g = generation, why = std::move(why)](error_code e) {
      if (!e && g == self->generation) self->shut(self->exited.value_or(why));
    });
  }

  // A request with its own timer: `done` once, with the result, the error, or the timeout.
  // A tools/call's error answer is the tool's failure (invalid params, an unknown tool): the server
  // is reachable.
  // With `progress`, the request's id is its progressToken too.
  void request(const std::string& method, json params, std::chrono::milliseconds timeout, answer done,
               bool cancel_on_timeout = false, std::function<void(json)> progress = {}) {
    if (!running) {
      net::post(strand, [done = std::move(done), d = name() + " is not running"] {
        done(json(), mcp_failure{codes::executor_unreachable, d});
      });
      return;
    }
    const std::int64_t id = next_id++;
    auto timer = std::make_shared<net::steady_timer>(strand, timeout);
    if (progress) params["_meta"] = {{"progressToken", id}};
    open[id] = pending{std::move(done), timer, method == "tools/call" ? codes::executor_tool_error : codes::executor_unreachable,
                       std::move(progress)};
    send({{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", std::move(params)}}, timeout);
    timer->async_wait([self = shared_from_this(), id, method, timeout, cancel_on_timeout](error_code ec) {
      if (ec) return;
      const auto it = self->open.find(id);
      if (it == self->open.end()) return;
      auto done = std::move(it->second.done);
      self->open.erase(it);
      if (cancel_on_timeout) {
        self->send({{"jsonrpc", "2.0"},
                    {"method", "notifications/cancelled"},
                    {"params", {{"requestId", id}, {"reason", "baton's timeout"}}}});
      }
      done(json(), mcp_failure{codes::executor_timeout, self->name() + ": no answer to " + method + " within " +
                                                            std::to_string(timeout.count()) + " ms"});
    });
  }

  // ---- Streamable HTTP ----

  // Each message is a POST of its own, on a connection of its own; its answer comes as JSON or as
  // an event stream read to its end (the server ends it once it has answered).
  void post_http(const json& message, std::chrono::milliseconds within) {
    std::optional<std::int64_t> id;
    if (message.contains("method") && message.contains("id") && message["id"].is_number_integer()) id = message["id"].get<std::int64_t>();
    net::co_spawn(strand, exchange_http(generation, message.dump(-1, ' ', false, json::error_handler_t::replace), id, within),
                  net::detached);
  }

  // The request `id` (if it is one) fails, unless it was answered or the connection changed.
  void fail_open(std::uint64_t g, std::optional<std::int64_t> id, const char* code, const std::string& why) {
    if (g != generation || !id) return;
    const auto it = open.find(*id);
    if (it == open.end()) return;
    auto p = std::move(it->second);
    open.erase(it);
    if (p.timer) p.timer->cancel();
    note_error(name() + ": " + why);
    p.done(json(), mcp_failure{code, name() + ": " + why});
  }

  // `conn` connected to the server by `deadline`; else why not.
  net::awaitable<std::optional<std::string>> open_http(http_client::connection& conn, http_client::clock_type::time_point deadline) {
    auto endpoints = co_await http_client::resolve(url->host, url->port, deadline);
    if (!endpoints) co_return "cannot resolve " + url->host + ": " + endpoints.error().detail;
    if (auto c = co_await conn.connect(*endpoints, url->host, deadline); !c) {
      co_return "cannot connect to " + config.url + ": " + c.error().detail;
    }
    co_return std::nullopt;
  }

  // A request to the server with what every one carries: the session, the protocol version and
  // the configured headers.
  http_client::request request_http(boost::beast::http::verb verb, const char* accept) const {
    namespace http = boost::beast::http;
    http_client::request req = http_client::request_to(verb, *url);
    req.set(http::field::user_agent, "baton");
    req.set(http::field::accept, accept);
    if (!session.empty()) req.set("Mcp-Session-Id", session);
    if (!version.empty()) req.set("MCP-Protocol-Version", version);
    for (const auto& [key, value] : headers) req.set(key, value);
    return req;
  }

  net::awaitable<void> exchange_http(std::uint64_t g, std::string body, std::optional<std::int64_t> id,
                                     std::chrono::milliseconds within) {
    namespace http = boost::beast::http;
    const auto self = shared_from_this();
    const auto deadline = http_client::clock_type::now() + within + std::chrono::seconds(1);
    const char* unreachable = codes::executor_unreachable;
    http_client::connection conn(strand, tls ? &*tls : nullptr);
    if (auto why = co_await open_http(conn, deadline)) co_return fail_open(g, id, unreachable, *why);
    http_client::request req = request_http(http::verb::post, "application/json, text/event-stream");
    req.set(http::field::content_type, "application/json");
    req.body() = std::move(body);
    req.prepare_payload();
    auto res = co_await conn.exchange(req, max_line);
    if (g != generation) co_return;
    if (!res) {
      if (res.error().why == http_client::fault::too_large) {
        co_return shut("sent an answer over " + std::to_string(max_line) + " bytes", codes::executor_output_too_large);
      }
      co_return fail_open(g, id, unreachable, "POST " + config.url + " failed: " + res.error().detail);
    }
    const unsigned status = res->result_int();
    // A session the server no longer knows: the next call starts a new one.
    if (status == 404 && !session.empty()) co_return shut("forgot baton's session (HTTP 404)");
    if (status == 202) co_return;
    if (status < 200 || status > 299) {
      co_return fail_open(g, id, unreachable, "answered HTTP " + std::to_string(status) + " to a POST");
    }
    if (const auto s = res->find("Mcp-Session-Id"); s != res->end() && session.empty()) session = std::string(s->value());
    const auto type = res->find(http::field::content_type);
    if (type != res->end() && type->value().starts_with("text/event-stream")) {
      take_events(res->body());
    } else {
      take_message(res->body());
    }
    // A request the answer did not answer (an event stream that ended first) fails now, not at its timeout.
    fail_open(g, id, unreachable, "ended its answer without answering");
  }

  // The server's own stream (GET), opened once initialized, for what it sends unasked: a changed
  // tool list. A server that offers none (405, or another 4xx) is not asked again; when the stream
  // ends or fails it is asked again after a back-off (1 s doubling to 60 s; back to 1 s after a
  // stream that brought an event), while the connection lasts.
  net::awaitable<void> listen_http(std::uint64_t g) {
    const auto self = shared_from_this();
    const bool again = co_await listen_once(g);
    if (!again || g != generation || !initialized) co_return;
    auto timer = std::make_shared<net::steady_timer>(strand, listen_backoff);
    listen_backoff = std::min<std::chrono::seconds>(listen_backoff * 2, std::chrono::seconds(60));
    timer->async_wait([self, g, timer](error_code ec) {
      if (!ec && g == self->generation && self->initialized) net::co_spawn(self->strand, self->listen_http(g), net::detached);
    });
  }

  // One GET stream read to its end: false when the server offers none.
  net::awaitable<bool> listen_once(std::uint64_t g) {
    namespace http = boost::beast::http;
    http_client::connection conn(strand, tls ? &*tls : nullptr);
    // Cancellable by shut() from here on (a connect, the head, each read).
    listening = &conn;
    struct unlisten {
      impl& i;
      http_client::connection* c;
      ~unlisten() {
        if (i.listening == c) i.listening = nullptr;
      }
    } done{*this, &conn};
    const auto deadline = http_client::clock_type::now() + config.timeout;
    if (auto why = co_await open_http(conn, deadline); why || g != generation) co_return true;
    http_client::request req = request_http(http::verb::get, "text/event-stream");
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(boost::none);
    parser.eager(true);  // each read takes what has come, not one chunk at a time
    if (auto w = co_await conn.write(req); !w || g != generation) co_return true;
    if (auto h = co_await conn.read_header(parser); !h || g != generation) co_return true;
    const unsigned status = parser.get().result_int();
    if (status >= 400 && status < 500) co_return false;  // 405: the server offers no stream of its own
    const auto type = parser.get().find(http::field::content_type);
    if (status != 200 || type == parser.get().end() || !type->value().starts_with("text/event-stream")) co_return true;
    std::array<char, 16384> chunk{};
    std::string events;
    std::size_t scanned = 0;  // `events` up to here holds no blank line
    while (!parser.is_done()) {
      parser.get().body().data = chunk.data();
      parser.get().body().size = chunk.size();
      conn.expires_after(std::chrono::hours(24));  // a stream may be quiet for long
      const auto read = co_await conn.read_body_some(parser);
      if (g != generation || !read) co_return true;
      // New bytes only, without CRs (lines may end CRLF; JSON holds no raw CR).
      const std::size_t got = chunk.size() - parser.get().body().size;
      std::copy_if(chunk.data(), chunk.data() + got, std::back_inserter(events), [](char c) { return c != '\r'; });
      // Whole events only: up to the last blank line, looked for among the new bytes.
      std::size_t end = std::string::npos;
      for (auto at = events.find("\n\n", scanned); at != std::string::npos; at = events.find("\n\n", at + 1)) end = at;
      if (end != std::string::npos) {
        take_events(std::string_view(events).substr(0, end + 2));
        if (g != generation) co_return true;
        events.erase(0, end + 2);
        listen_backoff = std::chrono::seconds(1);
      }
      scanned = events.empty() ? 0 : events.size() - 1;
      if (events.size() > max_line) {
        note_error(name() + ": an event of its stream was over " + std::to_string(max_line) + " bytes");
        co_return true;
      }
    }
    co_return true;
  }

  // An event stream's messages: each event's data lines, joined.
  void take_events(std::string_view stream) {
    std::string data;
    for (const std::uint64_t g = generation; !stream.empty() && g == generation;) {
      const auto nl = stream.find('\n');
      std::string_view line = stream.substr(0, nl);
      stream.remove_prefix(nl == std::string_view::npos ? stream.size() : nl + 1);
      if (line.ends_with('\r')) line.remove_suffix(1);
      if (line.empty()) {
        if (!data.empty()) take_message(data);
        data.clear();
      } else if (line.starts_with("data:")) {
        line.remove_prefix(5);
        if (line.starts_with(' ')) line.remove_prefix(1);
        if (!data.empty()) data += '\n';
        data.append(line);
      }
    }
    if (!data.empty()) take_message(data);
  }

  void take_bytes(std::string_view bytes) {
    for (const std::uint64_t g = generation; !bytes.empty() && g == generation;) {
      const std::size_t nl = bytes.find('\n');
      const std::string_view part = bytes.substr(0, nl);
      line.append(part);
      if (line.size() > max_line) {
        line.clear();
        shut("sent a message over " + std::to_string(max_line) + " bytes; the server was stopped",
             codes::executor_output_too_large);
        return;
      }
      if (nl == std::string_view::npos) return;
      bytes.remove_prefix(nl + 1);
      std::string message = std::move(line);
      line.clear();
      if (!message.empty() && message.back() == '\r') message.pop_back();
      if (!message.empty()) take_message(message);
    }
  }

  // A request's progress, to whoever asked for it (a token of another's, or of none, is dropped).
  void take_progress(const json& params) {
    if (!params.is_object()) return;
    const auto token = params.find("progressToken");
    if (token == params.end() || !token->is_number_integer() || !params.contains("progress") || !params["progress"].is_number()) return;
    const auto it = open.find(token->get<std::int64_t>());
    if (it != open.end() && it->second.progress) it->second.progress(params);
  }

  void take_message(const std::string& text) {
    json m;
    json_parse_error bad;
    if (!parse_json(text, m, bad) || !m.is_object()) {  // nesting bounded: a hostile line cannot exhaust the stack
      ++skipped;
      return;
    }
    const auto id = m.find("id");
    const auto method = m.find("method");
    if (method != m.end() && method->is_string()) {
      if (id == m.end()) {  // a notification
        if (*method == "notifications/tools/list_changed" && tools_changed) tools_changed();
        if (*method == "notifications/progress") take_progress(m.value("params", json()));
        return;
      }
      // A request of the server's: ping is answered; baton offers no other capability.
      if (*method == "ping") {
        send({{"jsonrpc", "2.0"}, {"id", *id}, {"result", json::object()}});
      } else {
        send({{"jsonrpc", "2.0"}, {"id", *id}, {"error", {{"code", -32601}, {"message", "method not found"}}}});
      }
      return;
    }
    if (id == m.end() || !id->is_number_integer()) {
      ++skipped;
      return;
    }
    const auto it = open.find(id->get<std::int64_t>());
    if (it == open.end()) return;  // answered after its timeout
    auto p = std::move(it->second);
    open.erase(it);
    if (p.timer) p.timer->cancel();
    if (const auto e = m.find("error"); e != m.end()) {
      std::string message = text_at(*e, "message", "(no message)");
      if (e->is_object() && e->contains("code") && (*e)["code"].is_number_integer()) {
        message += " (JSON-RPC " + std::to_string((*e)["code"].get<std::int64_t>()) + ")";
      }
      return p.done(json(), mcp_failure{p.error_code, name() + " answered an error: " + replace_invalid_utf8(message.substr(0, 1000))});
    }
    p.done(object_at(m, "result"), std::nullopt);
  }

  // ---- the protocol ----

  void initialize(std::function<void(std::optional<mcp_failure>)> done) {
    json params = {{"protocolVersion", mcp_protocol_versions().front()},
                   {"capabilities", json::object()},
                   {"clientInfo", {{"name", "baton"}, {"version", "1"}}}};
    // Callbacks kept in `open` hold the client weakly: a stopped I/O context must not keep it alive.
    request("initialize", std::move(params), config.timeout,
            [weak = weak_from_this(), done = std::move(done)](json result, std::optional<mcp_failure> failure) {
              const auto self = weak.lock();
              if (!self) return done(mcp_failure{codes::executor_unreachable, "the MCP client was stopped"});
              if (failure) {
                self->shut("did not initialize");
                return done(failure);
              }
              const std::string v = text_at(result, "protocolVersion");
              const auto& known = mcp_protocol_versions();
              if (std::find(known.begin(), known.end(), v) == known.end()) {
                self->shut("answered protocol version `" + v + "`");
                return done(mcp_failure{codes::executor_unreachable, self->name() + " speaks protocol version `" + v +
                                                                       "`, which baton does not"});
              }
              self->version = v;
              self->initialized = true;
              self->send({{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}});
              if (self->url) net::co_spawn(self->strand, self->listen_http(self->generation), net::detached);
              done(std::nullopt);
            });
  }

  void list_page(std::shared_ptr<std::vector<mcp_tool_info>> tools, std::optional<std::string> cursor, int page,
                 std::function<void(std::vector<mcp_tool_info>, std::optional<mcp_failure>)> done) {
    json params = json::object();
    if (cursor) params["cursor"] = *cursor;
    request("tools/list", std::move(params), config.timeout,
            [weak = weak_from_this(), tools, page, done = std::move(done)](json result,
                                                                            std::optional<mcp_failure> failure) mutable {
              const auto self = weak.lock();
              if (!self) return done({}, mcp_failure{codes::executor_unreachable, "the MCP client was stopped"});
              if (failure) return done({}, failure);
              const auto list = result.find("tools");
              if (list == result.end() || !list->is_array()) {
                return done({}, mcp_failure{codes::executor_unreachable, self->name() + ": tools/list answered no `tools` array"});
              }
              for (const json& t : *list) {
                if (!t.is_object() || !t.contains("name") || !t["name"].is_string()) continue;
                mcp_tool_info info;
                info.name = t["name"].get<std::string>();
                info.title = text_at(t, "title", text_at(object_at(t, "annotations"), "title"));
                info.description = text_at(t, "description");
                info.input_schema = object_at(t, "inputSchema");
                info.annotations = object_at(t, "annotations");
                tools->push_back(std::move(info));
              }
              const auto next = result.find("nextCursor");
              if (next != result.end() && next->is_string() && !next->get<std::string>().empty()) {
                if (page + 1 >= max_list_pages) {
                  return done({}, mcp_failure{codes::executor_unreachable,
                                              self->name() + ": tools/list went on past " + std::to_string(max_list_pages) + " pages"});
                }
                return self->list_page(tools, next->get<std::string>(), page + 1, std::move(done));
              }
              done(std::move(*tools), std::nullopt);
            });
  }
};

mcp_client::mcp_client(std::shared_ptr<impl> state) : impl_(std::move(state)) {}

mcp_client::~mcp_client() {
  net::post(impl_->strand, [state = impl_] { state->shut("was stopped"); });
}

std::shared_ptr<mcp_client> mcp_client::make(mcp_server_config config, net::any_io_executor io,
                                             const executor_limits& limits) {
  return std::shared_ptr<mcp_client>(new mcp_client(std::make_shared<impl>(std::move(config), std::move(io), limits)));
}

void mcp_client::start(std::function<void(std::optional<mcp_failure>)> done) {
  net::post(impl_->strand, [state = impl_, done = std::move(done)]() mutable {
    if (state->initialized && state->running) return done(std::nullopt);
    const bool under_way = !state->waiting.empty();
    state->waiting.push_back(std::move(done));
    if (under_way) return;
    // Kept in `open` while initialize is pending: it holds the client weakly (a strong hold would
    // be a cycle that outlives a stopped I/O context, and the child with it).
    const auto answer = [weak = std::weak_ptr<impl>(state)](std::optional<mcp_failure> failure) {
      const auto state = weak.lock();
      if (!state) return;
      ++(failure ? state->failed_starts : state->starts);
      if (failure) state->note_error(failure->detail);
      auto waiting = std::move(state->waiting);
      state->waiting.clear();
      for (auto& w : waiting) w(failure);
    };
    if (auto failure = state->spawn()) return answer(failure);
    state->initialize(answer);
  });
}

void mcp_client::list_tools(std::function<void(std::vector<mcp_tool_info>, std::optional<mcp_failure>)> done) {
  net::post(impl_->strand, [state = impl_, done = std::move(done)]() mutable {
    state->list_page(std::make_shared<std::vector<mcp_tool_info>>(), std::nullopt, 0, std::move(done));
  });
}

void mcp_client::call_tool(const std::string& name, json arguments, std::chrono::milliseconds timeout,
                           std::function<void(tool_outcome)> done, std::function<void(json)> progress) {
  const auto start = std::chrono::steady_clock::now();
  net::post(impl_->strand, [state = impl_, name, arguments = std::move(arguments), timeout, start,
                            done = std::move(done), progress = std::move(progress)]() mutable {
    state->request(
        "tools/call", {{"name", name}, {"arguments", std::move(arguments)}}, timeout,
        [done = std::move(done), start](json result, std::optional<mcp_failure> failure) {
          tool_outcome o;
          o.attempts = 1;
          o.duration_ms = ms_since(start);
          if (failure) {
            o.error_code = failure->code;
            o.detail = failure->detail;
            return done(std::move(o));
          }
          const auto content = result.find("content");
          json output = {{"content", content != result.end() && content->is_array() ? *content : json::array()}};
          if (const auto s = result.find("structuredContent"); s != result.end()) output["structuredContent"] = *s;
          if (flag_at(result, "isError", false)) {
            o.error_code = codes::executor_tool_error;
            std::string text;
            for (const json& c : output["content"]) {
              if (text_at(c, "type") == "text" && !text_at(c, "text").empty()) {
                if (!text.empty()) text += "\n";
                text += text_at(c, "text");
              }
            }
            o.detail = "the tool answered an error" +
                       (text.empty() ? std::string() : ": " + replace_invalid_utf8(std::string_view(text).substr(0, 1000)));
            o.output = std::move(output);  // what the tool said, for the log and an MCP client of baton's
            return done(std::move(o));
          }
          o.ok = true;
          o.output = std::move(output);
          done(std::move(o));
        },
        /*cancel_on_timeout=*/true, std::move(progress));
  });
}

void mcp_client::on_tools_changed(std::function<void()> callback) {
  net::post(impl_->strand, [state = impl_, callback = std::move(callback)]() mutable { state->tools_changed = std::move(callback); });
}

void mcp_client::post(std::function<void()> f) { net::post(impl_->strand, std::move(f)); }

void mcp_client::stop() {
  net::post(impl_->strand, [state = impl_] { state->shut("was stopped"); });
}

bool mcp_client::ready() const noexcept { return impl_->initialized && impl_->running; }

mcp_client::counts mcp_client::counted() const {
  std::lock_guard lock(impl_->error_mutex);
  return {impl_->starts.load(), impl_->failed_starts.load(), impl_->last_error};
}
const std::string& mcp_client::protocol_version() const noexcept { return impl_->version; }
std::size_t mcp_client::skipped_lines() const noexcept { return impl_->skipped; }

std::pair<std::vector<mcp_tool_info>, std::optional<mcp_failure>> discover_mcp_tools(const mcp_server_config& config,
                                                                                   const executor_limits& limits) {
  net::io_context io;
  std::pair<std::vector<mcp_tool_info>, std::optional<mcp_failure>> out;
  {
    const auto client = mcp_client::make(config, io.get_executor(), limits);
    client->start([&](std::optional<mcp_failure> failure) {
      if (failure) {
        out.second = failure;
        return;
      }
      client->list_tools([&](std::vector<mcp_tool_info> tools, std::optional<mcp_failure> f) {
        out.first = std::move(tools);
        out.second = f;
        client->stop();
      });
    });
    io.run();
  }
  io.restart();
  io.run();  // the destructor's shut
  return out;
}

}  // namespace baton::tools
