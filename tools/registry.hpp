// The YAML tool registry: tools with their executors and parameters, an optional
// `finish` option and global questions, validated against the serving engine's limits at load.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "core/json.hpp"
#include "core/limits.hpp"
#include "tools/mcp_types.hpp"

namespace baton::tools {

// The id of the "which tool next" question and the option added when the registry has `finish`:
// the registry refuses a global question or a tool that takes them.
inline constexpr const char* tool_question_id = "tool";
inline constexpr const char* finish_option = "finish";

enum class risk_level { low, medium, high };
enum class parameter_type { choice, boolean, text };

std::string_view to_string(risk_level r) noexcept;
std::string_view to_string(parameter_type t) noexcept;

struct parameter {
  std::string name;
  parameter_type type = parameter_type::text;
  std::string instructions;          // empty for a text parameter without any
  json values = json::object();      // choice: label → description, in file order
  std::optional<std::string> value;  // text: the static value; absent: from the agent's proposal
};

struct tool {
  std::string id;
  std::string description;
  risk_level risk = risk_level::low;
  json executor;  // {"type": "agent" | "http" | "command", ...} as written, or "mcp" as an MCP server's tool became it
  std::vector<parameter> parameters;  // in file order
  // What it is routed with in two stages (schema_compiler.hpp): `group:` as written, an MCP
  // server's name for its tools; empty: the group "default".
  std::string group;
};

// Where a loaded file wrote its elements, for `baton check`'s warnings: dotted paths (a registry's
// "tools.ID", "tools.ID.parameters.NAME", "questions.ID"; a policy's in policies/policy.hpp) → line.
// Never part of a hash: moving a line changes no decision.
struct source_lines {
  std::string file;
  std::map<std::string, int, std::less<>> lines;

  // The line of `path`, else 1 (the file's start).
  int line(std::string_view path) const;
};

struct registry {
  std::vector<tool> tools;                      // in file order: the order of the tool options
  std::optional<std::string> finish;            // the `finish` option's description when configured
  json questions = json::object();              // global SystemOne questions, id → question, in file order
  std::string hash;                             // "sha256:…" of canonical_json()
  source_lines source;                          // where each tool, parameter and question was written

  // Order-insensitive where order means nothing (fields of a tool, an executor, a question) and
  // order-sensitive where it is the question or option order (tools, parameters, choice values,
  // global questions, choice criteria).
  std::string canonical_json() const;
};

// The tool `id`; null when the registry has none (`finish` is no tool).
const tool* find_tool(const registry& r, std::string_view id);

// The question id a choice or boolean parameter becomes: "<tool_id>.<param>".
std::string parameter_question_id(const tool& t, const parameter& p);

// 422 INVALID_REGISTRY, message "FILE:LINE: reason", for anything the file gets wrong, including
// a registry whose compiled request would exceed `limits` (the serving engine's) both as one
// request and in two stages (compile_stages). Each of
// `mcp_servers` is started and its tools listed through `discover` (empty: discover_mcp_tools with
// default executor limits), and a server that cannot be is an error naming it.
result<registry> parse_registry(std::string_view yaml_text, std::string_view file_name,
                                const request_limits& limits, const mcp_discovery& discover = {});
result<registry> load_registry(const std::filesystem::path& file, const request_limits& limits,
                               const mcp_discovery& discover = {});

}  // namespace baton::tools
