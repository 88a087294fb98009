#include "adapters/server/auth.hpp"

#include <algorithm>
#include <cmath>

#include "core/error_codes.hpp"
#include "core/sha256.hpp"

namespace baton {

namespace {

// Equal-length digests compared without an early exit: the time taken says nothing about how
// much of a guess was right.
bool same_digest(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  unsigned diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

error unauthorized(std::string message) { return make_error(401, codes::unauthorized, std::move(message)); }

// Adds what a bucket earned since it was last refilled, up to its burst.
void refill(double& tokens, std::chrono::steady_clock::time_point& refilled, const rate_limit& l,
            std::chrono::steady_clock::time_point now) {
  tokens = std::min(l.burst, tokens + l.per_second * std::chrono::duration<double>(now - refilled).count());
  refilled = now;
}

// How long until a bucket holding `tokens` has one.
std::chrono::milliseconds wait_for_token(double tokens, const rate_limit& l) {
  const double wait_ms = std::ceil((1 - tokens) / l.per_second * 1000.0);
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::max(1.0, wait_ms)));
}

}  // namespace

std::string_view describe(endpoint e) noexcept {
  switch (e) {
    case endpoint::decide: return "POST /v1/systemone";
    case endpoint::models: return "GET /v1/models";
    case endpoint::metrics: return "GET /metrics";
    case endpoint::agent_ws: return "the agent WebSocket API (/v1/agent)";
    case endpoint::escalations: return "GET /v1/escalations and GET /v1/tools";
    case endpoint::resolve: return "POST /v1/escalations/{id}/resolve";
    case endpoint::review_ws: return "the reviewer WebSocket (/v1/review)";
    case endpoint::admin: return "POST /v1/admin/reload";
  }
  return "?";
}

bool may_use(role r, endpoint e) noexcept {
  switch (e) {
    case endpoint::decide:
    case endpoint::agent_ws: return r == role::agent || r == role::admin;
    case endpoint::models: return true;
    case endpoint::metrics: return r == role::auditor || r == role::admin;
    // Auditors read escalations; only reviewers resolve them.
    case endpoint::escalations: return r != role::agent;
    case endpoint::resolve:
    case endpoint::review_ws: return r == role::reviewer || r == role::admin;
    case endpoint::admin: return r == role::admin;
  }
  return false;
}

error forbidden(const caller& c, endpoint e) {
  return make_error(403, codes::forbidden, "key `" + c.name + "` has role " + std::string(to_string(c.role)) +
                                          ", which may not use " + std::string(describe(e)));
}

error rate_limited(const caller& c, std::chrono::milliseconds wait) {
  return make_error(429, codes::rate_limited, "key `" + c.name + "` is over its rate limit; retry in " +
                                             std::to_string(wait.count()) + " ms");
}

error too_many_failures(std::chrono::milliseconds wait) {
  return make_error(429, codes::rate_limited, "too many failed authentications from this address; retry in " +
                                             std::to_string(wait.count()) + " ms");
}

authenticator::authenticator(const auth_options& options) : anonymous_{"anonymous", role::admin, 0} {
  const auto now = std::chrono::steady_clock::now();
  auto add_bucket = [&](const std::optional<rate_limit>& own) {
    const std::optional<rate_limit> l = own ? own : options.limit;
    buckets_.push_back(bucket{l, l ? l->burst : 0, now});
  };
  if (options.keys.empty()) add_bucket(std::nullopt);
  for (const api_key& k : options.keys) {
    keys_.push_back(key_entry{sha256_hex(k.secret), caller{k.name, k.role, buckets_.size()}});
    add_bucket(k.limit);
  }
}

authenticator::address_key authenticator::key_of(const boost::asio::ip::address& a) {
  address_key k{};
  if (a.is_v4()) {
    const auto b = a.to_v4().to_bytes();
    std::copy(b.begin(), b.end(), k.begin());
  } else if (a.to_v6().is_v4_mapped()) {
    const auto b = a.to_v6().to_bytes();
    std::copy(b.begin() + 12, b.end(), k.begin());
  } else {
    const auto b = a.to_v6().to_bytes();
    std::copy(b.begin(), b.begin() + 8, k.begin());
    k[15] = 6;  // apart from every IPv4 key, whose last 12 bytes are zero
  }
  return k;
}

