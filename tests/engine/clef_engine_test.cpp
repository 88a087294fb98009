// The clef engine end to end against Cloudflare's reference run on a tiny release
// (tests/data/vectors/clef-omni-tiny): ids, spans, logits and answers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <optional>

#include "core/answers.hpp"
#include "engine/clef/clef_engine.hpp"
#include "support/files.hpp"

namespace baton::clef {
namespace {

std::filesystem::path tiny_dir() { return test::data_dir() / "vectors/clef-omni-tiny"; }

// One thread: ctest runs the test binaries side by side on two cores, where idle OpenMP threads
// spinning between the tiny model's many small ops cost far more than they give.
constexpr int test_threads = 1;

struct record_case {
  json line;      // records.jsonl
  json expected;  // expected.jsonl
};

// The records with media (paths relative to the vectors' folder), or the text ones.
std::vector<record_case> record_cases(bool media) {
  std::ifstream records(tiny_dir() / "records.jsonl"), expected(tiny_dir() / "expected.jsonl");
  std::vector<record_case> out;
  std::string a, b;
  while (std::getline(records, a) && std::getline(expected, b)) {
    record_case c{test::parse(a), test::parse(b)};
    const json& r = c.line["request"];
    if ((r.contains("images") || r.contains("audio") || r.contains("videos")) != media) continue;
    out.push_back(std::move(c));
  }
  return out;
}
std::vector<record_case> text_cases() { return record_cases(false); }

class clef_engine_test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    clef_engine_options options;
    options.model_dir = tiny_dir() / "release";
    options.model_id = "clef-omni-tiny";
    options.model.threads = test_threads;
    options.media.sources.roots = {tiny_dir()};  // the records name media/… files
    engine_ = new clef_engine(options);
  }
  static void TearDownTestSuite() {
    delete engine_;
    engine_ = nullptr;
  }
  static clef_engine* engine_;
};
clef_engine* clef_engine_test::engine_ = nullptr;

// Requests as the API layer would hand them over (or its refusal).
result<request> to_request(const record_case& c, const request_limits& limits = request_limits::text_only()) {
  return request_from_json(json(c.line["request"]), limits, "clef-omni-tiny");
}

std::size_t max_length_of(const record_case& c) {
  return c.line.contains("max_length") ? c.line["max_length"].get<std::size_t>() : 64000;
}

std::string scientific(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2e", v);
  return text;
}

// Runs an accepted record alone and compares ids, spans, logits (within 1e-4) and the response.
void expect_reference_answer(clef_engine& engine, const record_case& c, const request& req, double& worst) {
  const json& want = c.expected;
  const std::size_t window = max_length_of(c);
  std::vector<std::optional<clef_trace>> traces;
  auto results = engine.decide({&req, 1}, {&window, 1}, &traces);
  ASSERT_TRUE(results[0]) << render_error(results[0].error());
  ASSERT_TRUE(traces[0]);
  const clef_trace& t = *traces[0];
  EXPECT_EQ(json(t.encoded.ids), want["input_ids"]);
  ASSERT_EQ(t.encoded.questions.size(), want["questions"].size());
  for (std::size_t q = 0; q < t.encoded.questions.size(); ++q) {
    const auto& eq = t.encoded.questions[q];
    const json& wq = want["questions"][q];
    EXPECT_EQ(eq.id, wq["id"].get<std::string>());
    EXPECT_EQ(static_cast<int>(eq.type), wq["type"].get<int>());
    EXPECT_EQ(json::array({eq.question.begin, eq.question.end}), wq["question_span"]);
    EXPECT_EQ(json(eq.option_ids), wq["option_ids"]);
    ASSERT_EQ(eq.options.size(), wq["option_spans"].size());
    ASSERT_EQ(t.logits[q].size(), wq["logits"].size());
    for (std::size_t k = 0; k < eq.options.size(); ++k) {
      EXPECT_EQ(json::array({eq.options[k].begin, eq.options[k].end}), wq["option_spans"][k]);
      const double d = std::abs(t.logits[q][k] - wq["logits"][k].get<double>());
      worst = std::max(worst, d);
      EXPECT_LT(d, 1e-4) << eq.id << " option " << k;
    }
  }
  if (want.contains("media")) {
    EXPECT_EQ(t.audio_in_video, want["media"]["use_audio_in_video"].get<bool>());
  }
  auto answered = make_response(req, *results[0], confidence_metric::p_max, "clef-omni-tiny");
  ASSERT_TRUE(answered);
  const json got = test::parse(render_response(*answered));
  EXPECT_EQ(got["answers"], want["response"]["answers"]);
  EXPECT_EQ(got["usage"]["input_tokens"], want["response"]["usage"]["input_tokens"]);
  EXPECT_EQ(got["usage"]["state_truncated"].get<bool>(), c.line["id"] == "truncated_state");
}

