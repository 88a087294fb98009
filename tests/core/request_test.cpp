#include <gtest/gtest.h>

#include "core/request.hpp"
#include "support/files.hpp"

namespace baton {
namespace {

request parse_ok(std::string_view body, const request_limits& limits = {}) {
  auto r = parse_request(body, limits);
  EXPECT_TRUE(r.has_value()) << body << "\n" << (r ? "" : render_error(r.error()));
  return r ? std::move(*r) : request{};
}

TEST(request, keeps_question_and_choice_key_order) {
  const request r = parse_ok(R"({
    "model": "clef-omni", "state": {"b": 1, "a": 2},
    "questions": {
      "zeta": {"type": "choice", "criteria": {"z": "last letter", "a": null, "m": ["x"]}},
      "alpha": {"type": "score", "instructions": {"ask": "how much"}, "criteria": ["low", {"k": 1}]},
      "mid": {"type": "noul", "instructions": "Is it?", "criteria": {"false": null, "other": 1}}
    },
    "unknown": {"ignored": true}
  })");
  EXPECT_EQ(r.model, "clef-omni");
  ASSERT_EQ(r.questions.size(), 3u);
  EXPECT_EQ(r.questions[0].id, "zeta");
  EXPECT_EQ(r.questions[1].id, "alpha");
  EXPECT_EQ(r.questions[2].id, "mid");
  EXPECT_EQ(render_json(r.state, false), R"({"b":1,"a":2})");

  const question& choice = r.questions[0];
  EXPECT_EQ(choice.type, question_type::choice);
  ASSERT_EQ(choice.option_count(), 3u);
  EXPECT_EQ(choice.option_id(0), "z");
  EXPECT_EQ(choice.option_id(1), "a");
  EXPECT_EQ(choice.option_id(2), "m");
  EXPECT_TRUE(choice.option_description(1).is_null());
  EXPECT_EQ(render_json(choice.option_description(2), false), R"(["x"])");

  const question& score = r.questions[1];
  EXPECT_EQ(score.option_count(), 2u);
  EXPECT_EQ(score.option_id(1), "1");
  EXPECT_EQ(render_json(score.option_description(1), false), R"({"k":1})");

  // noul: caller sides override the defaults; an explicit null removes the description.
  const question& noul = r.questions[2];
  EXPECT_EQ(noul.option_count(), 2u);
  EXPECT_EQ(noul.option_id(0), "true");
  EXPECT_EQ(noul.option_description(0), "The proposition is true or the answer is yes.");
  EXPECT_TRUE(noul.option_description(1).is_null());
}

// Clef-Omni's reference (REF-omni encode_record) falls back only for null and "": an empty object
// or list is rendered like any other JSON value.
TEST(request, instruction_text_falls_back_to_the_id_for_null_or_empty_instructions) {
  const request r = parse_ok(R"({"state": "s", "questions": {
      "a": {"type": "noul"}, "b": {"type": "noul", "instructions": null},
      "c": {"type": "noul", "instructions": ""}, "d": {"type": "noul", "instructions": {}},
      "e": {"type": "noul", "instructions": []}, "f": {"type": "noul", "instructions": {"q": "x?"}},
      "g": {"type": "noul", "instructions": "Plain?"}}})");
  const char* expected[] = {"a", "b", "c", "{}", "[]", R"({"q":"x?"})", "Plain?"};
  ASSERT_EQ(r.questions.size(), 7u);
  for (std::size_t i = 0; i < 7; ++i) {
    std::string text;
    append_instruction_text(r.questions[i], text);
    EXPECT_EQ(text, expected[i]);
  }
}

TEST(request, model_absent_or_null_is_empty) {
  EXPECT_EQ(parse_ok(R"({"state":"s","questions":{"q":{"type":"noul"}}})").model, "");
  EXPECT_EQ(parse_ok(R"({"model":null,"state":"s","questions":{"q":{"type":"noul"}}})").model, "");
}

TEST(request, media_in_both_forms) {
  const request r = parse_ok(R"({"state": "s", "questions": {"q": {"type": "noul"}},
      "images": ["data:image/jpg;base64,AAAA", {"content_type": "image/webp", "base64": "AAECAw=="}],
      "audio": ["DATA:audio/wav;codec=pcm;base64,AAA="],
      "videos": [{"content_type": "video/mp4", "base64": ""}]})");
  ASSERT_EQ(r.images.size(), 2u);
  EXPECT_EQ(r.images[0].mime, "image/jpeg");
  EXPECT_EQ(r.images[0].base64(), "AAAA");
  EXPECT_EQ(r.images[0].decoded_bytes, 3u);
  EXPECT_EQ(r.images[1].mime, "image/webp");
  EXPECT_EQ(r.images[1].decoded_bytes, 4u);
  ASSERT_EQ(r.audio.size(), 1u);
  EXPECT_EQ(r.audio[0].mime, "audio/wav");
  EXPECT_EQ(r.audio[0].decoded_bytes, 2u);
  ASSERT_EQ(r.videos.size(), 1u);
  EXPECT_TRUE(r.has_media());
}

