// Strict base64 (RFC 4648 §4, the standard alphabet, padded): what media payloads must be.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace baton {

// The bytes `text` encodes, or nullopt with `reason` naming the first offending position. No
// whitespace, no URL-safe alphabet, no missing padding: a payload is refused rather than guessed.
std::optional<std::vector<std::byte>> base64_decode(std::string_view text, std::string& reason);

}  // namespace baton