TEST_F(clef_engine_test, text_records_match_the_reference) {
  const auto cases = text_cases();
  ASSERT_EQ(cases.size(), 12u);
  double worst = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.line["id"].get<std::string>());
    const json& want = c.expected;
    auto req = to_request(c);
    if (!want["ok"].get<bool>()) {
      // The reference's ValueErrors: a bad type is refused by validation, before the engine; a
      // schema longer than the window by the encoder, with the reference's message.
      if (!req) {
        EXPECT_EQ(req.error().code, "INVALID_REQUEST");
        EXPECT_NE(render_error(req.error()).find(R"(["body","questions","a"])"), std::string::npos);
        EXPECT_NE(want["error"].get<std::string>().find("type must be"), std::string::npos);
        continue;
      }
      const std::size_t window = max_length_of(c);
      std::vector<std::optional<clef_trace>> traces;
      auto results = engine_->decide({&*req, 1}, {&window, 1}, &traces);
      ASSERT_FALSE(results[0]);
      EXPECT_EQ(results[0].error().code, "INPUT_TOO_LONG");
      EXPECT_EQ(results[0].error().message, want["error"].get<std::string>());
      continue;
    }
    ASSERT_TRUE(req) << render_error(req.error());
    expect_reference_answer(*engine_, c, *req, worst);
  }
  RecordProperty("worst_logit_difference", scientific(worst));
}

// images_basic (a 64x96 PNG), audio_16k (2.5 s WAV) and video_with_sound (H.264 + AAC, read with
// its soundtrack interleaved): decode, preprocess, both towers, placement, MRoPE and deepstack.
TEST_F(clef_engine_test, media_records_match_the_reference) {
  const auto media = record_cases(true);
  ASSERT_EQ(media.size(), 3u);
  EXPECT_GT(engine_->describe().limits.images.max_items, 0u);
  double worst = 0;
  for (const auto& c : media) {
    SCOPED_TRACE(c.line["id"].get<std::string>());
    auto req = to_request(c, engine_->describe().limits);
    ASSERT_TRUE(req) << render_error(req.error());
    expect_reference_answer(*engine_, c, *req, worst);
  }
  RecordProperty("worst_media_logit_difference", scientific(worst));
}

// The reference's decoded pixels and samples (media_tensors/) as raw items through the C++ API.
template <class T>
std::vector<T> tensor_values(const std::string& record, const std::string& name) {
  const safetensors_file f(tiny_dir() / "media_tensors" / (record + ".safetensors"));
  const tensor_view* v = f.find(name);
  if (v == nullptr) return {};
  std::vector<T> out(v->bytes / sizeof(T));
  std::memcpy(out.data(), v->data, v->bytes);
  return out;
}

const record_case& media_case(const std::vector<record_case>& all, const std::string& id) {
  for (const auto& c : all) {
    if (c.line["id"] == id) return c;
  }
  throw std::runtime_error("no record " + id);
}

// Decoded frames and samples handed over raw give the same logits as the files they came from.
TEST_F(clef_engine_test, raw_pixels_and_samples_equal_their_files) {
  const auto media = record_cases(true);
  for (const auto& [id, field] : {std::pair<std::string, std::string>{"image_basic", "images"},
                                  {"audio_16k", "audio"}, {"video_with_sound", "videos"}}) {
    SCOPED_TRACE(id);
    const record_case& c = media_case(media, id);
    auto req = to_request(c, engine_->describe().limits);
    ASSERT_TRUE(req);
    raw_media raw;
    if (field == "images") {
      raw.pixels = tensor_values<std::uint8_t>(id, "decoded.image.0");
      raw.frames = 1, raw.height = 64, raw.width = 96;
      req->images = {raw_item(std::move(raw))};
    } else if (field == "audio") {
      raw.audio = tensor_values<float>(id, "decoded.audio.0");
      req->audio = {raw_item(std::move(raw))};
    } else {
      raw.pixels = tensor_values<std::uint8_t>(id, "decoded.video.0");
      raw.frames = 4, raw.height = 352, raw.width = 384;
      raw.audio = tensor_values<float>(id, "decoded.video_audio.0");
      req->videos = {raw_item(std::move(raw))};
    }
    double worst = 0;
    expect_reference_answer(*engine_, c, *req, worst);
  }
}

