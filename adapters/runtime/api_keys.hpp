// The API keys a server is configured with (auth.keys in config/baton.yaml) and their roles. What
// each role may call and how keys are checked is the server's (adapters/server/auth.hpp).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace baton {

enum class role { agent, reviewer, auditor, admin };

std::string_view to_string(role r) noexcept;
std::optional<role> parse_role(std::string_view name) noexcept;

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

}  // namespace baton