authenticator::bucket& authenticator::failures_of(const address_key& k, std::chrono::steady_clock::time_point now) {
  if (const auto it = failures_.find(k); it != failures_.end()) return it->second;
  if (failures_.size() >= max_failing_addresses) {
    // A full bucket is the same as none: those are forgotten first.
    for (auto it = failures_.begin(); it != failures_.end();) {
      bucket& b = it->second;
      refill(b.tokens, b.refilled, *b.limit, now);
      it = b.tokens >= b.limit->burst ? failures_.erase(it) : std::next(it);
    }
    // Still full: forget the address nearest to being forgiven, so that no address that never
    // failed shares anyone's bucket (an attacker with more addresses than the table gets a
    // burst per address, no more).
    if (failures_.size() >= max_failing_addresses) {
      failures_.erase(std::max_element(failures_.begin(), failures_.end(), [](const auto& a, const auto& b) {
        return a.second.tokens < b.second.tokens;
      }));
    }
  }
  return failures_.emplace(k, bucket{failure_limit, failure_limit.burst, now}).first->second;
}

std::optional<std::chrono::milliseconds> authenticator::failure_wait(const boost::asio::ip::address& from) {
  if (open()) return std::nullopt;
  std::lock_guard lock(mutex_);
  const auto it = failures_.find(key_of(from));
  if (it == failures_.end()) return std::nullopt;
  bucket* b = &it->second;
  refill(b->tokens, b->refilled, *b->limit, std::chrono::steady_clock::now());
  if (b->tokens >= 1) return std::nullopt;
  return wait_for_token(b->tokens, *b->limit);
}

result<const caller*> authenticator::authenticate(std::string_view authorization, const boost::asio::ip::address& from) {
  auto found = match(authorization);
  // A request without a key is not a guess: it is refused, not counted (the inbox's first,
  // keyless look; a client that forgot its header).
  if (!found && !open() && !authorization.empty()) {
    std::lock_guard lock(mutex_);
    const auto now = std::chrono::steady_clock::now();
    bucket& b = failures_of(key_of(from), now);
    refill(b.tokens, b.refilled, *b.limit, now);
    b.tokens = std::max(0.0, b.tokens - 1);
  }
  return found;
}

result<const caller*> authenticator::match(std::string_view authorization) const {
  if (open()) return &anonymous_;
  if (authorization.empty()) return unauthorized("an API key is needed: send `Authorization: Bearer <key>`");
  constexpr std::string_view scheme = "bearer ";
  if (authorization.size() <= scheme.size() ||
      !std::equal(scheme.begin(), scheme.end(), authorization.begin(),
                  [](char a, char b) { return a == (b | 0x20); })) {
    return unauthorized("the Authorization header must be `Bearer <key>`");
  }
  std::string_view key = authorization.substr(scheme.size());
  while (!key.empty() && (key.front() == ' ' || key.front() == '\t')) key.remove_prefix(1);
  while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.remove_suffix(1);
  const std::string digest = sha256_hex(key);
  const caller* found = nullptr;
  for (const key_entry& k : keys_) {
    if (same_digest(k.digest, digest)) found = &k.who;
  }
  if (found == nullptr) return unauthorized("the API key is not valid");
  return found;
}

std::optional<std::chrono::milliseconds> authenticator::admit(const caller& c) {
  std::lock_guard lock(mutex_);
  bucket& b = buckets_[c.index];
  if (!b.limit) return std::nullopt;
  refill(b.tokens, b.refilled, *b.limit, std::chrono::steady_clock::now());
  if (b.tokens >= 1) {
    b.tokens -= 1;
    return std::nullopt;
  }
  return wait_for_token(b.tokens, *b.limit);
}

}  // namespace baton
