// The `systemone` engine: a client for any server of the SystemOne wire (another
// baton, llama.cpp's server, colibri, Ollaya, TypeSafe Jev, …). It is how a larger model is
// reached. Every answer is checked against the request it answers: a malformed or partial one is
// an engine error, never a decision. Its `workers-ai` flavor speaks the same request to Cloudflare's
// hosted Clef-Omni, whose answer comes inside Cloudflare's API envelope (workers_ai.hpp).
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "engine/decision_engine.hpp"

namespace baton {

// Which form of the wire the server speaks.
enum class systemone_flavor {
  systemone,   // POST <url>/v1/systemone, the answer as it is
  workers_ai,  // POST <url>/client/v4/accounts/<account>/ai/run/<model>, the answer in Cloudflare's envelope
};

// The workers-ai flavor's defaults: Cloudflare's API, its Clef-Omni, and the environment
// variables Cloudflare's own tools read the account and the token from.
namespace workers_ai_defaults {
inline constexpr std::string_view url = "https://api.cloudflare.com";
inline constexpr std::string_view model = "@cf/cloudflare/clef-omni";
inline constexpr std::string_view account_env = "CLOUDFLARE_ACCOUNT_ID";
inline constexpr std::string_view key_env = "CLOUDFLARE_API_TOKEN";
}  // namespace workers_ai_defaults

struct systemone_engine_options {
  systemone_flavor flavor = systemone_flavor::systemone;
  std::string url;      // http[s]://host[:port][/prefix]; requests go to <url>/v1/systemone (workers-ai:
                        // <url>/client/v4/…; empty: workers_ai_defaults::url)
  std::filesystem::path ca_file;  // https: the CAs (PEM) that the server's certificate must chain to; empty: the system's
  std::string model;    // sent as `model`; empty: none (the server's default; workers-ai: workers_ai_defaults::model,
                        // which also names the model in the path)
  std::string api_key;  // sent as a bearer key; empty: none (workers-ai: the API token, needed)
  // Where api_key came from: command tools run without it, and an auth failure says which
  // variable to fix.
  std::string key_env;
  std::string account;      // workers-ai: the Cloudflare account id, in the path (needed)
  std::string account_env;  // workers-ai: where account came from, for the message when it is not found
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds timeout{10000};  // one attempt, from writing the request to its last byte
  int retries = 2;                            // after 408, 429, 5xx and transport errors
  std::chrono::milliseconds backoff{200};     // before the first retry; doubles up to backoff_max
  std::chrono::milliseconds backoff_max{2000};  // also caps what Retry-After may ask
  std::size_t connections = 8;                // kept-alive connections, requests in flight at once
  int breaker_failures = 5;                   // calls (batches) failed in a row that open the circuit
  std::chrono::milliseconds breaker_open{10000};  // how long it stays open before one trial batch
};

class systemone_engine : public decision_engine {
 public:
  // 400 INVALID_ENGINE_URL for a URL the client cannot call or whose host does not resolve
  // (resolved once, here: a resolver cannot be bounded in time), or (workers-ai) an account or
  // model a path cannot hold as it is; 400 INVALID_ENGINE_CA_FILE for CAs that do not load, or a
  // ca_file with an http URL; 400 ENGINE_NEEDS_CREDENTIALS for workers-ai without an account or a
  // token.
  static result<std::unique_ptr<systemone_engine>> make(systemone_engine_options options);
  ~systemone_engine() override;

  const engine_description& describe() const noexcept override;

  // The batch's requests go out at once over the connections; one result per request. Failures:
  // 502 BAD_UPSTREAM_RESPONSE (not a SystemOne answer to this request), 502 UPSTREAM_UNREACHABLE
  // (connection, TLS handshake, timeout or 5xx after the retries; an untrusted certificate at
  // once), 503 ENGINE_UNAVAILABLE (the circuit is open), or the server's own 400/404/413/422
  // refusal of the request; 422 MEDIA_SOURCE_REFUSED, without a call, for a request with raw
  // media (pixels or samples from the C++ API have no wire form). Workers AI's errors map onto these
  // and three of their own (workers_ai.hpp); its request id is in every error's message.
  std::vector<result<decision>> decide(std::span<const request> batch) override;

 private:
  struct impl;
  explicit systemone_engine(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

// The distributions a SystemOne response gives for `req`: every question answered once with its
// type, exactly the question's options, each a probability, each distribution summing to 1 within
// 1e-3 (plus 5e-5 per option for the server's 4-decimal rounding). Else 502 BAD_UPSTREAM_RESPONSE.
result<decision> decision_from_response(const request& req, const response& r);

}  // namespace baton
