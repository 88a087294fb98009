// What an escalation and its resolutions may be, held against a routing snapshot (the registry and
// policy that serve when it is decided): the escalation a decision raises, a reviewer's resolution
// checked field by field, the one its deadline makes, and why a pending escalation no longer fits
// after a reload. Pure functions: the desk (escalation_desk.hpp) keeps the state and the log.
#pragma once

#include <optional>
#include <string>

#include "adapters/log/log_reader.hpp"
#include "adapters/log/records.hpp"
#include "adapters/protocol/review_protocol.hpp"
#include "adapters/runtime/escalation_book.hpp"
#include "adapters/runtime/routing.hpp"
#include "core/answers.hpp"
#include "core/error.hpp"

namespace baton {

// 404 NOT_FOUND: no escalation `id`, pending or resolved.
error no_escalation(const std::string& id);

// Who resolves what nobody else did in time (a deadline, a misfit): the reviewer `baton`.
inline constexpr const char* deadline_reviewer = "baton";

// The escalation of an escalated decision (its row is written right after the decision's), with
// the terms of `routing`'s policy (the snapshot the turn decided with).
escalation make_escalation(const routing_snapshot& routing, const log::decision_record& d, const response* answers,
                           std::string state);

// A resolution of `r` as `in` asks, prepared against `routing` (what serves now, which then
// carries it out whatever a reload swaps in meanwhile): 422 INVALID_RESOLUTION for a tool or
// arguments the registry refuses, 409 VERSION_CHANGED when the registry or policy changed since it
// was raised (unless forced). `by`: reviewer | deadline.
result<log::resolution_record> prepare_resolution(const routing_snapshot& routing, const log::escalation_record& r,
                                                  protocol::resolve_input&& in, const std::string& reviewer,
                                                  const char* by);

// What its deadline resolves `r` to: its configured outcome, or a deny saying why when that
// execute is no longer allowed (a tool renamed or denied, a parameter changed).
log::resolution_record deadline_resolution(const routing_snapshot& routing, const log::escalation_record& r);

// Why `r`'s proposed tool does not fit `routing`; none when it does (or it proposes none, or was
// raised on this very registry and policy).
std::optional<std::string> misfit(const routing_snapshot& routing, const log::escalation_record& r);
// The deny of a misfit, forced, by `baton` as its deadline would deny it, `reason` saying why.
log::resolution_record misfit_denial(const routing_snapshot& routing, const log::escalation_record& r, std::string reason);

// The executor an `execute` resolution's tool has in `routing` (null for a deny, or for finish).
tools::executor* executor_for(const routing_snapshot& routing, const log::resolution_record& r);

// The wire objects, with what `routing` says of them: a resolution's executor kind, an
// escalation's evidence (read back from its decision's logged answers).
protocol::resolution_object resolution_object_of(const routing_snapshot& routing, const log::resolution_record& r,
                                                 const log::escalation_record& e);
escalation read_back(const routing_snapshot& routing, const log::escalation_row& row);
// An escalation read from the log, with its resolution and tool run when it has them.
protocol::escalation_object history_object(const routing_snapshot& routing, const log::escalation_history& h);

}  // namespace baton
