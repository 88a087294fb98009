// API keys by role (DESIGN §8): which key is calling, whether its role may use an endpoint, and
// whether it is within its rate. Keys are compared by their sha256 in constant time and never
// logged: a key is named by its `name` only.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"

namespace baton {

enum class role { agent, reviewer, auditor, admin };

std::string_view to_string(role r) noexcept;
std::optional<role> parse_role(std::string_view name) noexcept;

// What a role may call. /health is open to everyone.
enum class endpoint { decide, models, metrics, agent_ws, escalations, resolve, review_ws };
std::string_view describe(endpoint e) noexcept;
bool may_use(role r, endpoint e) noexcept;

struct rate_limit {
  double per_second = 0;  // tokens added per second
  double burst = 1;       // bucket size
};

struct api_key {
  std::string name;
  baton::role role = role::agent;
  std::string secret;
  std::string env;                  // the environment variable it was read from ("" for a file)
  std::optional<rate_limit> limit;  // else auth_options::limit
};

struct auth_options {
  std::vector<api_key> keys;        // none: every caller is `anonymous` (admin); loopback only
  std::optional<rate_limit> limit;  // per key, where the key sets none; absent: unlimited
};

struct caller {
  std::string name;
  baton::role role = role::admin;
  std::size_t index = 0;  // its rate bucket
};

class authenticator {
 public:
  explicit authenticator(const auth_options& options);

  bool open() const noexcept { return keys_.empty(); }

  // The caller an `Authorization` header value names ("Bearer KEY"; an empty view when absent).
  // 401 UNAUTHORIZED when keys are configured and it is missing or matches none.
  result<const caller*> authenticate(std::string_view authorization) const;

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
  std::vector<key_entry> keys_;
  caller anonymous_;
  std::mutex mutex_;
  std::vector<bucket> buckets_;
};

// 403 FORBIDDEN for a role that may not use the endpoint.
error forbidden(const caller& c, endpoint e);
// 429 RATE_LIMITED for a caller whose bucket is empty for `wait` more.
error rate_limited(const caller& c, std::chrono::milliseconds wait);

}  // namespace baton
