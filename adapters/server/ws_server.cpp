#include "adapters/server/ws_server.hpp"

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <spdlog/spdlog.h>

#include <deque>

#include "adapters/server/handler_guard.hpp"
#include "adapters/protocol/review_protocol.hpp"

namespace baton {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = net::ip::tcp;

namespace {

constexpr std::size_t read_chunk = 64 * 1024;
constexpr std::size_t max_queued_frames = 4096;  // a peer that stops reading is closed past this
constexpr std::size_t max_queued_bytes = 64u << 20;  // … or past this many bytes (frames echo ids, carry tool output)

}  // namespace

// One open TCP connection counted in the hub, from accept to close; moves from the HTTP session
// to the WebSocket session an upgrade makes.
class connection_slot {
 public:
  explicit connection_slot(std::shared_ptr<session_hub> hub) : hub_(std::move(hub)) { ++hub_->connections; }
  connection_slot(connection_slot&&) noexcept = default;
  connection_slot& operator=(connection_slot&&) = delete;
  ~connection_slot() {
    if (hub_) --hub_->connections;
  }

 private:
  std::shared_ptr<session_hub> hub_;
};

// What both WebSocket sessions do with their stream, on its strand: the handshake answered with
// baton's headers, a write queue with one write in flight (a peer that leaves too much unread is
// dropped), and a close that waits for the frames already queued. `Derived` is the session class
// (for its shared_from_this).
template <class Derived>
class ws_stream_session : public closable_session, public guard_target {
 public:
  void shut_down() override {
    net::post(guarded_strand(), [self = derived().shared_from_this()] {
      self->close(websocket::close_code::going_away, "the server is shutting down");
    });
  }

  // A handler of this connection threw: the peer hears why, and the connection closes (1011).
  void handler_failed() noexcept override {
    try {
      enqueue(protocol::render_error_frame(
          nullptr, make_error(500, "INTERNAL", "the server failed on this connection (logged); it closes")));
      close(websocket::close_code::internal_error, "internal error");
    } catch (...) {
      closing_ = true;
      beast::error_code ec;
      beast::get_lowest_layer(ws_).socket().close(ec);
    }
  }

 protected:
  ws_stream_session(tcp::socket&& socket, std::shared_ptr<session_hub> hub, connection_slot slot)
      : ws_(std::move(socket)), hub_(std::move(hub)), slot_(std::move(slot)) {}
  ~ws_stream_session() override { hub_->remove(this); }

  // Answers the upgrade (with `subprotocol` when not empty), then calls the session's on_open().
  void accept(http::request<http::string_body> req, const std::string& request_id, const std::string& subprotocol) {
    ws_.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
    ws_.set_option(websocket::stream_base::decorator([request_id, subprotocol](websocket::response_type& res) {
      res.set(http::field::server, "baton");
      res.set("x-typesafe-request-id", request_id);
      res.set("X-Request-Id", request_id);
      if (!subprotocol.empty()) res.set(http::field::sec_websocket_protocol, subprotocol);
    }));
    ws_.async_accept(req, [self = derived().shared_from_this()](beast::error_code ec) {
      if (ec) return;
      run_guarded("a WebSocket session's start", [&] {
        self->hub_->add(self);
        self->on_open();
      }, self.get());
    });
  }

  // The connection's strand, for whatever runs on its behalf (posted completions, timers).
  net::any_io_executor guarded_strand() { return guarded_executor(ws_.get_executor(), derived().weak_from_this()); }

  void enqueue(std::string frame) {
    if (closing_) return;
    if (queue_.size() >= max_queued_frames || queued_bytes_ + frame.size() > max_queued_bytes) {
      // A peer that does not read takes no close frame either: drop the connection. The write in
      // flight then fails, which clears the queue.
      spdlog::warn("closing a connection whose client left {} frames ({} bytes) unread", queue_.size(), queued_bytes_);
      closing_ = true;
      beast::error_code ec;
      beast::get_lowest_layer(ws_).socket().close(ec);
      return;
    }
    queued_bytes_ += frame.size();
    queue_.push_back(std::move(frame));
    if (queue_.size() == 1) write();
  }

  // Closes once the frames already queued (such as the error that explains it) are written.
  void close(websocket::close_code code, std::string reason) {
    if (close_code_) return;
    close_code_ = code;
    close_reason_ = std::move(reason);
    if (queue_.empty()) finish_close();
  }

