// One WebSocket connection at /v1/agent: frames are size-, rate- and key-limited here, then handed
// to the agent service (adapters/runtime/agent_service.hpp), which answers through send().
#include <algorithm>
#include <chrono>

#include "adapters/server/websocket_session.hpp"
#include "core/error_codes.hpp"

namespace baton {

namespace {

constexpr std::size_t read_chunk = 64 * 1024;

// One WebSocket connection at /v1/agent.
class agent_session : public agent_connection,
                   public ws_stream_session<agent_session>,
                   public std::enable_shared_from_this<agent_session> {
 public:
  agent_session(tcp::socket&& socket, std::shared_ptr<session_hub> hub, connection_slot slot, http_api::upgrade_ticket t)
      : ws_stream_session(std::move(socket), std::move(hub), std::move(slot)), who_(t.who), id_(std::move(t.id)),
        tokens_(double(hub_->options.max_frames_per_second)), refilled_(std::chrono::steady_clock::now()) {
    owner_ = std::move(t.owner);
    caller_ = t.who->name;
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
  friend class ws_stream_session<agent_session>;
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
      refuse(make_error(413, codes::frame_too_large, "a frame of more than " + std::to_string(o.max_frame_bytes) +
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
      refuse(make_error(429, codes::rate_limited, "more than " + std::to_string(o.max_frames_per_second) +
                                                 " frames per second (server.max_frames_per_second)"),
             id_of(frame, text));
    } else if (!text) {
      refuse(make_error(400, codes::binary_frame, "a binary frame: frames are JSON text"));
    } else if (const auto wait = hub_->api.admit_frame(*who_)) {
      refuse(rate_limited(*who_, *wait), id_of(frame, text));  // each frame counts
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

  void refuse(const error& e, json ref = nullptr) {
    send(protocol::render_error_frame(std::move(ref), e));
    ++bad_in_row_;
  }

  // The `id` of a frame refused for its rate, so that the client knows which request to send
  // again (null for a binary frame). Reading it is no work the limit saves: the frame is read and
  // bounded by max_frame_bytes, and no turn starts.
  json id_of(const std::string& frame, bool text) const { return text ? hub_->service.frame_id(frame) : json(nullptr); }

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

}  // namespace

void start_agent_session(tcp::socket&& socket, std::shared_ptr<session_hub> hub, connection_slot slot,
                         http_api::upgrade_ticket ticket, http::request<http::string_body>&& upgrade) {
  std::make_shared<agent_session>(std::move(socket), std::move(hub), std::move(slot), std::move(ticket))
      ->run(std::move(upgrade));
}

}  // namespace baton
