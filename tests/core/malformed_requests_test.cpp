// Every malformed request gets its exact status, code and field, and none crashes or hangs.
#include <gtest/gtest.h>

#include "core/request.hpp"
#include "support/files.hpp"

namespace baton {
namespace {

struct malformed {
  std::string name;
  std::string body;
  int status;
  std::string code;
  std::string loc;   // detail[0].loc as compact JSON; empty when there is no detail
  std::string type;  // detail[0].type
  request_limits limits = {};
};

std::string with_question(const std::string& q) {
  return R"({"model":"m","state":"s","questions":{"q":)" + q + "}}";
}

std::string with_media(const std::string& media) {
  return R"({"state":"s","questions":{"q":{"type":"noul"}},)" + media + "}";
}

std::string questions_of(std::size_t n) {
  std::string body = R"({"state":"s","questions":{)";
  for (std::size_t i = 0; i < n; ++i) {
    if (i) body += ',';
    body += "\"q" + std::to_string(i) + "\":{\"type\":\"noul\"}";
  }
  return body + "}}";
}

std::string choice_of(std::size_t n) {
  std::string c = "{";
  for (std::size_t i = 0; i < n; ++i) {
    if (i) c += ',';
    c += "\"o" + std::to_string(i) + "\":null";
  }
  return with_question(R"({"type":"choice","criteria":)" + c + "}}");
}

std::string score_of(std::size_t n) {
  std::string c = "[";
  for (std::size_t i = 0; i < n; ++i) {
    if (i) c += ',';
    c += "\"level " + std::to_string(i) + "\"";
  }
  return with_question(R"({"type":"score","criteria":)" + c + "]}");
}

request_limits small_body() {
  request_limits l;
  l.max_body_bytes = 1024;
  return l;
}

request_limits small_images() {
  request_limits l;
  l.images.max_item_bytes = 6;
  return l;
}

std::vector<malformed> cases() {
  const std::string q = R"(["body","questions","q")";
  return {
      {"truncated_json", R"({"state":)", 400, "INVALID_JSON", "", ""},
      {"empty_body", "", 400, "INVALID_JSON", "", ""},
      {"whitespace_body", " \n ", 400, "INVALID_JSON", "", ""},
      {"array_body", "[1,2]", 400, "INVALID_JSON", "", ""},
      {"string_body", R"("hello")", 400, "INVALID_JSON", "", ""},
      {"trailing_garbage", R"({"state":"s"} {})", 400, "INVALID_JSON", "", ""},
      {"single_quotes", R"({'state':'s'})", 400, "INVALID_JSON", "", ""},
      {"nan_literal", R"({"state":NaN})", 400, "INVALID_JSON", "", ""},
      {"missing_state", R"({"questions":{"q":{"type":"noul"}}})", 422, "INVALID_REQUEST", R"(["body","state"])", "missing"},
      {"null_state", R"({"state":null,"questions":{"q":{"type":"noul"}}})", 422, "INVALID_REQUEST", R"(["body","state"])", "state_type"},
      {"number_state", R"({"state":42,"questions":{"q":{"type":"noul"}}})", 422, "INVALID_REQUEST", R"(["body","state"])", "state_type"},
      {"bool_state", R"({"state":true,"questions":{"q":{"type":"noul"}}})", 422, "INVALID_REQUEST", R"(["body","state"])", "state_type"},
      {"big_integer_state", R"({"state":123456789012345678901234567890,"questions":{"q":{"type":"noul"}}})", 422, "INVALID_REQUEST", R"(["body","state"])", "state_type"},
      {"missing_questions", R"({"state":"s"})", 422, "INVALID_REQUEST", R"(["body","questions"])", "missing"},
      {"questions_array", R"({"state":"s","questions":[{"type":"noul"}]})", 422, "INVALID_REQUEST", R"(["body","questions"])", "dict_type"},
      {"questions_string", R"({"state":"s","questions":"q"})", 422, "INVALID_REQUEST", R"(["body","questions"])", "dict_type"},
      {"no_questions", R"({"state":"s","questions":{}})", 422, "INVALID_REQUEST", R"(["body","questions"])", "too_short"},
      {"65_questions", questions_of(65), 422, "INVALID_REQUEST", R"(["body","questions"])", "too_long"},
      {"100000_questions", questions_of(100000), 422, "INVALID_REQUEST", R"(["body","questions"])", "too_long"},
      {"question_not_object", with_question("5"), 422, "INVALID_REQUEST", q + "]", "dict_type"},
      {"question_without_type", with_question(R"({"instructions":"x"})"), 422, "INVALID_REQUEST", q + "]", "union_tag_not_found"},
      {"unknown_type_box", with_question(R"({"type":"box"})"), 422, "INVALID_REQUEST", q + "]", "union_tag_invalid"},
      {"type_not_string", with_question(R"({"type":1})"), 422, "INVALID_REQUEST", q + "]", "union_tag_invalid"},
      {"choice_missing_criteria", with_question(R"({"type":"choice"})"), 422, "INVALID_REQUEST", q + R"(,"choice","criteria"])", "missing"},
      {"choice_null_criteria", with_question(R"({"type":"choice","criteria":null})"), 422, "INVALID_REQUEST", q + R"(,"choice","criteria"])", "missing"},
      {"choice_criteria_array", with_question(R"({"type":"choice","criteria":["a","b"]})"), 422, "INVALID_REQUEST", q + R"(,"choice","criteria"])", "dict_type"},
      {"choice_criteria_string", with_question(R"({"type":"choice","criteria":"a,b"})"), 422, "INVALID_REQUEST", q + R"(,"choice","criteria"])", "dict_type"},
      {"choice_one_option", choice_of(1), 422, "INVALID_REQUEST", q + R"(,"choice","criteria"])", "too_short"},
      {"choice_256_options", choice_of(256), 422, "INVALID_REQUEST", q + R"(,"choice","criteria"])", "too_long"},
      {"choice_empty_label", with_question(R"({"type":"choice","criteria":{"":"x","b":null}})"), 422, "INVALID_REQUEST", q + R"(,"choice","criteria",""])", "string_too_short"},
      {"choice_number_description", with_question(R"({"type":"choice","criteria":{"a":1,"b":null}})"), 422, "INVALID_REQUEST", q + R"(,"choice","criteria","a"])", "json_type"},
      {"choice_bool_description", with_question(R"({"type":"choice","criteria":{"a":"x","b":false}})"), 422, "INVALID_REQUEST", q + R"(,"choice","criteria","b"])", "json_type"},
      {"score_missing_criteria", with_question(R"({"type":"score"})"), 422, "INVALID_REQUEST", q + R"(,"score","criteria"])", "missing"},
      {"score_criteria_dict", with_question(R"({"type":"score","criteria":{"0":"low","1":"high"}})"), 422, "INVALID_REQUEST", q + R"(,"score","criteria"])", "list_type"},
      {"score_one_level", score_of(1), 422, "INVALID_REQUEST", q + R"(,"score","criteria"])", "too_short"},
      {"score_11_levels", score_of(11), 422, "INVALID_REQUEST", q + R"(,"score","criteria"])", "too_long"},
      {"score_null_level", with_question(R"({"type":"score","criteria":["low",null]})"), 422, "INVALID_REQUEST", q + R"(,"score","criteria",1])", "json_type"},
      {"score_number_level", with_question(R"({"type":"score","criteria":[0,1]})"), 422, "INVALID_REQUEST", q + R"(,"score","criteria",0])", "json_type"},
      {"noul_criteria_array", with_question(R"({"type":"noul","criteria":["yes","no"]})"), 422, "INVALID_REQUEST", q + R"(,"noul","criteria"])", "dict_type"},
      {"noul_number_side", with_question(R"({"type":"noul","criteria":{"true":1}})"), 422, "INVALID_REQUEST", q + R"(,"noul","criteria","true"])", "json_type"},
      {"number_instructions", with_question(R"({"type":"noul","instructions":7})"), 422, "INVALID_REQUEST", q + R"(,"noul","instructions"])", "json_type"},
      {"bool_instructions", with_question(R"({"type":"noul","instructions":true})"), 422, "INVALID_REQUEST", q + R"(,"noul","instructions"])", "json_type"},
      {"empty_question_id", R"({"state":"s","questions":{"":{"type":"noul"}}})", 422, "INVALID_REQUEST", R"(["body","questions",""])", "string_too_short"},
      {"newline_in_question_id", R"({"state":"s","questions":{"a\nb":{"type":"noul"}}})", 422, "INVALID_REQUEST", R"(["body","questions","a\nb"])", "string_pattern_mismatch"},
      {"nul_in_question_id", R"({"state":"s","questions":{"a\u0000":{"type":"noul"}}})", 422, "INVALID_REQUEST", R"(["body","questions","a\u0000"])", "string_pattern_mismatch"},
      {"question_id_101_chars", R"({"state":"s","questions":{")" + std::string(101, 'x') + R"(":{"type":"noul"}}})", 422, "INVALID_REQUEST", R"(["body","questions",")" + std::string(101, 'x') + "\"]", "string_too_long"},
      {"model_number", R"({"model":5,"state":"s","questions":{"q":{"type":"noul"}}})", 422, "INVALID_REQUEST", R"(["body","model"])", "string_type"},
      {"invalid_utf8_state", "{\"state\":\"caf\xc3\x28\",\"questions\":{\"q\":{\"type\":\"noul\"}}}", 422, "INVALID_REQUEST", R"(["body","state"])", "string_unicode"},
      {"overlong_utf8", "{\"state\":\"\xc0\xaf\",\"questions\":{\"q\":{\"type\":\"noul\"}}}", 422, "INVALID_REQUEST", R"(["body","state"])", "string_unicode"},
      {"lone_surrogate_instructions", with_question(R"({"type":"noul","instructions":"\udc00"})"), 422, "INVALID_REQUEST", q + R"(,"instructions"])", "string_unicode"},
      {"state_nested_100_levels", R"({"state":)" + std::string(100, '[') + std::string(100, ']') + R"(,"questions":{"q":{"type":"noul"}}})", 422, "INVALID_REQUEST", "", "json_too_deep"},
      {"state_nested_1e6_levels", R"({"state":)" + std::string(1000000, '['), 422, "INVALID_REQUEST", "", "json_too_deep"},
      {"integer_400_digits", R"({"state":{"n":)" + std::string(400, '7') + R"(},"questions":{"q":{"type":"noul"}}})", 422, "INVALID_REQUEST", R"(["body","state","n"])", "int_too_long"},
      {"unterminated_string_saying_surrogate", R"({"state": "surrogate)", 400, "INVALID_JSON", "", ""},
      {"raw_tab_in_string", "{\"state\":\"ill-formed UTF-8\tx\"}", 400, "INVALID_JSON", "", ""},
      {"number_overflow", R"({"state":{"x":1e400},"questions":{"q":{"type":"noul"}}})", 422, "INVALID_REQUEST", R"(["body","state","x"])", "finite_number"},
      {"number_overflow_after_a_bom", "\xEF\xBB\xBF" R"( {"state":{"x":1e400},"questions":{"q":{"type":"noul"}}})", 422, "INVALID_REQUEST", R"(["body","state","x"])", "finite_number"},
      // A value that is not an object is refused as such, whatever else is wrong with it.
      {"top_level_overflow", "1e999", 400, "INVALID_JSON", "", ""},
      {"top_level_lone_surrogate", R"( "\ud800")", 400, "INVALID_JSON", "", ""},
      {"array_of_overflows", R"([1e400])", 400, "INVALID_JSON", "", ""},
      {"top_level_long_integer", std::string(400, '7'), 400, "INVALID_JSON", "", ""},
      {"empty_model", R"({"model":"","state":"s","questions":{"q":{"type":"noul"}}})", 422, "INVALID_REQUEST", R"(["body","model"])", "string_too_short"},
      {"body_over_limit", R"({"state":")" + std::string(2000, 'a') + R"(","questions":{"q":{"type":"noul"}}})", 413, "REQUEST_TOO_LARGE", "", "", small_body()},
      {"images_not_list", with_media(R"("images":"data:image/png;base64,AAAA")"), 422, "INVALID_REQUEST", R"(["body","images"])", "list_type"},
      {"image_ftp_url", with_media(R"("images":["ftp://example.com/a.png"])"), 422, "INVALID_REQUEST", R"(["body","images",0])", "url_scheme"},
      {"image_file_url", with_media(R"("images":["file:///tmp/a.png"])"), 422, "INVALID_REQUEST", R"(["body","images",0])", "url_scheme"},
      {"image_url_without_host", with_media(R"("images":["https:///a.png"])"), 422, "INVALID_REQUEST", R"(["body","images",0])", "url_syntax"},
      {"image_url_with_space", with_media(R"("images":["http://example.com/a b.png"])"), 422, "INVALID_REQUEST", R"(["body","images",0])", "url_syntax"},
      {"audio_url_with_user_info", with_media(R"("audio":["http://me@example.com/a.wav"])"), 422, "INVALID_REQUEST", R"(["body","audio",0])", "url_syntax"},
      {"data_url_without_comma", with_media(R"("images":["data:image/png;base64"])"), 422, "INVALID_REQUEST", R"(["body","images",0])", "url_syntax"},
      {"empty_media_string", with_media(R"("images":[""])"), 422, "INVALID_REQUEST", R"(["body","images",0])", "string_too_short"},
      {"path_with_newline", with_media(R"("videos":["clips/a\n.mp4"])"), 422, "INVALID_REQUEST", R"(["body","videos",0])", "string_pattern_mismatch"},
      {"path_over_4096_bytes", with_media(R"("images":[")" + std::string(4097, 'a') + R"("])"), 422, "INVALID_REQUEST", R"(["body","images",0])", "string_too_long"},
      {"image_gif", with_media(R"("images":["data:image/gif;base64,AAAA"])"), 422, "INVALID_REQUEST", R"(["body","images",0])", "media_type"},
      {"five_images", with_media(R"("images":["data:image/png;base64,AA==","data:image/png;base64,AA==","data:image/png;base64,AA==","data:image/png;base64,AA==","data:image/png;base64,AA=="])"), 422, "INVALID_REQUEST", R"(["body","images"])", "too_long"},
      {"audio_with_image_mime", with_media(R"("audio":[{"content_type":"image/png","base64":"AAAA"}])"), 422, "INVALID_REQUEST", R"(["body","audio",0])", "media_type"},
      {"data_url_not_base64", with_media(R"("images":["data:image/png,rawbytes"])"), 422, "INVALID_REQUEST", R"(["body","images",0])", "url_syntax"},
      {"media_object_without_payload", with_media(R"("images":[{"content_type":"image/png"}])"), 422, "INVALID_REQUEST", R"(["body","images",0,"base64"])", "missing"},
      {"media_item_number", with_media(R"("videos":[5])"), 422, "INVALID_REQUEST", R"(["body","videos",0])", "json_type"},
      {"image_too_large", with_media(R"("images":["data:image/png;base64,AAAAAAAAAAAA"])"), 413, "REQUEST_TOO_LARGE", R"(["body","images",0])", "media_too_large", small_images()},
      {"video_for_text_model", with_media(R"("videos":["data:video/mp4;base64,AAAA"])"), 422, "INVALID_REQUEST", R"(["body","videos"])", "media_unsupported", request_limits::text_only()},
  };
}

TEST(malformed_requests, each_gets_its_exact_code_and_field) {
  const auto table = cases();
  ASSERT_GE(table.size(), 40u);
  for (const malformed& c : table) {
    SCOPED_TRACE(c.name);
    auto r = parse_request(c.body, c.limits, "test-model");
    ASSERT_FALSE(r.has_value());
    const error& e = r.error();
    EXPECT_EQ(e.status, c.status);
    EXPECT_EQ(e.code, c.code);
    EXPECT_FALSE(e.message.empty());
    if (!c.type.empty()) {
      ASSERT_FALSE(e.detail.empty());
      EXPECT_EQ(e.detail[0].type, c.type);
      if (!c.loc.empty()) {
        EXPECT_EQ(render_json(e.detail[0].loc, false), render_json(test::parse(c.loc), false));
        // The message names the field, as the SDK's extract_message would.
        std::string where;
        for (std::size_t i = 1; i < e.detail[0].loc.size(); ++i) {
          const json& part = e.detail[0].loc[i];
          if (i > 1) where += '.';
          where += part.is_string() ? part.get<std::string>() : render_json(part, false);
        }
        EXPECT_NE(e.message.find(where), std::string::npos) << e.message;
      }
    } else {
      EXPECT_TRUE(e.detail.empty());
    }
    // The error body is valid JSON in the wire shape.
    const json body = test::parse(render_error(e));
    EXPECT_EQ(body.begin().key(), "error");
    EXPECT_EQ(body["code"], c.code);
    EXPECT_TRUE(body["detail"].is_array());
  }
}

TEST(malformed_requests, bytes_after_a_nul_are_refused_with_their_offset) {
  const std::string valid = with_question(R"({"type":"noul"})");
  ASSERT_TRUE(parse_request(valid, {}, "test-model").has_value());
  auto r = parse_request(valid + std::string(1, '\0') + "garbage", {}, "test-model");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().status, 400);
  EXPECT_EQ(r.error().code, "INVALID_JSON");
  EXPECT_NE(r.error().message.find("at byte " + std::to_string(valid.size() + 1)), std::string::npos) << r.error().message;
  // An escaped NUL in a string is still a value.
  EXPECT_TRUE(parse_request(R"({"state":"a\u0000b","questions":{"q":{"type":"noul"}}})", {}, "test-model").has_value());
}

}  // namespace
}  // namespace baton
