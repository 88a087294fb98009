#include "engine/factory/engine_settings.hpp"

#include <array>
#include <cstdint>

namespace baton {

namespace {

constexpr std::array<clef_setting_name, 7> settings = {{
    {"model_id", setting_kind::text},
    {"dtype", setting_kind::text},
    {"head_dtype", setting_kind::text},
    {"device", setting_kind::text},
    {"threads", setting_kind::integer},
    {"max_length", setting_kind::integer},
    {"batch_tokens", setting_kind::integer},
}};

// An integer within [min, max], or the problem.
std::optional<std::string> integer(const json& v, std::int64_t min, std::int64_t max, std::int64_t& out) {
  if (!v.is_number_integer() || v.get<std::int64_t>() < min || v.get<std::int64_t>() > max) {
    return "must be an integer within [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  }
  out = v.get<std::int64_t>();
  return std::nullopt;
}

constexpr std::int64_t most_tokens = std::int64_t(1) << 40;

}  // namespace

std::span<const clef_setting_name> clef_settings() noexcept { return settings; }

std::optional<setting_kind> clef_setting(std::string_view key) noexcept {
  for (const auto& [name, kind] : settings) {
    if (name == key) return kind;
  }
  return std::nullopt;
}

std::optional<std::string> set_clef_setting(engine_options& options, std::string_view key, const json& value) {
  clef::clef_engine_options& clef = options.clef;
  std::int64_t n = 0;
  if (key == "threads") {
    if (auto problem = integer(value, 0, 4096, n)) return problem;
    clef.model.threads = static_cast<int>(n);
    return std::nullopt;
  }
  if (key == "max_length" || key == "batch_tokens") {
    if (auto problem = integer(value, 1, most_tokens, n)) return problem;
    (key == "max_length" ? clef.max_length : clef.batch_tokens) = static_cast<std::size_t>(n);
    return std::nullopt;
  }
  if (!value.is_string()) return std::string("must be a string");
  const std::string& text = value.get_ref<const std::string&>();
  if (key == "model_id") {
    if (text.empty()) return std::string("must not be empty");
    clef.model_id = text;
  } else if (key == "dtype" || key == "head_dtype") {
    clef::compute_dtype dtype{};
    if (!clef::parse_compute_dtype(text, dtype)) return std::string("must be f32 or bf16");
    if (key == "dtype") {
      clef.model.dtype = dtype;
    } else {
      clef.model.head_dtype = dtype;
    }
  } else if (key == "device") {
    clef.model.device = text;
  } else {
    return std::string("is not a setting of the clef engine");
  }
  return std::nullopt;
}

}  // namespace baton
