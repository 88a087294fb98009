// The decision log's escalation rows as the review protocol shows them (docs/escalations.md): an
// escalation, its resolution and the run of its tool, each copied into its wire object. What is not
// in the rows comes from the caller: an escalation's evidence (derived from the decision's answers)
// and the kind of executor a resolution's tool has in the registry that serves.
#pragma once

#include <optional>
#include <string>

#include "adapters/log/records.hpp"
#include "adapters/protocol/review_protocol.hpp"
#include "core/json.hpp"

namespace baton::protocol {

tool_run_object tool_run_view(const log::tool_run_record& r);

// `executor`: agent | http | command; none for a deny, or a tool the registry no longer has.
resolution_object resolution_view(const log::resolution_record& r, const log::escalation_record& e,
                                  std::optional<std::string> executor);

// The escalation's `state` is the logged text read back as JSON (null when it does not parse); a
// resolved one's `tool_run` only with its resolution.
escalation_object escalation_view(const log::escalation_record& r, json evidence,
                                  std::optional<resolution_object> resolution = std::nullopt,
                                  std::optional<tool_run_object> tool_run = std::nullopt);

}  // namespace baton::protocol
