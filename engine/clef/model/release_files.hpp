// The files of a release the loader (release.cpp) opens, and the tensors it skips: named once, so
// that `baton pull` fetches exactly what `release` reads and nothing of the talker or code2wav.
#pragma once

#include <algorithm>
#include <array>
#include <set>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace baton::clef::release_files {

inline constexpr std::string_view config_json = "config.json";
inline constexpr std::string_view index_json = "model.safetensors.index.json";
inline constexpr std::string_view single_shard = "model.safetensors";  // a checkpoint without an index
inline constexpr std::string_view head_config_json = "joint_head_config.json";
inline constexpr std::string_view head_weights = "joint_head.safetensors";

// Every file but the shards an index names (model.safetensors is opened only without an index).
inline constexpr std::array<std::string_view, 5> fixed = {config_json, index_json, single_shard, head_config_json,
                                                          head_weights};

// Qwen3-Omni's speech generator: in the release, never opened by the loader.
inline bool skipped_tensor(std::string_view name) {
  return name.starts_with("talker.") || name.starts_with("code2wav.");
}

// The shards of an index's `weight_map` that hold a tensor the loader reads; a shard holding only
// skipped tensors is not among them. Entries that are not strings are left to the loader to refuse.
inline std::set<std::string> shards_read(const nlohmann::json& index) {
  std::set<std::string> out;
  const auto map = index.find("weight_map");
  if (map == index.end() || !map->is_object()) return out;
  for (const auto& [name, file] : map->items()) {
    if (!skipped_tensor(name) && file.is_string()) out.insert(file.get<std::string>());
  }
  return out;
}

}  // namespace baton::clef::release_files
