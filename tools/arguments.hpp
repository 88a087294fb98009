// A tool call's arguments, built and checked here only: from the engine's answers
// (choice and boolean parameters), from the registry or the agent's proposal (text parameters),
// and from a reviewer who runs the tool by hand.
#pragma once

#include <optional>
#include <vector>

#include "core/answers.hpp"
#include "core/error.hpp"
#include "core/json.hpp"
#include "tools/registry.hpp"

namespace baton::tools {

// The tool's choice and boolean parameters from their answers (`<tool>.<param>`: a choice's
// choice, a noul's p ≥ 0.5); none when an answer is missing or of another type.
std::optional<json> arguments_from_answers(const tool& t, const response& answers);

// Sets the tool's text parameters in `args`: the registry's static value, else the string the
// agent's `proposal` ({"tool", "arguments"}) gives when it names this tool; else left out.
void add_text_arguments(const tool& t, const json& proposal, json& args);

// The first name in a JSON Schema's `required` that `args` lacks; none when nothing is missing.
std::optional<std::string> first_missing_required(const json& schema, const json& args);

// The first argument `args` lacks that the tool requires: an MCP tool's inputSchema `required`
// (other tools' parameters are all optional to the executor); none when nothing is missing.
std::optional<std::string> missing_required_argument(const tool& t, const json& args);

// Arguments given by hand (a reviewer's): the tool's parameters only, each of its type (an MCP
// tool's text parameter: any JSON, its server checks it); every choice and boolean parameter
// given; a text parameter the registry fixes takes its value. What
// is wrong, one FastAPI-style issue per field at loc ["arguments", NAME] (["arguments"] when
// `args` is not an object); empty when `args` is complete.
std::vector<issue> complete_arguments(const tool& t, json& args);

}  // namespace baton::tools