// A request whose video has no soundtrack reads it as pictures only (no audio in video), and the
// placeholders say so.
TEST_F(clef_engine_test, a_silent_video_is_read_without_audio_in_video) {
  const auto media = record_cases(true);
  const record_case& c = media_case(media, "video_with_sound");
  auto req = to_request(c, engine_->describe().limits);
  ASSERT_TRUE(req);
  raw_media raw;
  raw.pixels = tensor_values<std::uint8_t>("video_with_sound", "decoded.video.0");
  raw.frames = 4, raw.height = 352, raw.width = 384;
  req->videos = {raw_item(std::move(raw))};
  std::vector<std::optional<clef_trace>> traces;
  const std::size_t window = 64000;
  auto results = engine_->decide({&*req, 1}, {&window, 1}, &traces);
  ASSERT_TRUE(results[0]) << render_error(results[0].error());
  EXPECT_FALSE(traces[0]->audio_in_video);
  ASSERT_EQ(traces[0]->media.size(), 1u);
  EXPECT_EQ(traces[0]->media[0].kind, "video");
  EXPECT_EQ(traces[0]->media[0].pads, 264);  // grid 2 x 22 x 24, merged 2 x 2
  EXPECT_EQ(results[0]->input_tokens, c.expected["num_tokens"].get<std::int64_t>() - 27 - 2);  // no soundtrack pads, no audio start/end
}

// Media that cannot be read fail the record alone, naming the item.
TEST_F(clef_engine_test, media_errors_name_the_item_and_spare_the_batch) {
  const auto media = record_cases(true);
  std::vector<request> batch;
  auto base = to_request(media_case(media, "image_basic"), engine_->describe().limits);
  ASSERT_TRUE(base);
  batch.push_back(*base);  // fine
  request missing = *base;
  missing.images.push_back(missing.images[0]);
  missing.images[1].data = "media/no_such_file.png";
  batch.push_back(missing);
  json corrupt_body = media_case(media, "image_basic").line["request"];
  corrupt_body["images"] = {"data:image/png;base64,bm90IGEgcG5nIGF0IGFsbA=="};  // "not a png at all"
  auto corrupt = request_from_json(std::move(corrupt_body), engine_->describe().limits, "clef-omni-tiny");
  ASSERT_TRUE(corrupt) << render_error(corrupt.error());
  batch.push_back(*corrupt);
  // Five images are one too many for Workers AI's limit: refused when the request is parsed.
  json five = media_case(media, "image_basic").line["request"];
  five["images"] = json::array({"a.png", "b.png", "c.png", "d.png", "e.png"});
  const auto too_many = request_from_json(std::move(five), engine_->describe().limits, "clef-omni-tiny");
  ASSERT_FALSE(too_many);
  EXPECT_EQ(too_many.error().status, 422);
  EXPECT_NE(render_error(too_many.error()).find(R"(["body","images"])"), std::string::npos);
  request silent = *base;
  raw_media empty_audio;
  silent.images.clear();
  silent.audio = {raw_item(std::move(empty_audio))};
  batch.push_back(silent);
  // Media control tokens in the request's own text would misplace the media: that record alone
  // is refused.
  request spoofed = *base;
  spoofed.state = "look: <|vision_start|><|image_pad|><|vision_end|>";
  batch.push_back(spoofed);
  const auto results = engine_->decide(batch);
  ASSERT_EQ(results.size(), 5u);
  ASSERT_FALSE(results[4]);
  EXPECT_EQ(results[4].error().code, "INVALID_REQUEST");
  EXPECT_NE(results[4].error().message.find("media control tokens"), std::string::npos);
  EXPECT_TRUE(results[0]) << render_error(results[0].error());
  ASSERT_FALSE(results[1]);
  EXPECT_EQ(results[1].error().code, "MEDIA_UNAVAILABLE");
  EXPECT_TRUE(results[1].error().message.starts_with("images[1]: ")) << results[1].error().message;
  ASSERT_FALSE(results[2]);
  EXPECT_EQ(results[2].error().status, 422);
  EXPECT_TRUE(results[2].error().message.starts_with("images[0]: ")) << results[2].error().message;
  ASSERT_FALSE(results[3]);
  EXPECT_EQ(results[3].error().status, 422);
  EXPECT_TRUE(results[3].error().message.starts_with("audio[0]: ")) << results[3].error().message;
}

