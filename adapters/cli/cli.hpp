// The `baton` command line: one subcommand per file (*_cli.cpp); main() only forwards to run_cli().
#pragma once

#include <iosfwd>
#include <span>
#include <string>
#include <string_view>

#include "adapters/cli/engine_cli.hpp"
#include "adapters/cli/exit_codes.hpp"

namespace baton {

inline constexpr const char* baton_version = "0.1.0";


// `args` excludes the program name.
int run_cli(std::span<const std::string_view> args, std::istream& in, std::ostream& out, std::ostream& err);

// Sends spdlog's default logger (the engines' start-up lines, the server's log) to standard
// error: standard output carries a command's results (JSON lines, the listening line). Once per
// process, before run_cli; calling it again is harmless.
void log_to_stderr();

}  // namespace baton
