// What the registry and the MCP client share of an MCP server: how to start it (stdio), what it
// says of its tools, and how a step with it failed.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/json.hpp"

namespace baton::tools {

struct mcp_server_config {
  std::string name;
  // stdio: `command` then `args`; empty for Streamable HTTP.
  std::vector<std::string> argv;
  // Streamable HTTP: the endpoint (http or https), and headers sent with every request, as written:
  // each ${NAME} in a value is that environment variable's value when the connection starts.
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;
  std::vector<std::pair<std::string, std::string>> env;   // added to baton's environment (less withheld_env)
  std::string cwd;
  std::chrono::milliseconds timeout{10000};               // for initialize and each tools/list page
};

struct mcp_tool_info {
  std::string name, title, description;
  json input_schema = json::object();
  json annotations = json::object();
};

// What a failed step says: an EXECUTOR_* code and a sentence.
struct mcp_failure {
  std::string code, detail;
};

// The part of an `mcp` executor's configuration that names its server's connection: {"type",
// "server", "command", "env", "cwd"} for stdio, {"type", "server", "url", "headers"} for
// Streamable HTTP (the registry adds "tool", "input_schema", "timeout_ms").
json mcp_connection_json(const mcp_server_config& server);

// What a registry load asks of each `mcp_servers` entry: its tools, or why they cannot be had.
using mcp_discovery =
    std::function<std::pair<std::vector<mcp_tool_info>, std::optional<mcp_failure>>(const mcp_server_config&)>;

}  // namespace baton::tools
