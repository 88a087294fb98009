// API keys by role (the keys themselves: runtime/api_keys.hpp): which key is calling, whether its role may use an endpoint, and
// whether it is within its rate. Keys are compared by their sha256 in constant time and never
// logged: a key is named by its `name` only.
#pragma once

#include <boost/asio/ip/address.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "adapters/runtime/api_keys.hpp"
#include "core/error.hpp"

namespace baton {

// What a role may call. /health is open to everyone.
enum class endpoint { decide, models, metrics, agent_ws, escalations, resolve, review_ws, admin };
std::string_view describe(endpoint e) noexcept;
bool may_use(role r, endpoint e) noexcept;

// Failed authentications allowed per client address: a bucket of `burst` failures refilled at
// `per_second`; an empty one answers 429 without looking at the key.
inline constexpr rate_limit failure_limit{1, 10};
// Addresses whose failures are counted at once; past it, the one nearest to being forgiven is
// forgotten.
inline constexpr std::size_t max_failing_addresses = 4096;

struct caller {
  std::string name;
  baton::role role = role::admin;
  std::size_t index = 0;  // its rate bucket
};

class authenticator {
 public:
  explicit authenticator(const auth_options& options);

  bool open() const noexcept { return keys_.empty(); }

  // How long `from` must wait before a key it sends is looked at: its failed authentications
  // have spent failure_limit. None: go on. Always none without keys.
  std::optional<std::chrono::milliseconds> failure_wait(const boost::asio::ip::address& from);

  // The caller an `Authorization` header value names ("Bearer KEY"; an empty view when absent).
  // 401 UNAUTHORIZED when keys are configured and it is missing or matches none; a wrong key (not
  // a missing one) counts against `from`.
  result<const caller*> authenticate(std::string_view authorization, const boost::asio::ip::address& from);

  // Takes one request from the caller's bucket. When it is empty: how long until it is not.
  std::optional<std::chrono::milliseconds> admit(const caller& c);

 private:
  struct key_entry {
    std::string digest;  // sha256_hex of the key
    caller who;
  };
  struct bucket {
    std::optional<rate_limit> limit;
    double tokens = 0;
    std::chrono::steady_clock::time_point refilled;
  };
  // IPv4, or the /64 of an IPv6 address: one machine holds a whole /64.
  using address_key = std::array<unsigned char, 16>;
  static address_key key_of(const boost::asio::ip::address& a);
  bucket& failures_of(const address_key& k, std::chrono::steady_clock::time_point now);
  result<const caller*> match(std::string_view authorization) const;

  std::vector<key_entry> keys_;
  caller anonymous_;
  std::mutex mutex_;
  std::vector<bucket> buckets_;
  std::map<address_key, bucket> failures_;  // guarded by mutex_; at most max_failing_addresses
};

// 403 FORBIDDEN for a role that may not use the endpoint.
error forbidden(const caller& c, endpoint e);
// 429 RATE_LIMITED for a caller whose bucket is empty for `wait` more.
error rate_limited(const caller& c, std::chrono::milliseconds wait);
// 429 RATE_LIMITED for an address whose failed authentications are spent for `wait` more.
error too_many_failures(std::chrono::milliseconds wait);

}  // namespace baton
