// The `baton` command line: one subcommand per file (*_cli.cpp); main() only forwards to run_cli().
#pragma once

#include <iosfwd>
#include <span>
#include <string>
#include <string_view>

#include "adapters/cli/cli_args.hpp"
#include "adapters/cli/engine_cli.hpp"
#include "adapters/cli/exit_codes.hpp"

namespace baton {

inline constexpr const char* baton_version = "0.1.0";

// `args` excludes the program name.
int run_cli(std::span<const std::string_view> args, std::istream& in, std::ostream& out, std::ostream& err);

}  // namespace baton
