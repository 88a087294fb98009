#include "adapters/log/change_feed.hpp"

#include <poll.h>

#include <atomic>
#include <thread>

#include <spdlog/spdlog.h>

#include "adapters/log/pg_log.hpp"

namespace baton::log {

struct change_feed::impl {
  log_options options;
  callback changed;
  std::chrono::milliseconds interval;
  std::atomic<bool> stopping = false;
  std::thread thread;

  // A connection that listens, or none (the reason logged once per outage).
  pg_conn listen(bool& reported) {
    auto c = pg_connect(options.url, options.password, "baton-changes");
    if (c) {
      if (const pg_reply r = pg_exec_simple(c->get(), "LISTEN baton_changes"); r) {
        if (reported) spdlog::info("escalations: listening to {} again", options.url);
        reported = false;
        return std::move(*c);
      }
    }
    if (!reported) spdlog::warn("escalations: cannot listen to {} for other instances' changes; retrying", options.url);
    reported = true;
    return nullptr;
  }

  void run() {
    pg_conn c;
    bool reported = false;
    auto next_tick = std::chrono::steady_clock::now() + interval;
    while (!stopping) {
      if (!c) {
        c = listen(reported);
        if (!c) {
          std::this_thread::sleep_for(std::chrono::milliseconds(500));
          continue;
        }
        changed(event::connected, {});  // what happened while it was not listening
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= next_tick) {
        next_tick = now + interval;
        changed(event::tick, {});
      }
      // Short waits: stopping is seen within 200 ms.
      const auto wait = std::min<std::chrono::milliseconds>(
          std::chrono::duration_cast<std::chrono::milliseconds>(next_tick - now), std::chrono::milliseconds(200));
      pollfd fd{PQsocket(c.get()), POLLIN, 0};
      const int ready = ::poll(&fd, 1, static_cast<int>(std::max<std::int64_t>(wait.count(), 1)));
      if (ready <= 0) continue;
      if (!PQconsumeInput(c.get()) || PQstatus(c.get()) != CONNECTION_OK) {
        c.reset();
        continue;
      }
      while (PGnotify* n = PQnotifies(c.get())) {
        const std::string payload = n->extra ? n->extra : "";
        PQfreemem(n);
        changed(event::notified, payload);
      }
    }
  }
};

change_feed::change_feed(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

std::unique_ptr<change_feed> change_feed::start(const log_options& options, callback changed,
                                                std::chrono::milliseconds interval) {
  auto p = std::make_unique<impl>();
  p->options = options;
  p->changed = std::move(changed);
  p->interval = interval;
  impl* raw = p.get();
  p->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<change_feed>(new change_feed(std::move(p)));
}

change_feed::~change_feed() {
  impl_->stopping = true;
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace baton::log
