// Cloudflare Workers AI's form of the SystemOne wire, the systemone engine's `workers-ai` flavor:
// the same request, POSTed to <base>/client/v4/accounts/<account>/ai/run/<model> with a bearer
// token, and the SystemOne answer wrapped in Cloudflare's API envelope
// {"result", "success", "errors", "messages"}. Failures, an HTTP 200 with `success: false` among
// them, map onto baton's codes with Cloudflare's own messages quoted and its request id named.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "core/request.hpp"
#include "engine/decision_engine.hpp"
#include "engine/systemone/dialect.hpp"
#include "engine/systemone/systemone_engine.hpp"

namespace baton::workers_ai {

// One entry of the envelope's `errors`.
struct api_error {
  std::optional<std::int64_t> code;  // Cloudflare's error code (10000: authentication), when given
  std::string message;
};

struct envelope {
  bool success = false;
  json result;  // the SystemOne response when success; null otherwise
  std::vector<api_error> errors;
};

// The path under the base URL, or nullopt when the account or the model holds characters a path
// cannot take as they are (the account: letters, digits, `-` and `_`; the model: those, `@`, `.`
// and `/`, no `..`).
std::optional<std::string> run_path(std::string_view account, std::string_view model);

// 502 BAD_UPSTREAM_RESPONSE when `body` is not an envelope: an object with a boolean `success`,
// a `result`, an `errors` array of {code?: integer, message: string} and, when present, a
// `messages` array.
result<envelope> envelope_from_json(const json& body);

// The systemone engine's `workers-ai` dialect (dialect.hpp) for `options`, whose url and model it
// fills with workers_ai_defaults when they are empty. 400 ENGINE_NEEDS_CREDENTIALS without an
// account or a token, 400 INVALID_ENGINE_URL for an account or a model run_path refuses.
// Replies are envelopes whose result is checked as a SystemOne answer (decision_from_response).
// Else: 401/403 502 UPSTREAM_AUTH_FAILED (which token variable to fix), 404 502
// UPSTREAM_NOT_FOUND (the account or the model), 400/413/422 that status with UPSTREAM_REFUSED,
// success: false or another status 502 UPSTREAM_REFUSED, a body that is not an envelope or whose
// result is not an answer to the request 502 BAD_UPSTREAM_RESPONSE. A retried reply (408, 429,
// 5xx) is told by its status and quoted errors. Every message quotes `errors` and names the
// request id (cf-ai-req-id, else cf-ray), and every outcome goes to the log with it.
result<std::unique_ptr<const systemone_dialect>> make_dialect(systemone_engine_options& options);

}  // namespace baton::workers_ai
