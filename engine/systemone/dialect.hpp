// What a flavor of the SystemOne wire decides for the systemone engine: where a request goes, how
// a reply is read and its failures worded, the provider's id of a call and what goes to the log.
// systemone_engine::make() chooses one (make_systemone_dialect() here, workers_ai::make_dialect()
// for Cloudflare's) and nothing else asks which flavor the engine speaks.
#pragma once

#include <memory>
#include <string>

#include "core/error.hpp"
#include "core/http_client.hpp"
#include "core/request.hpp"
#include "engine/decision_engine.hpp"

namespace baton {

class systemone_dialect {
 public:
  virtual ~systemone_dialect() = default;

  virtual std::string path() const = 0;  // under the engine's base URL
  virtual std::string name() const = 0;  // in the engine's fingerprint
  // For GET /v1/models: what the engine calls at `base`.
  virtual std::string description(const std::string& base, const std::string& model) const = 0;

  // The provider's id of the call a reply answers, which its support asks for; empty: none.
  virtual std::string request_id(const http_client::response& reply) const = 0;
  // The decision in a reply that is not retried, or its refusal; `request_id` is the reply's.
  virtual result<decision> answer(const request& req, int status, const std::string& body,
                                  const std::string& request_id) const = 0;
  // A reply that is retried (408, 429, 5xx), as the error says it when the retries run out.
  virtual std::string retried(int status, const std::string& body, const std::string& request_id) const = 0;
  // A call's outcome once its attempts are over, as the engine returns it (and logs it, if it does).
  virtual result<decision> returned(result<decision> r, const std::string& request_id) const = 0;
};

// The wire as it is: POST <url>/v1/systemone, the answer as it is, no request id, no log.
std::unique_ptr<const systemone_dialect> make_systemone_dialect();

}  // namespace baton
