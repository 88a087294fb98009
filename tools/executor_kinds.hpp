// The executor kinds behind make_executor and what they share. Internal to baton_tools.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "core/ids.hpp"
#include "tools/executor.hpp"

namespace baton::tools::detail {

// `config` is the tool's executor object as the registry validated it.
std::unique_ptr<executor> make_http_executor(const json& config, boost::asio::any_io_executor io,
                                             const executor_limits& limits);
std::unique_ptr<executor> make_command_executor(const json& config, boost::asio::any_io_executor io,
                                                const executor_limits& limits);
std::unique_ptr<executor> make_mcp_executor(const json& config, boost::asio::any_io_executor io,
                                            const executor_limits& limits);

// An executor whose runs end with `code` and `detail`: for a configuration that did not go
// through the registry's checks (a tool built by hand), which the registry would have refused.
std::unique_ptr<executor> make_failing_executor(std::string_view kind, std::string code, std::string detail,
                                                boost::asio::any_io_executor io);

// The configured timeout_ms, or the limits' default.
std::chrono::milliseconds timeout_of(const json& config, const executor_limits& limits);

// What both kinds send: {"decision":…,"tool":…,"arguments":{…}}.
std::string call_body(const tool_call& call);

// A body or stdout as the outcome's output: its JSON value when it parses, else the text.
json output_from_text(std::string_view text);

}  // namespace baton::tools::detail
