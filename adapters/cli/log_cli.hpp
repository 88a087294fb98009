// `baton log`: the auditor's commands over the decision log (sql, show, tail, verify). They open
// the database read-only and never create it.
#pragma once

#include <iosfwd>
#include <span>
#include <string_view>

namespace baton {

// `args` excludes "log".
int log_main(std::span<const std::string_view> args, std::istream& in, std::ostream& out, std::ostream& err);

}  // namespace baton
