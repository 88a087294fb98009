// The YAML reading shared by the config loaders (registry, policy): yaml-cpp nodes to checked
// values, and every problem reported as "FILE:LINE: reason".
#pragma once

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "core/json.hpp"

namespace baton::tools::yaml {

// yaml-cpp reports by throwing; the checks throw too, and parse() turns the one exception into
// the error value at the boundary.
struct yaml_error {
  int line;
  std::string reason;
};

int line_of(const YAML::Node& n);
[[noreturn]] void fail(const YAML::Node& at, std::string reason);
std::string ticked(std::string_view s);

struct field {
  std::string key;
  YAML::Node key_node;
  YAML::Node value;
};

// The entries of a mapping, refusing duplicate keys (yaml-cpp keeps both) and, when `allowed` is
// not empty, keys outside it.
std::vector<field> read_map(const YAML::Node& n, std::string_view what,
                            std::initializer_list<std::string_view> allowed = {});
const field* find(const std::vector<field>& fields, std::string_view key);
// A null value reads as the empty string.
std::string read_string(const YAML::Node& v, std::string_view what);
// A plain scalar reads as YAML 1.2 core types (bool, integer, float, string); a quoted one as a
// string. A value of more than max_json_nodes nodes, aliases expanded, or nested deeper than
// max_json_depth, is refused.
inline constexpr std::size_t max_json_nodes = 100000, max_json_depth = 256;
json to_json(const YAML::Node& n, std::string_view what);

// Reads `yaml_text` with `read(root)`; a yaml_error or a yaml-cpp error becomes 422 `code` with
// the message "FILE:LINE: reason".
template <class Read>
auto parse(std::string_view yaml_text, std::string_view file_name, const char* code, Read read)
    -> result<decltype(read(YAML::Node()))> {
  auto err = [&](int line, const std::string& reason) {
    return make_error(422, code, std::string(file_name) + ":" + std::to_string(line) + ": " + reason);
  };
  try {
    // One document a file: yaml-cpp's Load reads the first and would drop the others unseen.
    const std::vector<YAML::Node> documents = YAML::LoadAll(std::string(yaml_text));
    for (std::size_t i = 1; i < documents.size(); ++i) {
      if (!documents[i].IsNull()) fail(documents[i], "a second YAML document (after `---`): one document a file");
    }
    return read(documents.empty() ? YAML::Node() : documents.front());
  } catch (const yaml_error& e) {
    return err(e.line, e.reason);
  } catch (const YAML::Exception& e) {
    return err(std::max(1, e.mark.line + 1), e.msg);
  }
}

// The most a registry, policy or server configuration file may hold.
inline constexpr std::size_t max_config_bytes = std::size_t(16) << 20;

// The whole file, or 422 `code` "FILE: why": not a regular file (a FIFO, a device), more than
// `max_bytes`, or unreadable.
result<std::string> read_text(const std::filesystem::path& file, const char* code,
                              std::size_t max_bytes = max_config_bytes);

}  // namespace baton::tools::yaml
