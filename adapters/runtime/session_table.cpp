#include "adapters/runtime/session_table.hpp"

#include <algorithm>
#include <array>

#include "adapters/protocol/agent_protocol.hpp"
#include "core/error_codes.hpp"
#include "core/request.hpp"

namespace baton {

namespace {

// A malloc chunk of glibc on x86-64 for a request of n bytes: 8 bytes of header, 16-byte steps, 32
// at least.
std::size_t chunk(std::size_t n) { return n == 0 ? 0 : std::max<std::size_t>(32, (n + 8 + 15) / 16 * 16); }

// A std::string's heap beyond its short buffer (15 characters).
std::size_t string_heap(std::size_t n) { return n > 15 ? chunk(n + 1) : 0; }

}  // namespace

std::size_t json_held_bytes(const json& j) {
  switch (j.type()) {
    case json::value_t::string:
      return chunk(sizeof(std::string)) + string_heap(j.get_ref<const std::string&>().size());
    case json::value_t::object: {
      const auto& o = j.get_ref<const json::object_t&>();
      std::size_t b = chunk(sizeof(json::object_t)) + chunk(o.capacity() * sizeof(json::object_t::value_type));
      for (const auto& [key, value] : o) b += string_heap(key.size()) + json_held_bytes(value);
      return b;
    }
    case json::value_t::array: {
      const auto& a = j.get_ref<const json::array_t&>();
      std::size_t b = chunk(sizeof(json::array_t)) + chunk(a.capacity() * sizeof(json));
      for (const json& e : a) b += json_held_bytes(e);
      return b;
    }
    case json::value_t::binary: return chunk(sizeof(json::binary_t)) + chunk(j.get_binary().size());
    default: return 0;  // held in the value itself
  }
}

namespace {

// What a session with this history costs as held (rendered: its compact rendering's length).
std::size_t held_bytes_of(std::size_t json_bytes, std::size_t rendered, std::size_t media_bytes) {
  return session_entry_bytes + json_bytes + chunk(rendered + 1) + media_bytes;
}

}  // namespace

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
  const std::size_t event_bytes = json_held_bytes(event);
  history.push_back(std::move(event));
  json_bytes += event_bytes;
  grown += rendered.size() - before + event_bytes;
}

void session_table::touch(map::iterator it) {
  lru_.splice(lru_.end(), lru_, it->second.place);
  it->second.used = std::chrono::steady_clock::now();
}

void session_table::drop(map::iterator it) {
  total_bytes_ -= it->second.bytes;
  lru_.erase(it->second.place);
  sessions_.erase(it);
}

void session_table::forget(map::iterator it, gone_why why) {
  if (gone_.insert_or_assign(it->first, why).second) {
    gone_order_.push_back(it->first);
    if (gone_order_.size() > max_gone) {
      gone_.erase(gone_order_.front());
      gone_order_.pop_front();
    }
  }
  ++(why == gone_why::ended ? counts_.ended : why == gone_why::evicted ? counts_.evicted : counts_.expired);
  drop(it);
}

bool session_table::evictable(const std::string& name, const entry& e) const {
  return !e.busy && e.awaiting.empty() && !(has_work_ && has_work_(name));
}