  // Closing: read no more frames (async_close reads the peer's close).
  bool reading_stopped() const noexcept { return closing_ || close_code_.has_value(); }

  websocket::stream<beast::tcp_stream> ws_;
  std::shared_ptr<session_hub> hub_;

 private:
  Derived& derived() noexcept { return static_cast<Derived&>(*this); }

  void write() {
    ws_.text(true);
    ws_.async_write(net::buffer(queue_.front()), [self = derived().shared_from_this()](beast::error_code ec, std::size_t) {
      ws_stream_session& s = *self;
      if (ec) {
        s.queue_.clear();
        s.queued_bytes_ = 0;
        s.hub_->remove(&s);
        return;
      }
      s.queued_bytes_ -= s.queue_.front().size();
      s.queue_.pop_front();
      run_guarded("a WebSocket write's completion", [&] {
        if (!s.queue_.empty()) {
          s.write();
        } else if (s.close_code_) {
          s.finish_close();
        }
      }, &s);
    });
  }

  void finish_close() {
    if (closing_) return;
    closing_ = true;
    ws_.async_close(websocket::close_reason(*close_code_, close_reason_),
                    [self = derived().shared_from_this()](beast::error_code) {
                      ws_stream_session& s = *self;
                      s.hub_->remove(&s);
                    });
  }

  connection_slot slot_;
  std::deque<std::string> queue_;
  std::size_t queued_bytes_ = 0;
  std::optional<websocket::close_code> close_code_;
  std::string close_reason_;
  bool closing_ = false;
};

// One WebSocket connection at /v1/agent.
class ws_session : public agent_connection,
                   public ws_stream_session<ws_session>,
                   public std::enable_shared_from_this<ws_session> {
 public:
  ws_session(tcp::socket&& socket, std::shared_ptr<session_hub> hub, connection_slot slot, http_api::upgrade_ticket t)
      : ws_stream_session(std::move(socket), std::move(hub), std::move(slot)), who_(t.who), id_(std::move(t.id)),
        tokens_(double(hub_->options.max_frames_per_second)), refilled_(std::chrono::steady_clock::now()) {
    owner_ = std::move(t.owner);
  }

  // Guarded: what the service posts here (engine, log and executor completions, its timers) fails
  // only this connection when it throws.
  net::any_io_executor strand() override { return guarded_strand(); }

  void run(http::request<http::string_body> req) {
    // No limit in Beast: it would fail a frame whose header announces more at once, before on_read
    // could send FRAME_TOO_LARGE. on_read refuses past the limit itself, one chunk at a time.
    ws_.read_message_max(0);
    accept(std::move(req), id_, {});
  }

  void send(std::string frame) override { enqueue(std::move(frame)); }

 private:
  friend class ws_stream_session<ws_session>;
  void on_open() { read(); }

  void read() {
    if (reading_stopped()) return;
    ws_.async_read_some(buffer_, read_chunk, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      run_guarded("an agent frame's handler", [&] { self->on_read(ec); }, self.get());
    });
  }

  void on_read(beast::error_code ec) {
    if (ec) {
      hub_->remove(this);
      return;
    }
    const server_options& o = hub_->options;
    if (buffer_.size() > o.max_frame_bytes) {
      refuse(make_error(413, "FRAME_TOO_LARGE", "a frame of more than " + std::to_string(o.max_frame_bytes) +
                                                    " bytes (server.max_frame_bytes)"));
      close(websocket::close_code::too_big, "frame too large");
      return;
    }
    if (!ws_.is_message_done()) {
      read();
      return;
    }
    const bool text = ws_.got_text();
    std::string frame = beast::buffers_to_string(buffer_.data());
    buffer_.consume(buffer_.size());
    if (!take_token()) {
      refuse(make_error(429, "RATE_LIMITED", "more than " + std::to_string(o.max_frames_per_second) +
                                                 " frames per second (server.max_frames_per_second)"));
    } else if (!text) {
      refuse(make_error(400, "BINARY_FRAME", "a binary frame: frames are JSON text"));
    } else if (const auto wait = hub_->api.admit_frame(*who_)) {
      refuse(rate_limited(*who_, *wait));  // each frame counts
    } else if (hub_->service.on_frame(shared_from_this(), frame)) {
      bad_in_row_ = 0;
    } else {
      ++bad_in_row_;
    }
    if (bad_in_row_ >= o.max_bad_frames) {
      close(websocket::close_code::policy_error, "too many bad frames in a row");
      return;
    }
    read();
  }

