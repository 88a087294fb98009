#include <gtest/gtest.h>

#include <cstring>

#include "engine/factory/make_engine.hpp"
#include "engine/keyword/keyword_engine.hpp"
#include "support/files.hpp"

namespace baton {
namespace {

request parse_ok(std::string_view body) {
  auto r = parse_request(body, keyword_engine().describe().limits);
  EXPECT_TRUE(r) << body << "\n" << (r ? "" : render_error(r.error()));
  return r ? std::move(*r) : request{};
}

const char* routing = R"({"state": "Customer: I was charged twice for my March invoice, please refund the duplicate charge.",
  "questions": {
    "tool": {"type": "choice", "instructions": "Which tool should run next?", "criteria": {
      "refund_payment": "Refund a charge on the customer's card",
      "search_docs": "Search the help center articles",
      "reset_password": "Send a password reset link"}},
    "urgency": {"type": "score", "criteria": ["Can wait", "Today"]},
    "human": {"type": "noul", "instructions": "Does this need a person?"}}})";

TEST(keyword_engine, picks_the_option_the_state_talks_about) {
  keyword_engine engine;
  const decision d = engine.decide_one(parse_ok(routing));
  ASSERT_EQ(d.probabilities.size(), 3u);
  const auto& tool = d.probabilities[0];
  EXPECT_GT(tool[0], 0.9);
  EXPECT_NEAR(tool[1], tool[2], 1e-7);
  EXPECT_NEAR(tool[0] + tool[1] + tool[2], 1.0, 1e-6);
  EXPECT_FALSE(d.state_truncated);
  EXPECT_GT(d.input_tokens, 20);
}

TEST(keyword_engine, is_flat_when_nothing_matches) {
  keyword_engine engine;
  const decision d = engine.decide_one(parse_ok(routing));
  // "Can wait" / "Today" share no word with the state.
  EXPECT_EQ(d.probabilities[1], (std::vector<double>{0.5, 0.5}));
  const decision none = engine.decide_one(parse_ok(R"({"state": "zzz qqq", "questions": {"t": {"type": "choice",
      "criteria": {"alpha": "first letter", "beta": "second letter", "gamma": null}}}})"));
  for (double p : none.probabilities[0]) EXPECT_NEAR(p, 1.0 / 3.0, 1e-7);
}

TEST(keyword_engine, noul_is_half_unless_the_caller_describes_both_sides) {
  keyword_engine engine;
  const decision d = engine.decide_one(parse_ok(routing));
  EXPECT_EQ(d.probabilities[2], (std::vector<double>{0.5, 0.5}));

  const decision one_side = engine.decide_one(parse_ok(R"({"state": "the customer threatens to cancel", "questions": {
      "churn": {"type": "noul", "criteria": {"true": "The customer threatens to cancel or leave."}}}})"));
  EXPECT_EQ(one_side.probabilities[0], (std::vector<double>{0.5, 0.5}));

  const decision both = engine.decide_one(parse_ok(R"({"state": "I will cancel my subscription unless this is fixed", "questions": {
      "churn": {"type": "noul", "instructions": "Will the customer leave?",
                "criteria": {"true": "Threatens to cancel the subscription", "false": "Routine question, calm tone"}}}})"));
  EXPECT_GT(both.probabilities[0][0], 0.9);
}

TEST(keyword_engine, reads_json_states_and_stems_words) {
  keyword_engine engine;
  const decision d = engine.decide_one(parse_ok(R"({"state": {"ticket": {"subject": "Refunds", "body": "two charges"}},
      "questions": {"q": {"type": "choice", "criteria": {"billing": "charge and refund problems", "bug": "the product crashes"}}}})"));
  EXPECT_GT(d.probabilities[0][0], 0.9);
}

TEST(keyword_engine, score_levels_are_matched_by_description) {
  keyword_engine engine;
  const decision d = engine.decide_one(parse_ok(R"({"state": "The customer is furious and angry", "questions": {
      "anger": {"type": "score", "criteria": ["calm", "annoyed", "angry and furious"]}}})"));
  const auto& p = d.probabilities[0];
  EXPECT_GT(p[2], p[0]);
  EXPECT_NEAR(p[0], p[1], 1e-7);
}

TEST(keyword_engine, is_deterministic_and_batching_does_not_change_a_record) {
  keyword_engine engine;
  std::vector<request> batch;
  batch.push_back(parse_ok(routing));
  batch.push_back(parse_ok(R"({"state": "reset my password", "questions": {"tool": {"type": "choice", "criteria": {
      "refund_payment": "Refund a charge", "reset_password": "Send a password reset link"}}}})"));
  batch.push_back(parse_ok(routing));
  const auto results = engine.decide(batch);
  ASSERT_EQ(results.size(), 3u);
  for (std::size_t i = 0; i < batch.size(); ++i) {
    ASSERT_TRUE(results[i]);
    keyword_engine fresh;
    const decision alone = fresh.decide_one(batch[i]);
    ASSERT_EQ(alone.probabilities, results[i]->probabilities) << i;
    EXPECT_EQ(alone.input_tokens, results[i]->input_tokens);
  }
  EXPECT_EQ(results[0]->probabilities, results[2]->probabilities);
  EXPECT_GT(results[1]->probabilities[0][1], 0.9);
}

