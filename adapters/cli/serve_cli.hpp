// `baton serve`: the routing server of adapters/server, configured from config/baton.yaml and
// the command line, until SIGINT or SIGTERM.
#pragma once

#include <iosfwd>
#include <span>
#include <string_view>

namespace baton {

// `args` exclude "serve".
int serve_main(std::span<const std::string_view> args, std::ostream& out, std::ostream& err);

}  // namespace baton
