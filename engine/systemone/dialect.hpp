// What a flavor of the SystemOne wire decides for the systemone engine: where a request goes, how
// a reply is read and its failures worded, the provider's id of a call and what goes to the log.
// systemone_engine::make() chooses one (make_systemone_dialect() here, workers_ai::make_dialect()
// for Cloudflare's) and nothing else asks which flavor the engine speaks.
#pragma once

#include <boost/beast/http/fields.hpp>

#include <memory>
#include <string>

#include "core/error.hpp"
#include "core/request.hpp"
#include "engine/decision_engine.hpp"

namespace baton {

class systemone_dialect {
 public:
  virtual ~systemone_dialect() = default;

  // Filled in by the dialect's factory.
  std::string path;         // under the engine's base URL
  std::string name;         // in the engine's fingerprint
  std::string description;  // for GET /v1/models, followed by " at <the base URL>"

  // The provider's id of the call a reply (its head) answers, which its support asks for; empty: none.
  virtual std::string request_id(const boost::beast::http::fields& reply) const = 0;
  // The decision in a reply that is not retried, or its refusal; `request_id` is the reply's.
  virtual result<decision> answer(const request& req, int status, const std::string& body,
                                  const std::string& request_id) const = 0;
  // A reply that is retried (408, 429, 5xx), as the error says it when the retries run out: what
  // follows the engine's "the server answered <status>" (empty: nothing).
  virtual std::string retried(const std::string& body, const std::string& request_id) const = 0;
  // A call's outcome once its attempts are over, as the engine returns it (and logs it, if it does).
  virtual result<decision> returned(result<decision> r, const std::string& request_id) const = 0;
};

// The wire as it is: POST <url>/v1/systemone, the answer as it is, no request id, no log.
std::unique_ptr<const systemone_dialect> make_systemone_dialect();

}  // namespace baton
