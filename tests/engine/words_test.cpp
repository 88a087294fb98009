#include <gtest/gtest.h>

#include "engine/keyword/words.hpp"

namespace baton::words {
namespace {

using list = std::vector<std::string>;

TEST(words, normalise_case_punctuation_underscores_and_camel_case) {
  EXPECT_EQ(normalised("Refund_Order: searchWeb, HTTP-404!"), (list{"refund", "order", "search", "web", "http", "404"}));
  EXPECT_EQ(normalised("  \n\t"), list{});
}

TEST(words, stop_words_are_dropped) {
  EXPECT_EQ(normalised("The customer is NOT happy with it"), (list{"customer", "happy"}));
  for (const char* w : {"a", "about", "s", "same", "yourselves", "the", "whom"}) EXPECT_TRUE(is_stop_word(w)) << w;
  for (const char* w : {"refund", "zebra", "aa", "yourselve"}) EXPECT_FALSE(is_stop_word(w)) << w;
}

TEST(words, light_stemmer_joins_inflections) {
  const std::pair<const char*, const char*> cases[] = {
      {"charges", "charg"}, {"charged", "charg"}, {"charging", "charg"}, {"charge", "charg"},
      {"refunds", "refund"}, {"refunded", "refund"}, {"refunding", "refund"},
      {"shipped", "ship"}, {"shipping", "ship"}, {"policies", "policy"}, {"policy", "policy"},
      {"classes", "class"}, {"status", "status"}, {"analysis", "analysis"}, {"weekly", "week"},
      {"reply", "reply"}, {"need", "need"}, {"bus", "bus"}, {"failed", "fail"}, {"failing", "fail"},
  };
  for (const auto& [in, out] : cases) {
    std::string w = in;
    stem(w);
    EXPECT_EQ(w, out) << in;
  }
}

TEST(words, non_ascii_bytes_are_word_characters) {
  EXPECT_EQ(normalised("Café naïve 你好, straße"), (list{"café", "naïve", "你好", "straße"}));
}

TEST(words, hashes_follow_the_normalised_words) {
  std::vector<std::uint64_t> a, b;
  EXPECT_EQ(append_hashes("Refunds, please!", a), 2u);
  EXPECT_EQ(append_hashes("REFUND pleased", b), 2u);
  EXPECT_EQ(a[0], b[0]);
}

}  // namespace
}  // namespace baton::words
