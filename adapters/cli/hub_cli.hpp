// `baton pull` (a Clef-Omni release from the Hugging Face hub into its cache, only the files the
// clef engine reads) and `baton models` (what that cache holds).
#pragma once

#include <iosfwd>
#include <span>
#include <string_view>

namespace baton {

// `args` exclude "pull". `progress_bar`: a live bar on `err` (a terminal) instead of a line per file.
int pull_main(std::span<const std::string_view> args, std::ostream& out, std::ostream& err, bool progress_bar);

// `args` exclude "models".
int models_main(std::span<const std::string_view> args, std::ostream& out, std::ostream& err);

}  // namespace baton
