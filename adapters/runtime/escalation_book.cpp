#include "adapters/runtime/escalation_book.hpp"

#include <algorithm>

namespace baton {

void escalation_book::add_pending_locked(std::unique_ptr<pending_escalation> e) {
  e->order = ++raised_count_;
  raised_order.emplace(e->order, e.get());
  pending.emplace(e->escalation.row.id, std::move(e));
}

void escalation_book::remove_pending_locked(pending_map::iterator it) {
  if (it->second->timer) it->second->timer->cancel();
  raised_order.erase(it->second->order);
  pending.erase(it);
}

std::shared_ptr<agent_connection> escalation_book::connection_locked(const std::string& session) const {
  const auto it = sessions.find(session);
  return it == sessions.end() ? nullptr : it->second.lock();
}

void escalation_book::remember_connection_locked(const std::string& session, const std::shared_ptr<agent_connection>& c) {
  sessions[session] = c;
  if (sessions.size() > 2 * live_mark_ + 64) {
    std::erase_if(sessions, [](const auto& s) { return s.second.expired(); });
    live_mark_ = sessions.size();
  }
}

bool escalation_book::has_work_locked(const std::string& session) const {
  return tools_running.contains(session) ||
         std::any_of(waiting.begin(), waiting.end(), [&](const auto& x) { return x.second.session == session; }) ||
         std::any_of(pending.begin(), pending.end(), [&](const auto& x) { return x.second->escalation.row.session == session; });
}

void escalation_book::forget_if_done_locked(const std::string& session) {
  if (!has_work_locked(session)) sessions.erase(session);
}

void escalation_book::broadcast_locked(const std::string& frame) {
  for (auto it = listeners.begin(); it != listeners.end();) {
    if (auto l = it->lock()) {
      l->send(frame);
      ++it;
    } else {
      it = listeners.erase(it);
    }
  }
}

}  // namespace baton
