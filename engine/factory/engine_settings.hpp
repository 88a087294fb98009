// The clef engine's settings as config/baton.yaml (`engine:`, `routing.fallback:`) and `baton
// decide`'s flags both give them, checked and stored into engine_options here, once: `dtype: bf16`
// and `--dtype bf16` are the same setting with the same rule. Each caller names where the value
// came from in its message (the config's FILE:LINE and key, or the flag).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/json.hpp"
#include "engine/factory/engine_options.hpp"

namespace baton {

// What a setting's value is: text (model_id, dtype, head_dtype, device) or a whole number
// (threads, max_length, batch_tokens); none for another key.
enum class setting_kind { text, integer };
struct clef_setting_name {
  std::string_view key;
  setting_kind kind;
};
// Every one of them, in that order: what a caller that takes them all (decide's flags) walks.
std::span<const clef_setting_name> clef_settings() noexcept;
std::optional<setting_kind> clef_setting(std::string_view key) noexcept;

// Stores `value` for `key` into `options.clef`: a string for a text setting, an integer for a whole
// number. The problem, to follow the value's name, when it is not one ("must be f32 or bf16",
// "must be an integer within [0, 4096]").
std::optional<std::string> set_clef_setting(engine_options& options, std::string_view key, const json& value);

}  // namespace baton
