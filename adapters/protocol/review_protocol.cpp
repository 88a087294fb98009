#include "adapters/protocol/review_protocol.hpp"

#include "adapters/protocol/frame_opener.hpp"
#include "core/error_codes.hpp"
#include "core/ids.hpp"

namespace baton::protocol {

namespace {

error invalid(std::string message) { return make_error(422, codes::invalid_resolution, std::move(message)); }

}  // namespace

error invalid_resolution_field(json loc, std::string type, std::string msg) {
  return make_error(422, codes::invalid_resolution, std::vector<issue>{issue{std::move(loc), std::move(msg), std::move(type), nullptr}});
}

result<resolve_input> parse_resolve_input(const json& body) {
  if (!body.is_object()) return invalid("the body must be a JSON object");
  for (const auto& [key, v] : body.items()) {
    if (key != "outcome" && key != "tool" && key != "arguments" && key != "reason" && key != "force" &&
        key != "type" && key != "id" && key != "escalation") {
      return invalid_resolution_field(json::array({key}), "extra_forbidden",
                           "unknown field `" + key + "` (outcome, tool, arguments, reason, force)");
    }
  }
  resolve_input in;
  const auto outcome = body.find("outcome");
  if (outcome == body.end()) return invalid_resolution_field(json::array({"outcome"}), "missing", "`outcome` is required: \"execute\" or \"deny\"");
  if (!outcome->is_string() || (*outcome != "execute" && *outcome != "deny")) {
    return invalid_resolution_field(json::array({"outcome"}), "literal_error", "`outcome` must be \"execute\" or \"deny\"");
  }
  in.execute = *outcome == "execute";
  if (const auto t = body.find("tool"); t != body.end() && !t->is_null()) {
    if (!t->is_string()) return invalid_resolution_field(json::array({"tool"}), "string_type", "`tool` must be a tool id");
    in.tool = t->get<std::string>();
  }
  if (const auto a = body.find("arguments"); a != body.end() && !a->is_null()) in.arguments = *a;
  if (!in.execute && (in.tool || in.arguments)) {
    return invalid_resolution_field(json::array({in.tool ? "tool" : "arguments"}), "extra_forbidden", "a deny takes no `tool` nor `arguments`");
  }
  const auto reason = body.find("reason");
  if (reason == body.end()) return invalid_resolution_field(json::array({"reason"}), "missing", "`reason` is required: say why, for the agent and the auditors");
  if (!reason->is_string() || reason->get_ref<const std::string&>().empty()) {
    return invalid_resolution_field(json::array({"reason"}), "string_type", "`reason` is required: say why, for the agent and the auditors");
  }
  in.reason = reason->get<std::string>();
  if (in.reason.size() > 2000) return invalid_resolution_field(json::array({"reason"}), "string_too_long", "`reason` is longer than 2000 bytes");
  if (const auto f = body.find("force"); f != body.end() && !f->is_null()) {
    if (!f->is_boolean()) return invalid_resolution_field(json::array({"force"}), "bool_type", "`force` must be true or false");
    in.force = f->get<bool>();
  }
  return in;
}

result<resolve_frame> parse_review_frame(std::string_view text, json& id) {
  auto opened = open_frame(text, json_parse_options{}.max_depth, id);
  if (!opened) return opened.error();
  const json& f = *opened;
  const auto type = f.find("type");
  if (type == f.end() || !type->is_string() || type->get_ref<const std::string&>() != "resolve") {
    return make_error(422, codes::unknown_type, "reviewers send `resolve` frames: a \"type\" of \"resolve\"");
  }
  resolve_frame r;
  const auto escalation = f.find("escalation");
  if (escalation == f.end()) {
    return make_error(422, codes::invalid_frame, {issue{json::array({"escalation"}), "Field required (the escalation to resolve)", "missing", nullptr}});
  }
  if (!escalation->is_string()) {
    return make_error(422, codes::invalid_frame,
                      {issue{json::array({"escalation"}), "Input should be a valid string (an escalation id)", "string_type", nullptr}});
  }
  r.escalation = escalation->get<std::string>();
  auto in = parse_resolve_input(f);
  if (!in) return in.error();
  r.input = std::move(*in);
  return r;
}

namespace {

json as_json(const resolve_input& in) {
  json out = {{"outcome", in.execute ? "execute" : "deny"}};
  if (in.tool) out["tool"] = *in.tool;
  if (in.arguments) out["arguments"] = *in.arguments;
  out["reason"] = in.reason;
  out["force"] = in.force;
  return out;
}

}  // namespace

std::string render(const resolve_input& in) { return render_json(as_json(in), false); }

std::string render(const resolve_frame& f, const json& id) {
  json out = {{"type", "resolve"}};
  if (!id.is_null()) out["id"] = id;
  out["escalation"] = f.escalation;
  out.update(as_json(f.input));
  return render_json(out, false);
}

namespace {

json as_json(const tool_run_object& r) {
  return json{{"id", r.id},
              {"tool", r.tool},
              {"executor", r.executor},
              {"ok", r.ok},
              {"error_code", r.ok ? json() : json(r.error_code)},
              {"detail", r.detail},
              {"output", r.output},
              {"attempts", r.attempts},
              {"duration_ms", round_decimals(r.duration_ms, 3)},
              {"created_at", iso_utc(r.created_ms)},
              {"created_ms", r.created_ms}};
}

json as_json(const resolution_object& r) {
  return json{{"id", r.id},
              {"escalation", r.escalation},
              {"decision", r.decision},
              {"session", r.session},
              {"turn", r.turn},
              {"outcome", r.outcome},
              {"tool", r.tool.empty() ? json() : json(r.tool)},
              {"arguments", r.arguments},
              {"reason", r.reason},
              {"reviewer", r.reviewer},
              {"by", r.by},
              {"forced", r.forced},
              {"created_at", iso_utc(r.created_ms)},
              {"created_ms", r.created_ms},
              {"executor", r.executor ? json(*r.executor) : json()}};
}

json as_json(const escalation_object& e) {
  json resolution;
  if (e.resolution) {
    resolution = as_json(*e.resolution);
    resolution["tool_run"] = e.tool_run ? as_json(*e.tool_run) : json();
  }
  return json{{"id", e.id},
              {"status", e.resolution ? "resolved" : "pending"},
              {"decision", e.decision},
              {"session", e.session},
              {"turn", e.turn},
              {"created_at", iso_utc(e.created_ms)},
              {"created_ms", e.created_ms},
              {"deadline_at", iso_utc(e.deadline_ms)},
              {"deadline_ms", e.deadline_ms},
              {"on_deadline", e.on_deadline},
              {"reason", e.reason},
              {"question", e.question},
              {"tool", e.tool.empty() ? json() : json(e.tool)},
              {"arguments", e.arguments},
              {"confidence", round_decimals(e.confidence, 4)},
              {"candidates", e.candidates},
              {"state", e.state},
              {"evidence", e.evidence},
              {"registry_hash", e.registry_hash},
              {"policy_hash", e.policy_hash},
              {"resolution", std::move(resolution)}};
}

json as_json(const std::vector<escalation_object>& list) {
  json out = json::array();
  for (const escalation_object& e : list) out.push_back(as_json(e));
  return out;
}

json as_json(const tools_list& t) {
  json list = json::array();
  for (const tool_entry& tool : t.tools) {
    json parameters = json::array();
    for (const tool_parameter& p : tool.parameters) {
      json values = json::array();
      for (const tool_parameter_value& v : p.values) values.push_back({{"value", v.value}, {"description", v.description}});
      parameters.push_back({{"name", p.name},
                            {"type", p.type},
                            {"instructions", p.instructions},
                            {"values", std::move(values)},
                            {"fixed", p.fixed ? json(*p.fixed) : json()}});
    }
    list.push_back({{"id", tool.id},
                    {"description", tool.description},
                    {"risk", tool.risk},
                    {"executor", tool.executor},
                    {"parameters", std::move(parameters)}});
  }
  return json{{"tools", std::move(list)}, {"finish", t.finish ? json(*t.finish) : json()}, {"registry_hash", t.registry_hash}};
}

}  // namespace

std::string render(const tool_run_object& r) { return render_json(as_json(r), false); }
std::string render(const resolution_object& r) { return render_json(as_json(r), false); }
std::string render(const escalation_object& e) { return render_json(as_json(e), false); }
std::string render(const escalation_list& l) { return render_json(json{{"escalations", as_json(l.escalations)}}, false); }
std::string render(const tools_list& t) { return render_json(as_json(t), false); }

std::string render(const snapshot_frame& f) {
  return render_json(json{{"type", "snapshot"}, {"escalations", as_json(f.escalations)}}, false);
}
std::string render(const escalation_frame& f) {
  return render_json(json{{"type", "escalation"}, {"escalation", as_json(f.escalation)}}, false);
}
std::string render(const resolved_frame& f) {
  return render_json(json{{"type", "resolved"}, {"escalation", as_json(f.escalation)}}, false);
}
std::string render(const tool_run_frame& f) {
  return render_json(json{{"type", "tool_run"}, {"escalation", f.escalation}, {"tool_run", as_json(f.tool_run)}}, false);
}
std::string render(const resolve_result_frame& f) {
  return render_json(json{{"type", "resolve_result"}, {"ref", f.ref}, {"resolution", as_json(f.resolution)}}, false);
}

}  // namespace baton::protocol
