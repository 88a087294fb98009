// A release's JSON files (config, index, head config) read whole: nlohmann::json, or
// nlohmann::ordered_json where a copy must keep the key order. Throws load_error.
#pragma once

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/clef/model/safetensors.hpp"

namespace baton::clef {

template <class Json = nlohmann::json>
Json read_json_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw load_error(p.string() + ": cannot read");
  std::ostringstream s;
  s << in.rdbuf();
  Json j = Json::parse(s.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw load_error(p.string() + ": not valid JSON");
  if (!j.is_object()) throw load_error(p.string() + ": not a JSON object");
  return j;
}

}  // namespace baton::clef