bool session_table::make_room(std::size_t sessions, std::size_t bytes, const std::string* keep,
                              std::chrono::steady_clock::time_point now) {
  auto fits = [&] {
    return sessions_.size() + sessions <= limits_.max_sessions && total_bytes_ + bytes <= limits_.max_history_bytes_total;
  };
  // Among the least recently used (a bounded look, so that a table full of sessions with work
  // elsewhere costs no scan of it all), those idle past the limit are forgotten whatever they wait
  // for, and those with nothing in flight are evicted. Then, rather than refuse, the least
  // recently used without a turn out: one whose work is elsewhere (an escalation, a tool's result)
  // holds here only a copy of the history its agent sends again, while its escalation and its
  // resolution live on in the desk. The list's order is never changed here.
  std::size_t looked = 0;
  for (auto p = lru_.begin(); p != lru_.end() && looked < idle_look && !fits(); ++looked) {
    const auto it = sessions_.find(**p);
    ++p;
    const bool expired = !it->second.busy && now - it->second.used > limits_.idle;
    if (&it->first != keep && (expired || evictable(it->first, it->second))) {
      forget(it, expired ? gone_why::expired : gone_why::evicted);
    }
  }
  for (auto p = lru_.begin(); p != lru_.end() && !fits();) {
    const auto it = sessions_.find(**p);
    ++p;
    if (&it->first != keep && !it->second.busy) forget(it, gone_why::evicted);
  }
  return fits();
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
  // The events' JSON as the session will keep it: their own heap, and their slots in the history.
  std::size_t added_json = 0;
  for (const json& e : events) added_json += json_held_bytes(e) + sizeof(json);

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
  auto it = sessions_.find(session);
  bool created = false;
  if (it == sessions_.end()) {
    if (append) {
      const auto gone = gone_.find(session);
      const std::string why = gone == gone_.end()             ? "no session `" + session + "` on this server"
                              : gone->second == gone_why::ended ? "session `" + session + "` ended"
                              : gone->second == gone_why::evicted
                                  ? "session `" + session + "` was forgotten to make room for others"
                                  : "session `" + session + "` was forgotten after " +
                                        std::to_string(limits_.idle.count()) + " s idle";
      return make_error(409, codes::unknown_session, why + ": send the full history");
    }
    if (!make_room(1, 0, nullptr, now)) {
      return make_error(503, codes::too_many_sessions,
                        "the server holds " + std::to_string(sessions_.size()) + " sessions (server.max_sessions " +
                            std::to_string(limits_.max_sessions) + ") and each has a decision in flight; retry later");
    }
    it = sessions_.emplace(session, entry{}).first;
    it->second.place = lru_.insert(lru_.end(), &it->first);
    created = true;
  }
  // A refusal leaves the table as it was: no empty entry for a first turn that was refused.
  auto refuse = [&](error e) -> result<session_turn> {
    if (created) drop(it);
    return e;
  };
  entry& e = it->second;
  if (e.busy) return make_error(409, codes::session_busy, "session `" + session + "` has a decision in flight");
  if (e.ending) return make_error(409, codes::session_busy, "session `" + session + "` is ending");
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
  // Every session together is bounded too, by what holding them costs: others make room.
  const std::size_t json_bytes = (append ? e.json_bytes : chunk(sizeof(json::array_t))) + added_json;
  const std::size_t held = held_bytes_of(json_bytes, bytes - media_bytes, media_bytes);
  const std::ptrdiff_t delta = static_cast<std::ptrdiff_t>(held) - static_cast<std::ptrdiff_t>(e.bytes);
  if (delta > 0 && !make_room(0, static_cast<std::size_t>(delta), &it->first, now)) {
    return refuse(make_error(503, codes::too_many_sessions,
                             "the sessions hold " + std::to_string(total_bytes_) +
                                 " bytes (server.max_history_bytes_total " +
                                 std::to_string(limits_.max_history_bytes_total) +
                                 ") and the others have decisions in flight; retry later"));
  }
  total_bytes_ = static_cast<std::size_t>(static_cast<std::ptrdiff_t>(total_bytes_) + delta);
  session_turn t;
  t.session = session;
  t.turn = turn.value_or(next);
  t.append = append;
  t.reserved = delta;
  t.media_bytes = media_bytes;
  t.json_bytes = json_bytes;
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
  e.awaiting.clear();  // a next turn: the agent has moved on from the last decision's tool
  touch(it);
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
  it->second.json_bytes = t.json_bytes;
  it->second.bytes = static_cast<std::size_t>(static_cast<std::ptrdiff_t>(it->second.bytes) + t.reserved) + t.grown;
  total_bytes_ += t.grown;
  it->second.turn = t.turn;
  it->second.committed = true;
}

bool session_table::abort(session_turn&& t) {
  std::lock_guard lock(mutex_);
  const auto it = sessions_.find(t.session);
  if (it == sessions_.end()) return false;
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
  touch(it);
  if (e.ending) {
    forget(it, gone_why::ended);
    return true;
  }
  if (!e.committed) drop(it);
  return false;
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
  const std::size_t event_bytes = json_held_bytes(event);
  it->second.history.push_back(std::move(event));
  it->second.json_bytes += event_bytes;
  it->second.bytes += it->second.rendered.size() - before + event_bytes;
  total_bytes_ += it->second.rendered.size() - before + event_bytes;
}

bool session_table::release(const std::string& session) {
  std::lock_guard lock(mutex_);
  const auto it = sessions_.find(session);
  if (it == sessions_.end()) return false;
  it->second.busy = false;
  touch(it);
  if (it->second.ending) {
    forget(it, gone_why::ended);
    return true;
  }
  // A session whose first turn was never decided holds nothing worth keeping.
  if (!it->second.committed) drop(it);
  return false;
}

void session_table::await_tool(const std::string& session, const std::string& decision) {
  std::lock_guard lock(mutex_);
  if (const auto it = sessions_.find(session); it != sessions_.end()) it->second.awaiting = decision;
}

void session_table::tool_reported(const std::string& session, const std::string& decision) {
  std::lock_guard lock(mutex_);
  if (const auto it = sessions_.find(session); it != sessions_.end() && it->second.awaiting == decision) {
    it->second.awaiting.clear();
  }
}

session_table::end_result session_table::end(const std::string& session) {
  std::lock_guard lock(mutex_);
  const auto it = sessions_.find(session);
  if (it == sessions_.end()) return gone_.contains(session) ? end_result::ended : end_result::unknown;
  if (it->second.busy) {
    it->second.ending = true;
    return end_result::pending;
  }
  forget(it, gone_why::ended);
  return end_result::ended;
}

std::size_t session_table::size() const {
  std::lock_guard lock(mutex_);
  return sessions_.size();
}

std::size_t session_table::held_bytes() const {
  std::lock_guard lock(mutex_);
  return total_bytes_;
}

session_table::counts session_table::counted() const {
  std::lock_guard lock(mutex_);
  return counts_;
}

}  // namespace baton
