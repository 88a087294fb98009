// Agent sessions: each keeps its history and last turn in memory so a
// client may send only the new events of a turn. One decision per session at a time.
//
// A turn takes the session's history out (no copy) and hands it back with commit() or abort();
// while it is out the session is busy. The history's rendering (sorted keys, compact, as engines
// render a state) grows with it, so the state's hash never re-renders earlier events.
//
// The table holds at most max_sessions sessions and max_history_bytes_total bytes of what holding
// them costs (the history's JSON as kept, its rendering, its media, the entry). When a new session
// or a growing history would pass either, the least recently used session with nothing in flight
// (among the 64 least recently used) is forgotten (evicted): not busy, no agent-run tool's result
// awaited, no work of its own elsewhere (the escalations' `has_work`). Where none is, the least
// recently used one whose work
// is elsewhere goes (its escalation lives on in the desk; its agent sends the history again);
// only when every session has a turn out is a new one refused. A session ends when its agent
// says so (end()). The names of ended and evicted sessions are remembered, boundedly, to tell an
// agent that comes back why its session is gone.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "adapters/protocol/agent_protocol.hpp"
#include "core/error.hpp"
#include "core/json.hpp"
#include "tools/history_media.hpp"

namespace baton {

struct session_limits {
  std::size_t max_history_bytes = 4u << 20;  // one session's rendered history and media, as sent
  std::size_t max_history_bytes_total = std::size_t(512) << 20;  // what every session costs as held
  std::size_t max_sessions = 100000;
  std::chrono::seconds idle{3600};
};

// The heap bytes a JSON value holds as the server keeps it (nlohmann's ordered_json under glibc's
// malloc: its strings, vectors and their chunks; within 1 % of malloc's own count on histories).
std::size_t json_held_bytes(const json& j);
// What an entry costs besides its history: the table's node, the entry, its name and LRU place.
inline constexpr std::size_t session_entry_bytes = 512;

// A turn begun on a session: the history it decides on and its number.
struct session_turn {
  std::string session;
  std::int64_t turn = 0;
  json history;          // an array: moved into the request, and back before commit()
  std::string rendered;  // the history rendered without its closing "]"
  // The media items the history names by placeholder ("image 3"), in history order; what the
  // request carries is copied from here (tools::attach_media).
  std::vector<tools::history_item> media;
  std::size_t media_bytes = 0;  // what `media` holds (tools::held_bytes), counted in the history's size
  std::size_t json_bytes = 0;   // json_held_bytes of `history`, kept up to date as it grows
  bool append = false;
  std::size_t base_events = 0;    // append: events the session had before the turn
  std::size_t base_rendered = 0;  // append: rendered bytes before the turn
  std::size_t base_media = 0;     // append: media items before the turn
  std::ptrdiff_t reserved = 0;    // what the turn adds to the table's total (negative: frees)
  std::size_t grown = 0;          // held bytes add_event() added after begin(): counted at commit()

  // Appends one event to the turn's history (what a baton-run tool returned).
  void add_event(json event);

  std::size_t history_bytes() const noexcept { return rendered.size() + 1 + media_bytes; }
  std::string state_text() const { return rendered + "]"; }
  // state_hash(state_text(), request with every item of `media`) without building either: a
  // turn that differs from another only in a screenshot has another hash.
  std::string state_hash() const;
};

class session_table {
 public:
  // Whether a session has work elsewhere that keeps it from being evicted (an escalation pending,
  // a resolution unacknowledged, a tool baton runs for one). Asked under the table's lock: it must
  // not call back into the table.
  using work_check = std::function<bool(const std::string& session)>;
  explicit session_table(session_limits limits, work_check has_work = {})
      : limits_(limits), has_work_(std::move(has_work)) {}

