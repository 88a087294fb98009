// What baton sends, read back into the protocol's structs (adapters/protocol renders them): the
// golden-frame and protocol tests' reader, and the C++ test clients'. Each reader takes exactly
// what its render() writes: 502 BAD_UPSTREAM_RESPONSE naming the first field that is missing or of
// another type, or a `*_at` that is not its `*_ms`; unknown fields are ignored.
#pragma once

#include <cstddef>
#include <string_view>
#include <variant>

#include "adapters/protocol/agent_protocol.hpp"
#include "adapters/protocol/error_frame.hpp"
#include "adapters/protocol/review_protocol.hpp"
#include "core/error.hpp"
#include "core/json.hpp"

namespace baton::protocol {

// An error frame (`type` already known to be "error").
result<error_frame> parse_error_frame(const json& frame);

// The review protocol's objects and HTTP bodies.
result<tool_run_object> parse_tool_run(const json& body);
result<resolution_object> parse_resolution(const json& body);
result<escalation_object> parse_escalation(const json& body);
result<escalation_list> parse_escalation_list(const json& body);
result<tools_list> parse_tools_list(const json& body);

using server_frame = std::variant<decision_frame, tool_outcome_frame, resumed_frame, tool_result_ack_frame,
                                  resolution_frame, error_frame>;

// A frame the server sent on /v1/agent: also 502 when it is not JSON (nested at most
// `max_json_depth` levels) or not one of these.
result<server_frame> parse_server_frame(std::string_view text, std::size_t max_json_depth = 64);

using review_server_frame =
    std::variant<snapshot_frame, escalation_frame, resolved_frame, tool_run_frame, resolve_result_frame, error_frame>;

// A frame the server sent on /v1/review: the same (an escalation's state is the agent's history,
// hence the depth).
result<review_server_frame> parse_review_server_frame(std::string_view text, std::size_t max_json_depth = 64);

}  // namespace baton::protocol
