#include "adapters/protocol/error_frame.hpp"

#include "core/error_codes.hpp"

namespace baton::protocol {

std::string render_error_frame(const json& ref, const error& e) {
  std::string out = "{\"type\":\"error\",\"ref\":";
  render_json(ref, out, false);
  out += ',';
  std::string body;
  render_error(e, body);
  out.append(body, 1, body.size() - 2);  // the error body without its braces
  // A full queue or a rate limit says when to come back, never a silent wait.
  if (e.status == 429) out += ",\"retry_after_ms\":1000";
  if (e.status == 503 && e.code != codes::shutting_down) out += ",\"retry_after_ms\":100";
  out += '}';
  return out;
}

std::string render(const error_frame& f) { return render_error_frame(f.ref, f.error); }

}  // namespace baton::protocol