// Paths and URLs are told apart by their start and checked for syntax only: nothing is read or
// fetched while parsing, so a path that does not exist parses.
TEST(request, media_paths_and_urls) {
  const request r = parse_ok(R"({"state": "s", "questions": {"q": {"type": "noul"}},
      "images": ["photos/cat.png", "/no/such/dir/../x.jpg", "https://cdn.example.com/a.png?w=2"],
      "audio": ["../clips/a.wav"],
      "videos": ["http://127.0.0.1:8080/v.mp4"]})");
  ASSERT_EQ(r.images.size(), 3u);
  EXPECT_EQ(r.images[0].source, media_source::path);
  EXPECT_EQ(r.images[0].data, "photos/cat.png");
  EXPECT_EQ(r.images[0].mime, "");
  EXPECT_EQ(r.images[0].decoded_bytes, 0u);
  EXPECT_EQ(r.images[1].source, media_source::path);
  EXPECT_EQ(r.images[2].source, media_source::url);
  EXPECT_EQ(r.images[2].data, "https://cdn.example.com/a.png?w=2");
  EXPECT_EQ(r.audio[0].source, media_source::path);  // `..` is judged when loaded, against the roots
  EXPECT_EQ(r.videos[0].source, media_source::url);
  EXPECT_FALSE(r.has_raw_media());
}

TEST(request, media_scheme_case_and_odd_paths) {
  // An upper-case scheme is a URL (refused by the URL grammar, which wants it lower case); a
  // "scheme" with a slash before "://" is a path.
  auto upper = parse_request(R"({"state":"s","questions":{"q":{"type":"noul"}},"audio":["HTTP://example.com/a.wav"]})", {});
  ASSERT_FALSE(upper.has_value());
  EXPECT_EQ(upper.error().detail.at(0).type, "url_syntax");
  const request r = parse_ok(R"({"state":"s","questions":{"q":{"type":"noul"}},"audio":["dir/clip://a.wav"]})");
  ASSERT_EQ(r.audio.size(), 1u);
  EXPECT_EQ(r.audio[0].source, media_source::path);
  // A data URL's tags are case-insensitive (RFC 2397), ";BASE64" as much as "DATA:" and the type.
  const request shouted = parse_ok(R"({"state":"s","questions":{"q":{"type":"noul"}},"images":["DATA:IMAGE/PNG;BASE64,AA=="]})");
  ASSERT_EQ(shouted.images.size(), 1u);
  EXPECT_EQ(shouted.images[0].source, media_source::inline_base64);
  EXPECT_EQ(shouted.images[0].mime, "image/png");
  EXPECT_EQ(shouted.images[0].data, "DATA:IMAGE/PNG;base64,AA==");  // forwarded as the contract spells the tag
}

// Inline items count toward the 413 limits at parse; a path or URL does not (its size is unknown
// until it is loaded), so many of them pass where the same count of large inline items does not.
TEST(request, only_inline_media_counts_toward_the_decoded_size_limits) {
  request_limits tight;
  tight.images.max_item_bytes = 3;
  tight.max_image_bytes_total = 3;
  const std::string q = R"("state":"s","questions":{"q":{"type":"noul"}})";
  EXPECT_TRUE(parse_request("{" + q + R"(,"images":["a.png","b.png","https://x.example/c.png"]})", tight).has_value());
  auto inline_too_big = parse_request("{" + q + R"(,"images":["data:image/png;base64,AAAAAAAA"]})", tight);
  ASSERT_FALSE(inline_too_big.has_value());
  EXPECT_EQ(inline_too_big.error().status, 413);
}

// Forwarding sends each item as the caller wrote it; a raw item has no wire form (null).
TEST(request, render_keeps_each_media_item_as_sent) {
  const std::string body = R"({"state":"s","questions":{"q":{"type":"noul"}},)"
                           R"("images":["data:image/png;base64,AAAA",{"content_type":"image/webp","base64":"AAECAw=="},"a/b.png"],)"
                           R"("videos":["https://example.com/v.mp4"]})";
  request r = parse_ok(body);
  std::string out;
  render_request(r, out);
  EXPECT_EQ(out, body);
  const request again = parse_ok(out);
  ASSERT_EQ(again.images.size(), 3u);
  EXPECT_EQ(again.images[2].source, media_source::path);

  raw_media pcm;
  pcm.audio = {0.0f, 0.5f};
  r.audio.push_back(raw_item(std::move(pcm)));
  EXPECT_TRUE(r.has_raw_media());
  out.clear();
  render_request(r, out);
  EXPECT_NE(out.find(R"("audio":[null])"), std::string::npos) << out;
}

TEST(request, raw_items_share_their_samples) {
  raw_media frames;
  frames.pixels.assign(2 * 2 * 3, 7);
  frames.frames = 1;
  frames.height = 2;
  frames.width = 2;
  const media_item item = raw_item(std::move(frames));
  EXPECT_EQ(item.source, media_source::raw);
  ASSERT_NE(item.raw, nullptr);
  EXPECT_EQ(item.raw->pixels.size(), 12u);
  const media_item copy = item;  // a copy of the request does not copy the pixels
  EXPECT_EQ(copy.raw.get(), item.raw.get());
}

TEST(request, limits_are_configurable) {
  request_limits wide;
  wide.min_choice_options = 1;
  wide.max_score_levels = 12;
  wide.max_questions = 2;
  const request r = parse_ok(R"({"state": "s", "questions": {
      "one": {"type": "choice", "criteria": {"only": null}},
      "many": {"type": "score", "criteria": ["0","1","2","3","4","5","6","7","8","9","10","11"]}}})",
                             wide);
  EXPECT_EQ(r.questions[0].option_count(), 1u);
  EXPECT_EQ(r.questions[1].option_count(), 12u);
  auto three = parse_request(R"({"state":"s","questions":{"a":{"type":"noul"},"b":{"type":"noul"},"c":{"type":"noul"}}})", wide);
  ASSERT_FALSE(three);
  EXPECT_EQ(three.error().detail[0].ctx["max_length"], 2);
}

TEST(request, option_budget_names_the_model) {
  request_limits budget;
  budget.max_total_options = 4;
  auto r = parse_request(R"({"state":"s","questions":{"a":{"type":"noul"},"b":{"type":"choice","criteria":{"x":null,"y":null,"z":null}}}})",
                         budget, "laya:en");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().status, 422);
  EXPECT_EQ(r.error().code, "TOO_MANY_OPTIONS");
  EXPECT_EQ(r.error().detail[0].type, "too_many_options");
  EXPECT_EQ(r.error().detail[0].ctx["options"], 5);
  EXPECT_EQ(r.error().detail[0].ctx["model"], "laya:en");
  EXPECT_NE(r.error().message.find("laya:en"), std::string::npos);
}

