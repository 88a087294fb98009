#include <gtest/gtest.h>

#include <cstring>
#include <sstream>

#include "core/request.hpp"
#include "support/files.hpp"

namespace baton {
namespace {

using test::parse;

double from_bits(std::uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}

TEST(python_float, repr_and_round_match_cpython) {
  std::istringstream lines(test::read_file(test::source_dir() / "tests/core/data/python_float_repr.txt"));
  std::string line;
  int cases = 0;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string hex, repr, rounded;
    fields >> hex >> repr >> rounded;
    const double v = from_bits(std::stoull(hex, nullptr, 16));
    std::string out;
    render_double(v, out);
    EXPECT_EQ(out, repr) << hex;
    out.clear();
    render_rounded(v, 4, out);
    EXPECT_EQ(out, rounded) << hex;
    ++cases;
  }
  EXPECT_GT(cases, 700);
}

TEST(python_float, round_ties_follow_the_exact_binary_value) {
  EXPECT_EQ(round_decimals(0.03125, 4), 0.0312);  // an exact tie: half to even
  EXPECT_EQ(round_decimals(0.00005, 4), 0.0001);  // just above the tie in binary
  EXPECT_EQ(round_decimals(0.99995, 4), 1.0);
  std::string out;
  render_rounded(-1e-10, 4, out);
  EXPECT_EQ(out, "-0.0");
}

// The judge-clef fixture holds the prompt pieces Cloudflare's reference code built: the state,
// every instruction and every option object as rendered by Python's json.dumps.
TEST(python_render, matches_every_piece_of_the_reference_encodings) {
  const json records = test::read_json(test::data_dir() / "vectors/clef/encode_records.json");
  ASSERT_EQ(records.size(), 6u);
  for (const json& record : records) {
    const std::string name = record["evaluation"]["id"].get<std::string>();
    const json& pieces = record["pieces"];
    std::vector<std::string> instructions;
    std::vector<std::vector<std::string>> options;
    for (std::size_t i = 0; i + 1 < pieces.size(); ++i) {
      const std::string& p = pieces[i].get_ref<const std::string&>();
      if (p.starts_with("\nFIELD ")) {
        instructions.push_back(pieces[i + 1].get<std::string>());
        options.emplace_back();
      } else if (p.starts_with("OPTION ")) {
        options.back().push_back(pieces[i + 1].get<std::string>());
      }
    }

    json body = record["evaluation"];
    std::string state_piece;
    render_text(body["state"], state_piece);
    EXPECT_EQ(state_piece, pieces[1].get<std::string>()) << name;

    auto req = request_from_json(json(body), request_limits{});
    ASSERT_TRUE(req.has_value()) << name << ": " << req.error().message;
    ASSERT_EQ(req->questions.size(), instructions.size()) << name;
    for (std::size_t q = 0; q < req->questions.size(); ++q) {
      const question& question = req->questions[q];
      std::string text;
      append_instruction_text(question, text);
      EXPECT_EQ(text, instructions[q]) << name << " question " << question.id;

      // The reference lists choice options sorted by label; noul and score keep their order.
      std::vector<std::size_t> order(question.option_count());
      for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
      if (question.type == question_type::choice)
        std::sort(order.begin(), order.end(),
                  [&](auto a, auto b) { return question.choice_label(a) < question.choice_label(b); });
      ASSERT_EQ(order.size(), options[q].size()) << name;
      for (std::size_t j = 0; j < order.size(); ++j) {
        json option = json::object();
        option["option_id"] = question.option_id(order[j]);
        if (const json& d = question.option_description(order[j]); !d.is_null()) option["description"] = d;
        EXPECT_EQ(render_json(option, true), options[q][j]) << name << " question " << question.id;
      }
    }
  }
}

struct render_case {
  const char* input;
  const char* sorted;    // sort_keys=True
  const char* unsorted;  // sort_keys=False
};

TEST(python_render, edge_cases) {
  const render_case cases[] = {
      {R"({"b":1,"a":[1.0,-0,1E2,1.10,1e-7,0.1e1,-0.0]})", R"({"a":[1.0,0,100.0,1.1,1e-07,1.0,-0.0],"b":1})",
       R"({"b":1,"a":[1.0,0,100.0,1.1,1e-07,1.0,-0.0]})"},
      {"[18446744073709551616,-9223372036854775809,100000000000000000000000000000,18446744073709551615]",
       "[18446744073709551616,-9223372036854775809,100000000000000000000000000000,18446744073709551615]",
       "[18446744073709551616,-9223372036854775809,100000000000000000000000000000,18446744073709551615]"},
      {R"({"b":1,"a":2,"b":3})", R"({"a":2,"b":3})", R"({"b":3,"a":2})"},
      {R"({"é":1,"z":2,"\uffff":3,"😀":4,"A":5,"":6})", "{\"\":6,\"A\":5,\"z\":2,\"é\":1,\"\xef\xbf\xbf\":3,\"😀\":4}",
       "{\"é\":1,\"z\":2,\"\xef\xbf\xbf\":3,\"😀\":4,\"A\":5,\"\":6}"},
      {R"("\u0000\u001f\b\f\n\r\t\"\\\/\u007f\u2028\u00e9\ud83d\ude00")",
       "\"\\u0000\\u001f\\b\\f\\n\\r\\t\\\"\\\\/\x7f\xe2\x80\xa8é😀\"",
       "\"\\u0000\\u001f\\b\\f\\n\\r\\t\\\"\\\\/\x7f\xe2\x80\xa8é😀\""},
      {R"({"n":null,"t":true,"f":false,"e":{},"l":[]})", R"({"e":{},"f":false,"l":[],"n":null,"t":true})",
       R"({"n":null,"t":true,"f":false,"e":{},"l":[]})"},
      {"[1e16,1e15,123456789012345678901234567890.0,5e-324]", "[1e+16,1000000000000000.0,1.2345678901234568e+29,5e-324]",
       "[1e+16,1000000000000000.0,1.2345678901234568e+29,5e-324]"},
  };
  for (const auto& c : cases) {
    const json v = parse(c.input);
    EXPECT_EQ(render_json(v, true), c.sorted) << c.input;
    EXPECT_EQ(render_json(v, false), c.unsorted) << c.input;
  }
}

