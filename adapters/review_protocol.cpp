#include "adapters/review_protocol.hpp"

namespace baton::protocol {

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