TEST(request, all_issues_are_reported_at_once) {
  auto r = parse_request(R"({"model": 3, "state": 1, "questions": {"a": {"type": "nope"}, "b": {"type": "choice"}}})",
                         request_limits{});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().detail.size(), 4u) << render_error(r.error());
  EXPECT_EQ(r.error().message,
            "model: Input should be a valid string; state: Input should be a valid string, object or array, not "
            "number; questions.a: Input tag 'nope' found using 'type' does not match any of the expected tags: "
            "'choice', 'score', 'noul'; questions.b.choice.criteria: Field required");
}

TEST(request, state_hash_of_pieces_is_the_hash_of_the_joined_text) {
  EXPECT_EQ(state_hash_of_parts({"[{\"a\":1}", "]"}), state_hash("[{\"a\":1}]"));
  EXPECT_EQ(state_hash_of_parts({"ab", "", "c"}), "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_NE(state_hash_of_parts({"[]"}), state_hash_of_parts({"[", "}"}));
}

TEST(request, state_hash_of_pieces_with_media_is_the_hash_of_the_request) {
  request r = parse_ok(R"({"state":[{"a":1}],"questions":{"q":{"type":"noul"}},)"
                       R"("images":["data:image/png;base64,AAAA","shot.png"],"audio":["clip.wav"]})");
  const std::string state = R"([{"a":1}])";
  const std::vector<media_ref> refs = {{"images", &r.images[0]}, {"images", &r.images[1]}, {"audio", &r.audio[0]}};
  EXPECT_EQ(state_hash_of_parts({"[{\"a\":1}", "]"}, refs), state_hash(state, &r));
  EXPECT_NE(state_hash(state, &r), state_hash(state));
  // Another picture, the same state text: another hash.
  const std::vector<media_ref> other = {{"images", &r.images[1]}, {"images", &r.images[0]}, {"audio", &r.audio[0]}};
  EXPECT_NE(state_hash_of_parts({state}, other), state_hash(state, &r));
}

// An array read on its own (an agent event's) gets request_from_json's issues, at its own place.
TEST(request, a_media_array_read_apart_has_the_requests_issues) {
  request_limits limits;
  limits.images.max_items = 10;
  limits.images.max_item_bytes = 3;
  const std::string items = R"(["data:image/png;base64,AAAA","data:text/plain;base64,AAAA",7,"ftp://x/a.png",)"
                            R"("data:image/png;base64,AAAAAAAA","a.png"])";
  auto whole = parse_request(R"({"state":"s","questions":{"q":{"type":"noul"}},"images":)" + items + "}", limits);
  ASSERT_FALSE(whole);
  json array = json::parse(items);
  const media_read read = read_media_array(array, "images", limits.images, json::array({"append", 2, "images"}));
  ASSERT_EQ(read.items.size(), 3u);  // the first, the too large one (a 413 issue) and the path
  EXPECT_EQ(read.items[2].source, media_source::path);
  std::vector<issue> apart = read.issues;
  apart.insert(apart.end(), read.too_large.begin(), read.too_large.end());
  ASSERT_EQ(apart.size(), whole.error().detail.size());
  for (std::size_t i = 0; i < apart.size(); ++i) {
    json want = whole.error().detail[i].loc;
    want[0] = "append";
    want.insert(want.begin() + 1, 2);
    EXPECT_EQ(apart[i].loc, want) << i;
    EXPECT_EQ(apart[i].msg, whole.error().detail[i].msg) << i;
    EXPECT_EQ(apart[i].type, whole.error().detail[i].type) << i;
  }
  EXPECT_EQ(read.too_large.size(), 1u);
  EXPECT_EQ(read.too_large[0].loc, json::parse(R"(["append",2,"images",4])"));

  // A kind the model does not read: no size issue for its items (the request is refused whole).
  json one = json::parse(R"(["data:image/png;base64,AAAAAAAA"])");
  const media_read unread = read_media_array(one, "images", request_limits::text_only().images, json::array({"history"}));
  EXPECT_TRUE(unread.issues.empty());
  EXPECT_TRUE(unread.too_large.empty());
  EXPECT_EQ(unread.items.size(), 1u);
  json not_list = "a.png";
  EXPECT_EQ(read_media_array(not_list, "audio", limits.audio, json::array({"x"})).issues.at(0).type, "list_type");
}

// A request built from items read apart is checked as the same body would be.
TEST(request, media_limits_of_a_built_request_are_the_bodys) {
  request_limits limits;
  limits.images.max_items = 2;
  limits.max_audio_video_bytes_total = 5;
  const std::string q = R"("state":"s","questions":{"q":{"type":"noul"}})";
  for (const auto& [media, lim] :
       {std::pair<std::string, request_limits>{R"("images":["a.png"],"audio":["b.wav"])", request_limits::text_only()},
        {R"("images":["a.png","b.png","c.png"])", limits},
        {R"("audio":["data:audio/wav;base64,AAAA"],"videos":["data:video/mp4;base64,AAAA"])", limits},
        {R"("images":["a.png"],"audio":["data:audio/wav;base64,AAAA"])", limits}}) {
    auto whole = parse_request("{" + q + "," + media + "}", lim);
    request built = parse_ok("{" + q + "," + media + "}");  // read under the default limits
    auto checked = check_media_limits(built, lim);
    if (whole) {
      EXPECT_TRUE(checked) << media;
      continue;
    }
    ASSERT_FALSE(checked) << media;
    EXPECT_EQ(checked.error().status, whole.error().status) << media;
    EXPECT_EQ(checked.error().code, whole.error().code) << media;
    EXPECT_EQ(checked.error().message, whole.error().message) << media;
    EXPECT_EQ(render_error(checked.error()), render_error(whole.error())) << media;
  }
  auto keyword = check_media_limits(parse_ok("{" + q + R"(,"images":["a.png"]})"), request_limits::text_only());
  ASSERT_FALSE(keyword);
  EXPECT_EQ(keyword.error().code, "INVALID_REQUEST");
  EXPECT_EQ(keyword.error().message, "images: this model does not read images");
}

TEST(request, a_media_items_wire_form_is_as_sent) {
  const request r = parse_ok(R"({"state":"s","questions":{"q":{"type":"noul"}},)"
                             R"("images":["data:image/png;base64,AAAA",{"content_type":"image/webp","base64":"AAECAw=="},"a/b.png"]})");
  EXPECT_EQ(media_item_json(r.images[0]), "data:image/png;base64,AAAA");
  EXPECT_EQ(media_item_json(r.images[1]), json::parse(R"({"content_type":"image/webp","base64":"AAECAw=="})"));
  EXPECT_EQ(media_item_json(r.images[2]), "a/b.png");
  EXPECT_TRUE(media_item_json(raw_item(raw_media{})).is_null());
}

}  // namespace
}  // namespace baton
