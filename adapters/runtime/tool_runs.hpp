// A tool run as the log and the wire hold it, from what an executor reports (baton ran it) or an
// agent's `tool_result` (the agent ran it): one builder for the turn and the escalation desk.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "adapters/log/records.hpp"
#include "adapters/protocol/agent_protocol.hpp"
#include "tools/executor.hpp"

namespace baton {

// The row of a tool baton ran (an `http` or `command` executor) for `decision`.
log::tool_run_record tool_run_of(const std::string& decision, const std::string& tool, std::string_view executor,
                                 const tools::tool_outcome& o);

// The row of an agent-run tool, as its `tool_result` reported it.
log::tool_run_record reported_tool_run(const std::string& decision, const std::string& tool, bool ok, json output);

// What the agent's `tool_result` frame says of a tool baton ran.
protocol::tool_outcome wire_outcome(tools::tool_outcome&& o);

// baton's `tool_result` frame of a logged run of a tool it ran (read back for a resolution);
// "" for none, or for a run the agent reported.
std::string logged_tool_result(const std::optional<log::tool_run_record>& run);

}  // namespace baton
