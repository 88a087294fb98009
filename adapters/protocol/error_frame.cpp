#include "adapters/protocol/error_frame.hpp"

#include "adapters/protocol/fields.hpp"

namespace baton::protocol {

std::string render_error_frame(const json& ref, const error& e) {
  std::string out = "{\"type\":\"error\",\"ref\":";
  render_json(ref, out, false);
  out += ',';
  std::string body;
  render_error(e, body);
  out.append(body, 1, body.size() - 2);  // the error body without its braces
  // DESIGN §7: a full queue or a rate limit says when to come back, never a silent wait.
  if (e.status == 429) out += ",\"retry_after_ms\":1000";
  if (e.status == 503 && e.code != "SHUTTING_DOWN") out += ",\"retry_after_ms\":100";
  out += '}';
  return out;
}

std::string render(const error_frame& f) { return render_error_frame(f.ref, f.error); }

result<error_frame> parse_error_frame(const json& frame) {
  fields f(frame, "error frame");
  error_frame out;
  out.ref = f.value("ref");
  int status = 0;
  if (const json* retry = f.find("retry_after_ms")) {
    if (*retry == 1000) {
      status = 429;
    } else if (*retry == 100) {
      status = 503;
    } else {
      f.fail("`retry_after_ms` is neither 1000 (429) nor 100 (503)");
    }
  }
  if (!f.ok()) return f.failure();
  auto e = error_from_json(frame, status);
  if (!e) return e.error();
  out.error = std::move(*e);
  return out;
}

}  // namespace baton::protocol
