#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "core/answers.hpp"
#include "support/files.hpp"

namespace baton {
namespace {

request parse_ok(std::string_view body) {
  auto r = parse_request(body, request_limits{});
  EXPECT_TRUE(r) << body;
  return r ? std::move(*r) : request{};
}

const request three_kinds = parse_ok(R"({"state": "s", "questions": {
  "department": {"type": "choice", "criteria": {"billing": "b", "technical": "t", "account": "a"}},
  "frustration": {"type": "score", "criteria": ["Calm", {"level": "Frustrated"}, ["Very", "angry"]]},
  "refund": {"type": "noul"}}})");

TEST(answers, shapes_from_probabilities) {
  decision d;
  d.probabilities = {{0.25, 0.5, 0.25}, {0.7471740406107564, 0.23909123364490217, 0.01373472574434125}, {0.4761779351845965, 0.5238220648154035}};
  d.input_tokens = 42;
  d.cached_tokens = 32;
  auto r = make_response(three_kinds, d, confidence_metric::p_max, "m");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->model, "m");
  ASSERT_EQ(r->answers.size(), 3u);
  const auto& choice = std::get<choice_answer>(r->answers[0].second);
  EXPECT_EQ(choice.choice, "technical");
  EXPECT_DOUBLE_EQ(choice.confidence, 0.5);
  const auto& score = std::get<score_answer>(r->answers[1].second);
  EXPECT_DOUBLE_EQ(score.score, 0.23909123364490217 + 2 * 0.01373472574434125);
  EXPECT_EQ(render_json(score.legend[1].second, false), R"({"level":"Frustrated"})");
  EXPECT_DOUBLE_EQ(std::get<noul_answer>(r->answers[2].second).noul, 0.4761779351845965);
  EXPECT_EQ(render_response(*r),
            R"({"model":"m","answers":{"department":{"type":"choice","choice":"technical","confidence":0.5,)"
            R"("probabilities":{"billing":0.25,"technical":0.5,"account":0.25}},"frustration":{"type":"score",)"
            R"("score":0.2666,"confidence":0.7472,"legend":{"0":"Calm","1":{"level":"Frustrated"},"2":["Very","angry"]},)"
            R"("probabilities":{"0":0.7472,"1":0.2391,"2":0.0137}},"refund":{"type":"noul","noul":0.4762}},)"
            R"("usage":{"input_tokens":42,"output_tokens":0,"state_truncated":false,"cached_tokens":32}})");
}

TEST(answers, cached_tokens_are_read_when_sent_and_must_be_a_count) {
  auto body = [](const char* usage) {
    return json::parse(std::string(R"({"model":"m","answers":{"refund":{"type":"noul","noul":0.25}},"usage":)") + usage + "}");
  };
  auto with = response_from_json(body(R"({"input_tokens":9,"output_tokens":0,"cached_tokens":8})"));
  ASSERT_TRUE(with) << with.error().message;
  EXPECT_EQ(with->usage.cached_tokens, 8);
  EXPECT_EQ(render_response(*with, -1),
            R"({"model":"m","answers":{"refund":{"type":"noul","noul":0.25}},"usage":{"input_tokens":9,"output_tokens":0,"cached_tokens":8}})");
  // Another server may not say: nothing is made up.
  auto without = response_from_json(body(R"({"input_tokens":9,"output_tokens":0})"));
  ASSERT_TRUE(without);
  EXPECT_FALSE(without->usage.cached_tokens);
  EXPECT_EQ(render_response(*without, -1).find("cached_tokens"), std::string::npos);

  for (const char* bad : {R"({"input_tokens":9,"output_tokens":0,"cached_tokens":-1})",
                          R"({"input_tokens":9,"output_tokens":0,"cached_tokens":1.5})",
                          R"({"input_tokens":9,"output_tokens":0,"cached_tokens":"8"})",
                          R"({"input_tokens":9,"output_tokens":0,"cached_tokens":null})"}) {
    SCOPED_TRACE(bad);
    auto r = response_from_json(body(bad));
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, "BAD_UPSTREAM_RESPONSE");
    EXPECT_NE(r.error().message.find("usage.cached_tokens is not a count"), std::string::npos) << r.error().message;
  }
}

TEST(answers, first_option_in_request_order_wins_a_tie) {
  decision d;
  d.probabilities = {{0.4, 0.2, 0.4}, {0.5, 0.5, 0.0}, {0.5, 0.5}};
  auto r = make_response(three_kinds, d, confidence_metric::p_max, "m");
  ASSERT_TRUE(r);
  EXPECT_EQ(std::get<choice_answer>(r->answers[0].second).choice, "billing");
}