  // Marks the session busy and builds the turn's history: `events` replace the history, or are
  // appended to it (`append`). `media` are the events' items (protocol::parse_frame took them
  // out): each takes its place in its event as a placeholder, "image N" with N counted per kind
  // over the session's history from 1 (a new `history` starts again at 1), and the items go to
  // the turn's `media`. Errors: UNKNOWN_SESSION, TURN_OUT_OF_ORDER, SESSION_BUSY, INVALID_FRAME
  // (no `turn`, and the next one is past protocol::max_turn), HISTORY_TOO_LARGE (the rendered
  // history and its media's bytes), TOO_MANY_SESSIONS (no room, and every other session has a
  // turn out); the session is then unchanged. An unknown session's UNKNOWN_SESSION says
  // whether it ended or was evicted.
  result<session_turn> begin(const std::string& session, std::optional<std::int64_t> turn, bool append,
                             json&& events, std::vector<protocol::event_item>&& media = {});
  // The turn was decided and delivered: its history becomes the session's. The session stays busy.
  void commit(session_turn&& t);
  // The turn was refused after begin(): the session gets its history back as it was, not busy.
  // True when the session ended with it (end() was asked while the turn was out).
  bool abort(session_turn&& t);
  // Appends one event to a committed session (what a baton-run tool returned).
  void add_event(const std::string& session, json event);
  // The turn ended after commit(): the session takes decisions again. True when the session
  // ended with it (end() was asked while the turn was out).
  bool release(const std::string& session);

  // The session's last decision awaits the result of a tool its agent runs: it is not evicted
  // until tool_reported() for that decision, its next turn, or its idle time runs out.
  void await_tool(const std::string& session, const std::string& decision);
  void tool_reported(const std::string& session, const std::string& decision);

  enum class end_result {
    ended,    // forgotten now (or was already: it ended or was evicted before)
    pending,  // a turn is out: it ends when release() or abort() hands the session back
    unknown,  // never held here, as far as the table remembers
  };
  end_result end(const std::string& session);

  std::size_t size() const;
  std::size_t held_bytes() const;  // what every session costs as held (the budget's count)
  struct counts {
    std::uint64_t ended = 0, evicted = 0, expired = 0;  // since start: by their agents, under pressure, idle
  };
  counts counted() const;

 private:
  struct entry {
    json history = json::array();
    std::string rendered = "[";
    std::vector<tools::history_item> media;
    std::size_t media_bytes = 0;
    std::size_t json_bytes = 0;  // json_held_bytes(history)
    std::size_t bytes = 0;  // held bytes counted in total_bytes_ (kept while a turn holds them)
    std::int64_t turn = 0;  // the last committed turn; 0: none yet
    bool busy = false;
    bool committed = false;  // a turn was decided at least once
    bool ending = false;     // end() was asked while a turn was out
    std::string awaiting;    // the decision whose agent-run tool's result is awaited; empty: none
    std::chrono::steady_clock::time_point used;
    std::list<const std::string*>::iterator place;  // in lru_
  };
  using map = std::unordered_map<std::string, entry>;
  enum class gone_why { ended, evicted, expired };

  // The least recently used first; touched when a turn begins and when it is handed back.
  void touch(map::iterator it);
  void drop(map::iterator it);  // out of the table, its bytes and its place in lru_
  // drop(), remembering why the name is gone and counting it.
  void forget(map::iterator it, gone_why why);
  // Forgets sessions idle past limits_.idle (from the least recently used), then evicts until
  // `sessions` more fit in max_sessions and `bytes` more in the budget; `keep` is never evicted.
  // False when that much room cannot be made.
  bool make_room(std::size_t sessions, std::size_t bytes, const std::string* keep, std::chrono::steady_clock::time_point now);
  bool evictable(const std::string& name, const entry& e) const;
  // The least recently used sessions make_room looks at for one with nothing in flight.
  static constexpr std::size_t idle_look = 64;

  session_limits limits_;
  work_check has_work_;
  mutable std::mutex mutex_;
  map sessions_;
  std::list<const std::string*> lru_;  // the keys of sessions_ (stable in an unordered_map)
  std::size_t total_bytes_ = 0;  // Σ held bytes of the sessions and their turns in flight
  // Names of sessions that ended or were forgotten, the most recent max_gone, and why (read only
  // for a name not in sessions_: one used again keeps its entry here).
  static constexpr std::size_t max_gone = 65536;
  std::unordered_map<std::string, gone_why> gone_;
  std::deque<std::string> gone_order_;
  counts counts_;
};

// Appends an event's rendering (sorted keys, compact) to a rendered history, with its separator.
void append_rendered(const json& event, std::string& rendered);

}  // namespace baton
