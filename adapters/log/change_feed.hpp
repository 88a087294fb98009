// What other instances wrote to a shared (PostgreSQL) log, as it happens: LISTEN on the channel
// the store NOTIFYs in every transaction that adds escalations, resolutions or deliveries, with
// what it added: the writing instance's name on the first line, then "e ID", "v ID ESCALATION"
// or "d RESOLUTION", a line each.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include "adapters/log/decision_log.hpp"

namespace baton::log {

class change_feed {
 public:
  // Listens on `options.url` from a thread of its own and calls `changed` there: with each
  // notification's payload (`notified`), once connected (`connected`: whatever a lost connection
  // missed is to be read again), and every `interval` (`tick`). A connection that fails is made
  // again, quietly, every half second.
  enum class event { notified, connected, tick };
  using callback = std::function<void(event, const std::string& payload)>;
  static std::unique_ptr<change_feed> start(const log_options& options, callback changed,
                                            std::chrono::milliseconds interval);
  ~change_feed();  // stops the thread

 private:
  struct impl;
  explicit change_feed(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace baton::log