TEST(python_render, text_is_verbatim_for_strings_and_sorted_json_otherwise) {
  std::string out;
  render_text(json("a \"b\"\n"), out);
  EXPECT_EQ(out, "a \"b\"\n");
  out.clear();
  render_text(parse(R"({"z":[1,{"b":1,"a":2}],"a":"x"})"), out);
  EXPECT_EQ(out, R"({"a":"x","z":[1,{"a":2,"b":1}]})");
}

TEST(json_parse, duplicate_keys_in_large_objects_keep_the_first_position_and_last_value) {
  std::string text = "{";
  for (int i = 0; i < 40; ++i) text += "\"k" + std::to_string(i) + "\":" + std::to_string(i) + ",";
  text += "\"k5\":\"last\"}";
  const json v = parse(text);
  ASSERT_EQ(v.size(), 40u);
  EXPECT_EQ(v["k5"], "last");
  EXPECT_EQ(v.begin().key(), "k0");
  EXPECT_EQ(std::next(v.begin(), 5).key(), "k5");
}

TEST(json_parse, big_integers_are_numbers_and_never_doubles) {
  const json v = parse("[123456789012345678901234567890, 1.5]");
  EXPECT_TRUE(is_big_integer(v[0]));
  EXPECT_TRUE(is_number(v[0]));
  EXPECT_FALSE(is_big_integer(v[1]));
  EXPECT_TRUE(is_number(v[1]));
  EXPECT_FALSE(is_number(json("1")));
}

json_parse_error parse_failure(std::string_view text, std::size_t max_depth = 64) {
  json out;
  json_parse_error err;
  EXPECT_FALSE(parse_json(text, out, err, {max_depth})) << text;
  EXPECT_TRUE(out.is_null());
  return err;
}

TEST(json_parse, integers_are_exact_up_to_308_digits) {
  const std::string digits(308, '9');
  EXPECT_EQ(render_json(parse("[-" + digits + "]"), false), "[-" + digits + "]");
  json out;
  json_parse_error err;
  EXPECT_FALSE(parse_json("{\"n\": " + std::string(400, '1') + "}", out, err));
  EXPECT_EQ(err.what, json_parse_error::kind::long_integer);
  EXPECT_EQ(err.path, json::array({"n"}));
  EXPECT_NE(err.message.find("400 digits"), std::string::npos) << err.message;
}

TEST(json_parse, a_document_cut_short_says_so) {
  json out;
  json_parse_error err;
  EXPECT_FALSE(parse_json("{", out, err));
  EXPECT_TRUE(err.truncated);
  EXPECT_FALSE(parse_json(R"({"a": })", out, err));
  EXPECT_FALSE(err.truncated);
}

