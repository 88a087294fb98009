// Agent sessions: each keeps its history and last turn in memory so a
// client may send only the new events of a turn. One decision per session at a time.
//
// A turn takes the session's history out (no copy) and hands it back with commit() or abort();
// while it is out the session is busy. The history's rendering (sorted keys, compact, as engines
// render a state) grows with it, so the state's hash never re-renders earlier events.
#pragma once

#include <chrono>
#include <cstdint>
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
  std::size_t max_history_bytes = 4u << 20;
  std::size_t max_history_bytes_total = std::size_t(256) << 20;  // every session's rendered history
  std::size_t max_sessions = 100000;
  std::chrono::seconds idle{3600};
};

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
  bool append = false;
  std::size_t base_events = 0;    // append: events the session had before the turn
  std::size_t base_rendered = 0;  // append: rendered bytes before the turn
  std::size_t base_media = 0;     // append: media items before the turn
  std::ptrdiff_t reserved = 0;    // what the turn adds to the table's total (negative: frees)
  std::size_t grown = 0;          // rendered bytes add_event() added after begin(): counted at commit()

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
  explicit session_table(session_limits limits) : limits_(limits) {}

  // Marks the session busy and builds the turn's history: `events` replace the history, or are
  // appended to it (`append`). `media` are the events' items (protocol::parse_frame took them
  // out): each takes its place in its event as a placeholder, "image N" with N counted per kind
  // over the session's history from 1 (a new `history` starts again at 1), and the items go to
  // the turn's `media`. Errors: UNKNOWN_SESSION, TURN_OUT_OF_ORDER, SESSION_BUSY, INVALID_FRAME
  // (no `turn`, and the next one is past protocol::max_turn), HISTORY_TOO_LARGE (the rendered
  // history and its media's bytes), TOO_MANY_SESSIONS; the session is then unchanged.
  result<session_turn> begin(const std::string& session, std::optional<std::int64_t> turn, bool append,
                             json&& events, std::vector<protocol::event_item>&& media = {});
  // The turn was decided and delivered: its history becomes the session's. The session stays busy.
  void commit(session_turn&& t);
  // The turn was refused after begin(): the session gets its history back as it was, not busy.
  void abort(session_turn&& t);
  // Appends one event to a committed session (what a baton-run tool returned).
  void add_event(const std::string& session, json event);
  // The turn ended after commit(): the session takes decisions again.
  void release(const std::string& session);

  std::size_t size() const;
  std::size_t history_bytes() const;  // rendered and media, over every session

 private:
  struct entry {
    json history = json::array();
    std::string rendered = "[";
    std::vector<tools::history_item> media;
    std::size_t media_bytes = 0;
    std::size_t bytes = 0;  // rendered and media bytes counted in total_bytes_ (kept while a turn holds them)
    std::int64_t turn = 0;  // the last committed turn; 0: none yet
    bool busy = false;
    bool committed = false;  // a turn was decided at least once
    std::chrono::steady_clock::time_point used;
  };
  void forget_idle(std::chrono::steady_clock::time_point now);

  session_limits limits_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, entry> sessions_;
  std::size_t total_bytes_ = 0;  // Σ rendered and media bytes of the sessions' histories and turns in flight
};

// Appends an event's rendering (sorted keys, compact) to a rendered history, with its separator.
void append_rendered(const json& event, std::string& rendered);

}  // namespace baton
