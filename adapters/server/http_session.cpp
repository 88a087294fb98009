#include "adapters/server/http_session.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "adapters/runtime/handler_guard.hpp"
#include "adapters/server/websocket_session.hpp"

namespace baton {

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

  // Beast's parser refused the bytes (not a peer that went away: that ends a message early).
  static bool is_parse_error(beast::error_code ec) {
    return ec.category() == http::make_error_code(http::error::bad_target).category() && ec != http::error::partial_message;
  }

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
      if (is_parse_error(ec)) respond(hub_->api.unreadable(11, http_api::unreadable_reason::malformed), true);
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
        start_review_session(stream_.release_socket(), hub_, std::move(slot_), std::move(t), parser_->release());
      } else {
        start_agent_session(stream_.release_socket(), hub_, std::move(slot_), std::move(t), parser_->release());
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
    // Only a decision (or an MCP message) reads its body; a chunked body is counted as it comes.
    const bool reads_body = ticket_->decide || (ticket_->mcp && req.method() == http::verb::post);
    const std::size_t limit = reads_body ? hub_->options.max_body_bytes : http_api::small_body_bytes;
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
    if (ec) {
      // A body Beast cannot parse (a bad chunk) gets a 400; a peer that went away or stalled gets nothing.
      if (is_parse_error(ec)) respond(hub_->api.unreadable(parser_->get().version(), http_api::unreadable_reason::malformed), true);
      return;
    }
    stream_.expires_never();  // a decision may take its time; the write sets its own limit
    if (ticket_->mcp) {
      version_ = parser_->get().version();
      keep_alive_ = parser_->keep_alive();
      // The body goes to the gateway now: a call that waits for a person does not hold its bytes.
      hub_->buffered_bytes -= reserved_;
      reserved_ = 0;
      hub_->api.handle_mcp(*ticket_, parser_->release(),
                           std::make_shared<mcp_stream>(shared_from_this(), stream_.get_executor(), ticket_->id));
      return;
    }
    // Guarded: a decision's completions and timers run here, and fail only this request.
    hub_->api.handle(std::move(*ticket_), parser_->release(), guarded_executor(stream_.get_executor(), weak_from_this()),
                     [self = shared_from_this()](http_api::response res) { self->respond(std::move(res), false); });
  }

  // An /mcp request's answer as the gateway gives it, from any thread: each call is posted to the
  // session's strand. It holds the session until the gateway lets go of it (the call's answer).
  class mcp_stream final : public mcp_reply {
   public:
    mcp_stream(std::shared_ptr<http_session> s, net::any_io_executor strand, std::string request)
        : session_(std::move(s)), strand_(std::move(strand)), request_(std::move(request)) {}
    void answer(unsigned status, std::string body, std::string session) override {
      on_strand([status, body = std::move(body), session = std::move(session)](http_session& s) mutable {
        s.mcp_answer(status, std::move(body), session);
      });
    }
    void open() override {
      on_strand([](http_session& s) { s.mcp_open(); });
    }
    void event(mcp_event e) override {
      on_strand([e = std::move(e)](http_session& s) mutable { s.mcp_send(std::move(e)); });
    }
    void end() override {
      on_strand([](http_session& s) { s.mcp_end(); });
    }

   private:
    template <class F>
    void on_strand(F f) {
      // Only while the session still serves this request: a late call must not answer the next one.
      net::dispatch(strand_, [s = session_, f = std::move(f), request = request_]() mutable {
        if (s->ticket_ && s->ticket_->id == request) run_guarded("an MCP answer", [&] { f(*s); }, s.get());
      });
    }
    std::shared_ptr<http_session> session_;
    net::any_io_executor strand_;
    std::string request_;  // its ticket's id
  };

  void mcp_answer(unsigned status, std::string body, const std::string& session) {
    if (answered_ || !ticket_) return;
    respond(hub_->api.mcp_answer(*ticket_, version_, keep_alive_, status, std::move(body), session), false);
  }

  // The event stream begins: its head goes (once).
  void mcp_open() {
    if (!ticket_ || answered_ || stream_ended_) return;
    answered_ = true;
    streaming_ = true;
    sse_head_ = std::make_shared<http::response<http::empty_body>>(hub_->api.mcp_stream_head(*ticket_, version_, keep_alive_));
    sse_serializer_ = std::make_shared<http::response_serializer<http::empty_body>>(*sse_head_);
    writing_ = true;
    stream_.expires_after(std::chrono::seconds(30));
    http::async_write_header(stream_, *sse_serializer_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      run_guarded("an MCP stream's head", [&] { self->sse_written(ec); }, self.get());
    });
  }

  // One event of the stream, which the first opens (its head written before it).
  void mcp_send(mcp_event e) {
    if (!ticket_ || (answered_ && !streaming_) || stream_ended_) return;
    if (!streaming_) mcp_open();
    std::string text = "id: " + e.id + "\n";
    if (e.retry.count() > 0) text += "retry: " + std::to_string(e.retry.count()) + "\n";
    // A priming event has no message (an empty data line); the others are each a message.
    text += e.message.empty() ? "data: \n\n" : "event: message\ndata: " + e.message + "\n\n";
    sse_queue_.push_back(std::move(text));
    sse_write();
  }

  // The stream's end (the last chunk), or, before any message, an empty 202.
  void mcp_end() {
    if (!streaming_) return mcp_answer(202, {}, {});
    if (stream_ended_) return;
    stream_ended_ = true;
    sse_write();
  }

  void sse_write() {
    if (writing_ || sse_failed_) return;
    if (!sse_queue_.empty()) {
      writing_ = true;
      auto chunk = std::make_shared<std::string>(std::move(sse_queue_.front()));
      sse_queue_.pop_front();
      stream_.expires_after(std::chrono::seconds(30));
      net::async_write(stream_, http::make_chunk(net::buffer(*chunk)), [self = shared_from_this(), chunk](beast::error_code ec, std::size_t) {
        run_guarded("an MCP stream's message", [&] { self->sse_written(ec); }, self.get());
      });
      return;
    }
    if (!stream_ended_) {
      stream_.expires_never();  // the next message may be a while: a person decides
      return;
    }
    writing_ = true;
    stream_.expires_after(std::chrono::seconds(30));
    net::async_write(stream_, http::make_chunk_last(), [self = shared_from_this()](beast::error_code ec, std::size_t) {
      run_guarded("an MCP stream's end", [&] {
        self->writing_ = false;
        const bool keep_alive = self->sse_head_->keep_alive();
        self->streaming_ = false;
        self->stream_ended_ = false;
        self->sse_head_.reset();
        self->sse_serializer_.reset();
        self->finish_request();
        if (!ec) self->next_request(keep_alive);
      }, self.get());
    });
  }

  void sse_written(beast::error_code ec) {
    writing_ = false;
    if (ec) {
      // The client went away: what is left is dropped, and the connection with it.
      sse_failed_ = true;
      sse_queue_.clear();
      finish_request();
      return;
    }
    sse_write();
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
        } else {
          self->next_request(r->keep_alive());
        }
      }, self.get());
    });
  }

  // An answer went: the connection's next request, or its end.
  void next_request(bool keep_alive) {
    if (keep_alive) return read_head();
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
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
  // An /mcp request's: the request's version and keep-alive, and its event stream when it has one.
  unsigned version_ = 11;
  bool keep_alive_ = true;
  bool streaming_ = false;
  bool writing_ = false;
  bool stream_ended_ = false;  // end() came: the last chunk follows the queue
  bool sse_failed_ = false;
  std::shared_ptr<http::response<http::empty_body>> sse_head_;
  std::shared_ptr<http::response_serializer<http::empty_body>> sse_serializer_;
  std::deque<std::string> sse_queue_;
  bool counted_ = false;      // in hub_->http_requests
  std::size_t reserved_ = 0;  // of hub_->buffered_bytes
  std::vector<char> scratch_;
  std::size_t lingered_ = 0;
};

}  // namespace

void start_http_session(tcp::socket&& socket, std::shared_ptr<session_hub> hub, connection_slot slot) {
  std::make_shared<http_session>(std::move(socket), std::move(hub), std::move(slot))->run();
}

}  // namespace baton