// Audio the spectrogram cannot take is the request's fault (422, naming the item), not a 500
// "not a probability" from the NaN it would become: samples of 1e19 overflow float32 power.
TEST_F(clef_engine_test, audio_too_loud_or_too_short_is_refused_naming_the_item) {
  const auto media = record_cases(true);
  auto base = to_request(media_case(media, "image_basic"), engine_->describe().limits);
  ASSERT_TRUE(base);
  base->images.clear();
  request loud = *base, short_clip = *base;
  raw_media samples;
  samples.audio.assign(16000, 1e19f);
  loud.audio = {raw_item(std::move(samples))};
  raw_media few;
  few.audio.assign(100, 0.5f);
  short_clip.audio = {raw_item(std::move(few))};
  const auto results = engine_->decide(std::vector<request>{loud, short_clip});
  ASSERT_FALSE(results[0]);
  EXPECT_EQ(results[0].error().code, "INVALID_MEDIA");
  EXPECT_TRUE(results[0].error().message.starts_with("audio[0]: its samples are not finite")) << results[0].error().message;
  ASSERT_FALSE(results[1]);
  EXPECT_EQ(results[1].error().code, "INVALID_MEDIA");
  EXPECT_EQ(results[1].error().message, "audio[0]: shorter than 201 samples at 16 kHz, too short for a spectrogram");
}

TEST_F(clef_engine_test, a_batch_gives_each_record_its_alone_logits_and_answers) {
  std::vector<request> requests;
  std::vector<std::size_t> windows;
  for (const auto& c : text_cases()) {
    if (!c.expected["ok"].get<bool>()) continue;
    auto r = to_request(c);
    ASSERT_TRUE(r);
    requests.push_back(std::move(*r));
    windows.push_back(max_length_of(c));
  }
  ASSERT_EQ(requests.size(), 10u);
  std::vector<std::optional<clef_trace>> together;
  const auto batch = engine_->decide(requests, windows, &together);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    std::vector<std::optional<clef_trace>> alone;
    const auto one = engine_->decide({&requests[i], 1}, {&windows[i], 1}, &alone);
    ASSERT_TRUE(batch[i]);
    ASSERT_TRUE(one[0]);
    for (std::size_t q = 0; q < alone[0]->logits.size(); ++q) {
      for (std::size_t k = 0; k < alone[0]->logits[q].size(); ++k) {
        EXPECT_NEAR(together[i]->logits[q][k], alone[0]->logits[q][k], 1e-6);
      }
    }
    // The same answers; how many tokens each reused from the cache depends on what ran before.
    const auto a = make_response(requests[i], *batch[i], confidence_metric::p_max, "m");
    const auto b = make_response(requests[i], *one[0], confidence_metric::p_max, "m");
    std::string answers_a, answers_b;
    render_answers(*a, answers_a);
    render_answers(*b, answers_b);
    EXPECT_EQ(answers_a, answers_b);
    EXPECT_EQ(a->usage.input_tokens, b->usage.input_tokens);
  }
}

TEST_F(clef_engine_test, describes_itself_with_a_fingerprint_of_the_release) {
  const auto& d = engine_->describe();
  EXPECT_EQ(d.model_id, "clef-omni-tiny");
  EXPECT_EQ(d.fingerprint.rfind("sha256:", 0), 0u);
  EXPECT_EQ(d.fingerprint.size(), 7u + 64u);
  EXPECT_EQ(d.fingerprint, release_fingerprint(tiny_dir() / "release"));
  // The tiny release has both towers: Workers AI's item limits.
  EXPECT_EQ(d.limits.images.max_items, 4u);
  EXPECT_EQ(d.limits.audio.max_items, 4u);
  EXPECT_EQ(d.limits.videos.max_items, 2u);
}

// A Hugging Face cache snapshot is named by its revision: the repo's name is two folders up.
TEST(clef_engine_model_id, comes_from_the_hub_cache_layout_or_the_directory_name) {
  EXPECT_EQ(served_model_id("/hub/models--Cloudflare--clef-omni/snapshots/0db1cd2607d76a7bdb2a382f659e7b313079f84b"),
            "Cloudflare/clef-omni");
  EXPECT_EQ(served_model_id("/hub/models--Cloudflare--clef-omni/snapshots/0db1cd2/"), "Cloudflare/clef-omni");
  EXPECT_EQ(served_model_id("/hub/models--gpt2/snapshots/e7da7f2"), "gpt2");  // a repo without an owner
  EXPECT_EQ(served_model_id("/srv/models/clef-omni-v2"), "clef-omni-v2");
  EXPECT_EQ(served_model_id("/srv/models/clef-omni-v2/"), "clef-omni-v2");
  EXPECT_EQ(served_model_id("/srv/snapshots/0db1cd2"), "0db1cd2");  // not under models--…
  EXPECT_EQ(served_model_id("/srv/models--x/other/0db1cd2"), "0db1cd2");
  EXPECT_EQ(served_model_id("/"), "clef-omni");
}

