// A release's JSON files (config, index, head config) read whole: nlohmann::json, or
// nlohmann::ordered_json where a copy must keep the key order. Throws load_error.
#pragma once

#include <cstddef>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "engine/clef/model/safetensors.hpp"

namespace baton::clef {

// The largest a release's JSON file may be: the 30B thinker's index is ~2 MB, its config ~20 kB.
inline constexpr std::size_t max_release_json_bytes = std::size_t(64) << 20;

template <class Json = nlohmann::json>
Json read_json_file(const std::filesystem::path& p) {
  const mapped_file file(p);  // a regular file only: a FIFO would block the load for good
  if (file.size() > max_release_json_bytes) {
    throw load_error(p.string() + ": is " + std::to_string(file.size()) + " bytes, more than the " +
                     std::to_string(max_release_json_bytes) + " such a file may be");
  }
  const std::string_view text(reinterpret_cast<const char*>(file.data()), file.size());
  if (!json_depth_within(text, max_json_depth)) {
    throw load_error(p.string() + ": not valid JSON, or nested over " + std::to_string(max_json_depth) + " levels");
  }
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);  // valid: the depth pass read it all
  if (!j.is_object()) throw load_error(p.string() + ": not a JSON object");
  return j;
}

}  // namespace baton::clef
