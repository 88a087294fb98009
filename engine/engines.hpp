// Engines by name, for the CLI and the configuration.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "engine/decision_engine.hpp"

namespace baton {

// The names make_engine() knows.
std::vector<std::string_view> engine_names();

result<std::unique_ptr<decision_engine>> make_engine(std::string_view name);

}  // namespace baton