// A model directory that is missing or is a file is named as the model directory, not as the
// tokenizer file the loader would have looked for next.
TEST(clef_engine_load, a_missing_or_file_model_directory_is_named) {
  const auto message = [](const std::filesystem::path& dir) {
    clef_engine_options o;
    o.model_dir = dir;
    try {
      clef_engine e(o);
    } catch (const load_error& e) {
      return std::string(e.what());
    }
    return std::string("loaded");
  };
  EXPECT_EQ(message("/nonexistent"), "model directory /nonexistent: does not exist");
  const auto file = tiny_dir() / "release/config.json";
  EXPECT_EQ(message(file), "model directory " + file.string() + ": is not a directory");
  EXPECT_THROW(clef_encoder("/nonexistent"), load_error);
  try {
    clef_encoder encoder(file);
    ADD_FAILURE() << "loaded";
  } catch (const load_error& e) {
    EXPECT_EQ(std::string(e.what()), "model directory " + file.string() + ": is not a directory");
  }
  // The release loader says the same.
  try {
    release r("/nonexistent/release");
    ADD_FAILURE() << "loaded";
  } catch (const load_error& e) {
    EXPECT_EQ(std::string(e.what()), "model directory /nonexistent/release: does not exist");
  }
}

TEST(clef_engine_bf16, answers_every_text_record_close_to_fp32) {
  clef_engine_options options;
  options.model_dir = tiny_dir() / "release";
  options.model.dtype = compute_dtype::bf16;
  options.model.threads = test_threads;
  clef_engine engine(options);
  for (const auto& c : text_cases()) {
    if (!c.expected["ok"].get<bool>()) continue;
    auto req = to_request(c);
    ASSERT_TRUE(req);
    const std::size_t window = max_length_of(c);
    std::vector<std::optional<clef_trace>> traces;
    auto results = engine.decide({&*req, 1}, {&window, 1}, &traces);
    ASSERT_TRUE(results[0]) << render_error(results[0].error());
    for (std::size_t q = 0; q < traces[0]->logits.size(); ++q) {
      for (std::size_t k = 0; k < traces[0]->logits[q].size(); ++k) {
        // bf16 keeps 8 bits of mantissa; the tiny model's logits are O(1).
        EXPECT_NEAR(traces[0]->logits[q][k], c.expected["questions"][q]["logits"][k].get<double>(), 0.1);
      }
    }
  }
}

}  // namespace
}  // namespace baton::clef

namespace baton::clef {
namespace {

// A budget of one byte forces 16-row chunks everywhere: attention over the longer records runs in
// many chunks (each with its own causal mask), and so do the head's cross-attentions.
TEST(clef_engine_chunks, small_score_budgets_give_the_same_logits) {
  clef_engine_options options;
  options.model_dir = test::data_dir() / "vectors/clef-omni-tiny/release";
  options.model.threads = 1;
  options.media.sources.roots = {options.model_dir.parent_path()};
  clef_engine whole(options);
  options.model.score_budget_bytes = 1;  // 16-row chunks in the thinker, the head and the vision
  clef_engine chunked(options);          // tower; one audio window and one chunk at a time
  std::ifstream records(options.model_dir.parent_path() / "records.jsonl");
  std::size_t compared = 0;
  for (std::string line; std::getline(records, line);) {
    const json record = test::parse(line);
    auto req = request_from_json(json(record["request"]), whole.describe().limits, "m");
    if (!req) continue;
    std::vector<std::optional<clef_trace>> a, b;
    const auto ra = whole.decide({&*req, 1}, {}, &a);
    const auto rb = chunked.decide({&*req, 1}, {}, &b);
    ASSERT_EQ(static_cast<bool>(ra[0]), static_cast<bool>(rb[0]));
    if (!ra[0]) continue;
    ASSERT_GT(a[0]->encoded.ids.size(), 32u);  // several chunks
    for (std::size_t q = 0; q < a[0]->logits.size(); ++q) {
      for (std::size_t k = 0; k < a[0]->logits[q].size(); ++k) {
        EXPECT_NEAR(a[0]->logits[q][k], b[0]->logits[q][k], 1e-5);
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 50u);
}

}  // namespace
}  // namespace baton::clef
