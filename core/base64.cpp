#include "core/base64.hpp"

#include <array>
#include <cstdint>

namespace baton {

namespace {

constexpr std::uint8_t invalid = 0xff;

constexpr std::array<std::uint8_t, 256> decode_table() {
  std::array<std::uint8_t, 256> t{};
  t.fill(invalid);
  constexpr std::string_view alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (std::size_t i = 0; i < alphabet.size(); ++i) t[static_cast<unsigned char>(alphabet[i])] = static_cast<std::uint8_t>(i);
  return t;
}

constexpr auto table = decode_table();

}  // namespace

std::optional<std::vector<std::byte>> base64_decode(std::string_view text, std::string& reason) {
  if (text.size() % 4 != 0) {
    reason = "its length " + std::to_string(text.size()) + " is not a multiple of 4";
    return std::nullopt;
  }
  std::size_t pad = 0;
  while (pad < 2 && pad < text.size() && text[text.size() - 1 - pad] == '=') ++pad;
  const std::size_t data_chars = text.size() - pad;
  std::vector<std::byte> out;
  out.reserve(data_chars * 3 / 4);
  std::uint32_t acc = 0;
  for (std::size_t i = 0; i < data_chars; ++i) {
    const std::uint8_t v = table[static_cast<unsigned char>(text[i])];
    if (v == invalid) {
      const auto c = static_cast<unsigned char>(text[i]);
      reason = "character " + std::to_string(i) + " is ";
      if (c >= 0x21 && c < 0x7f) {
        reason += '\'';
        reason += text[i];
        reason += '\'';
      } else {
        reason += "byte " + std::to_string(c);
      }
      reason += ", not base64";
      return std::nullopt;
    }
    acc = (acc << 6) | v;
    if (i % 4 == 3) {
      out.push_back(std::byte(acc >> 16));
      out.push_back(std::byte(acc >> 8));
      out.push_back(std::byte(acc));
      acc = 0;
    }
  }
  // The last quantum: 2 characters give 1 byte, 3 give 2.
  switch (data_chars % 4) {
    case 2: out.push_back(std::byte(acc >> 4)); break;
    case 3:
      out.push_back(std::byte(acc >> 10));
      out.push_back(std::byte(acc >> 2));
      break;
    default: break;
  }
  return out;
}

}  // namespace baton