// llama.cpp's Clef answers in local-jev-bench t01 use TypeSafe's formulas.
TEST(answers, margin_confidence_matches_typesafe_formulas) {
  const double choice[] = {0.9889329954573034, 0.008990860704250472, 0.002076143838445988};
  EXPECT_DOUBLE_EQ(choice_confidence(choice, confidence_metric::margin), 0.9833994931859551);
  EXPECT_DOUBLE_EQ(choice_confidence(choice, confidence_metric::p_max), 0.9889329954573034);
  const double score[] = {0.7471740406107564, 0.23909123364490217, 0.01373472574434125};
  EXPECT_NEAR(score_confidence(score, confidence_metric::margin), 0.600158972299623, 1e-15);
  const double flat[] = {0.25, 0.25, 0.25, 0.25};
  EXPECT_DOUBLE_EQ(choice_confidence(flat, confidence_metric::margin), 0.0);
  const double one[] = {1.0};
  EXPECT_DOUBLE_EQ(choice_confidence(one, confidence_metric::margin), 1.0);
  EXPECT_DOUBLE_EQ(score_confidence(one, confidence_metric::margin), 1.0);
  // TypeSafe docs: score p = [0, 0.95, 0.05] gives 0.925 under either formula.
  const double docs[] = {0.0, 0.95, 0.05};
  EXPECT_NEAR(score_confidence(docs, confidence_metric::margin), 0.925, 1e-12);
  EXPECT_EQ(parse_confidence_metric("margin"), confidence_metric::margin);
  EXPECT_EQ(parse_confidence_metric("p_max"), confidence_metric::p_max);
  EXPECT_FALSE(parse_confidence_metric("entropy"));
}

TEST(answers, softmax_is_stable_and_normalised) {
  const float logits[] = {1000.0f, 1001.0f, 999.0f};
  const auto p = softmax(logits);
  double sum = 0;
  for (double x : p) {
    EXPECT_TRUE(std::isfinite(x));
    sum += x;
  }
  EXPECT_NEAR(sum, 1.0, 1e-6);
  EXPECT_GT(p[1], p[0]);
  const float zeros[] = {0.0f, 0.0f};
  EXPECT_EQ(softmax(zeros)[0], 0.5);
}

TEST(answers, a_decision_that_does_not_fit_the_request_is_an_error) {
  decision d;
  d.probabilities = {{0.5, 0.5, 0.0}};
  auto r = make_response(three_kinds, d, confidence_metric::p_max, "m");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().status, 500);
  EXPECT_EQ(r.error().code, "INFERENCE_FAILED");
  d.probabilities = {{0.5, 0.5}, {1, 0, 0}, {0.5, 0.5}};
  EXPECT_FALSE(make_response(three_kinds, d, confidence_metric::p_max, "m"));
  d.probabilities = {{0.5, 0.5, NAN}, {1, 0, 0}, {0.5, 0.5}};
  EXPECT_FALSE(make_response(three_kinds, d, confidence_metric::p_max, "m"));
}

// Cloudflare's reference code on the tiny Clef-Omni release: from its logits, baton's answers and
// rounding give the reference's response text exactly.
TEST(answers, reproduce_the_reference_responses_from_its_logits) {
  const auto dir = test::data_dir() / "vectors/clef-omni-tiny";
  std::ifstream records(dir / "records.jsonl");
  std::ifstream expected(dir / "expected.jsonl");
  std::string record_line, expected_line;
  int compared = 0;
  while (std::getline(records, record_line) && std::getline(expected, expected_line)) {
    const json rec = test::parse(record_line);
    const json exp = test::parse(expected_line);
    if (!exp["ok"].get<bool>()) continue;
    SCOPED_TRACE(exp["id"].get<std::string>());
    json body = rec["request"];
    for (const char* media : {"images", "audio", "videos"}) body.erase(media);  // paths, not data URLs
    auto req = request_from_json(std::move(body), request_limits{});
    ASSERT_TRUE(req) << render_error(req.error());

    decision d;
    d.input_tokens = exp["num_tokens"].get<std::int64_t>();
    const json& questions = exp["questions"];
    ASSERT_EQ(questions.size(), req->questions.size());
    for (std::size_t qi = 0; qi < req->questions.size(); ++qi) {
      const question& q = req->questions[qi];
      // Logits come in encode order (choice labels sorted); answers want request order.
      std::vector<float> logits(q.option_count());
      for (std::size_t i = 0; i < logits.size(); ++i) {
        std::size_t at = 0;
        while (questions[qi]["option_ids"][at] != q.option_id(i)) ++at;
        logits[i] = questions[qi]["logits"][at].get<float>();
      }
      d.probabilities.push_back(softmax(logits));
    }
    auto r = make_response(*req, d, confidence_metric::p_max, exp["response"]["model"].get<std::string>());
    ASSERT_TRUE(r);
    // baton's additions; the reference sends neither
    r->usage.state_truncated.reset();
    r->usage.cached_tokens.reset();
    EXPECT_EQ(render_response(*r), render_json(exp["response"], false));
    ++compared;
  }
  EXPECT_EQ(compared, 13);
}

}  // namespace
}  // namespace baton
