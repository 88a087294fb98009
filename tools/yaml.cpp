#include "tools/yaml.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <unordered_set>

#include "core/files.hpp"

namespace baton::tools::yaml {

int line_of(const YAML::Node& n) { return std::max(1, n.Mark().line + 1); }

void fail(const YAML::Node& at, std::string reason) { throw yaml_error{line_of(at), std::move(reason)}; }

std::string ticked(std::string_view s) {
  // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "`" + std::string(s).
  std::string out;
  out.reserve(s.size() + 2);
  out += '`';
  out += s;
  out += '`';
  return out;
}

std::vector<field> read_map(const YAML::Node& n, std::string_view what,
                            std::initializer_list<std::string_view> allowed) {
  if (!n.IsMap()) fail(n, std::string(what) + " must be a mapping");
  std::vector<field> out;
  std::unordered_set<std::string> keys;  // a scan of `out` per key was quadratic in a large map
  for (auto it = n.begin(); it != n.end(); ++it) {
    if (!it->first.IsScalar()) fail(it->first, std::string(what) + ": keys must be strings");
    std::string key = it->first.Scalar();
    if (allowed.size() && std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      fail(it->first, "unknown key " + ticked(key) + " in " + std::string(what));
    }
    if (!keys.insert(key).second) fail(it->first, "duplicate key " + ticked(key) + " in " + std::string(what));
    out.push_back({std::move(key), it->first, it->second});
  }
  return out;
}

const field* find(const std::vector<field>& fields, std::string_view key) {
  for (const field& f : fields) {
    if (f.key == key) return &f;
  }
  return nullptr;
}

std::string read_string(const YAML::Node& v, std::string_view what) {
  if (v.IsNull()) return {};
  if (!v.IsScalar()) fail(v, std::string(what) + " must be a string");
  return v.Scalar();
}

namespace {

// A quoted scalar has the "!" tag.
json scalar_to_json(const YAML::Node& n) {
  const std::string& s = n.Scalar();
  if (n.Tag() == "!") return s;
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  const char* end = s.data() + s.size();
  std::int64_t i = 0;
  if (auto [p, ec] = std::from_chars(s.data(), end, i); ec == std::errc() && p == end) return i;
  const bool numeric_start = !s.empty() && (std::isdigit(static_cast<unsigned char>(s[0])) ||
                                            ((s[0] == '-' || s[0] == '+' || s[0] == '.') && s.size() > 1));
  double d = 0;
  const char* begin = s.data() + (!s.empty() && s[0] == '+' ? 1 : 0);
  if (auto [p, ec] = std::from_chars(begin, end, d); numeric_start && ec == std::errc() && p == end &&
                                                     std::isfinite(d)) {
    return d;
  }
  return s;
}

// An alias repeats its anchor's node wherever it is used, so a few hundred bytes of aliases of
// aliases expand to billions of nodes; `left` of them may still be read. An alias inside its own
// anchor (`&a [*a]`) is a cycle: the depth stops it before the stack does.
json to_json(const YAML::Node& n, std::string_view what, std::size_t& left, std::size_t depth) {
  if (left == 0) {
    fail(n, std::string(what) + " expands to more than " + std::to_string(max_json_nodes) +
                " values (aliases of aliases?)");
  }
  if (depth > max_json_depth) {
    fail(n, std::string(what) + " nests deeper than " + std::to_string(max_json_depth) + " levels (an alias inside its own anchor?)");
  }
  --left;
  switch (n.Type()) {
    case YAML::NodeType::Scalar:
      return scalar_to_json(n);
    case YAML::NodeType::Sequence: {
      json a = json::array();
      for (const YAML::Node& item : n) a.push_back(to_json(item, what, left, depth + 1));
      return a;
    }
    case YAML::NodeType::Map: {
      json o = json::object();
      for (const field& f : read_map(n, what)) o[f.key] = to_json(f.value, what, left, depth + 1);
      return o;
    }
    default:
      return nullptr;
  }
}

}  // namespace

json to_json(const YAML::Node& n, std::string_view what) {
  std::size_t left = max_json_nodes;
  return to_json(n, what, left, 0);
}

result<std::string> read_text(const std::filesystem::path& file, const char* code, std::size_t max_bytes) {
  std::string why;
  auto text = read_regular_file(file, max_bytes, why);
  if (!text) return make_error(422, code, file.string() + ": " + why);
  return std::move(*text);
}

}  // namespace baton::tools::yaml