  void refuse(const error& e) {
    send(protocol::render_error_frame(nullptr, e));
    ++bad_in_row_;
  }

  bool take_token() {
    const double rate = double(hub_->options.max_frames_per_second);
    const auto now = std::chrono::steady_clock::now();
    tokens_ = std::min(rate, tokens_ + rate * std::chrono::duration<double>(now - refilled_).count());
    refilled_ = now;
    if (tokens_ < 1) return false;
    tokens_ -= 1;
    return true;
  }

  const caller* who_;  // the authenticator's, which outlives every running session
  std::string id_;     // the upgrade's request id
  beast::flat_buffer buffer_;
  std::size_t bad_in_row_ = 0;
  double tokens_;
  std::chrono::steady_clock::time_point refilled_;
};

// One reviewer connection at /v1/review: escalations are pushed to it (escalation_desk), and it
// may resolve them with `resolve` frames.
class review_session : public review_listener,
                       public ws_stream_session<review_session>,
                       public std::enable_shared_from_this<review_session> {
 public:
  review_session(tcp::socket&& socket, std::shared_ptr<session_hub> hub, connection_slot slot, http_api::upgrade_ticket t)
      : ws_stream_session(std::move(socket), std::move(hub), std::move(slot)), ticket_(std::move(t)) {}

  void run(http::request<http::string_body> req) {
    ws_.read_message_max(max_frame_bytes);
    accept(std::move(req), ticket_.id, ticket_.subprotocol);
  }

  // From any thread (the desk's broadcasts).
  void send(std::string frame) override {
    net::post(guarded_strand(),
              [self = shared_from_this(), frame = std::move(frame)]() mutable { self->enqueue(std::move(frame)); });
  }

 private:
  friend class ws_stream_session<review_session>;
  static constexpr std::size_t max_frame_bytes = 64 * 1024;

  void on_open() {
    hub_->service.desk().add_listener(shared_from_this());
    read();
  }

  void read() {
    if (reading_stopped()) return;
    ws_.async_read(buffer_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      run_guarded("a reviewer frame's handler", [&] { self->on_read(ec); }, self.get());
    });
  }

  void on_read(beast::error_code ec) {
    if (ec) {
      hub_->remove(this);
      return;
    }
    const std::string text = beast::buffers_to_string(buffer_.data());
    buffer_.consume(buffer_.size());
    if (const auto wait = hub_->api.admit_frame(*ticket_.who)) {
      send(protocol::render_error_frame(nullptr, rate_limited(*ticket_.who, *wait)));
    } else {
      on_frame(text);
    }
    read();
  }

  void on_frame(const std::string& text) {
    json ref;
    auto f = protocol::parse_review_frame(text, ref);
    if (!f) {
      send(protocol::render_error_frame(ref, f.error()));
      return;
    }
    hub_->service.desk().resolve(f->escalation, std::move(f->input), ticket_.who->name,
                                 [self = shared_from_this(), ref](result<json> r) {
                                   if (!r) {
                                     self->send(protocol::render_error_frame(ref, r.error()));
                                     return;
                                   }
                                   self->send(render_json(json{{"type", "resolve_result"}, {"ref", ref}, {"resolution", *r}}, false));
                                 });
  }

  http_api::upgrade_ticket ticket_;
  beast::flat_buffer buffer_;
};

namespace {

// Plain HTTP until a WebSocket upgrade, one request at a time: the head first, which http_api
// admits or refuses before any body is read; then the body (after `100 Continue` when the client
// waits for it), then the answer. A request refused with its body unread closes the connection
// after draining what the client still sends, so that it reads the answer instead of a reset.
class http_session : public guard_target, public std::enable_shared_from_this<http_session> {
 public:
  http_session(tcp::socket&& socket, std::shared_ptr<session_hub> hub, connection_slot slot)
      : stream_(std::move(socket)), hub_(std::move(hub)), slot_(std::move(slot)) {
    beast::error_code ec;
    from_ = stream_.socket().remote_endpoint(ec).address();  // a peer already gone: any address
  }

