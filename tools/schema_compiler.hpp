// The schema compiler: (registry, session history) → one SystemOne request.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/json.hpp"
#include "core/limits.hpp"
#include "core/request.hpp"
#include "tools/history_media.hpp"
#include "tools/registry.hpp"

namespace baton::tools {

// One request: `state` is the history (a JSON array of events, as given); the questions are, in
// this order, `tool` (a choice over the tool ids, then `finish` when configured), each tool's choice
// and boolean parameters as "<tool_id>.<param>" (choice and noul), then the global questions.
//
// Engines render a non-string state with sorted keys and compact separators, each event on its
// own, so the rendered history of n events without its closing "]" is a prefix of the rendered
// history of n + 1 events: a prefix cache keeps what earlier turns computed.
//
// `extra_questions` (an object, or null for none) are asked after those, in their order; an id the
// registry uses is 422 QUESTION_CONFLICT.
//
// Validated with request_from_json against `limits`: what comes back is what the engines accept.
// 422 INVALID_HISTORY when the history is not an array.
result<request> compile_schema(const registry& r, json history, const request_limits& limits,
                               const json& extra_questions = nullptr);

// The same request with an empty history: what every turn asks, validated once. A turn is this
// request with its history as `state` (a server keeps it and moves each turn's history in).
result<request> compile_questions(const registry& r, const request_limits& limits,
                                  const json& extra_questions = nullptr);

// "sha256:…" over the questions in order (ids, types, instructions, criteria); the state is left
// out, so every turn of one registry has the same schema hash.
std::string schema_hash(const request& r);

// How an agent's history is fitted to the engine's context window (`routing.keep_first`,
// `routing.drop_fraction`). An engine cuts a state that does not fit from its end, which would lose
// the newest events; the runtime drops the oldest ones instead, in chunks, so that what it sends
// starts at the same event for many turns and a prefix cache keeps hitting (llama.cpp's n_keep and
// context shift).
struct event_dropping {
  std::size_t keep_first = 1;  // the first events (the task as first stated) are never dropped
  double fraction = 0.25;      // in (0, 1]: a chunk's share of the droppable events that fit
};

// The events drop_oldest_events left out of a state, from `at`: of a state the request holds, the
// events themselves, oldest first (restore_events puts them back); of a history it refers to, how
// many it skips.
struct dropped_events {
  std::size_t at = 0;
  std::vector<json> events;
  std::size_t skipped = 0;
  std::size_t count() const noexcept { return events.size() + skipped; }
};

// Tokens of the state the engine would cut to fit its window (decision_engine::state_overflow).
using overflow_measure = std::function<result<std::size_t>(const request&)>;

// Drops the oldest events of the request's state until `overflow` says it fits: never the first
// `keep_first` nor the newest event. A history the request refers to (an agent turn's) is measured
// whole (an earlier window's cut undone: another engine's turn), read without them, and stays as
// it is; an array state the request holds loses them; any other state is
// left as it is. When even the kept events do not fit, everything else is dropped and the engine
// cuts what remains (its end).
//
// Cuts fall on multiples of a chunk: `fraction` of the droppable events that fit (those kept by
// the smallest cut that fits), rounded down to a power of two, at least 1; the fewest chunks that
// fit are dropped. While a history grows by a few events a turn the chunk stays the same, so each
// turn drops what the turn before dropped until the window is full again, and then one chunk
// more: the state sent keeps its prefix for about a chunk of events.
//
// Asks `overflow` once when the state fits, O(log events) times when it does not. Its error comes
// back as it is, with `req` unchanged.
result<dropped_events> drop_oldest_events(request& req, const event_dropping& how, const overflow_measure& overflow);

// Puts dropped events back where they were (the state the engine handed back).
void restore_events(json& state, dropped_events dropped);

// What of a history's media a request carries (attach_media).
struct attached_media {
  std::vector<std::size_t> sent;  // indices into the history's media, in the request's order
  std::size_t left_out = 0;       // items the history holds that the request does not carry
};

// Puts the history's media (an agent session's items, in history order) into `req.images`,
// `req.audio` and `req.videos`, as copies in history order, replacing what `req` had:
// - the items of the events drop_oldest_events left out (`dropped`) are left out with them;
// - of a kind the model reads, only the newest that fit `limits` go: at most `max_items`, then
//   the oldest dropped until the per-request byte totals hold (images; audio and videos
//   together). An agent that sends a screenshot every turn keeps going on its latest ones;
// - a kind the model does not read goes whole, for check_media_limits to refuse as the SystemOne
//   API refuses it.
attached_media attach_media(request& req, const std::vector<history_item>& media, const request_limits& limits,
                            const dropped_events& dropped);

}  // namespace baton::tools
