#include "adapters/protocol/frame_opener.hpp"

#include "core/error_codes.hpp"

#include <string>

namespace baton::protocol {

result<json> read_json(std::string_view text, std::string_view what, std::size_t max_depth) {
  json value;
  json_parse_error err;
  if (!parse_json(text, value, err, json_parse_options{max_depth})) {
    return make_error(400, codes::invalid_json,
                      "the " + std::string(what) + " is not JSON: " + err.message + " at byte " + std::to_string(err.byte));
  }
  return result<json>(boost::system::in_place_value, std::move(value));
}

result<json> open_frame(std::string_view text, std::size_t max_depth, json& id) {
  id = nullptr;
  auto frame = read_json(text, "frame", max_depth);
  if (!frame) return frame;
  if (!frame->is_object()) return make_error(400, codes::invalid_json, "a frame must be a JSON object");
  if (const auto it = frame->find("id"); it != frame->end()) id = *it;
  return frame;
}

json frame_id(std::string_view text, std::size_t max_depth) {
  json id;
  open_frame(text, max_depth, id);
  return id;
}

}  // namespace baton::protocol