  ~http_session() { finish_request(); }

  void run() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      run_guarded("an HTTP session's start", [&] { self->read_head(); }, self.get());
    });
  }

  // A handler of this request threw: 500 INTERNAL when nothing was answered yet, and the
  // connection closes either way.
  void handler_failed() noexcept override {
    try {
      if (!answered_) {
        respond(hub_->api.unreadable(parser_ ? parser_->get().version() : 11, http_api::unreadable_reason::internal),
                parser_ && !parser_->is_done());
        return;
      }
    } catch (...) {
    }
    beast::error_code ec;
    stream_.socket().close(ec);
  }

 private:
  static constexpr std::size_t max_head_bytes = 16 * 1024;
  static constexpr std::size_t max_linger_bytes = 64u << 20;

  void read_head() {
    answered_ = false;
    parser_.emplace();
    parser_->header_limit(max_head_bytes);
    // No limit on the head's declared size: http_api refuses an oversized body only after the
    // key and the route, so a caller without a key learns nothing more than 401.
    parser_->body_limit(boost::none);
    stream_.expires_after(std::chrono::seconds(30));
    http::async_read_header(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      run_guarded("an HTTP request's head handler", [&] { self->on_head(ec); }, self.get());
    });
  }

  void on_head(beast::error_code ec) {
    if (ec == http::error::end_of_stream) {
      stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
      return;
    }
    if (ec == http::error::header_limit) {
      respond(hub_->api.unreadable(11, http_api::unreadable_reason::head_too_large), true);
      return;
    }
    if (ec) {
      // A head Beast cannot parse gets a 400; a peer that went away or stalled gets nothing.
      if (ec.category() == http::make_error_code(http::error::bad_target).category() && ec != http::error::partial_message) {
        respond(hub_->api.unreadable(11, http_api::unreadable_reason::malformed), true);
      }
      return;
    }
    const auto& req = parser_->get();
    if (websocket::is_upgrade(req)) {
      auto admitted = hub_->api.upgrade(req.base(), parser_->keep_alive(), from_);
      if (auto* refusal = std::get_if<http_api::response>(&admitted)) {
        respond(std::move(*refusal), !parser_->is_done());
        return;
      }
      stream_.expires_never();
      auto& t = std::get<http_api::upgrade_ticket>(admitted);
      if (t.review) {
        std::make_shared<review_session>(stream_.release_socket(), hub_, std::move(slot_), std::move(t))
            ->run(parser_->release());
      } else {
        std::make_shared<ws_session>(stream_.release_socket(), hub_, std::move(slot_), std::move(t))->run(parser_->release());
      }
      return;
    }
    ++hub_->http_requests;
    counted_ = true;
    std::optional<std::uint64_t> length;
    if (const auto l = parser_->content_length()) length = *l;
    auto admitted = hub_->api.admit(req.base(), length, parser_->keep_alive(), from_);
    if (auto* refusal = std::get_if<http_api::response>(&admitted)) {
      refuse(std::move(*refusal), length);
      return;
    }
    ticket_ = std::move(std::get<http_api::ticket>(admitted));
    // Only a decision reads its body; a chunked body is counted as it comes.
    const std::size_t limit = ticket_->decide ? hub_->options.max_body_bytes : http_api::small_body_bytes;
    parser_->body_limit(limit);
    if (!parser_->is_done()) {
      // A body that declares no size may still grow to the limit.
      reserved_ = length.value_or(limit);
      if (hub_->buffered_bytes.fetch_add(reserved_) + reserved_ > hub_->options.max_buffered_bytes) {
        respond(hub_->api.unreadable(req.version(), http_api::unreadable_reason::busy), !parser_->is_done());
        return;
      }
    }
    if (!parser_->is_done() && expects_continue()) {
      auto cont = std::make_shared<http::response<http::empty_body>>(http::status::continue_, req.version());
      http::async_write(stream_, *cont, [self = shared_from_this(), cont](beast::error_code e, std::size_t) {
        if (!e) run_guarded("an HTTP 100 Continue's completion", [&] { self->read_body(); }, self.get());
      });
      return;
    }
    read_body();
  }

  // A refused request's small body is read and dropped, so that the connection can go on;
  // a large one (or one of unknown size) is not read at all.
  void refuse(http_api::response res, std::optional<std::uint64_t> length) {
    // A client waiting for 100 Continue sends no body after a final answer.
    if (parser_->is_done() || expects_continue() || !length || *length > http_api::small_body_bytes) {
      respond(std::move(res), !parser_->is_done());
      return;
    }
    auto r = std::make_shared<http_api::response>(std::move(res));
    stream_.expires_after(std::chrono::seconds(30));
    http::async_read(stream_, buffer_, *parser_, [self = shared_from_this(), r](beast::error_code ec, std::size_t) {
      if (!ec) run_guarded("a refused HTTP request's body handler", [&] { self->respond(std::move(*r), false); }, self.get());
    });
  }

  bool expects_continue() const {
    const auto expect = parser_->get().find(http::field::expect);
    return expect != parser_->get().end() && beast::iequals(expect->value(), "100-continue");
  }

  void read_body() {
    stream_.expires_after(std::chrono::seconds(30));
    http::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      run_guarded("an HTTP request's handler", [&] { self->on_body(ec); }, self.get());
    });
  }

  void on_body(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      respond(hub_->api.unreadable(parser_->get().version(), http_api::unreadable_reason::body_too_large), true);
      return;
    }
    if (ec) return;  // the peer went away or stalled
    stream_.expires_never();  // a decision may take its time; the write sets its own limit
    // Guarded: a decision's completions and timers run here, and fail only this request.
    hub_->api.handle(std::move(*ticket_), parser_->release(), guarded_executor(stream_.get_executor(), weak_from_this()),
                     [self = shared_from_this()](http_api::response res) { self->respond(std::move(res), false); });
  }

  // Writes the answer; then the next request, or (when the body was left unread) a lingering close.
  void respond(http_api::response res, bool body_unread) {
    // Once per request: an answer after a 500 INTERNAL (a late completion) is dropped.
    if (answered_) return;
    answered_ = true;
    if (body_unread) res.keep_alive(false);
    auto r = std::make_shared<http_api::response>(std::move(res));
    stream_.expires_after(std::chrono::seconds(30));
    http::async_write(stream_, *r, [self = shared_from_this(), r, body_unread](beast::error_code ec, std::size_t) {
      self->finish_request();
      if (ec) return;
      run_guarded("an HTTP response's completion", [&] {
        if (body_unread) {
          self->linger();
        } else if (!r->keep_alive()) {
          self->stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
        } else {
          self->read_head();
        }
      }, self.get());
    });
  }

  // Reads and drops what the client still sends (at most 64 MiB, for 5 s): closing with unread
  // data would reset the connection, and the client could lose the answer it has not read yet.
  void linger() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    scratch_.resize(64 * 1024);
    stream_.expires_after(std::chrono::seconds(5));
    linger_read();
  }

  void linger_read() {
    stream_.async_read_some(net::buffer(scratch_), [self = shared_from_this()](beast::error_code ec, std::size_t n) {
      self->lingered_ += n;
      if (!ec && self->lingered_ < max_linger_bytes) self->linger_read();
    });
  }

  void finish_request() {
    if (counted_) {
      --hub_->http_requests;
      counted_ = false;
    }
    if (reserved_ > 0) {
      hub_->buffered_bytes -= reserved_;
      reserved_ = 0;
    }
    ticket_.reset();
  }

  beast::tcp_stream stream_;
  std::shared_ptr<session_hub> hub_;
  connection_slot slot_;
  net::ip::address from_;  // the client's, for its failed authentications
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<http_api::ticket> ticket_;
  bool answered_ = false;     // this request's response went out (or is going)
  bool counted_ = false;      // in hub_->http_requests
  std::size_t reserved_ = 0;  // of hub_->buffered_bytes
  std::vector<char> scratch_;
  std::size_t lingered_ = 0;
};

}  // namespace

