// What the clef engine opens in a release directory, named by the code that opens it (the loader,
// the tokenizer, the media preprocessing), so that `baton pull` downloads exactly these.
#pragma once

#include <algorithm>
#include <set>
#include <string>
#include <string_view>

#include "engine/clef/model/release_files.hpp"
#include "engine/tokenizer/tokenizer_files.hpp"

namespace baton::clef {

// min_pixels / max_pixels for the vision preprocessing (media_input.cpp).
inline constexpr std::string_view preprocessor_config_json = "preprocessor_config.json";

// Whether the engine opens `file` of a revision. `indexed`: the revision has the index, and
// `shards` are its release_files::shards_read. The loader opens model.safetensors only without an
// index (or when the index names it); the other fixed files, the tokenizer's and the
// preprocessor's whatever the index says.
inline bool engine_reads(std::string_view file, bool indexed, const std::set<std::string>& shards) {
  if (shards.contains(std::string(file))) return true;
  if (file == release_files::single_shard) return !indexed;
  const auto in = [&](const auto& names) { return std::find(names.begin(), names.end(), file) != names.end(); };
  return in(release_files::fixed) || in(tokenizer_files::all) || file == preprocessor_config_json;
}

}  // namespace baton::clef
