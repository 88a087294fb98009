// What other instances wrote to a shared (PostgreSQL) log, as it happens: LISTEN on the channel
// the store NOTIFYs in every transaction that adds escalations, resolutions or deliveries.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include "adapters/log/decision_log.hpp"

namespace baton::log {

class change_feed {
 public:
  // Listens on `options.url` from a thread of its own: calls `changed` there after each
  // notification, and every `interval` besides (what a lost connection missed is caught up
  // then). A connection that fails is made again, quietly, every half second.
  static std::unique_ptr<change_feed> start(const log_options& options, std::function<void()> changed,
                                            std::chrono::milliseconds interval);
  ~change_feed();  // stops the thread

 private:
  struct impl;
  explicit change_feed(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace baton::log
