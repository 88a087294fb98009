#include "tools/registry.hpp"

#include <algorithm>
#include <set>

#include "core/error_codes.hpp"
#include "core/http_url.hpp"
#include "core/request.hpp"
#include "core/sha256.hpp"
#include "tools/mcp_client.hpp"
#include "tools/schema_compiler.hpp"
#include "tools/yaml.hpp"

namespace baton::tools {

namespace {

using namespace yaml;

// `noun` names the value in messages where its key does not (a choice value's description).
std::string read_nonempty(const std::vector<field>& fields, std::string_view key, const YAML::Node& owner,
                          const std::string& what, std::string_view noun = {}) {
  const std::string name(noun.empty() ? key : noun);
  const field* f = find(fields, key);
  if (!f) fail(owner, what + " has no " + name);
  std::string s = read_string(f->value, what + "'s " + name);
  // An empty value (`key:`) has its mark after the key, on the next line.
  if (s.empty()) fail(f->value.IsNull() ? f->key_node : f->value, what + " has an empty " + name);
  return s;
}

bool valid_name(std::string_view s, bool dots) {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(), [dots](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || (dots && c == '.');
  });
}

risk_level read_risk(const YAML::Node& v) {
  const std::string s = read_string(v, "risk");
  if (s == "low") return risk_level::low;
  if (s == "medium") return risk_level::medium;
  if (s == "high") return risk_level::high;
  fail(v, "unknown risk " + ticked(s) + " (low, medium or high)");
}

void check_integer(const field* f, std::int64_t min, std::int64_t max, const std::string& what) {
  if (!f) return;
  const json v = to_json(f->value, what);
  if (!v.is_number_integer() || v.get<std::int64_t>() < min || v.get<std::int64_t>() > max) {
    fail(f->value, what + " must be an integer from " + std::to_string(min) + " to " + std::to_string(max));
  }
}

json read_executor(const YAML::Node& n, const std::string& tool_what) {
  const std::string what = tool_what + "'s executor";
  const auto fields = read_map(n, what, {"type", "url", "timeout_ms", "retries", "argv"});
  const field* type = find(fields, "type");
  if (!type) fail(n, what + " has no type");
  const std::string t = read_string(type->value, what + "'s type");
  std::vector<std::string_view> allowed;
  if (t == "agent") {
    allowed = {"type"};
  } else if (t == "http") {
    allowed = {"type", "url", "timeout_ms", "retries"};
    const std::string url = read_nonempty(fields, "url", n, what);
    std::string reason;
    if (!parse_http_url(url, reason)) fail(find(fields, "url")->value, what + "'s url " + ticked(url) + " " + reason);
  } else if (t == "command") {
    allowed = {"type", "argv", "timeout_ms"};
    const field* argv = find(fields, "argv");
    if (!argv) fail(n, what + " has no argv");
    const json a = to_json(argv->value, what);
    if (!a.is_array() || a.empty() ||
        !std::all_of(a.begin(), a.end(), [](const json& s) { return s.is_string() && !s.get_ref<const std::string&>().empty(); })) {
      fail(argv->value, what + "'s argv must be a non-empty list of non-empty strings");
    }
  } else {
    fail(type->value, "unknown executor type " + ticked(t) + " (agent, http or command)");
  }
  for (const field& f : fields) {
    if (std::find(allowed.begin(), allowed.end(), f.key) == allowed.end()) {
      fail(f.key_node, "unknown key " + ticked(f.key) + " in a " + t + " executor");
    }
  }
  // As baton.yaml bounds them (executors.timeout_ms, engine.retries): a larger timeout overflowed
  // the deadline's clock arithmetic and the call timed out at once.
  check_integer(find(fields, "timeout_ms"), 1, std::int64_t(1) << 40, what + "'s timeout_ms");
  check_integer(find(fields, "retries"), 0, 10, what + "'s retries");
  return to_json(n, what);
}

parameter read_parameter(const field& entry, const std::string& tool_what, const request_limits& limits) {
  const std::string what = "parameter " + ticked(entry.key) + " of " + tool_what;
  if (!valid_name(entry.key, false)) fail(entry.key_node, "bad parameter name " + ticked(entry.key) + " (A-Za-z0-9_-)");
  parameter p;
  p.name = entry.key;
  const auto fields = read_map(entry.value, what, {"type", "instructions", "values", "value"});
  const field* type = find(fields, "type");
  if (!type) fail(entry.value, what + " has no type");
  const std::string t = read_string(type->value, what + "'s type");
  std::string_view own_key;  // the key only this type takes
  if (t == "choice") {
    p.type = parameter_type::choice;
    own_key = "values";
  } else if (t == "boolean") {
    p.type = parameter_type::boolean;
  } else if (t == "text") {
    p.type = parameter_type::text;
    own_key = "value";
  } else {
    fail(type->value, "unknown parameter type " + ticked(t) + " of " + what + " (choice, boolean or text)");
  }
  for (const field& f : fields) {
    if ((f.key == "values" || f.key == "value") && f.key != own_key) {
      fail(f.key_node, "unknown key " + ticked(f.key) + " in a " + t + " parameter");
    }
  }
  if (p.type == parameter_type::text) {
    if (const field* i = find(fields, "instructions")) p.instructions = read_string(i->value, what + "'s instructions");
    if (const field* v = find(fields, "value")) p.value = read_string(v->value, what + "'s value");
    return p;
  }
  // Choice and boolean parameters are questions: the engine reads their instructions.
  p.instructions = read_nonempty(fields, "instructions", entry.value, what);
  if (p.type == parameter_type::boolean) return p;
  const field* values = find(fields, "values");
  if (!values) fail(entry.value, what + " has no values");
  const auto labels = read_map(values->value, what + "'s values");
  if (labels.size() < std::max<std::size_t>(2, limits.min_choice_options)) {
    fail(values->value, "choice " + what + " needs at least " +
                            std::to_string(std::max<std::size_t>(2, limits.min_choice_options)) + " values");
  }
  if (labels.size() > limits.max_choice_options) {
    fail(values->value, "choice " + what + " has " + std::to_string(labels.size()) +
                            " values, over the engine's limit of " + std::to_string(limits.max_choice_options));
  }
  for (const field& v : labels) {
    if (v.key.empty()) fail(v.key_node, "a value of " + what + " has an empty label");
    p.values[v.key] = read_nonempty(labels, v.key, values->value, "value " + ticked(v.key) + " of " + what, "description");
  }
  return p;
}

tool read_tool(const YAML::Node& n, const request_limits& limits) {
  const auto fields = read_map(n, "a tool", {"id", "description", "risk", "executor", "parameters", "group"});
  tool t;
  const field* id = find(fields, "id");
  if (!id) fail(n, "a tool has no id");
  t.id = read_string(id->value, "a tool id");
  if (!valid_name(t.id, true)) fail(id->value, "bad tool id " + ticked(t.id) + " (A-Za-z0-9_.-)");
  const std::string what = "tool " + ticked(t.id);
  t.description = read_nonempty(fields, "description", n, what);
  if (const field* r = find(fields, "risk")) t.risk = read_risk(r->value);
  if (const field* g = find(fields, "group")) {
    t.group = read_string(g->value, what + "'s group");
    if (!valid_name(t.group, false)) fail(g->value, "bad group " + ticked(t.group) + " of " + what + " (A-Za-z0-9_-)");
  }
  // A tool without an executor is run by the agent itself.
  t.executor = json{{"type", "agent"}};
  if (const field* e = find(fields, "executor")) t.executor = read_executor(e->value, what);
  if (const field* ps = find(fields, "parameters"); ps && !ps->value.IsNull()) {
    for (const field& p : read_map(ps->value, what + "'s parameters")) {
      t.parameters.push_back(read_parameter(p, what, limits));
    }
  }
  return t;
}

// Checks a global question with the request validator itself, so that what loads is what the
// engine accepts. Returns the question and how many options it has.
std::pair<json, std::size_t> read_question(const field& entry, const request_limits& limits) {
  const std::string what = "question " + ticked(entry.key);
  read_map(entry.value, what, {"type", "instructions", "criteria"});
  json q = to_json(entry.value, what);
  json body = {{"state", ""}, {"questions", {{entry.key, q}}}};
  auto checked = request_from_json(std::move(body), limits);
  if (!checked) fail(entry.key_node, what + ": " + checked.error().message);
  return {std::move(q), checked->questions.front().option_count()};
}

// A tool an MCP server lists, as a registry tool `SERVER.TOOL` (tools/README.md, MCP servers).
// `timeout_given`: the file set timeout_ms (else the executors' default applies to calls).
// `prefix`: what goes before the tool's own name (`SERVER.` unless the file says otherwise).
tool mcp_tool(const mcp_server_config& server, const std::string& prefix, bool timeout_given, const mcp_tool_info& info,
              const json& risks, const YAML::Node& at, const request_limits& limits) {
  tool t;
  t.id = prefix + info.name;
  t.group = server.name;
  const std::string what = "MCP server " + ticked(server.name) + "'s tool " + ticked(info.name);
  if (!valid_name(info.name, true)) fail(at, what + ": its name has characters a tool id cannot have (A-Za-z0-9_.-)");
  t.description = info.title.empty()         ? info.description
                  : info.description.empty() ? info.title
                                             : info.title + ": " + info.description;
  if (t.description.empty()) t.description = info.name;
  // The server's hints, unless the file says otherwise: read-only is low, destructive (MCP's
  // default where a tool is not read-only) high, the rest medium.
  if (const auto r = risks.find(info.name); r != risks.end()) {
    const std::string v = r->get<std::string>();
    t.risk = v == "high" ? risk_level::high : v == "medium" ? risk_level::medium : risk_level::low;
  } else {
    // A hint that is not a boolean counts as absent.
    const auto hint = [&](const char* key, bool absent) {
      const auto h = info.annotations.find(key);
      return h != info.annotations.end() && h->is_boolean() ? h->get<bool>() : absent;
    };
    t.risk = hint("readOnlyHint", false) ? risk_level::low : hint("destructiveHint", true) ? risk_level::high : risk_level::medium;
  }
  t.executor = mcp_connection_json(server);
  t.executor["tool"] = info.name;
  t.executor["input_schema"] = info.input_schema;
  if (timeout_given) t.executor["timeout_ms"] = server.timeout.count();
  // Enumerated properties are choices, booleans yes/no questions, the rest the agent's to give.
  const auto props = info.input_schema.find("properties");
  if (props == info.input_schema.end() || !props->is_object()) return t;
  for (const auto& [name, schema] : props->items()) {
    if (!valid_name(name, false)) fail(at, what + ": its argument " + ticked(name) + " has a name a parameter cannot have (A-Za-z0-9_-)");
    parameter p;
    p.name = name;
    // The property's description where it has one (a string, not empty), else its name.
    const auto d = schema.is_object() ? schema.find("description") : schema.end();
    const bool described = schema.is_object() && d != schema.end() && d->is_string() && !d->get_ref<const std::string&>().empty();
    const std::string instructions = described ? d->get<std::string>() : name;
    const auto e = schema.is_object() ? schema.find("enum") : schema.end();
    const json values = schema.is_object() && e != schema.end() ? *e : json();
    const bool strings = values.is_array() && std::all_of(values.begin(), values.end(), [](const json& v) { return v.is_string() && !v.get_ref<const std::string&>().empty(); });
    if (strings && values.size() >= std::max<std::size_t>(2, limits.min_choice_options) && values.size() <= limits.max_choice_options) {
      p.type = parameter_type::choice;
      p.instructions = instructions;
      for (const json& v : values) p.values[v.get<std::string>()] = v.get<std::string>();
    } else if (schema.is_object() && schema.contains("type") && schema["type"] == "boolean") {
      p.type = parameter_type::boolean;
      p.instructions = instructions;
    } else {
      p.type = parameter_type::text;
      if (described) p.instructions = instructions;
    }
    t.parameters.push_back(std::move(p));
  }
  return t;
}

std::vector<std::string> read_names(const field* f, const std::string& what) {
  std::vector<std::string> names;
  if (!f) return names;
  const json a = to_json(f->value, what);
  if (!a.is_array() || !std::all_of(a.begin(), a.end(), [](const json& v) { return v.is_string(); })) {
    fail(f->value, what + " must be a list of names");
  }
  for (const json& v : a) names.push_back(v.get<std::string>());
  return names;
}

// `mcp_servers`: each server started and its tools listed through `discover` (tools/README.md).
// Appends them to `r`, with the node each came from.
void read_mcp_servers(const field& f, const request_limits& limits, const mcp_discovery& discover, registry& r,
                      std::vector<YAML::Node>& tool_nodes) {
  for (const field& entry : read_map(f.value, "`mcp_servers`")) {
    const std::string what = "MCP server " + ticked(entry.key);
    if (!valid_name(entry.key, false)) fail(entry.key_node, "bad MCP server name " + ticked(entry.key) + " (A-Za-z0-9_-)");
    const auto fields = read_map(entry.value, what,
                                 {"command", "args", "env", "cwd", "url", "headers", "timeout_ms", "include", "exclude", "risk", "prefix"});
    mcp_server_config server;
    server.name = entry.key;
    // stdio (a command baton starts) or Streamable HTTP (a url it posts to), not both.
    const bool http = find(fields, "url") != nullptr;
    if (http == (find(fields, "command") != nullptr)) fail(entry.value, what + " needs exactly one of `command` (stdio) and `url` (Streamable HTTP)");
    for (const char* key : {"args", "env", "cwd"}) {
      if (http && find(fields, key)) fail(find(fields, key)->key_node, what + ": `" + key + "` is for a `command`, not a `url`");
    }
    if (!http && find(fields, "headers")) fail(find(fields, "headers")->key_node, what + ": `headers` are for a `url`, not a `command`");
    if (http) {
      server.url = read_nonempty(fields, "url", entry.value, what);
      std::string reason;
      if (!parse_http_url(server.url, reason, true)) fail(find(fields, "url")->value, what + "'s url: " + reason);
      if (const field* h = find(fields, "headers")) {
        for (const field& v : read_map(h->value, what + "'s headers")) {
          server.headers.emplace_back(v.key, read_string(v.value, what + "'s header " + ticked(v.key)));
        }
      }
    } else {
      server.argv.push_back(read_nonempty(fields, "command", entry.value, what));
    }
    for (std::string& a : read_names(find(fields, "args"), what + "'s args")) server.argv.push_back(std::move(a));
    if (const field* e = find(fields, "env")) {
      for (const field& v : read_map(e->value, what + "'s env")) server.env.emplace_back(v.key, read_string(v.value, what + "'s env " + ticked(v.key)));
    }
    if (const field* c = find(fields, "cwd")) server.cwd = read_string(c->value, what + "'s cwd");
    check_integer(find(fields, "timeout_ms"), 1, std::int64_t(1) << 40, what + "'s timeout_ms");
    if (const field* t = find(fields, "timeout_ms")) server.timeout = std::chrono::milliseconds(to_json(t->value, what).get<std::int64_t>());
    const std::vector<std::string> include = read_names(find(fields, "include"), what + "'s include"),
                                   exclude = read_names(find(fields, "exclude"), what + "'s exclude");
    json risks = json::object();
    if (const field* rs = find(fields, "risk")) {
      for (const field& v : read_map(rs->value, what + "'s risk")) risks[v.key] = std::string(to_string(read_risk(v.value)));
    }
    // The tools' names: SERVER.TOOL, or, for a gateway that shows them as the server names them,
    // another prefix (an empty one); two tools of one id are refused as in `tools`.
    std::string prefix = server.name + ".";
    if (const field* p = find(fields, "prefix")) {
      prefix = read_string(p->value, what + "'s prefix");
      if (!prefix.empty() && !valid_name(prefix, true)) fail(p->value, "bad prefix " + ticked(prefix) + " of " + what + " (A-Za-z0-9_.-)");
    }
    std::pair<std::vector<mcp_tool_info>, std::optional<mcp_failure>> listed_tools;
    try {
      listed_tools = discover ? discover(server) : discover_mcp_tools(server, executor_limits{});
    } catch (const std::exception& e) {  // what a server sent must not stop a load with anything but an error
      fail(entry.key_node, what + ": its tools could not be read: " + e.what());
    }
    auto& [infos, failure] = listed_tools;
    if (failure) fail(entry.key_node, what + ": " + failure->detail);
    const auto listed = [&](const std::string& name) {
      return std::any_of(infos.begin(), infos.end(), [&](const mcp_tool_info& i) { return i.name == name; });
    };
    for (const auto* names : {&include, &exclude, }) {
      for (const std::string& n : *names) {
        if (!listed(n)) fail(entry.key_node, what + " lists no tool " + ticked(n) + " (named in include or exclude)");
      }
    }
    for (const auto& [name, level] : risks.items()) {
      if (!listed(name)) fail(entry.key_node, what + " lists no tool " + ticked(name) + " (named in risk)");
    }
    for (const mcp_tool_info& info : infos) {
      const bool taken = include.empty() || std::find(include.begin(), include.end(), info.name) != include.end();
      if (!taken || std::find(exclude.begin(), exclude.end(), info.name) != exclude.end()) continue;
      r.tools.push_back(mcp_tool(server, prefix, find(fields, "timeout_ms") != nullptr, info, risks, entry.key_node, limits));
      tool_nodes.push_back(entry.key_node);
    }
  }
}

registry read_registry(const YAML::Node& root, const request_limits& limits, const mcp_discovery& discover) {
  if (root.IsNull() || !root.IsDefined()) fail(root, "the registry is empty: it needs `tools` or `mcp_servers`");
  const auto top = read_map(root, "the registry", {"tools", "mcp_servers", "finish", "questions"});
  const field* tools = find(top, "tools");
  const field* servers = find(top, "mcp_servers");
  if (!tools && !servers) fail(root, "the registry has no `tools` and no `mcp_servers`");
  if (tools && !tools->value.IsSequence()) fail(tools->value, "`tools` must be a list");
  const YAML::Node& tools_at = tools ? tools->key_node : servers->key_node;

  registry r;
  std::vector<YAML::Node> tool_nodes;  // each tool's node: its own, or its MCP server's key
  if (tools) {
    for (const YAML::Node& n : tools->value) {
      r.tools.push_back(read_tool(n, limits));
      tool_nodes.push_back(n);
    }
  }
  const std::size_t written = r.tools.size();
  if (servers) read_mcp_servers(*servers, limits, discover, r, tool_nodes);
  std::vector<YAML::Node> id_nodes;
  std::set<std::string> ids;
  for (std::size_t i = 0; i < r.tools.size(); ++i) {
    const YAML::Node id = i < written ? tool_nodes[i]["id"] : tool_nodes[i];
    if (!ids.insert(r.tools[i].id).second) fail(id, "duplicate tool id " + ticked(r.tools[i].id));
    id_nodes.push_back(id);
    r.source.lines["tools." + r.tools[i].id] = line_of(id);
  }
  if (const field* f = find(top, "finish")) {
    const auto fields = read_map(f->value, "`finish`", {"description"});
    r.finish = read_nonempty(fields, "description", f->value, "`finish`");
    if (ids.contains(finish_option)) {
      const auto at = std::find_if(r.tools.begin(), r.tools.end(), [](const tool& t) { return t.id == finish_option; });
      fail(id_nodes[at - r.tools.begin()], "tool id `finish` clashes with the finish option");
    }
  }

  const std::size_t tool_options = r.tools.size() + (r.finish ? 1 : 0);
  const std::size_t min_options = std::max<std::size_t>(2, limits.min_choice_options);
  if (tool_options < min_options) {
    fail(tools_at, "the tool choice has " + std::to_string(tool_options) + " option(s); it needs at least " +
                              std::to_string(min_options) + " (tools, plus finish when configured)");
  }
  // Every question of the compiled request, in order, with where it comes from in the file. What
  // one request cannot hold (too many tools, questions or options) may still be routed in two
  // stages: checked at the end.
  std::set<std::string> question_ids{tool_question_id};
  std::size_t questions = 1, total_options = tool_options;
  std::optional<std::pair<YAML::Node, std::string>> one_request_too_large;
  if (tool_options > limits.max_choice_options) {
    one_request_too_large.emplace(tools_at, "the tool choice has " + std::to_string(tool_options) +
                                                " options, over the engine's limit of " + std::to_string(limits.max_choice_options));
  }
  auto count_question = [&](const YAML::Node& at, std::size_t options) {
    if (++questions > limits.max_questions && !one_request_too_large) {
      one_request_too_large.emplace(at, "the registry makes more than " + std::to_string(limits.max_questions) +
                                            " questions (the tool choice, parameter and global questions), the engine's limit");
    }
    total_options += options;
  };
  for (std::size_t i = 0; i < r.tools.size(); ++i) {
    const YAML::Node params = i < written ? tool_nodes[i]["parameters"] : YAML::Node();
    if (params.IsDefined() && params.IsMap()) {
      for (auto it = params.begin(); it != params.end(); ++it) {
        r.source.lines["tools." + r.tools[i].id + ".parameters." + it->first.Scalar()] = line_of(it->first);
      }
    }
    for (const parameter& p : r.tools[i].parameters) {
      if (p.type == parameter_type::text) continue;
      const YAML::Node at = i < written ? params[p.name] : tool_nodes[i];
      const std::string qid = parameter_question_id(r.tools[i], p);
      if (qid.size() > limits.max_question_id_chars) {
        fail(at, "question id " + ticked(qid) + " is longer than the engine's limit of " +
                     std::to_string(limits.max_question_id_chars) + " characters");
      }
      question_ids.insert(qid);
      count_question(at, p.type == parameter_type::choice ? p.values.size() : 2);
    }
  }
  if (const field* qs = find(top, "questions"); qs && !qs->value.IsNull()) {
    for (const field& q : read_map(qs->value, "`questions`")) {
      if (question_ids.contains(q.key)) {
        fail(q.key_node, "question " + ticked(q.key) + " clashes with a question id the tools generate");
      }
      auto [question, options] = read_question(q, limits);
      r.questions[q.key] = std::move(question);
      r.source.lines["questions." + q.key] = line_of(q.key_node);
      count_question(q.key_node, options);
    }
  }
  if (limits.max_total_options && total_options > limits.max_total_options && !one_request_too_large) {
    one_request_too_large.emplace(tools_at, "the registry's questions have " + std::to_string(total_options) +
                                                " options in all, over the engine's budget of " +
                                                std::to_string(limits.max_total_options));
  }
  if (one_request_too_large) {
    // Two stages need two groups at least: with one, the first stage would ask nothing.
    std::set<std::string> groups;
    for (const tool& t : r.tools) groups.insert(group_of(t));
    if (groups.size() < 2) fail(one_request_too_large->first, one_request_too_large->second);
    if (auto staged = compile_stages(r, limits); !staged) {
      fail(one_request_too_large->first, one_request_too_large->second + "; in two stages (by group): " + staged.error().message);
    }
  }
  r.hash = sha256_hex(r.canonical_json());
  return r;
}

json pairs(const json& object) {
  json a = json::array();
  for (const auto& [k, v] : object.items()) a.push_back(json::array({k, v}));
  return a;
}

}  // namespace