TEST(json_parse, errors_say_what_and_where) {
  auto e = parse_failure("{\"a\": \"\xff\"}");
  EXPECT_EQ(e.what, json_parse_error::kind::unicode);
  EXPECT_EQ(e.path, json::array({"a"}));

  e = parse_failure(R"({"a": ["x", "\ud800"]})");
  EXPECT_EQ(e.what, json_parse_error::kind::unicode);
  EXPECT_EQ(e.path, parse(R"(["a", 1])"));

  e = parse_failure(R"({"a": {"b": 1e400}})");
  EXPECT_EQ(e.what, json_parse_error::kind::non_finite);
  EXPECT_EQ(e.path, parse(R"(["a", "b"])"));

  e = parse_failure("{\"a\": }\xff");
  EXPECT_EQ(e.what, json_parse_error::kind::syntax);
  EXPECT_GT(e.byte, 0u);
  for (char c : e.message) EXPECT_LT(static_cast<unsigned char>(c), 0x80) << e.message;

  EXPECT_EQ(parse_failure("{} x").what, json_parse_error::kind::syntax);
  EXPECT_EQ(parse_failure("").what, json_parse_error::kind::syntax);
  EXPECT_EQ(parse_failure("NaN").what, json_parse_error::kind::syntax);
}

// nlohmann's lexer alone takes a NUL byte for the end of the input and would drop what follows.
TEST(json_parse, only_whitespace_may_follow_the_value_not_a_nul_and_garbage) {
  using namespace std::string_literals;
  auto e = parse_failure("{\"a\": 1}\0garbage"s);
  EXPECT_EQ(e.what, json_parse_error::kind::syntax);
  EXPECT_EQ(e.byte, 9u);  // bytes read up to the offending one, as for every syntax error
  EXPECT_FALSE(e.truncated);
  EXPECT_NE(e.message.find("NUL"), std::string::npos) << e.message;

  e = parse_failure("[1, 2]  \n\0"s);
  EXPECT_EQ(e.byte, 10u);
  // A NUL inside the value stops it there: not "cut short" (a multi-line document), but invalid.
  e = parse_failure("{\"a\": \0 1}"s);
  EXPECT_EQ(e.byte, 7u);
  EXPECT_FALSE(e.truncated);
  // Raw inside a string it is an unescaped control character, as before; escaped it is a value.
  e = parse_failure("[\"a\0b\"]"s);
  EXPECT_EQ(e.what, json_parse_error::kind::syntax);
  EXPECT_NE(e.message.find("U+0000"), std::string::npos) << e.message;
  EXPECT_EQ(parse(R"(["a\u0000b"])")[0].get<std::string>(), "a\0b"s);
  // Whitespace alone after the value is fine; anything else is refused where it starts.
  EXPECT_EQ(parse("{\"a\": 1} \r\n\t ")["a"], 1);
  EXPECT_EQ(parse_failure("{} x").byte, parse_failure("{} \0"s).byte);
}

TEST(json_parse, depth_is_bounded) {
  const std::string ok = std::string(64, '[') + std::string(64, ']');
  json out;
  json_parse_error err;
  EXPECT_TRUE(parse_json(ok, out, err, {64}));

  const std::string deep = "{\"s\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  const auto e = parse_failure(deep, 64);
  EXPECT_EQ(e.what, json_parse_error::kind::too_deep);
  EXPECT_EQ(e.path.front(), "s");
  EXPECT_EQ(e.path.size(), 64u);
}

TEST(json, invalid_utf8_is_replaced_as_python_does) {
  EXPECT_EQ(replace_invalid_utf8("caf\xc3\xa9 \xf0\x9f\x98\x80"), "caf\xc3\xa9 \xf0\x9f\x98\x80");
  EXPECT_EQ(replace_invalid_utf8("a\xe2\x82z"), "a\xef\xbf\xbdz");                      // truncated: one U+FFFD
  EXPECT_EQ(replace_invalid_utf8("\xc0\xaf"), "\xef\xbf\xbd\xef\xbf\xbd");                // overlong: one per byte
  EXPECT_EQ(replace_invalid_utf8("\xed\xa0\x80"), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");  // surrogate
  EXPECT_EQ(replace_invalid_utf8("\xf0\x9f\x98"), "\xef\xbf\xbd");                        // cut at the end
}

}  // namespace
}  // namespace baton
