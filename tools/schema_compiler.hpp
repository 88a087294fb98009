// The schema compiler (DESIGN §4): (registry, session history) → one SystemOne request.
#pragma once

#include <string>

#include "core/error.hpp"
#include "core/json.hpp"
#include "core/limits.hpp"
#include "core/request.hpp"
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

}  // namespace baton::tools
