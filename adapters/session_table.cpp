#include "adapters/session_table.hpp"

namespace baton {

std::size_t event_bytes(const json& event) {
  std::string s;
  render_json(event, s, true);
  return s.size() + 1;
}

void session_table::forget_idle(std::chrono::steady_clock::time_point now) {
  std::erase_if(sessions_, [&](const auto& kv) { return !kv.second.busy && now - kv.second.used > limits_.idle; });
}

result<session_turn> session_table::begin(const std::string& session, std::optional<std::int64_t> turn, bool append,
                                          const json& events) {
  const auto now = std::chrono::steady_clock::now();
  std::size_t added = 0;
  for (const json& e : events) added += event_bytes(e);

  std::lock_guard lock(mutex_);
  auto it = sessions_.find(session);
  if (it == sessions_.end()) {
    if (append) {
      return make_error(409, "UNKNOWN_SESSION",
                        "no session `" + session + "` on this server: send the full history first");
    }
    if (sessions_.size() >= limits_.max_sessions) forget_idle(now);
    if (sessions_.size() >= limits_.max_sessions) {
      return make_error(503, "TOO_MANY_SESSIONS", "the server holds " + std::to_string(limits_.max_sessions) +
                                                      " sessions; retry later");
    }
    it = sessions_.emplace(session, entry{}).first;
  }
  entry& e = it->second;
  if (e.busy) return make_error(409, "SESSION_BUSY", "session `" + session + "` has a decision in flight");
  if (append && !e.committed) {
    return make_error(409, "UNKNOWN_SESSION", "session `" + session + "` has no decided turn yet: send the full history");
  }
  const std::int64_t next = e.turn + 1;
  if (turn && (append ? *turn != next : *turn < next)) {
    return make_error(409, "TURN_OUT_OF_ORDER", "turn " + std::to_string(*turn) + " of session `" + session +
                                                    "`: the next turn is " + std::to_string(next));
  }
  session_turn t{session, turn.value_or(next), json(), 0};
  t.history_bytes = append ? e.history_bytes + added : 2 + added;
  if (t.history_bytes > limits_.max_history_bytes) {
    return make_error(413, "HISTORY_TOO_LARGE", "the history of session `" + session + "` would take " +
                                                    std::to_string(t.history_bytes) + " bytes (limit " +
                                                    std::to_string(limits_.max_history_bytes) + ")");
  }
  if (append) {
    t.history = e.history;
    for (const json& ev : events) t.history.push_back(ev);
  } else {
    t.history = events;
  }
  e.busy = true;
  e.used = now;
  return t;
}

void session_table::commit(session_turn&& t) {
  std::lock_guard lock(mutex_);
  const auto it = sessions_.find(t.session);
  if (it == sessions_.end()) return;
  it->second.history = std::move(t.history);
  it->second.history_bytes = t.history_bytes;
  it->second.turn = t.turn;
  it->second.committed = true;
}

void session_table::add_event(const std::string& session, json event) {
  const std::size_t bytes = event_bytes(event);
  std::lock_guard lock(mutex_);
  const auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  it->second.history.push_back(std::move(event));
  it->second.history_bytes += bytes;
}

void session_table::release(const std::string& session) {
  std::lock_guard lock(mutex_);
  const auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  it->second.busy = false;
  it->second.used = std::chrono::steady_clock::now();
  // A session created by a turn that never got decided holds nothing worth keeping.
  if (!it->second.committed) sessions_.erase(it);
}

std::size_t session_table::size() const {
  std::lock_guard lock(mutex_);
  return sessions_.size();
}

}  // namespace baton
