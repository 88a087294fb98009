#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

#include "engine/clef/record_encoder.hpp"
#include "engine/clef/schema_cost.hpp"
#include "support/files.hpp"

namespace baton::clef {
namespace {

const json& encode_vectors() {
  static const json v = test::read_json(test::data_dir() / "vectors/clef/encode_records.json");
  return v;
}

// A fixture record's `evaluation` as a SystemOne request: its `id` is the fixture's name, not a
// request field. The records pass baton's default validation unchanged.
request request_of(const json& evaluation) {
  json body = evaluation;
  body.erase("id");
  auto r = request_from_json(std::move(body), request_limits::text_only());
  EXPECT_TRUE(r.has_value()) << evaluation["id"] << ": " << (r ? "" : render_error(r.error()));
  return r ? std::move(*r) : request{};
}

request parse_ok(std::string_view body) {
  auto r = parse_request(body, request_limits::text_only());
  EXPECT_TRUE(r.has_value()) << body << "\n" << (r ? "" : render_error(r.error()));
  return r ? std::move(*r) : request{};
}

const json& record_named(std::string_view name) {
  for (const json& rec : encode_vectors())
    if (rec["evaluation"]["id"] == name) return rec;
  ADD_FAILURE() << "no encode record " << name;
  static const json none;
  return none;
}

encoded_record encode_ok(const request& r, std::size_t max_length,
                         std::span<const std::int32_t> media = {}) {
  auto e = encode_record(r, byte_tokenizer(), {max_length, media});
  EXPECT_TRUE(e.has_value()) << (e ? "" : render_error(e.error()));
  return e ? std::move(*e) : encoded_record{};
}

// Byte-mode ids back to the text they encode.
std::string text_of(const std::vector<std::int32_t>& ids, span s) {
  std::string out;
  for (std::int32_t i = s.begin; i < s.end; ++i) out.push_back(static_cast<char>(ids[static_cast<std::size_t>(i)]));
  return out;
}

std::string text_of(const std::vector<std::int32_t>& ids) {
  return text_of(ids, {0, static_cast<std::int32_t>(ids.size())});
}

// The head's type row: noul 0, choice 1, score 2 (the fixture's `kind`).
int kind_of(question_type t) {
  switch (t) {
    case question_type::noul: return 0;
    case question_type::choice: return 1;
    case question_type::score: return 2;
  }
  return -1;
}

span span_of(const json& pair) { return {pair[0].get<std::int32_t>(), pair[1].get<std::int32_t>()}; }

// Remembers every piece it is asked to tokenize, in order.
class recording_tokenizer final : public piece_tokenizer {
 public:
  void encode(std::string_view text, std::vector<std::int32_t>& out) const override {
    pieces.emplace_back(text);
    byte_tokenizer().encode(text, out);
  }
  mutable std::vector<std::string> pieces;
};

TEST(record_encoder, byte_mode_matches_every_reference_vector) {
  const json& records = encode_vectors();
  ASSERT_EQ(records.size(), 6u);
  std::size_t windows = 0, rejected = 0;
  for (const json& rec : records) {
    const std::string name = rec["evaluation"]["id"].get<std::string>();
    const request r = request_of(rec["evaluation"]);
    for (const json& window : rec["bytes"]) {
      ++windows;
      const auto max_length = window["max_length"].get<std::size_t>();
      SCOPED_TRACE(name + " max_length " + std::to_string(max_length));
      const json& expected = window["expected"];
      auto e = encode_record(r, byte_tokenizer(), {max_length});
      if (expected.contains("Err")) {
        ++rejected;
        ASSERT_EQ(expected["Err"], "payload_too_large");
        ASSERT_FALSE(e.has_value());
        EXPECT_EQ(e.error().status, 422);
        EXPECT_EQ(e.error().code, "INPUT_TOO_LONG");
        continue;
      }
      ASSERT_TRUE(e.has_value()) << render_error(e.error());
      const json& ok = expected["Ok"];
      EXPECT_EQ(e->ids, ok[0].get<std::vector<std::int32_t>>());
      EXPECT_LE(e->ids.size(), max_length);
      EXPECT_EQ(e->prefix_tokens, prompt_prefix.size());
      EXPECT_EQ(e->state_dropped, ok[2].get<std::size_t>());
      const json& fields = ok[1];
      ASSERT_EQ(e->questions.size(), fields.size());
      for (std::size_t q = 0; q < fields.size(); ++q) {
        const encoded_question& eq = e->questions[q];
        EXPECT_EQ(kind_of(eq.type), fields[q][0].get<int>()) << "question " << q;
        EXPECT_EQ(eq.question, span_of(fields[q][1])) << "question " << q;
        const json& opts = fields[q][2];
        ASSERT_EQ(eq.options.size(), opts.size()) << "question " << q;
        for (std::size_t o = 0; o < opts.size(); ++o)
          EXPECT_EQ(eq.options[o], span_of(opts[o])) << "question " << q << " option " << o;
      }
    }
  }
  EXPECT_EQ(windows, 10u);
  EXPECT_EQ(rejected, 1u);
}

TEST(record_encoder, tokenizes_the_reference_pieces_one_by_one) {
  for (const json& rec : encode_vectors()) {
    const std::string name = rec["evaluation"]["id"].get<std::string>();
    SCOPED_TRACE(name);
    const request r = request_of(rec["evaluation"]);
    recording_tokenizer tok;
    auto e = encode_record(r, tok, {16384});
    ASSERT_TRUE(e.has_value()) << render_error(e.error());
    const auto pieces = rec["pieces"].get<std::vector<std::string>>();
    EXPECT_EQ(tok.pieces, pieces);

    std::string joined;
    for (const std::string& p : pieces) joined += p;
    EXPECT_EQ(text_of(e->ids), joined);

    const json& option_ids = rec["option_ids"];
    ASSERT_EQ(e->questions.size(), option_ids.size());
    for (std::size_t q = 0; q < option_ids.size(); ++q) {
      EXPECT_EQ(e->questions[q].option_ids, option_ids[q].get<std::vector<std::string>>());
      // request_option points each encoded option at the same option in request order.
      for (std::size_t k = 0; k < e->questions[q].option_ids.size(); ++k)
        EXPECT_EQ(r.questions[q].option_id(e->questions[q].request_option[k]), e->questions[q].option_ids[k]);
    }
  }
}

TEST(record_encoder, worked_example_numbers) {
  const request r = request_of(record_named("invoice")["evaluation"]);

  const encoded_record full = encode_ok(r, 16384);
  EXPECT_EQ(full.ids.size(), 1173u);
  EXPECT_EQ(full.prefix_tokens, 182u);
  EXPECT_EQ(full.state_kept, 80u);
  EXPECT_EQ(full.state_dropped, 0u);
  EXPECT_EQ(text_of(full.ids, full.questions[2].question), "urgency");
  EXPECT_EQ(text_of(full.ids, full.questions[1].options[0]), R"({"description":"Not sent.","option_id":"draft"})");
  EXPECT_EQ(text_of(full.ids, {1097, 1173}), prompt_suffix);

  const encoded_record cut = encode_ok(r, 1103);
  EXPECT_EQ(cut.ids.size(), 1103u);
  EXPECT_EQ(cut.state_kept, 10u);
  EXPECT_EQ(cut.state_dropped, 70u);
  EXPECT_EQ(text_of(cut.ids, {182, 192}), R"({"invoice")");
  EXPECT_EQ(cut.questions[0].question, (span{252, 280}));
  EXPECT_EQ(cut.questions[1].options[2], (span{725, 778}));
  EXPECT_EQ(cut.questions[2].options[2], (span{977, 1016}));
}

TEST(record_encoder, schema_that_alone_exceeds_the_window_is_input_too_long) {
  const request r = request_of(record_named("invoice")["evaluation"]);
  const encoded_record exact = encode_ok(r, 1093);
  EXPECT_EQ(exact.state_kept, 0u);
  EXPECT_EQ(exact.state_dropped, 80u);

  auto e = encode_record(r, byte_tokenizer(), {1092});
  ASSERT_FALSE(e.has_value());
  const error& err = e.error();
  EXPECT_EQ(err.status, 422);
  EXPECT_EQ(err.code, "INPUT_TOO_LONG");
  EXPECT_EQ(err.message, "schema requires 1093 tokens before state; maximum is 1092");
  ASSERT_EQ(err.detail.size(), 1u);
  EXPECT_EQ(render_json(err.detail[0].loc, false), R"(["body"])");
  EXPECT_EQ(err.detail[0].type, "input_too_long");
  EXPECT_EQ(err.detail[0].msg, err.message);
  EXPECT_EQ(render_json(err.detail[0].ctx, false), R"({"max_tokens":1092,"tokens":1093})");
}

// What every turn pays whatever its state: the invoice's 1093 fixed tokens above, split into the
// prompt's own text, the schema header and each question's field.
TEST(record_encoder, schema_cost_adds_up_to_the_fixed_part_of_a_record) {
  const request r = request_of(record_named("invoice")["evaluation"]);
  auto c = measure_schema(r, byte_tokenizer());
  ASSERT_TRUE(c.has_value()) << render_error(c.error());
  EXPECT_EQ(c->prompt, prompt_prefix.size() + prompt_suffix.size());
  EXPECT_EQ(c->prompt, 182u + 76u);
  EXPECT_EQ(c->frame, std::string_view("\n\nSCHEMA FIELDS:\n").size());
  ASSERT_EQ(c->questions.size(), 3u);
  EXPECT_EQ(c->prompt + c->schema(), 1093u);
  // A question's field holds at least its instruction and option texts.
  const encoded_record full = encode_ok(r, 16384);
  for (std::size_t q = 0; q < 3; ++q) {
    std::size_t least = static_cast<std::size_t>(full.questions[q].question.size());
    for (const span& o : full.questions[q].options) least += static_cast<std::size_t>(o.size());
    EXPECT_GT(c->questions[q], least) << q;
  }
  // Dropping the last question takes exactly its field off.
  request fewer = r;
  fewer.questions.pop_back();
  auto less = measure_schema(fewer, byte_tokenizer());
  ASSERT_TRUE(less.has_value());
  EXPECT_EQ(less->schema() + c->questions[2], c->schema());

  // encode_record's refusals come back as they are (a question whose text has no tokens).
  request empty_text;
  empty_text.questions.emplace_back();
  auto refused = measure_schema(empty_text, byte_tokenizer());
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, "INVALID_REQUEST");
}

TEST(record_encoder, media_ids_follow_the_prefix_and_count_as_fixed) {
  const request r = request_of(record_named("invoice")["evaluation"]);
  const std::array<std::int32_t, 3> media{900001, 900002, 900003};
  const encoded_record plain = encode_ok(r, 16384);
  const encoded_record with = encode_ok(r, 16384, media);

  ASSERT_EQ(with.ids.size(), plain.ids.size() + 3);
  EXPECT_EQ(with.prefix_tokens, 185u);
  EXPECT_EQ(std::vector<std::int32_t>(with.ids.begin() + 182, with.ids.begin() + 185),
            std::vector<std::int32_t>(media.begin(), media.end()));
  EXPECT_TRUE(std::equal(plain.ids.begin(), plain.ids.begin() + 182, with.ids.begin()));
  EXPECT_TRUE(std::equal(plain.ids.begin() + 182, plain.ids.end(), with.ids.begin() + 185));
  ASSERT_EQ(with.questions.size(), plain.questions.size());
  for (std::size_t q = 0; q < plain.questions.size(); ++q) {
    EXPECT_EQ(with.questions[q].question.begin, plain.questions[q].question.begin + 3);
    EXPECT_EQ(with.questions[q].question.end, plain.questions[q].question.end + 3);
    for (std::size_t o = 0; o < plain.questions[q].options.size(); ++o)
      EXPECT_EQ(with.questions[q].options[o].begin, plain.questions[q].options[o].begin + 3);
  }

  // The three media tokens come out of the state's room; media itself is never cut.
  const encoded_record cut = encode_ok(r, 1103, media);
  EXPECT_EQ(cut.ids.size(), 1103u);
  EXPECT_EQ(cut.state_kept, 7u);
  EXPECT_EQ(cut.state_dropped, 73u);
  EXPECT_EQ(cut.ids[184], 900003);
  EXPECT_EQ(cut.questions[0].question, (span{252, 280}));

  auto e = encode_record(r, byte_tokenizer(), {1095, media});
  ASSERT_FALSE(e.has_value());
  EXPECT_EQ(e.error().message, "schema requires 1096 tokens before state; maximum is 1095");
}

TEST(record_encoder, question_text_without_tokens_is_refused) {
  // The API refuses an empty id; a request built directly can still carry one.
  request r;
  r.state = "s";
  question empty;
  empty.id = "";
  question fine;
  fine.id = "fine";
  fine.instructions = "";
  r.questions = {fine, empty};
  auto e = encode_record(r, byte_tokenizer());
  ASSERT_FALSE(e.has_value());
  EXPECT_EQ(e.error().status, 422);
  EXPECT_EQ(e.error().code, "INVALID_REQUEST");
  ASSERT_EQ(e.error().detail.size(), 1u);
  EXPECT_EQ(render_json(e.error().detail[0].loc, false), R"(["body","questions","","instructions"])");
  EXPECT_EQ(e.error().detail[0].type, "empty_question_span");
  EXPECT_NE(e.error().detail[0].msg.find("no tokens"), std::string::npos);

  r.questions = {fine};
  EXPECT_TRUE(encode_record(r, byte_tokenizer()).has_value());
}

TEST(record_encoder, record_without_questions_is_refused) {
  request r;
  r.state = "s";
  auto e = encode_record(r, byte_tokenizer());
  ASSERT_FALSE(e.has_value());
  EXPECT_EQ(e.error().status, 422);
  EXPECT_EQ(e.error().code, "INVALID_REQUEST");
  ASSERT_EQ(e.error().detail.size(), 1u);
  EXPECT_EQ(render_json(e.error().detail[0].loc, false), R"(["body","questions"])");
}

TEST(record_encoder, criteria_of_the_wrong_shape_are_refused_without_throwing) {
  request r;
  r.state = "s";
  question choice;
  choice.id = "c";
  choice.type = question_type::choice;
  choice.criteria = json::array({"a", "b"});
  question score;
  score.id = "s";
  score.type = question_type::score;
  score.criteria = json::array();
  r.questions = {choice, score};
  auto e = encode_record(r, byte_tokenizer());
  ASSERT_FALSE(e.has_value());
  EXPECT_EQ(e.error().code, "INVALID_REQUEST");
  ASSERT_EQ(e.error().detail.size(), 2u);
  EXPECT_EQ(render_json(e.error().detail[0].loc, false), R"(["body","questions","c","choice","criteria"])");
  EXPECT_EQ(render_json(e.error().detail[1].loc, false), R"(["body","questions","s","score","criteria"])");
}

TEST(record_encoder, choice_options_are_encoded_in_code_point_order) {
  const request r = parse_ok(R"({"state": "s", "questions": {"pick": {"type": "choice", "instructions": "Which?",
      "criteria": {"b": "bee", "a": null, "é": ["e", 1], "B": {"z": 1, "y": 2}}}}})");
  const encoded_record e = encode_ok(r, 16384);
  ASSERT_EQ(e.questions.size(), 1u);
  const encoded_question& q = e.questions[0];
  EXPECT_EQ(q.type, question_type::choice);
  EXPECT_EQ(q.option_ids, (std::vector<std::string>{"B", "a", "b", "é"}));
  EXPECT_EQ(q.request_option, (std::vector<std::uint32_t>{3, 1, 0, 2}));
  ASSERT_EQ(q.options.size(), 4u);
  EXPECT_EQ(text_of(e.ids, q.options[0]), R"({"description":{"y":2,"z":1},"option_id":"B"})");
  EXPECT_EQ(text_of(e.ids, q.options[1]), R"({"option_id":"a"})");
  EXPECT_EQ(text_of(e.ids, q.options[2]), R"({"description":"bee","option_id":"b"})");
  EXPECT_EQ(text_of(e.ids, q.options[3]), R"({"description":["e",1],"option_id":"é"})");
  // Options are numbered in encoded order.
  EXPECT_EQ(text_of(e.ids, {q.options[0].begin - 10, q.options[0].begin}), "OPTION 1: ");
  EXPECT_EQ(text_of(e.ids, {q.options[3].begin - 10, q.options[3].begin}), "OPTION 4: ");
}

