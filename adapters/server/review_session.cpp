// One reviewer connection at /v1/review: the escalation desk pushes escalations to it, and its
// `resolve` frames go to the desk (adapters/runtime/escalation_desk.hpp), which answers on it.
#include "adapters/server/websocket_session.hpp"

namespace baton {

namespace {

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
      hub_->service.desk().on_review_frame(shared_from_this(), text, ticket_.who->name);
    }
    read();
  }

  http_api::upgrade_ticket ticket_;
  beast::flat_buffer buffer_;
};

}  // namespace

void start_review_session(tcp::socket&& socket, std::shared_ptr<session_hub> hub, connection_slot slot,
                          http_api::upgrade_ticket ticket, http::request<http::string_body>&& upgrade) {
  std::make_shared<review_session>(std::move(socket), std::move(hub), std::move(slot), std::move(ticket))
      ->run(std::move(upgrade));
}

}  // namespace baton
