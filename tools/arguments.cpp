#include "tools/arguments.hpp"

#include <algorithm>
#include <string>

namespace baton::tools {

namespace {

// "'low' or 'high'", as pydantic words a literal's expected values.
std::string expected_text(const json& values) {
  std::string out;
  std::size_t i = 0;
  for (const auto& [label, d] : values.items()) {
    out += (i == 0 ? "" : i + 1 == values.size() ? " or " : ", ") + ("'" + label + "'");
    ++i;
  }
  return out;
}

}  // namespace

std::optional<json> arguments_from_answers(const tool& t, const response& answers) {
  json args = json::object();
  for (const parameter& p : t.parameters) {
    if (p.type == parameter_type::text) continue;
    const answer* a = find_answer(answers, parameter_question_id(t, p));
    if (!a) return std::nullopt;
    if (p.type == parameter_type::choice) {
      const auto* c = std::get_if<choice_answer>(a);
      if (!c) return std::nullopt;
      args[p.name] = c->choice;
    } else {
      const auto* n = std::get_if<noul_answer>(a);
      if (!n) return std::nullopt;
      args[p.name] = n->noul >= 0.5;
    }
  }
  return args;
}

void add_text_arguments(const tool& t, const json& proposal, json& args) {
  const json* proposed = nullptr;
  if (proposal.is_object() && proposal.value("tool", "") == t.id) {
    if (const auto a = proposal.find("arguments"); a != proposal.end()) proposed = &*a;
  }
  for (const parameter& p : t.parameters) {
    if (p.type != parameter_type::text) continue;
    if (p.value) {
      args[p.name] = *p.value;
    } else if (proposed && proposed->contains(p.name) && (*proposed)[p.name].is_string()) {
      args[p.name] = (*proposed)[p.name];
    }
  }
}

std::optional<std::string> first_missing_required(const json& schema, const json& args) {
  if (!schema.is_object()) return std::nullopt;
  const auto required = schema.find("required");
  if (required == schema.end() || !required->is_array()) return std::nullopt;
  for (const json& name : *required) {
    if (name.is_string() && !(args.is_object() && args.contains(name.get<std::string>()))) return name.get<std::string>();
  }
  return std::nullopt;
}

std::optional<std::string> missing_required_argument(const tool& t, const json& args) {
  if (t.executor.value("type", "") != "mcp") return std::nullopt;
  const auto schema = t.executor.find("input_schema");
  return schema == t.executor.end() ? std::nullopt : first_missing_required(*schema, args);
}

std::vector<issue> complete_arguments(const tool& t, json& args) {
  if (!args.is_object()) return {issue{json::array({"arguments"}), "Input should be a valid dictionary", "dict_type", nullptr}};
  std::vector<issue> issues;
  auto add = [&](const std::string& name, std::string msg, const char* type, json ctx = nullptr) {
    issues.push_back({json::array({"arguments", name}), std::move(msg), type, std::move(ctx)});
  };
  for (const auto& [name, value] : args.items()) {
    const auto p = std::find_if(t.parameters.begin(), t.parameters.end(),
                                [&](const parameter& x) { return x.name == name; });
    if (p == t.parameters.end()) {
      add(name, "Extra inputs are not permitted (`" + t.id + "` has no such parameter)", "extra_forbidden");
      continue;
    }
    switch (p->type) {
      case parameter_type::choice:
        if (!value.is_string() || !p->values.contains(value.get<std::string>())) {
          const std::string expected = expected_text(p->values);
          add(name, "Input should be " + expected, "literal_error", {{"expected", expected}});
        }
        break;
      case parameter_type::boolean:
        if (!value.is_boolean()) add(name, "Input should be a valid boolean", "bool_type");
        break;
      case parameter_type::text:
        // An MCP tool's argument is any JSON its inputSchema allows (a number, an object): the
        // server checks it, as it checks what the agent called it with.
        if (!value.is_string() && t.executor.value("type", "") == "mcp") break;
        if (!value.is_string()) {
          add(name, "Input should be a valid string", "string_type");
        } else if (p->value && value != *p->value) {
          const std::string expected = "'" + *p->value + "'";
          add(name, "Input should be " + expected + " (fixed by the registry)", "literal_error", {{"expected", expected}});
        }
        break;
    }
  }
  for (const parameter& p : t.parameters) {
    if (p.type == parameter_type::text) {
      if (p.value) args[p.name] = *p.value;
    } else if (!args.contains(p.name)) {
      add(p.name, "Field required (a " + std::string(to_string(p.type)) + ")", "missing");
    }
  }
  return issues;
}

}  // namespace baton::tools