void session_hub::add(const std::shared_ptr<closable_session>& s) {
  std::lock_guard lock(mutex);
  sessions.emplace(s.get(), s);
}

void session_hub::remove(const closable_session* s) {
  std::lock_guard lock(mutex);
  sessions.erase(s);
}

std::size_t session_hub::size() {
  std::lock_guard lock(mutex);
  return sessions.size();
}

ws_server::ws_server(net::io_context& ioc, const server_options& options, agent_service& service,
                     systemone_service& systemone, http_api& api)
    : ioc_(ioc), hub_(std::make_shared<session_hub>(options, service, systemone, api)), acceptor_(net::make_strand(ioc)),
      accept_retry_(acceptor_.get_executor()) {
  const tcp::endpoint endpoint(net::ip::make_address(options.host == "localhost" ? "127.0.0.1" : options.host),
                               options.port);
  acceptor_.open(endpoint.protocol());
  acceptor_.set_option(net::socket_base::reuse_address(true));
  acceptor_.bind(endpoint);
  acceptor_.listen(net::socket_base::max_listen_connections);
  port_ = acceptor_.local_endpoint().port();
}

ws_server::~ws_server() = default;

void ws_server::start() { accept(); }

void ws_server::accept() {
  acceptor_.async_accept(net::make_strand(ioc_), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) {
      // EMFILE and the like repeat at once: accepting again straight away spins an I/O thread.
      spdlog::warn("accept failed: {}; retrying in 100 ms", ec.message());
      accept_retry_.expires_after(std::chrono::milliseconds(100));
      accept_retry_.async_wait([this](beast::error_code e) {
        if (!e && acceptor_.is_open()) accept();
      });
      return;
    }
    // A connection that fails to start is dropped (its socket closes with it); accepting goes on.
    run_guarded("the acceptor", [&] {
      if (hub_->connections.load() >= hub_->options.max_connections) {
        // Refused at once: a small blocking write into an empty send buffer, then close.
        const auto res = hub_->api.unreadable(11, http_api::unreadable_reason::busy);
        http::write(socket, res, ec);
        socket.shutdown(tcp::socket::shutdown_both, ec);
        socket.close(ec);
      } else {
        socket.set_option(tcp::no_delay(true), ec);
        std::make_shared<http_session>(std::move(socket), hub_, connection_slot(hub_))->run();
      }
    }, nullptr);
    accept();
  });
}

