#include "engine/systemone/workers_ai.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/answers.hpp"
#include "core/error_codes.hpp"
#include "engine/systemone/systemone_engine.hpp"

namespace baton::workers_ai {

namespace {

error not_an_envelope(const std::string& why) {
  return make_error(502, codes::bad_upstream_response, "the answer is not a Workers AI envelope: " + why);
}

bool path_safe(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

// `NAME`, or what stands for it when the caller did not say where a value came from.
std::string ticked_env(std::string_view name) {
  if (name.empty()) return "the environment variable it came from";
  std::string out = "`";  // appended, not `+`: GCC 12 warns (-Wrestrict) about "`" + std::string
  out += name;
  return out += '`';
}

error tagged(error e, const std::string& tag) {
  e.message += tag;
  return e;
}

// ` (HTTP 401, request id 8f3a…)`: what to quote when asking Cloudflare about a call.
std::string reply_tag(int status, std::string_view request_id) {
  return " (HTTP " + std::to_string(status) + ", " +
         (request_id.empty() ? std::string("no request id") : "request id " + std::string(request_id)) + ")";
}

// `: 10000 "Authentication error"; 7003 "No route"`, or nothing when none are given.
std::string quoted(const std::vector<api_error>& errors) {
  std::string out;
  for (const api_error& e : errors) {
    out += out.empty() ? ": " : "; ";
    if (e.code) out += std::to_string(*e.code) + " ";
    render_string(e.message, out);
  }
  return out;
}

// The envelope in `body`, or why it is not one.
result<envelope> read(std::string_view body) {
  json parsed;
  json_parse_error perr;
  if (!parse_json(body, parsed, perr)) return not_an_envelope("not JSON: " + perr.message);
  return envelope_from_json(parsed);
}

class dialect final : public systemone_dialect {
 public:
  dialect(std::string model, std::string key_env, std::string account_env)
      : model_(std::move(model)), key_env_(std::move(key_env)), account_env_(std::move(account_env)) {}

  // Cloudflare's id of the call, which its support asks for: cf-ai-req-id, else the edge's cf-ray.
  std::string request_id(const boost::beast::http::fields& reply) const override {
    for (const char* name : {"cf-ai-req-id", "cf-ray"}) {
      if (const auto it = reply.find(name); it != reply.end() && !it->value().empty()) return std::string(it->value());
    }
    return {};
  }

  result<decision> answer(const request& req, int status, const std::string& body, const std::string& request_id) const override {
    const std::string tag = reply_tag(status, request_id);
    auto env = read(body);
    // The status says what went wrong even when the body is not an envelope (a proxy's HTML page).
    const std::string said = env ? quoted(env->errors) : "";
    if (status == 401 || status == 403) {
      return make_error(502, codes::upstream_auth_failed,
                        "Workers AI refused the API token" + tag + said + "; set " + ticked_env(key_env_) +
                            " to a Cloudflare API token with Workers AI permission on the account in " + ticked_env(account_env_));
    }
    if (status == 404) {
      return make_error(502, codes::upstream_not_found,
                        "Workers AI found no model `" + model_ + "` for the account" + tag + said + "; check the account id in " +
                            ticked_env(account_env_) + " and the model name");
    }
    if (status == 400 || status == 413 || status == 422) {
      // This request was refused: the caller's to know, with Cloudflare's reasons.
      return make_error(status, codes::upstream_refused, "Workers AI refused the request" + tag + said);
    }
    if (status < 200 || status >= 300) return make_error(502, codes::upstream_refused, "Workers AI answered" + tag + said);
    if (!env) return tagged(env.error(), tag);
    if (!env->success) return make_error(502, codes::upstream_refused, "Workers AI answered success: false" + tag + said);
    auto answered = response_from_json(env->result);
    if (!answered) return tagged(answered.error(), tag);
    auto d = decision_from_response(req, *answered);
    if (!d) return tagged(d.error(), tag);
    return d;
  }

  std::string retried(const std::string& body, const std::string& request_id) const override {
    auto env = read(body);
    return (env ? quoted(env->errors) : "") + (request_id.empty() ? std::string() : " (request id " + request_id + ")");
  }

  // The outcome goes to the log with the request id (in the message of a failure), which is what
  // Cloudflare's support asks for.
  result<decision> returned(result<decision> r, const std::string& request_id) const override {
    if (r) {
      spdlog::debug("Workers AI {} answered (request id {})", model_, request_id.empty() ? "none" : request_id);
    } else {
      spdlog::warn("Workers AI {} failed: {} {}", model_, r.error().code, r.error().message);
    }
    return r;
  }

 private:
  std::string model_;
  std::string key_env_;      // where the token came from
  std::string account_env_;  // where the account came from
};

}  // namespace

std::optional<std::string> run_path(std::string_view account, std::string_view model) {
  const bool account_ok = !account.empty() && std::all_of(account.begin(), account.end(), path_safe);
  const bool model_ok = !model.empty() && model.front() != '/' && model.find("..") == std::string_view::npos &&
                        std::all_of(model.begin(), model.end(), [](char c) { return path_safe(c) || c == '@' || c == '.' || c == '/'; });
  if (!account_ok || !model_ok) return std::nullopt;
  return "/client/v4/accounts/" + std::string(account) + "/ai/run/" + std::string(model);
}

result<envelope> envelope_from_json(const json& body) {
  if (!body.is_object()) return not_an_envelope("not an object");
  const auto success = body.find("success");
  if (success == body.end() || !success->is_boolean()) return not_an_envelope("no boolean `success`");
  const auto result = body.find("result");
  if (result == body.end()) return not_an_envelope("no `result`");
  const auto errors = body.find("errors");
  if (errors == body.end() || !errors->is_array()) return not_an_envelope("no `errors` array");
  if (const auto messages = body.find("messages"); messages != body.end() && !messages->is_array()) {
    return not_an_envelope("`messages` is not an array");
  }
  envelope e;
  e.success = success->get<bool>();
  e.result = *result;
  for (const json& item : *errors) {
    const auto message = item.is_object() ? item.find("message") : item.end();
    if (!item.is_object() || message == item.end() || !message->is_string()) {
      return not_an_envelope("an `errors` item without a string `message`");
    }
    api_error a;
    a.message = message->get<std::string>();
    if (const auto code = item.find("code"); code != item.end()) {
      if (!code->is_number_integer()) return not_an_envelope("an `errors` item whose `code` is not an integer");
      a.code = code->get<std::int64_t>();
    }
    e.errors.push_back(std::move(a));
  }
  return e;
}

result<std::unique_ptr<const systemone_dialect>> make_dialect(systemone_engine_options& options) {
  if (options.url.empty()) options.url = workers_ai_defaults::url;
  if (options.model.empty()) options.model = workers_ai_defaults::model;
  if (options.account.empty() || options.api_key.empty()) {
    return make_error(400, codes::engine_needs_credentials, "the systemone engine's workers-ai flavor needs a Cloudflare account id and an API token");
  }
  auto path = run_path(options.account, options.model);
  if (!path) {
    return make_error(400, codes::invalid_engine_url, "the workers-ai account id or the model `" + options.model +
                                                     "` holds characters a URL path cannot take as they are");
  }
  auto d = std::make_unique<dialect>(options.model, options.key_env, options.account_env);
  d->path = std::move(*path);
  d->name = "workers-ai";
  d->description = "Workers AI's " + options.model;
  return std::unique_ptr<const systemone_dialect>(std::move(d));
}

}  // namespace baton::workers_ai
