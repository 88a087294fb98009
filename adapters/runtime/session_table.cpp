#include "adapters/runtime/session_table.hpp"

#include <algorithm>
#include <array>

#include "adapters/protocol/agent_protocol.hpp"
#include "core/error_codes.hpp"
#include "core/request.hpp"

namespace baton {

void append_rendered(const json& event, std::string& rendered) {
  if (rendered.size() > 1) rendered.push_back(',');
  render_json(event, rendered, true);
}

std::string session_turn::state_hash() const {
  // In a request's order: every image, then every clip, then every video.
  std::vector<media_ref> refs;
  refs.reserve(media.size());
  for (const tools::media_kind kind : tools::media_kinds) {
    for (const tools::history_item& m : media) {
      if (m.kind == kind) refs.push_back({tools::field_name(kind), &m.item});
    }
  }
  return state_hash_of_parts({rendered, "]"}, refs);
}

void session_turn::add_event(json event) {
  const std::size_t before = rendered.size();
  append_rendered(event, rendered);
  history.push_back(std::move(event));
  grown += rendered.size() - before;
}

void session_table::forget_idle(std::chrono::steady_clock::time_point now) {
  std::erase_if(sessions_, [&](const auto& kv) {
    if (kv.second.busy || now - kv.second.used <= limits_.idle) return false;
    total_bytes_ -= kv.second.bytes;
    return true;
  });
}

result<session_turn> session_table::begin(const std::string& session, std::optional<std::int64_t> turn, bool append,
                                          json&& events, std::vector<protocol::event_item>&& media) {
  const auto now = std::chrono::steady_clock::now();
  // Rendered outside the lock: the new events only. Their media's digests too.
  std::vector<tools::history_item> items;
  items.reserve(media.size());
  std::size_t added_media = 0;
  for (protocol::event_item& m : media) {
    items.push_back(tools::make_history_item(*tools::kind_of_field(m.field), m.event, m.slot, std::move(m.item)));
    added_media += tools::held_bytes(items.back());
  }
  std::string added;
  if (items.empty()) {
    for (const json& e : events) append_rendered(e, added);
  }

  std::lock_guard lock(mutex_);
  if (!items.empty()) {
    // The placeholders' numbers go on from the session's: these events are named and rendered
    // under the lock (their items are out of them, so they are small).
    std::array<std::size_t, tools::media_kinds.size()> count{};
    std::size_t first_event = 0;
    if (const auto found = sessions_.find(session); append && found != sessions_.end()) {
      for (const tools::history_item& m : found->second.media) ++count[std::size_t(m.kind)];
      first_event = found->second.history.size();
    }
    for (tools::history_item& m : items) {
      m.number = ++count[std::size_t(m.kind)];
      events[m.event][std::string(tools::field_name(m.kind))][m.slot] = tools::placeholder(m.kind, m.number);
      m.event += first_event;
    }
    for (const json& e : events) append_rendered(e, added);
  }
  if (total_bytes_ + added.size() + added_media > limits_.max_history_bytes_total) forget_idle(now);
  auto it = sessions_.find(session);
  bool created = false;
  if (it == sessions_.end()) {
    if (append) {
      return make_error(409, codes::unknown_session,
                        "no session `" + session + "` on this server: send the full history first");
    }
    if (sessions_.size() >= limits_.max_sessions) forget_idle(now);
    if (sessions_.size() >= limits_.max_sessions) {
      return make_error(503, codes::too_many_sessions, "the server holds " + std::to_string(limits_.max_sessions) +
                                                      " sessions; retry later");
    }
    it = sessions_.emplace(session, entry{}).first;
    created = true;
  }
  // A refusal leaves the table as it was: no empty entry for a first turn that was refused.
  auto refuse = [&](error e) -> result<session_turn> {
    if (created) sessions_.erase(it);
    return e;
  };
  entry& e = it->second;
  if (e.busy) return make_error(409, codes::session_busy, "session `" + session + "` has a decision in flight");
  if (append && !e.committed) {
    return make_error(409, codes::unknown_session, "session `" + session + "` has no decided turn yet: send the full history");
  }
  const std::int64_t next = e.turn + 1;
  if (turn && (append ? *turn != next : *turn < next)) {
    return make_error(409, codes::turn_out_of_order, "turn " + std::to_string(*turn) + " of session `" + session +
                                                    "`: the next turn is " + std::to_string(next));
  }
  // A turn the frame left out is the next one, and within the same limit as one it names.
  if (!turn && next > protocol::max_turn) {
    return refuse(protocol::turn_too_large("the next turn of session `" + session + "` would be " +
                                           std::to_string(next)));
  }
  const std::size_t base = append ? e.rendered.size() : 1;
  const std::size_t media_bytes = (append ? e.media_bytes : 0) + added_media;
  const std::size_t bytes = base + (base > 1 && !added.empty() ? 1 : 0) + added.size() + 1 + media_bytes;
  if (bytes > limits_.max_history_bytes) {
    return refuse(make_error(413, codes::history_too_large,
                             "the history of session `" + session + "` would take " + std::to_string(bytes) +
                                 " bytes" + (media_bytes ? ", " + std::to_string(media_bytes) + " of them media" : "") +
                                 " (limit " + std::to_string(limits_.max_history_bytes) + ")"));
  }
  // Every session's history together is bounded too: memory, not just one session's size.
  const std::ptrdiff_t delta = static_cast<std::ptrdiff_t>(bytes) - static_cast<std::ptrdiff_t>(e.bytes);
  if (delta > 0 && total_bytes_ + static_cast<std::size_t>(delta) > limits_.max_history_bytes_total) {
    return refuse(make_error(503, codes::too_many_sessions,
                             "the sessions already hold " + std::to_string(total_bytes_) +
                                 " bytes of history (server.max_history_bytes_total); retry later"));
  }
  total_bytes_ = static_cast<std::size_t>(static_cast<std::ptrdiff_t>(total_bytes_) + delta);
  session_turn t;
  t.session = session;
  t.turn = turn.value_or(next);
  t.append = append;
  t.reserved = delta;
  t.media_bytes = media_bytes;
  if (append) {
    t.base_events = e.history.size();
    t.base_rendered = e.rendered.size();
    t.base_media = e.media.size();
    t.history = std::move(e.history);
    t.rendered = std::move(e.rendered);
    t.media = std::move(e.media);
    for (tools::history_item& m : items) t.media.push_back(std::move(m));
    for (json& ev : events) t.history.push_back(std::move(ev));
    if (!added.empty()) {
      if (t.rendered.size() > 1) t.rendered.push_back(',');
      t.rendered += added;
    }
  } else {
    t.history = std::move(events);
    t.rendered = "[" + added;
    t.media = std::move(items);
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
  it->second.rendered = std::move(t.rendered);
  it->second.media = std::move(t.media);
  it->second.media_bytes = t.media_bytes;
  it->second.bytes = static_cast<std::size_t>(static_cast<std::ptrdiff_t>(it->second.bytes) + t.reserved) + t.grown;
  total_bytes_ += t.grown;
  it->second.turn = t.turn;
  it->second.committed = true;
}

void session_table::abort(session_turn&& t) {
  std::lock_guard lock(mutex_);
  const auto it = sessions_.find(t.session);
  if (it == sessions_.end()) return;
  entry& e = it->second;
  total_bytes_ = static_cast<std::size_t>(static_cast<std::ptrdiff_t>(total_bytes_) - t.reserved);
  if (t.append) {
    // The history went out with the turn: give it back without this turn's events.
    if (t.history.is_array()) {
      t.history.erase(t.history.begin() + static_cast<std::ptrdiff_t>(std::min(t.base_events, t.history.size())),
                      t.history.end());
    }
    t.rendered.resize(t.base_rendered);
    t.media.erase(t.media.begin() + static_cast<std::ptrdiff_t>(std::min(t.base_media, t.media.size())), t.media.end());
    e.history = std::move(t.history);
    e.rendered = std::move(t.rendered);
    e.media = std::move(t.media);
  }
  e.busy = false;
  e.used = std::chrono::steady_clock::now();
  if (!e.committed) sessions_.erase(it);
}

void session_table::add_event(const std::string& session, json event) {
  std::string added;
  append_rendered(event, added);
  std::lock_guard lock(mutex_);
  const auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  const std::size_t before = it->second.rendered.size();
  if (before > 1) it->second.rendered.push_back(',');
  it->second.rendered += added;
  it->second.history.push_back(std::move(event));
  it->second.bytes += it->second.rendered.size() - before;
  total_bytes_ += it->second.rendered.size() - before;
}

void session_table::release(const std::string& session) {
  std::lock_guard lock(mutex_);
  const auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  it->second.busy = false;
  it->second.used = std::chrono::steady_clock::now();
  // A session whose first turn was never decided holds nothing worth keeping.
  if (!it->second.committed) {
    total_bytes_ -= it->second.bytes;
    sessions_.erase(it);
  }
}

std::size_t session_table::size() const {
  std::lock_guard lock(mutex_);
  return sessions_.size();
}

std::size_t session_table::history_bytes() const {
  std::lock_guard lock(mutex_);
  return total_bytes_;
}

}  // namespace baton
