#include <gtest/gtest.h>

#include "core/base64.hpp"

namespace baton {
namespace {

std::string decoded(std::string_view text) {
  std::string reason;
  const auto bytes = base64_decode(text, reason);
  EXPECT_TRUE(bytes.has_value()) << text << ": " << reason;
  if (!bytes) return {};
  std::string out;
  for (std::byte b : *bytes) out += static_cast<char>(b);
  return out;
}

std::string refusal(std::string_view text) {
  std::string reason;
  EXPECT_FALSE(base64_decode(text, reason).has_value()) << text;
  return reason;
}

// RFC 4648 §10's test vectors.
TEST(base64, decodes_the_rfc_vectors) {
  EXPECT_EQ(decoded(""), "");
  EXPECT_EQ(decoded("Zg=="), "f");
  EXPECT_EQ(decoded("Zm8="), "fo");
  EXPECT_EQ(decoded("Zm9v"), "foo");
  EXPECT_EQ(decoded("Zm9vYg=="), "foob");
  EXPECT_EQ(decoded("Zm9vYmE="), "fooba");
  EXPECT_EQ(decoded("Zm9vYmFy"), "foobar");
}

TEST(base64, decodes_every_byte_value) {
  const std::string all = decoded("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0+P0BBQkNERUZHSElKS0xNTk9QUVJTVFVWV1hZWltcXV5fYGFiY2RlZmdoaWprbG1ub3BxcnN0dXZ3eHl6e3x9fn+AgYKDhIWGh4iJiouMjY6PkJGSk5SVlpeYmZqbnJ2en6ChoqOkpaanqKmqq6ytrq+wsbKztLW2t7i5uru8vb6/wMHCw8TFxsfIycrLzM3Oz9DR0tPU1dbX2Nna29zd3t/g4eLj5OXm5+jp6uvs7e7v8PHy8/T19vf4+fr7/P3+/w==");
  ASSERT_EQ(all.size(), 256u);
  for (std::size_t i = 0; i < 256; ++i) EXPECT_EQ(static_cast<unsigned char>(all[i]), i);
}

TEST(base64, refuses_what_is_not_strict_base64) {
  EXPECT_EQ(refusal("Zm9"), "its length 3 is not a multiple of 4");
  EXPECT_EQ(refusal("Zm9v\nYmFy"), "its length 9 is not a multiple of 4");
  EXPECT_EQ(refusal("Zm9-"), "character 3 is '-', not base64");  // URL-safe alphabet
  EXPECT_EQ(refusal("Z=9v"), "character 1 is '=', not base64");  // padding inside
  EXPECT_EQ(refusal("Z==="), "character 1 is '=', not base64");  // three pad characters
  EXPECT_EQ(refusal("Zm9v Ym="), "character 4 is byte 32, not base64");
  EXPECT_EQ(refusal(std::string_view("Zm\0v", 4)), "character 2 is byte 0, not base64");
}

}  // namespace
}  // namespace baton