TEST(record_encoder, noul_criteria_update_the_default_descriptions) {
  const request r = parse_ok(R"({"state": "s", "questions": {
      "none": {"type": "noul", "criteria": null},
      "drop": {"type": "noul", "criteria": {"true": null}},
      "both": {"type": "noul", "criteria": {"true": "", "false": {"b": 1, "a": 2}, "maybe": "ignored"}},
      "empty": {"type": "noul", "criteria": {}}}})");
  const encoded_record e = encode_ok(r, 16384);
  ASSERT_EQ(e.questions.size(), 4u);
  const std::string yes = R"({"description":"The proposition is true or the answer is yes.","option_id":"true"})";
  const std::string no = R"({"description":"The proposition is false or the answer is no.","option_id":"false"})";
  const std::array<std::array<std::string, 2>, 4> expected{{
      {yes, no},
      {R"({"option_id":"true"})", no},
      {R"({"description":"","option_id":"true"})", R"({"description":{"a":2,"b":1},"option_id":"false"})"},
      {yes, no},
  }};
  for (std::size_t q = 0; q < 4; ++q) {
    const encoded_question& eq = e.questions[q];
    EXPECT_EQ(eq.type, question_type::noul);
    EXPECT_EQ(eq.option_ids, (std::vector<std::string>{"true", "false"}));
    EXPECT_EQ(eq.request_option, (std::vector<std::uint32_t>{0, 1}));
    ASSERT_EQ(eq.options.size(), 2u) << q;
    EXPECT_EQ(text_of(e.ids, eq.options[0]), expected[q][0]) << q;
    EXPECT_EQ(text_of(e.ids, eq.options[1]), expected[q][1]) << q;
    // No instructions: the id is the question text.
    EXPECT_EQ(text_of(e.ids, eq.question), r.questions[q].id);
  }
}

TEST(record_encoder, score_levels_keep_list_order) {
  const request r = parse_ok(R"({"state": ["a"], "questions": {"s": {"type": "score",
      "criteria": ["high", {"level": "low"}, ["mid"]]}}})");
  const encoded_record e = encode_ok(r, 16384);
  const encoded_question& q = e.questions[0];
  EXPECT_EQ(q.option_ids, (std::vector<std::string>{"0", "1", "2"}));
  EXPECT_EQ(q.request_option, (std::vector<std::uint32_t>{0, 1, 2}));
  EXPECT_EQ(text_of(e.ids, q.options[1]), R"({"description":{"level":"low"},"option_id":"1"})");
}

}  // namespace
}  // namespace baton::clef
