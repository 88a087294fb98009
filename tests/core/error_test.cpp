#include <gtest/gtest.h>

#include "core/error.hpp"
#include "core/sha256.hpp"
#include "support/files.hpp"

namespace baton {
namespace {

TEST(error, message_is_what_the_sdk_extracts_from_detail) {
  std::vector<issue> detail = {
      {json::array({"body", "state"}), "Field required", "missing", {}},
      {json::array({"body", "questions", "q", "score", "criteria", 3}), "bad level", "json_type", {}},
      {json::array({"query", "x"}), "odd", "t", {}},
  };
  EXPECT_EQ(issues_message(detail), "state: Field required; questions.q.score.criteria.3: bad level; query.x: odd");
  const error e = make_error(422, "INVALID_REQUEST", detail);
  EXPECT_EQ(e.message, issues_message(detail));
  EXPECT_EQ(render_error(e),
            R"({"error":"state: Field required; questions.q.score.criteria.3: bad level; query.x: odd","code":"INVALID_REQUEST",)"
            R"("detail":[{"loc":["body","state"],"msg":"Field required","type":"missing"},)"
            R"({"loc":["body","questions","q","score","criteria",3],"msg":"bad level","type":"json_type"},)"
            R"({"loc":["query","x"],"msg":"odd","type":"t"}]})");
}

TEST(error, plain_errors_have_an_empty_detail) {
  EXPECT_EQ(render_error(make_error(503, "QUEUE_FULL", "the engine queue is full")),
            R"({"error":"the engine queue is full","code":"QUEUE_FULL","detail":[]})");
}

TEST(error, reading_bodies_that_are_not_errors_fails_clearly) {
  EXPECT_FALSE(error_from_json(json::array(), 400));
  EXPECT_FALSE(error_from_json(test::parse(R"({"error":"x"})"), 400));
  EXPECT_FALSE(error_from_json(test::parse(R"({"error":"x","code":"C","detail":{}})"), 400));
  EXPECT_FALSE(error_from_json(test::parse(R"({"error":"x","code":"C","detail":[{"loc":"body"}]})"), 400));
  auto ok = error_from_json(test::parse(R"({"error":"x","code":"C"})"), 418);
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 418);
  EXPECT_TRUE(ok->detail.empty());
}

TEST(error, value_throws_only_where_asked) {
  result<int> r = make_error(400, "X", "bad");
  EXPECT_THROW((void)r.value(), error_exception);
}

}  // namespace
}  // namespace baton

namespace baton {
namespace {

TEST(sha256, known_digests_in_one_piece_and_incrementally) {
  // FIPS 180-2 test vectors.
  EXPECT_EQ(sha256_hex(""), "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  sha256 h;
  h.update("a");
  h.update(std::string_view("bc"));
  EXPECT_EQ(h.digest(), sha256_hex("abc"));
}

}  // namespace
}  // namespace baton
