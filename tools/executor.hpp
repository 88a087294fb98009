// Executors: how baton carries out a chosen tool. One interface, three kinds:
// `agent` (the agent runs it and answers with a tool_result frame), `http` (POST the arguments as
// JSON, Beast client, timeout and retries) and `command` (argv exec, no shell, timeout, output cap).
#pragma once

#include <boost/asio/any_io_executor.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>
#include <string_view>

#include "core/json.hpp"
#include "tools/registry.hpp"

namespace baton::tools {

struct tool_outcome {
  bool ok = false;
  json output;             // http body or command stdout: JSON when it parses, else a string; null when not ok
  std::string error_code;  // "" when ok; EXECUTOR_TIMEOUT, EXECUTOR_UNREACHABLE, EXECUTOR_HTTP_STATUS, EXECUTOR_EXIT_STATUS, EXECUTOR_OUTPUT_TOO_LARGE, EXECUTOR_SPAWN_FAILED, EXECUTOR_NOT_RUNNABLE
  std::string detail;      // a sentence for people
  int attempts = 0;
  double duration_ms = 0;
};

// What a tool call carries: the tool, the decision it belongs to and its arguments.
struct tool_call {
  std::string decision;
  std::string tool;
  json arguments = json::object();
  // Told how far the run is, as the tool says it (an MCP tool's notifications/progress params:
  // progress, total, message), from the executor's I/O context; the other kinds say nothing.
  std::function<void(json)> progress;
};

class executor {
 public:
  virtual ~executor() = default;
  virtual std::string_view kind() const noexcept = 0;  // agent | http | command | mcp
  // True for `agent`: baton does not run it; the agent answers with tool_result.
  virtual bool agent_runs() const noexcept { return false; }
  // Runs the call; `done` is called exactly once, from the executor's I/O context (never inside
  // run), also when the run fails. A run outlives the executor object that started it. For agent
  // executors it ends at once with EXECUTOR_NOT_RUNNABLE.
  virtual void run(tool_call call, std::function<void(tool_outcome)> done) = 0;
};

struct executor_limits {
  std::chrono::milliseconds default_timeout{10000};
  std::size_t max_output_bytes = 1u << 20;  // http body or command stdout; beyond: EXECUTOR_OUTPUT_TOO_LARGE
  // Environment variables a command never sees (the server's API keys): its environment is
  // baton's without them.
  std::vector<std::string> withheld_env;
  // Called (from an I/O thread) when an MCP server whose tools a registry holds says its tool list
  // changed (notifications/tools/list_changed), with the server's name: the server reloads.
  std::function<void(const std::string& server)> mcp_tools_changed;
};

// The executor of a registry tool. Its configuration was validated when the registry loaded; one
// that was not and is wrong gives an executor whose runs fail (EXECUTOR_UNREACHABLE for a bad url,
// EXECUTOR_SPAWN_FAILED for a missing argv, EXECUTOR_NOT_RUNNABLE for an unknown type).
std::unique_ptr<executor> make_executor(const tool& t, boost::asio::any_io_executor io, const executor_limits& limits);

}  // namespace baton::tools
