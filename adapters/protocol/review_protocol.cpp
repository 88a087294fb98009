#include "adapters/protocol/review_protocol.hpp"

namespace baton::protocol {

namespace {

error invalid(std::string message) { return make_error(422, "INVALID_RESOLUTION", std::move(message)); }

// A refused field of a resolution, named in `loc` as the agent protocol names a frame's fields.
error invalid_field(json loc, std::string type, std::string msg) {
  return make_error(422, "INVALID_RESOLUTION", std::vector<issue>{issue{std::move(loc), std::move(msg), std::move(type), nullptr}});
}

}  // namespace

result<resolve_input> parse_resolve_input(const json& body) {
  if (!body.is_object()) return invalid("the body must be a JSON object");
  for (const auto& [key, v] : body.items()) {
    if (key != "outcome" && key != "tool" && key != "arguments" && key != "reason" && key != "force" &&
        key != "type" && key != "id" && key != "escalation") {
      return invalid_field(json::array({key}), "extra_forbidden",
                           "unknown field `" + key + "` (outcome, tool, arguments, reason, force)");
    }
  }
  resolve_input in;
  const auto outcome = body.find("outcome");
  if (outcome == body.end()) return invalid_field(json::array({"outcome"}), "missing", "`outcome` is required: \"execute\" or \"deny\"");
  if (!outcome->is_string() || (*outcome != "execute" && *outcome != "deny")) {
    return invalid_field(json::array({"outcome"}), "literal_error", "`outcome` must be \"execute\" or \"deny\"");
  }
  in.execute = *outcome == "execute";
  if (const auto t = body.find("tool"); t != body.end() && !t->is_null()) {
    if (!t->is_string()) return invalid_field(json::array({"tool"}), "string_type", "`tool` must be a tool id");
    in.tool = t->get<std::string>();
  }
  if (const auto a = body.find("arguments"); a != body.end() && !a->is_null()) in.arguments = *a;
  if (!in.execute && (in.tool || in.arguments)) {
    return invalid_field(json::array({in.tool ? "tool" : "arguments"}), "extra_forbidden", "a deny takes no `tool` nor `arguments`");
  }
  const auto reason = body.find("reason");
  if (reason == body.end()) return invalid_field(json::array({"reason"}), "missing", "`reason` is required: say why, for the agent and the auditors");
  if (!reason->is_string() || reason->get_ref<const std::string&>().empty()) {
    return invalid_field(json::array({"reason"}), "string_type", "`reason` is required: say why, for the agent and the auditors");
  }
  in.reason = reason->get<std::string>();
  if (in.reason.size() > 2000) return invalid_field(json::array({"reason"}), "string_too_long", "`reason` is longer than 2000 bytes");
  if (const auto f = body.find("force"); f != body.end() && !f->is_null()) {
    if (!f->is_boolean()) return invalid_field(json::array({"force"}), "bool_type", "`force` must be true or false");
    in.force = f->get<bool>();
  }
  return in;
}

result<resolve_frame> parse_review_frame(std::string_view text, json& id) {
  id = nullptr;
  json f;
  json_parse_error err;
  if (!parse_json(text, f, err, json_parse_options{})) {
    return make_error(400, "INVALID_JSON", "the frame is not JSON: " + err.message + " at byte " + std::to_string(err.byte));
  }
  if (!f.is_object()) return make_error(400, "INVALID_JSON", "a frame must be a JSON object");
  if (const auto it = f.find("id"); it != f.end()) id = *it;
  const auto type = f.find("type");
  if (type == f.end() || !type->is_string() || type->get_ref<const std::string&>() != "resolve") {
    return make_error(422, "UNKNOWN_TYPE", "reviewers send `resolve` frames: a \"type\" of \"resolve\"");
  }
  resolve_frame r;
  const auto escalation = f.find("escalation");
  if (escalation == f.end()) {
    return make_error(422, "INVALID_FRAME", {issue{json::array({"escalation"}), "Field required (the escalation to resolve)", "missing", nullptr}});
  }
  if (!escalation->is_string()) {
    return make_error(422, "INVALID_FRAME",
                      {issue{json::array({"escalation"}), "Input should be a valid string (an escalation id)", "string_type", nullptr}});
  }
  r.escalation = escalation->get<std::string>();
  auto in = parse_resolve_input(f);
  if (!in) return in.error();
  r.input = std::move(*in);
  return r;
}

}  // namespace baton::protocol
