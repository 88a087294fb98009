// The `systemone` engine (DESIGN §3): a client for any server of the SystemOne wire (another
// baton, llama.cpp's server, colibri, Ollaya, TypeSafe Jev, …). It is how a larger model is
// reached. Every answer is checked against the request it answers: a malformed or partial one is
// an engine error, never a decision.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "engine/decision_engine.hpp"

namespace baton {

struct systemone_engine_options {
  std::string url;      // http[s]://host[:port][/prefix]; requests go to <url>/v1/systemone
  std::filesystem::path ca_file;  // https: the CAs (PEM) that the server's certificate must chain to; empty: the system's
  std::string model;    // sent as `model`; empty: none (the server's default)
  std::string api_key;  // sent as a bearer key; empty: none
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
  // (resolved once, here: a resolver cannot be bounded in time); 400 INVALID_ENGINE_CA_FILE for
  // CAs that do not load, or a ca_file with an http URL.
  static result<std::unique_ptr<systemone_engine>> make(systemone_engine_options options);
  ~systemone_engine() override;

  const engine_description& describe() const noexcept override;

  // The batch's requests go out at once over the connections; one result per request. Failures:
  // 502 BAD_UPSTREAM_RESPONSE (not a SystemOne answer to this request), 502 UPSTREAM_UNREACHABLE
  // (connection, TLS handshake, timeout or 5xx after the retries; an untrusted certificate at
  // once), 503 ENGINE_UNAVAILABLE (the circuit is open), or the server's own 400/404/413/422
  // refusal of the request; 422 MEDIA_SOURCE_REFUSED, without a call, for a request with raw
  // media (pixels or samples from the C++ API have no wire form).
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