void ws_server::close_sessions() {
  std::vector<std::shared_ptr<closable_session>> open;
  {
    std::lock_guard lock(hub_->mutex);
    for (auto& [p, w] : hub_->sessions) {
      if (auto s = w.lock()) open.push_back(std::move(s));
    }
  }
  for (auto& s : open) s->shut_down();
}

// Polls every 10 ms: first until no decision is in flight (or the drain limit), then until every
// session has closed (or 2 s).
struct ws_server::stopper : std::enable_shared_from_this<stopper> {
  ws_server& server;
  net::steady_timer timer;
  std::chrono::steady_clock::time_point drain_until;
  std::chrono::steady_clock::time_point close_until{};
  bool closing = false;
  std::function<void()> done;

  stopper(ws_server& s, std::chrono::milliseconds drain_limit, std::function<void()> d)
      : server(s), timer(s.ioc_), drain_until(std::chrono::steady_clock::now() + drain_limit), done(std::move(d)) {}

  void poll() {
    const auto now = std::chrono::steady_clock::now();
    const std::size_t in_flight =
        server.hub_->service.in_flight() + server.hub_->systemone.in_flight() + server.hub_->http_requests.load();
    if (!closing && (in_flight == 0 || now >= drain_until)) {
      if (in_flight > 0) spdlog::warn("{} decisions still in flight after the drain limit", in_flight);
      server.close_sessions();
      closing = true;
      close_until = now + std::chrono::seconds(2);
    } else if (closing && (server.sessions() == 0 || now >= close_until)) {
      done();
      return;
    }
    timer.expires_after(std::chrono::milliseconds(10));
    timer.async_wait([self = shared_from_this()](beast::error_code) { self->poll(); });
  }
};

void ws_server::stop(std::chrono::milliseconds drain_limit, std::function<void()> done) {
  net::post(acceptor_.get_executor(), [this] {
    beast::error_code ec;
    acceptor_.close(ec);
    accept_retry_.cancel();
  });
  hub_->service.drain();
  hub_->systemone.drain();
  auto s = std::make_shared<stopper>(*this, drain_limit, std::move(done));
  net::post(ioc_, [s] { s->poll(); });
}

}  // namespace baton
