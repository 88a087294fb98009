// The schema compiler: (registry, session history) → one SystemOne request.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/answers.hpp"
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

// Two-stage routing, for a registry larger than one choice should be (`routing.max_options`, or
// the engine's limits): the first request asks which group fits (`tool`, a choice over the groups
// in order of their first tool, then `finish` when configured) with the global questions; the
// second, on the same state, which tool of that group (`tool` over its tools) with their
// parameter questions. The state comes before the questions in what an engine reads, so the second
// request's prefix is the first's and a prefix cache serves it.
struct staged_questions {
  request first;
  registry first_registry;  // what `first` is compiled from: the groups as options (extra questions join it)
  std::vector<std::string> groups;                            // the first stage's options, in order
  std::map<std::string, std::vector<std::string>> members;   // group → its tool ids, in registry order
  // group → the second stage; for a group of one tool only its parameter questions (no `tool`),
  // and none when it has no choice or boolean parameter.
  std::map<std::string, request> second;
  std::string schema_hash;                // over the first stage and every second, in order
};

// Whether `r` is routed in two stages: it has at least two groups, and more tool options (finish
// included) than `max_options` or more than one request under `limits` can hold.
bool routed_in_two_stages(const registry& r, std::size_t max_options, const request_limits& limits);

// A first-stage option's text: the group's tools, ids and descriptions, up to this many characters
// (every turn reads every group's).
inline constexpr std::size_t max_group_description = 300;

// A tool's group: its `group`, else "default".
std::string group_of(const tool& t);

// The two stages of `r`, each validated against `limits` (422 naming the stage that does not fit);
// a group named `finish` is refused (it would be the finish option). A decide frame's extra
// questions are asked in the first stage (compile_questions of `first_registry` with them).
result<staged_questions> compile_stages(const registry& r, const request_limits& limits);

// In two stages, the other groups' options of a merged `tool` answer: "group:NAME".
inline constexpr std::string_view group_option_prefix = "group:";

// The group the second stage asks, from the first stage's answers `first`: an MCP call's own
// tool's group (`called`; nullopt when `r` has no such tool), else the group the first stage
// chose; "" when it chose finish (no second stage).
std::optional<std::string> second_stage_group(const staged_questions& stages, const registry& r, const response& first,
                                              const std::string* called);

// One answer set from the two: the first's questions but `tool`, the second's but `tool`, and a
// `tool` choice of the second stage's choice over the group's tools with probability
// P(group)·P(tool | group), beside the other groups ("group:NAME", P(NAME)) and `finish`: the
// policy reads the probability of the tool it runs (p_max: as one stage would give it; margin
// counts these options). `second` null, or without `tool`: a group of one tool (P(tool | group)
// = 1). `group` empty: the first stage ended it (finish), its groups listed as "group:NAME".
// Usage is the two requests' sum.
response merge_stages(const staged_questions& stages, const response& first, const std::string& group,
                      const response* second);

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