std::string_view to_string(risk_level r) noexcept {
  switch (r) {
    case risk_level::low: return "low";
    case risk_level::medium: return "medium";
    case risk_level::high: return "high";
  }
  return "low";
}

std::string_view to_string(parameter_type t) noexcept {
  switch (t) {
    case parameter_type::choice: return "choice";
    case parameter_type::boolean: return "boolean";
    case parameter_type::text: return "text";
  }
  return "text";
}

int source_lines::line(std::string_view path) const {
  const auto it = lines.find(path);
  return it == lines.end() ? 1 : it->second;
}

const tool* find_tool(const registry& r, std::string_view id) {
  const auto it = std::find_if(r.tools.begin(), r.tools.end(), [&](const tool& t) { return t.id == id; });
  return it == r.tools.end() ? nullptr : &*it;
}

std::string parameter_question_id(const tool& t, const parameter& p) { return t.id + "." + p.name; }

std::string registry::canonical_json() const {
  // Sorted keys make field order irrelevant; what is ordered is written as arrays.
  json c = json::object();
  json& ts = c["tools"] = json::array();
  for (const tool& t : tools) {
    json ps = json::array();
    for (const parameter& p : t.parameters) {
      ps.push_back({{"name", p.name},
                    {"type", to_string(p.type)},
                    {"instructions", p.instructions},
                    {"values", pairs(p.values)},
                    {"value", p.value ? json(*p.value) : json(nullptr)}});
    }
    ts.push_back({{"id", t.id},
                  {"description", t.description},
                  {"risk", to_string(t.risk)},
                  {"executor", t.executor},
                  {"parameters", std::move(ps)}});
    // Only when written: registries without `group:` keep their hash (an MCP tool's is its server).
    if (!t.group.empty() && !(t.executor.value("type", "") == "mcp" && t.executor.value("server", "") == t.group)) {
      ts.back()["group"] = t.group;
    }
  }
  c["finish"] = finish ? json(*finish) : json(nullptr);
  json& qs = c["questions"] = json::array();
  for (const auto& [id, q] : questions.items()) {
    json canonical = q;
    if (q.value("type", "") == "choice" && q.contains("criteria")) canonical["criteria"] = pairs(q["criteria"]);
    qs.push_back(json::array({id, std::move(canonical)}));
  }
  return render_json(c, true);
}

result<registry> parse_registry(std::string_view yaml_text, std::string_view file_name,
                                const request_limits& limits, const mcp_discovery& discover) {
  return yaml::parse(yaml_text, file_name, codes::invalid_registry, [&](const YAML::Node& root) {
    registry r = read_registry(root, limits, discover);
    r.source.file = file_name;
    return r;
  });
}

result<registry> load_registry(const std::filesystem::path& file, const request_limits& limits,
                               const mcp_discovery& discover) {
  auto text = yaml::read_text(file, codes::invalid_registry);
  if (!text) return text.error();
  return parse_registry(*text, file.string(), limits, discover);
}

}  // namespace baton::tools
