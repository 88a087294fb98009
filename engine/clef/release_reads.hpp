// What the clef engine opens in a release directory, named by the code that opens it (the loader,
// the tokenizer, the media preprocessing), so that `baton pull` downloads exactly these.
#pragma once

#include <algorithm>
#include <string_view>

#include "engine/clef/model/release_files.hpp"
#include "engine/tokenizer/tokenizer_files.hpp"

namespace baton::clef {

// min_pixels / max_pixels for the vision preprocessing (media_input.cpp).
inline constexpr std::string_view preprocessor_config_json = "preprocessor_config.json";

// A file the engine reads whatever the index says: config, index, head, tokenizer, preprocessor.
// The shards it reads are the index's: release_files::shards_read.
inline bool engine_reads(std::string_view file) {
  const auto in = [&](const auto& names) { return std::find(names.begin(), names.end(), file) != names.end(); };
  return in(release_files::fixed) || in(tokenizer_files::all) || file == preprocessor_config_json;
}

}  // namespace baton::clef
