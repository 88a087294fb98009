// The wire examples in tests/data/spec-examples/: requests parse (or fail as the example says), SystemOne
// responses and error bodies round-trip through baton's types.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include "core/answers.hpp"
#include "core/request.hpp"
#include "support/files.hpp"

namespace baton {
namespace {

std::filesystem::path examples_dir() { return test::data_dir() / "spec-examples"; }

json example(const std::string& name) { return test::read_json(examples_dir() / name); }

// Content equality with Python's spelling of every number (0.0 stays 0.0, 1 stays 1).
std::string canonical(const json& v) { return render_json(v, true); }

std::vector<std::string> keys(const json& obj) {
  std::vector<std::string> out;
  for (const auto& [k, v] : obj.items()) out.push_back(k);
  return out;
}

// A response read into baton's types and written back (unrounded) says the same thing, with
// answers and probabilities in the caller's order.
void expect_round_trip(const json& original, const std::set<std::string>& dropped_extensions = {}) {
  auto r = response_from_json(original);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  const json back = test::parse(render_response(*r, -1));
  json expected = original;
  for (const std::string& k : dropped_extensions) {
    if (k.starts_with("usage."))
      expected["usage"].erase(k.substr(6));
    else
      expected.erase(k);
  }
  EXPECT_EQ(canonical(back), canonical(expected));
  EXPECT_EQ(keys(back["answers"]), keys(original["answers"]));
  for (const auto& [id, a] : original["answers"].items()) {
    if (a.contains("probabilities")) {
      EXPECT_EQ(keys(back["answers"][id]["probabilities"]), keys(a["probabilities"])) << id;
    }
  }
}

TEST(golden_examples, every_file_is_checked) {
  const std::set<std::string> checked = {
      "cloudflare-blog__clef-omni-media-request.json",
      "colibri-clef-md__clef-27b.json",
      "judge-clef__clef-flash-reference-invoice.json",
      "local-jev-bench__llamacpp-clef27b-t01.json",
      "neurolink-cloudflare-clef__401-envelope.json",
      "neurolink-cloudflare-clef__workers-ai-envelope.json",
      "ollama-library__d1-omni-request.json",
      "ollaya-api-md__404-model-not-found.json",
      "ollaya-api-md__422-missing-state-and-one-level-score.json",
      "ollaya-api-md__422-state-truncated.json",
      "ollaya-api-md__422-too-many-options.json",
      "ollaya-api-md__systemone-laya.json",
      "ollaya-api-md__v1-models.json",
      "system-one-adapter-spec__book-review.json",
      "typesafe-docs-api__choice.json",
      "typesafe-docs-api__noul.json",
      "typesafe-docs-api__score.json",
      "typesafe-openapi__422-validation-error.json",
      "typesafe-openapi__end-to-end-noul.json",
  };
  std::set<std::string> present;
  // Every example is a .json file; the folder's PROVENANCE.md is not one.
  for (const auto& entry : std::filesystem::directory_iterator(examples_dir()))
    if (entry.path().extension() == ".json") present.insert(entry.path().filename().string());
  EXPECT_EQ(present, checked) << "a new example needs a decision on how it is checked";
}

TEST(golden_examples, requests_parse) {
  const std::map<std::string, std::size_t> requests = {
      {"cloudflare-blog__clef-omni-media-request.json", 3},  // with images, audio and videos
      {"colibri-clef-md__clef-27b.json", 3},
      {"local-jev-bench__llamacpp-clef27b-t01.json", 4},
      {"neurolink-cloudflare-clef__workers-ai-envelope.json", 1},
      {"ollama-library__d1-omni-request.json", 1},
      {"ollaya-api-md__systemone-laya.json", 2},
      {"typesafe-docs-api__choice.json", 1},
      {"typesafe-docs-api__noul.json", 1},
      {"typesafe-docs-api__score.json", 1},
      {"typesafe-openapi__end-to-end-noul.json", 1},
  };
  for (const auto& [file, questions] : requests) {
    SCOPED_TRACE(file);
    const json ex = example(file);
    auto r = parse_request(render_json(ex["request"], false), request_limits{});
    ASSERT_TRUE(r.has_value()) << render_error(r.error());
    ASSERT_EQ(r->questions.size(), questions);
    EXPECT_EQ(r->questions.front().id, ex["request"]["questions"].begin().key());
  }
  const json media = example("cloudflare-blog__clef-omni-media-request.json")["request"];
  auto r = parse_request(render_json(media, false), request_limits{});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->images.size(), 1u);
  EXPECT_EQ(r->audio[0].mime, "audio/mpeg");
  EXPECT_EQ(r->videos[0].mime, "video/mp4");
  // The judge-clef record is a request without a model; it parses too.
  auto judge = parse_request(render_json(example("judge-clef__clef-flash-reference-invoice.json")["record"], false),
                             request_limits{});
  ASSERT_TRUE(judge);
  EXPECT_EQ(judge->questions[1].option_count(), 3u);
}

TEST(golden_examples, rejected_request_gives_the_documented_error_body) {
  const json ex = example("ollaya-api-md__422-missing-state-and-one-level-score.json");
  auto r = parse_request(render_json(ex["request"], false), request_limits{});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().status, ex["status"].get<int>());
  EXPECT_EQ(render_error(r.error()), render_json(ex["response"], false));
}

