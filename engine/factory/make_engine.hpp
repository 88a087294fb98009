// The engine an engine_options names, for `baton serve` and `baton decide`.
#pragma once

#include <memory>

#include "core/error.hpp"
#include "engine/decision_engine.hpp"
#include "engine/factory/engine_options.hpp"

namespace baton {

// 400 UNKNOWN_ENGINE for a name it does not know, 400 ENGINE_NEEDS_MODEL for clef without a
// release directory, 500 ENGINE_LOAD_FAILED for a release that does not load, and the systemone
// engine's own refusals of its options (systemone_engine::make).
result<std::unique_ptr<decision_engine>> make_engine(const engine_options& options);

// The limits an engine of `options` checks a request's questions against (the question fields of
// its describe().limits), known without making it: no weights read, no host resolved (`baton
// check`). Media limits are left at none: the clef engine's depend on the release, and a registry's
// questions carry no media.
request_limits question_limits(const engine_options& options);

}  // namespace baton