TEST(keyword_engine, temperature_sharpens_or_flattens) {
  const request r = parse_ok(routing);
  keyword_engine cold({1.2, 0.75, 0.25});
  keyword_engine warm({1.2, 0.75, 2.0});
  EXPECT_GT(cold.decide_one(r).probabilities[0][0], warm.decide_one(r).probabilities[0][0]);
}

TEST(keyword_engine, describes_itself_and_reads_no_media) {
  keyword_engine engine;
  const auto& d = engine.describe();
  EXPECT_EQ(d.model_id, "baton-keyword-1");
  EXPECT_EQ(d.fingerprint, "baton-keyword-1;bm25;k1=1.2;b=0.75;temperature=0.5");
  EXPECT_EQ(d.limits.images.max_items, 0u);
  EXPECT_EQ(d.limits.max_questions, 64u);
  auto refused = parse_request(R"({"state":"s","questions":{"q":{"type":"noul"}},"images":["data:image/png;base64,AAAA"]})", d.limits);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().detail[0].type, "media_unsupported");
}

TEST(engines, by_name) {
  engine_options options;
  options.name = "keyword";
  auto k = make_engine(options);
  ASSERT_TRUE(k);
  EXPECT_EQ((*k)->describe().model_id, "baton-keyword-1");
  options.name = "gpt";
  auto unknown = make_engine(options);
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("keyword"), std::string::npos);
}

// `baton check` checks a registry against question_limits without making the engine: they must be
// the question limits the engine itself describes.
TEST(engines, question_limits_are_the_described_ones_without_making_the_engine) {
  auto same = [](const request_limits& a, const request_limits& b) {
    return a.max_body_bytes == b.max_body_bytes && a.max_json_depth == b.max_json_depth &&
           a.min_questions == b.min_questions && a.max_questions == b.max_questions &&
           a.min_choice_options == b.min_choice_options && a.max_choice_options == b.max_choice_options &&
           a.min_score_levels == b.min_score_levels && a.max_score_levels == b.max_score_levels &&
           a.max_question_id_chars == b.max_question_id_chars && a.max_total_options == b.max_total_options;
  };
  engine_options keyword;
  engine_options systemone;
  systemone.name = "systemone";
  systemone.systemone.url = "http://127.0.0.1:9";  // made, never called
  engine_options clef;
  clef.name = "clef";
  clef.clef.model_dir = test::data_dir() / "vectors/clef-omni-tiny/release";
  clef.clef.model.threads = 1;
  for (const engine_options* o : {&keyword, &systemone, &clef}) {
    auto made = make_engine(*o);
    ASSERT_TRUE(made) << o->name << ": " << made.error().message;
    EXPECT_TRUE(same(question_limits(*o), (*made)->describe().limits)) << o->name;
    EXPECT_EQ(question_limits(*o).images.max_items, 0u) << o->name;
  }
}

}  // namespace
}  // namespace baton

namespace baton {
namespace {

// The option index is cached per schema; a request with other options must not get a stale one.
TEST(keyword_engine, cached_schemas_follow_the_request) {
  keyword_engine engine;
  const char* first = R"({"state": "ship it to Paris", "questions": {"q": {"type": "choice",
      "criteria": {"a": "ship to Paris", "b": "refund the order"}}}})";
  const char* swapped = R"({"state": "ship it to Paris", "questions": {"q": {"type": "choice",
      "criteria": {"a": "refund the order", "b": "ship to Paris"}}}})";
  const char* reordered = R"({"state": "ship it to Paris", "questions": {"q": {"type": "choice",
      "criteria": {"b": "refund the order", "a": "ship to Paris"}}}})";
  for (int round = 0; round < 2; ++round) {
    const auto p1 = engine.decide_one(parse_ok(first)).probabilities[0];
    const auto p2 = engine.decide_one(parse_ok(swapped)).probabilities[0];
    const auto p3 = engine.decide_one(parse_ok(reordered)).probabilities[0];
    EXPECT_GT(p1[0], 0.9);
    EXPECT_GT(p2[1], 0.9);
    EXPECT_GT(p3[1], 0.9);  // probabilities follow the request's option order
    EXPECT_EQ(p3, (std::vector<double>{p1[1], p1[0]}));  // the same options in the other order
  }
}

// A question without instructions reads its id; the cache must not carry another id's count.
TEST(keyword_engine, word_counts_do_not_depend_on_earlier_requests) {
  const char* long_id = R"({"state": "s", "questions": {"is this a refund or a shipping question": {"type": "choice",
      "criteria": {"a": "refund", "b": "shipping"}}}})";
  const char* short_id = R"({"state": "s", "questions": {"q": {"type": "choice",
      "criteria": {"a": "refund", "b": "shipping"}}}})";
  keyword_engine alone;
  const auto expected = alone.decide_one(parse_ok(long_id)).input_tokens;
  keyword_engine after;
  after.decide_one(parse_ok(short_id));
  EXPECT_EQ(after.decide_one(parse_ok(long_id)).input_tokens, expected);
}

}  // namespace
}  // namespace baton
