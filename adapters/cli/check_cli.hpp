// `baton check`: a config's registry and policy loaded as `baton serve` loads them, without a
// listener, model weights or a call to a remote engine; the schema every turn asks, its size, and
// what the policy can never use (policies/policy_check.hpp).
#pragma once

#include <iosfwd>
#include <span>
#include <string_view>

namespace baton {

// `args` exclude "check".
int check_main(std::span<const std::string_view> args, std::ostream& out, std::ostream& err);

}  // namespace baton
