// The error frame both protocols answer a refused frame with (docs/protocol.md, docs/escalations.md):
// the one error body of every baton API plus `type` and `ref`. No I/O.
#pragma once

#include <string>

#include "core/error.hpp"
#include "core/json.hpp"

namespace baton::protocol {

struct error_frame {
  json ref;  // the refused frame's `id`; null when it had none or was refused before it was read
  // The status is not on the wire: it decides `retry_after_ms` (429: 1000; 503 other than
  // SHUTTING_DOWN: 100), and a parsed frame has 429 or 503 when that says so, else 0.
  baton::error error;
};

// {"type":"error","ref":…,"error":…,"code":…,"detail":[…]}, plus "retry_after_ms" for a 429 (1000)
// or a 503 (100) other than SHUTTING_DOWN: rate limited, overloaded, log backlog, too many sessions.
std::string render_error_frame(const json& ref, const error& e);
std::string render(const error_frame& f);

}  // namespace baton::protocol
