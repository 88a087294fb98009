#include "engine/systemone/dialect.hpp"

#include "core/answers.hpp"
#include "core/error_codes.hpp"
#include "engine/systemone/systemone_engine.hpp"

namespace baton {

namespace {

class plain_dialect final : public systemone_dialect {
 public:
  std::string request_id(const boost::beast::http::fields&) const override { return {}; }

  result<decision> answer(const request& req, int status, const std::string& body, const std::string&) const override {
    json parsed;
    json_parse_error perr;
    const bool is_json = parse_json(body, parsed, perr);
    if (status != 200) {
      std::optional<error> refused;
      if (is_json) {
        if (auto e = error_from_json(parsed, status)) refused = std::move(*e);
      }
      const std::string what = refused ? refused->message : body.substr(0, 200);
      if (status == 400 || status == 404 || status == 413 || status == 422) {
        // The server refused this request: the caller's to know, with the server's issues.
        if (refused) return *refused;
        return make_error(status, codes::upstream_refused, "the server answered " + std::to_string(status) + ": " + what);
      }
      return make_error(502, codes::upstream_refused, "the server answered " + std::to_string(status) + ": " + what);
    }
    if (!is_json) return make_error(502, codes::bad_upstream_response, "the answer is not JSON: " + perr.message);
    auto answered = response_from_json(parsed);
    if (!answered) return answered.error();
    return decision_from_response(req, *answered);
  }

  std::string retried(const std::string&, const std::string&) const override { return {}; }

  result<decision> returned(result<decision> r, const std::string&) const override { return r; }
};

}  // namespace

std::unique_ptr<const systemone_dialect> make_systemone_dialect() {
  auto d = std::make_unique<plain_dialect>();
  d->path = "/v1/systemone";
  d->name = "systemone";
  d->description = "the SystemOne server";
  return d;
}

}  // namespace baton