TEST(golden_examples, fastapi_issue_shape_matches_typesafe) {
  const json ex = example("typesafe-openapi__422-validation-error.json");
  auto r = parse_request(R"({"model":"jev-latest","questions":{"billing":{"type":"noul"}}})", request_limits{});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().status, ex["status"].get<int>());
  const json ours = test::parse(render_error(r.error()));
  EXPECT_EQ(canonical(ours["detail"]), canonical(ex["response"]["detail"]));
}

TEST(golden_examples, adapter_spec_document_field_is_not_state) {
  // SPEC.md's draft names the state `document`; the hosted wire (and baton) need `state`.
  const json ex = example("system-one-adapter-spec__book-review.json");
  auto r = parse_request(render_json(ex["request"], false), request_limits{});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().status, 422);
  EXPECT_EQ(r.error().detail[0].loc, json::array({"body", "state"}));
  // Its response omits the score legend that the hosted API and the Python SDK require.
  auto resp = response_from_json(ex["response"]);
  ASSERT_FALSE(resp);
  EXPECT_NE(resp.error().message.find("answers.rating.legend"), std::string::npos) << resp.error().message;
}

TEST(golden_examples, responses_round_trip) {
  for (const char* file : {"typesafe-docs-api__choice.json", "typesafe-docs-api__noul.json", "typesafe-docs-api__score.json",
                           "typesafe-openapi__end-to-end-noul.json", "ollaya-api-md__systemone-laya.json"}) {
    SCOPED_TRACE(file);
    const json ex = example(file);
    ASSERT_EQ(ex["status"], 200);
    expect_round_trip(ex["response"]);
  }
  {
    SCOPED_TRACE("workers-ai envelope: the SystemOne body is its result");
    expect_round_trip(example("neurolink-cloudflare-clef__workers-ai-envelope.json")["response"]["result"]);
  }
  {
    SCOPED_TRACE("colibri: its extensions (id, provider, usage.cost) are not part of the SystemOne body");
    expect_round_trip(example("colibri-clef-md__clef-27b.json")["response"], {"id", "provider", "usage.cost"});
  }
  {
    SCOPED_TRACE("llama.cpp: unrounded, keys in sorted order");
    const json ex = example("local-jev-bench__llamacpp-clef27b-t01.json");
    json body = json::object();
    body["model"] = ex["request"]["model"];
    body["answers"] = ex["response_answers_only"];
    body["usage"] = json{{"input_tokens", 0}, {"output_tokens", 0}};
    expect_round_trip(body);
  }
}

TEST(golden_examples, error_bodies_round_trip) {
  for (const char* file : {"ollaya-api-md__422-missing-state-and-one-level-score.json", "ollaya-api-md__422-state-truncated.json",
                           "ollaya-api-md__422-too-many-options.json"}) {
    SCOPED_TRACE(file);
    const json ex = example(file);
    auto e = error_from_json(ex["response"], ex["status"].get<int>());
    ASSERT_TRUE(e.has_value()) << e.error().message;
    EXPECT_EQ(e->status, 422);
    EXPECT_EQ(render_error(*e), render_json(ex["response"], false));
  }
  // Ollaya leaves out an empty detail; baton always sends it (spec §11.5).
  const json ex = example("ollaya-api-md__404-model-not-found.json");
  auto e = error_from_json(ex["response"], ex["status"].get<int>());
  ASSERT_TRUE(e.has_value());
  json expected = ex["response"];
  expected["detail"] = json::array();
  EXPECT_EQ(render_error(*e), render_json(expected, false));
}

TEST(golden_examples, foreign_envelopes_are_not_baton_errors) {
  // Cloudflare's {"result","success","errors","messages"} and /v1/models are other shapes.
  EXPECT_FALSE(error_from_json(example("neurolink-cloudflare-clef__401-envelope.json")["response"], 401));
  EXPECT_FALSE(response_from_json(example("ollaya-api-md__v1-models.json")["response"]));
}

}  // namespace
}  // namespace baton
