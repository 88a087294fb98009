#include "adapters/runtime/api_keys.hpp"

namespace baton {

std::string_view to_string(role r) noexcept {
  switch (r) {
    case role::agent: return "agent";
    case role::reviewer: return "reviewer";
    case role::auditor: return "auditor";
    case role::admin: return "admin";
  }
  return "?";
}

std::optional<role> parse_role(std::string_view name) noexcept {
  for (role r : {role::agent, role::reviewer, role::auditor, role::admin}) {
    if (to_string(r) == name) return r;
  }
  return std::nullopt;
}

}  // namespace baton
