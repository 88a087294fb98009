#include <gtest/gtest.h>

#include <array>

#include "engine/keyword/keyword_engine.hpp"
#include "tools/schema_compiler.hpp"

namespace baton::tools {
namespace {

const char* support = R"(tools:
  - id: refund_payment
    description: Refund a duplicate or wrong charge to the customer's card
    risk: medium
    parameters:
      reason: {type: choice, instructions: "Why?", values: {duplicate: "Charged twice", fraud: "Fraud"}}
      notify: {type: boolean, instructions: "Notify the customer?"}
      note:   {type: text, value: "static text"}
  - id: reset_password
    description: Send the customer a password reset link
  - id: search_help_center
    description: Search the help center for an article
    parameters:
      query: {type: text}
finish: {description: "Nothing left to do"}
questions:
  urgency: {type: score, instructions: "How urgent?", criteria: ["Can wait", "Today", "Now"]}
  needs_person: {type: noul, instructions: "Does this need a person?"}
)";

registry load(std::string_view text) {
  auto r = parse_registry(text, "tools.yaml", request_limits::text_only());
  EXPECT_TRUE(r) << (r ? "" : r.error().message);
  return r ? std::move(*r) : registry{};
}

request compile_ok(const registry& r, const json& history) {
  auto req = compile_schema(r, history, request_limits::text_only());
  EXPECT_TRUE(req) << (req ? "" : render_error(req.error()));
  return req ? std::move(*req) : request{};
}

const json history = json::parse(R"([
  {"role": "user", "content": "I was charged twice for my March invoice, please refund the duplicate charge."},
  {"role": "assistant", "content": "Let me look at your payments."}
])");

TEST(schema_compiler, questions_in_order) {
  const request req = compile_ok(load(support), history);
  EXPECT_EQ(req.state, history);
  ASSERT_EQ(req.questions.size(), 5u);
  const std::vector<std::string> ids = {"tool", "refund_payment.reason", "refund_payment.notify", "urgency",
                                        "needs_person"};
  for (std::size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(req.questions[i].id, ids[i]);

  const question& tool = req.questions[0];
  EXPECT_EQ(tool.type, question_type::choice);
  ASSERT_EQ(tool.option_count(), 4u);
  EXPECT_EQ(tool.option_id(0), "refund_payment");
  EXPECT_EQ(tool.option_id(1), "reset_password");
  EXPECT_EQ(tool.option_id(2), "search_help_center");
  EXPECT_EQ(tool.option_id(3), "finish");
  EXPECT_EQ(tool.option_description(0), "Refund a duplicate or wrong charge to the customer's card");
  EXPECT_EQ(tool.option_description(3), "Nothing left to do");

  const question& reason = req.questions[1];
  EXPECT_EQ(reason.type, question_type::choice);
  EXPECT_EQ(reason.instructions, "Why?");
  EXPECT_EQ(reason.criteria.dump(), R"({"duplicate":"Charged twice","fraud":"Fraud"})");

  EXPECT_EQ(req.questions[2].type, question_type::noul);
  EXPECT_EQ(req.questions[2].instructions, "Notify the customer?");
  EXPECT_EQ(req.questions[3].type, question_type::score);
  EXPECT_EQ(req.questions[3].option_count(), 3u);
  EXPECT_EQ(req.questions[4].type, question_type::noul);
}

TEST(schema_compiler, no_finish_option_unless_configured) {
  const registry r = load("tools:\n  - {id: a, description: A}\n  - {id: b, description: B}\n");
  const request req = compile_ok(r, json::array());
  ASSERT_EQ(req.questions.size(), 1u);
  EXPECT_EQ(req.questions[0].option_count(), 2u);
  EXPECT_EQ(req.questions[0].option_id(1), "b");
}

TEST(schema_compiler, the_request_passes_validation_as_text) {
  // What the compiler builds is a valid wire request: it parses again to the same questions.
  const request req = compile_ok(load(support), history);
  json body = {{"state", req.state}, {"questions", json::object()}};
  for (const question& q : req.questions) {
    body["questions"][q.id] = {{"type", to_string(q.type)}, {"instructions", q.instructions}};
    if (!q.criteria.is_null()) body["questions"][q.id]["criteria"] = q.criteria;
  }
  auto again = parse_request(render_json(body, false), request_limits::text_only());
  ASSERT_TRUE(again) << render_error(again.error());
  EXPECT_EQ(schema_hash(*again), schema_hash(req));
}

TEST(schema_compiler, refuses_a_history_that_is_not_an_array) {
  auto req = compile_schema(load(support), json::parse(R"({"role": "user"})"), request_limits::text_only());
  ASSERT_FALSE(req);
  EXPECT_EQ(req.error().status, 422);
  EXPECT_EQ(req.error().code, "INVALID_HISTORY");
}

TEST(schema_compiler, engine_limits_apply) {
  request_limits tight = request_limits::text_only();
  tight.max_questions = 4;
  auto req = compile_schema(load(support), history, tight);
  ASSERT_FALSE(req);
  EXPECT_EQ(req.error().code, "INVALID_REQUEST");
}

TEST(schema_compiler, schema_hash_is_deterministic_and_ignores_the_state) {
  const registry r = load(support);
  const std::string h = schema_hash(compile_ok(r, history));
  EXPECT_EQ(h.rfind("sha256:", 0), 0u);
  EXPECT_EQ(schema_hash(compile_ok(load(support), history)), h);
  EXPECT_EQ(schema_hash(compile_ok(r, json::array())), h);

  std::string changed = support;
  changed.replace(changed.find("Send the customer a password reset link"), 39, "Send the customer a password reset code");
  EXPECT_NE(schema_hash(compile_ok(load(changed), history)), h);
  std::string instructions = support;
  instructions.replace(instructions.find("\"How urgent?\""), 13, "\"How urgent!\"");
  EXPECT_NE(schema_hash(compile_ok(load(instructions), history)), h);
}

TEST(schema_compiler, rendered_history_grows_by_appending) {
  const registry r = load(support);
  json events = json::array();
  std::string previous = render_json(compile_ok(r, events).state, true);
  const json more = json::parse(R"([
    {"role": "user", "content": "Hi, my card was charged twice"},
    {"role": "tool", "name": "search_help_center", "content": {"z": 1, "a": [1, 2.5, null]}},
    {"content": "Refunded", "role": "assistant"}
  ])");
  for (const json& event : more) {
    events.push_back(event);
    const std::string rendered = render_json(compile_ok(r, events).state, true);
    ASSERT_EQ(previous.back(), ']');
    EXPECT_EQ(rendered.compare(0, previous.size() - 1, previous, 0, previous.size() - 1), 0)
        << previous << "\n" << rendered;
    EXPECT_GT(rendered.size(), previous.size());
    previous = rendered;
  }
}

TEST(schema_compiler, the_keyword_engine_answers_a_compiled_request) {
  keyword_engine engine;
  const request req = compile_ok(load(support), history);
  auto decisions = engine.decide(std::span<const request>(&req, 1));
  ASSERT_EQ(decisions.size(), 1u);
  ASSERT_TRUE(decisions[0]);
  const auto& tool = decisions[0]->probabilities.at(0);
  ASSERT_EQ(tool.size(), 4u);
  const auto best = std::max_element(tool.begin(), tool.end()) - tool.begin();
  EXPECT_EQ(req.questions[0].option_id(best), "refund_payment");

  auto reset = compile_ok(load(support), json::parse(R"([{"role": "user",
      "content": "I forgot my password and cannot log in, please send a reset link"}])"));
  auto other = engine.decide(std::span<const request>(&reset, 1));
  const auto& p = other[0]->probabilities.at(0);
  EXPECT_EQ(reset.questions[0].option_id(std::max_element(p.begin(), p.end()) - p.begin()), "reset_password");
}

TEST(schema_compiler, the_example_registry_compiles_for_the_keyword_engine) {
  keyword_engine engine;
  auto r = load_registry(BATON_SOURCE_DIR "/config/tools.yaml", engine.describe().limits);
  ASSERT_TRUE(r) << r.error().message;
  auto req = compile_schema(*r, history, engine.describe().limits);
  ASSERT_TRUE(req) << render_error(req.error());
  EXPECT_EQ(req->questions.size(), 5u);  // tool, send_payment.method, send_payment.notify, urgency, needs_person
  EXPECT_EQ(req->questions[0].option_count(), 6u);
}

TEST(schema_compiler, extra_questions_come_last_and_may_not_take_registry_ids) {
  const registry r = load(support);
  const json extra = json::parse(R"({"language": {"type": "choice", "instructions": "Which language?",
                                                  "criteria": {"en": "English", "de": "German"}}})");
  auto req = compile_schema(r, history, request_limits::text_only(), extra);
  ASSERT_TRUE(req) << render_error(req.error());
  ASSERT_EQ(req->questions.size(), 6u);
  EXPECT_EQ(req->questions.back().id, "language");
  EXPECT_NE(schema_hash(*req), schema_hash(compile_ok(r, history)));

  for (const char* taken : {"tool", "refund_payment.reason", "urgency"}) {
    json clash = json::object();
    clash[taken] = {{"type", "noul"}, {"instructions", "Again?"}};
    auto refused = compile_schema(r, history, request_limits::text_only(), clash);
    ASSERT_FALSE(refused) << taken;
    EXPECT_EQ(refused.error().code, "QUESTION_CONFLICT") << taken;
  }
  auto not_object = compile_schema(r, history, request_limits::text_only(), json::array());
  ASSERT_FALSE(not_object);
  EXPECT_EQ(not_object.error().code, "INVALID_REQUEST");
}

// A context window of `window` tokens over events {"n": index, "tokens": t}: what an engine's
// state_overflow would say, counting its calls.
struct token_window {
  std::size_t window = 0;
  int calls = 0;
  result<std::size_t> operator()(const request& r) {
    ++calls;
    std::size_t tokens = 0;
    for (const json& e : r.state) tokens += e["tokens"].get<std::size_t>();
    return result<std::size_t>(boost::system::in_place_value, tokens > window ? tokens - window : 0);
  }
};

request history_of(std::size_t events, std::size_t tokens_each = 10) {
  request r;
  r.state = json::array();
  for (std::size_t i = 0; i < events; ++i) r.state.push_back({{"n", i}, {"tokens", tokens_each}});
  return r;
}

std::vector<std::size_t> numbers(const json& state) {
  std::vector<std::size_t> out;
  for (const json& e : state) out.push_back(e["n"].get<std::size_t>());
  return out;
}

// The first `keep` then `from` .. `to` (inclusive).
std::vector<std::size_t> kept(std::size_t keep, std::size_t from, std::size_t to) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < keep; ++i) out.push_back(i);
  for (std::size_t i = from; i <= to; ++i) out.push_back(i);
  return out;
}

TEST(drop_oldest_events, a_state_that_fits_is_sent_whole_after_one_question) {
  request r = history_of(10);
  token_window w{100};
  auto d = drop_oldest_events(r, {}, std::ref(w));
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_EQ(d->count(), 0u);
  EXPECT_EQ(w.calls, 1);
  EXPECT_EQ(r.state, history_of(10).state);

  request text;
  text.state = "a text state has no events to drop";
  token_window never{0};
  auto t = drop_oldest_events(text, {}, [&](const request&) -> result<std::size_t> {
    ++never.calls;
    return result<std::size_t>(boost::system::in_place_value, 1000);
  });
  ASSERT_TRUE(t);
  EXPECT_EQ(t->count(), 0u);
  EXPECT_EQ(never.calls, 0);
  EXPECT_EQ(text.state, "a text state has no events to drop");
}

TEST(drop_oldest_events, keeps_the_first_events_and_the_newest_and_drops_whole_chunks) {
  // 45 events of 10 tokens in a window of 20 events: the smallest cut that fits is 25 events.
  // The chunk is a quarter of the droppable events that then fit (18 with keep_first 1, 19 with
  // 0, 16 with 3: 5, 5 and 4), rounded down to a power of two: 4, so 28 are dropped.
  for (const std::size_t keep : {std::size_t(0), std::size_t(1), std::size_t(3)}) {
    SCOPED_TRACE("keep_first " + std::to_string(keep));
    request r = history_of(45);
    token_window w{200};
    auto d = drop_oldest_events(r, {keep, 0.25}, std::ref(w));
    ASSERT_TRUE(d) << d.error().message;
    EXPECT_EQ(d->count(), 28u);
    EXPECT_EQ(numbers(r.state), kept(keep, keep + 28, 44));
    EXPECT_EQ(*w(r), 0u);
    EXPECT_LE(w.calls, 9);  // 1 + 1 + log2(44) bisections + the check above

    restore_events(r.state, std::move(*d));
    EXPECT_EQ(r.state, history_of(45).state);
  }
}

// An agent turn's request refers to its session's history: the same cut is made by skipping the
// events, the history is left as it is, and the engine reads the same state as from a held copy.
TEST(drop_oldest_events, a_history_the_request_refers_to_is_read_without_the_dropped_events_and_left_as_it_is) {
  const json history = history_of(45).state;
  request viewed;
  viewed.history.events = &history;
  std::size_t calls = 0;
  auto measure = [&](const request& r) -> result<std::size_t> {
    ++calls;
    std::size_t tokens = 0;
    r.history.for_each([&](const json& e) { tokens += e["tokens"].get<std::size_t>(); });
    return result<std::size_t>(boost::system::in_place_value, tokens > 200 ? tokens - 200 : 0);
  };
  auto d = drop_oldest_events(viewed, {1, 0.25}, measure);
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_EQ(d->count(), 28u);
  EXPECT_TRUE(d->events.empty());
  EXPECT_EQ(viewed.history.size(), 17u);
  EXPECT_EQ(*measure(viewed), 0u);
  EXPECT_EQ(history, history_of(45).state);

  request held = history_of(45);
  token_window w{200};
  ASSERT_TRUE(drop_oldest_events(held, {1, 0.25}, std::ref(w)));
  std::string from_view, from_held;
  render_state(viewed, from_view, false);
  render_state(held, from_held, false);
  EXPECT_EQ(from_view, from_held);
  std::string scratch;
  EXPECT_EQ(state_text(viewed, scratch), render_json(held.state, true));
}

TEST(drop_oldest_events, the_fraction_sizes_the_chunk) {
  // As above with keep_first 1: 18 droppable events fit after the smallest cut (25).
  auto dropped = [](double fraction) {
    request r = history_of(45);
    token_window w{200};
    auto d = drop_oldest_events(r, {1, fraction}, std::ref(w));
    EXPECT_TRUE(d);
    return d ? d->count() : 0;
  };
  EXPECT_EQ(dropped(1.0), 32u);    // chunk 16 (18 rounded down)
  EXPECT_EQ(dropped(0.5), 32u);    // chunk 8 (9)
  EXPECT_EQ(dropped(0.25), 28u);   // chunk 4 (5)
  EXPECT_EQ(dropped(0.01), 25u);   // chunk 1: just what does not fit
}

TEST(drop_oldest_events, when_even_the_kept_events_overflow_the_rest_is_dropped_and_the_engine_cuts) {
  request r = history_of(12);
  token_window w{35};  // the first 3 and the newest are 40 tokens
  auto d = drop_oldest_events(r, {3, 0.25}, std::ref(w));
  ASSERT_TRUE(d);
  EXPECT_EQ(d->count(), 8u);
  EXPECT_EQ(numbers(r.state), kept(3, 11, 11));
  EXPECT_GT(*w(r), 0u);

  request small = history_of(4);
  auto none = drop_oldest_events(small, {3, 0.25}, std::ref(w));  // nothing between the first 3 and the newest
  ASSERT_TRUE(none);
  EXPECT_EQ(none->count(), 0u);
  EXPECT_EQ(small.state, history_of(4).state);
}

TEST(drop_oldest_events, a_growing_history_keeps_its_cut_for_a_chunk_of_turns) {
  // One event a turn, of 5 to 15 tokens, in a window of 1000: what is sent keeps its start (so a
  // prefix cache hits) until the window is full again, then a whole chunk more is dropped. Cut
  // points computed from the history's length alone (a quarter of every droppable event) would
  // move every turn.
  request r;
  r.state = json::array();
  std::size_t previous_cut = 0, changes = 0, overflowing = 0;
  std::string previous_sent;
  for (std::size_t i = 0; i < 600; ++i) {
    r.state.push_back({{"n", i}, {"tokens", 5 + (i * 7) % 11}});
    token_window w{1000};
    auto d = drop_oldest_events(r, {1, 0.25}, std::ref(w));
    ASSERT_TRUE(d) << i;
    const std::size_t cut = d->count();
    ASSERT_EQ(*w(r), 0u) << i;
    ASSERT_EQ(numbers(r.state), kept(1, 1 + cut, i)) << i;
    ASSERT_GE(cut, previous_cut) << i;
    const std::string sent = render_json(r.state, false);
    if (cut != previous_cut) {
      ++changes;
      EXPECT_GE(cut - previous_cut, 16u) << "turn " << i << " dropped " << cut - previous_cut << " more events";
    } else if (!previous_sent.empty()) {
      EXPECT_EQ(sent.compare(0, previous_sent.size() - 1, previous_sent, 0, previous_sent.size() - 1), 0) << i;
    }
    if (cut > 0) ++overflowing;
    previous_cut = cut;
    previous_sent = sent;
    restore_events(r.state, std::move(*d));
  }
  EXPECT_EQ(overflowing, 500u);
  EXPECT_LE(changes, 32u);  // a chunk of 16 every 16 turns or so
}

TEST(drop_oldest_events, an_overflow_error_comes_back_with_the_state_unchanged) {
  for (const int failing_call : {1, 2, 4}) {
    SCOPED_TRACE("the call that fails: " + std::to_string(failing_call));
    request r = history_of(45);
    token_window w{200};
    auto d = drop_oldest_events(r, {}, [&](const request& q) -> result<std::size_t> {
      if (w.calls + 1 == failing_call) return make_error(422, "TOO_MANY_OPTIONS", "the schema alone is over the window");
      return w(q);
    });
    ASSERT_FALSE(d);
    EXPECT_EQ(d.error().code, "TOO_MANY_OPTIONS");
    EXPECT_EQ(r.state, history_of(45).state);
  }
}

// A session's media: `spec` is one letter per item (i image, a audio, v video), each on its own
// event; inline items of `bytes` decoded bytes each (0: a path).
std::vector<history_item> held(std::string_view spec, std::size_t bytes = 0) {
  std::vector<history_item> out;
  std::array<std::size_t, 3> count{};
  for (std::size_t e = 0; e < spec.size(); ++e) {
    const media_kind k = spec[e] == 'i' ? media_kind::image : spec[e] == 'a' ? media_kind::audio : media_kind::video;
    media_item m;
    if (bytes) {
      m.source = media_source::inline_base64;
      m.mime = k == media_kind::image ? "image/png" : k == media_kind::audio ? "audio/wav" : "video/mp4";
      m.data = std::string(bytes / 3 * 4, 'A');
      m.decoded_bytes = bytes;
    } else {
      m.source = media_source::path;
    }
    history_item h = make_history_item(k, e, 0, std::move(m));
    h.number = ++count[std::size_t(k)];
    if (!bytes) h.item.data = placeholder(k, h.number) + ".bin";
    out.push_back(std::move(h));
  }
  return out;
}

std::vector<std::string> paths(const std::vector<media_item>& items) {
  std::vector<std::string> out;
  for (const media_item& m : items) out.push_back(m.data);
  return out;
}

TEST(attach_media, the_newest_items_of_a_kind_go_within_its_count) {
  request req;
  const std::vector<history_item> media = held("iaiiviiiv");
  const attached_media a = attach_media(req, media, request_limits{}, dropped_events{});
  // 6 images, 4 go: the newest. Audio and videos go whole.
  EXPECT_EQ(paths(req.images), (std::vector<std::string>{"image 3.bin", "image 4.bin", "image 5.bin", "image 6.bin"}));
  EXPECT_EQ(paths(req.audio), (std::vector<std::string>{"audio 1.bin"}));
  EXPECT_EQ(paths(req.videos), (std::vector<std::string>{"video 1.bin", "video 2.bin"}));
  EXPECT_EQ(a.left_out, 2u);
  EXPECT_EQ(a.sent, (std::vector<std::size_t>{3, 5, 6, 7, 1, 4, 8}));  // in the request's order
  EXPECT_TRUE(check_media_limits(req, request_limits{}));

  // A second attach replaces what the request had.
  request_limits two;
  two.images.max_items = 2;
  EXPECT_EQ(attach_media(req, media, two, dropped_events{}).left_out, 4u);
  EXPECT_EQ(paths(req.images), (std::vector<std::string>{"image 5.bin", "image 6.bin"}));
}

TEST(attach_media, the_oldest_go_first_past_the_byte_totals) {
  request req;
  request_limits limits;
  limits.images.max_items = 10;
  limits.max_image_bytes_total = 9;        // three images of 3 bytes
  limits.max_audio_video_bytes_total = 6;  // two clips or videos
  const attached_media a = attach_media(req, held("iiiiavav", 3), limits, dropped_events{});
  EXPECT_EQ(req.images.size(), 3u);
  EXPECT_EQ(a.sent.front(), 1u);  // the first image is left out
  // Of audio 1, video 1, audio 2, video 2 (events 4 to 7), the two newest.
  ASSERT_EQ(req.audio.size(), 1u);
  ASSERT_EQ(req.videos.size(), 1u);
  EXPECT_EQ(a.sent, (std::vector<std::size_t>{1, 2, 3, 6, 7}));
  EXPECT_EQ(a.left_out, 3u);
  EXPECT_TRUE(check_media_limits(req, limits));
}

TEST(attach_media, items_of_dropped_events_go_with_them) {
  request req;
  const std::vector<history_item> media = held("iiiii");
  dropped_events dropped;
  dropped.at = 1;
  dropped.events = {json::object(), json::object(), json::object()};  // events 1, 2 and 3
  const attached_media a = attach_media(req, media, request_limits{}, dropped);
  EXPECT_EQ(paths(req.images), (std::vector<std::string>{"image 1.bin", "image 5.bin"}));
  EXPECT_EQ(a.left_out, 3u);
}

// A kind the engine does not read goes whole, so that the request is refused as a SystemOne
// request with it is.
TEST(attach_media, a_kind_the_engine_does_not_read_goes_whole_to_be_refused) {
  request req;
  const attached_media a = attach_media(req, held("iiiiii"), request_limits::text_only(), dropped_events{});
  EXPECT_EQ(req.images.size(), 6u);
  EXPECT_EQ(a.left_out, 0u);
  const auto refused = check_media_limits(req, request_limits::text_only());
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message, "images: this model does not read images");
}

TEST(history_media, placeholders_and_what_the_log_records) {
  EXPECT_EQ(placeholder(media_kind::image, 3), "image 3");
  EXPECT_EQ(placeholder(media_kind::audio, 1), "audio 1");
  EXPECT_EQ(placeholder(media_kind::video, 12), "video 12");
  EXPECT_EQ(kind_of_field("videos"), media_kind::video);
  EXPECT_FALSE(kind_of_field("image"));

  media_item png;
  png.source = media_source::inline_base64;
  png.mime = "image/png";
  png.data = "data:image/png;base64,YWJj";  // "abc"
  png.payload_offset = 22;
  png.decoded_bytes = 3;
  history_item h = make_history_item(media_kind::image, 4, 1, png);
  h.number = 2;
  EXPECT_EQ(logged_item(h), json::parse(R"({"field":"images","number":2,"event":4,"source":"inline","content_type":"image/png",)"
                                        R"("bytes":3,"sha256":"sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"})"));
  EXPECT_EQ(held_bytes(h), png.data.size());
  png.data = "data:image/png;base64,Y*Jj";  // not base64: no digest (the engine refuses it)
  EXPECT_TRUE(logged_item(make_history_item(media_kind::image, 0, 0, png))["sha256"].is_null());
  media_item path;
  path.source = media_source::path;
  path.data = "shots/a.png";
  EXPECT_EQ(logged_item(make_history_item(media_kind::image, 0, 0, path)),
            json::parse(R"({"field":"images","number":0,"event":0,"source":"path","path":"shots/a.png"})"));
}

}  // namespace
}  // namespace baton::tools

namespace baton::tools {
namespace {

// A registry of `groups` groups of `per_group` tools each (one parameter choice on the first tool
// of each), with finish and a global question: what two-stage routing is for.
std::string grouped_registry(int groups, int per_group) {
  std::string y = "tools:\n";
  for (int g = 0; g < groups; ++g) {
    for (int t = 0; t < per_group; ++t) {
      y += "  - {id: g" + std::to_string(g) + ".t" + std::to_string(t) + ", group: g" + std::to_string(g) +
           ", description: \"Tool " + std::to_string(t) + " of service " + std::to_string(g) + "\"";
      if (t == 0) y += ", parameters: {mode: {type: choice, instructions: \"Which mode?\", values: {fast: Fast, safe: Safe}}}";
      y += "}\n";
    }
  }
  return y + "finish: {description: Nothing more to do}\nquestions:\n  needs_person: {type: noul, instructions: \"A person?\"}\n";
}

// 1,000 tools are too many for one choice (255) but load as 20 groups of 50.
TEST(compile_stages, a_registry_too_large_for_one_question_loads_in_two_stages) {
  const registry r = load(grouped_registry(20, 50));
  ASSERT_EQ(r.tools.size(), 1000u);
  EXPECT_FALSE(compile_questions(r, request_limits::text_only()));
  auto s = compile_stages(r, request_limits::text_only());
  ASSERT_TRUE(s) << s.error().message;
  ASSERT_EQ(s->groups.size(), 20u);
  EXPECT_EQ(s->groups[3], "g3");
  // The first stage: the groups and finish, then the global question.
  ASSERT_EQ(s->first.questions.size(), 2u);
  EXPECT_EQ(s->first.questions[0].option_count(), 21u);
  EXPECT_EQ(s->first.questions[1].id, "needs_person");
  // Each second stage: the group's tools, then their parameter questions.
  const request& g3 = s->second.at("g3");
  ASSERT_EQ(g3.questions.size(), 2u);
  EXPECT_EQ(g3.questions[0].option_count(), 50u);
  EXPECT_EQ(g3.questions[0].option_id(7), "g3.t7");
  EXPECT_EQ(g3.questions[1].id, "g3.t0.mode");
  // Too large even so: groups of 300 tools.
  auto bad = parse_registry(grouped_registry(2, 300), "tools.yaml", request_limits::text_only());
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("in two stages (by group): the second stage of group `g0`"), std::string::npos)
      << bad.error().message;
  // One group of too many is not split: the first stage would ask nothing.
  auto one = parse_registry(grouped_registry(1, 300), "tools.yaml", request_limits::text_only());
  ASSERT_FALSE(one);
  EXPECT_EQ(one.error().message, "tools.yaml:1: the tool choice has 301 options, over the engine's limit of 255");
}

TEST(compile_stages, merged_answers_give_the_tool_its_probability_in_both_stages) {
  const registry r = load(grouped_registry(3, 2) + "");
  const staged_questions s = compile_stages(r, request_limits::text_only()).value();
  response first;
  first.model = "m";
  first.usage.input_tokens = 100;
  first.answers.emplace_back("tool", choice_answer{"g1", 0, {{"g0", 0.1}, {"g1", 0.6}, {"g2", 0.2}, {"finish", 0.1}}});
  first.answers.emplace_back("needs_person", noul_answer{0.2});
  response second;
  second.usage.input_tokens = 100;
  second.usage.cached_tokens = 90;
  second.answers.emplace_back("tool", choice_answer{"g1.t1", 0, {{"g1.t0", 0.25}, {"g1.t1", 0.75}}});
  second.answers.emplace_back("g1.t0.mode", choice_answer{"safe", 0, {{"fast", 0.4}, {"safe", 0.6}}});
  const response m = merge_stages(s, first, "g1", &second);
  const auto& tool = std::get<choice_answer>(*find_answer(m, "tool"));
  EXPECT_EQ(tool.choice, "g1.t1");
  EXPECT_DOUBLE_EQ(tool.confidence, 0.45);
  const probability_list expected = {{"g1.t0", 0.15}, {"g1.t1", 0.45}, {"group:g0", 0.1}, {"group:g2", 0.2}, {"finish", 0.1}};
  ASSERT_EQ(tool.probabilities.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(tool.probabilities[i].first, expected[i].first);
    EXPECT_NEAR(tool.probabilities[i].second, expected[i].second, 1e-12);
  }
  EXPECT_NE(find_answer(m, "needs_person"), nullptr);
  EXPECT_NE(find_answer(m, "g1.t0.mode"), nullptr);
  EXPECT_EQ(m.usage.input_tokens, 200);
  EXPECT_EQ(m.usage.cached_tokens, 90);
  // Finish won the first stage: its answer, the groups named as groups.
  const response ended = merge_stages(s, first, "", nullptr);
  const auto& f = std::get<choice_answer>(*find_answer(ended, "tool"));
  EXPECT_EQ(f.probabilities[1].first, "group:g1");
  EXPECT_EQ(f.probabilities[3].first, "finish");
}

// A group of one tool asks only that tool's parameters in its second stage (none: no second stage);
// a registry of one group is not split, however many tools it has.
TEST(compile_stages, a_group_of_one_tool_and_the_rule_for_splitting) {
  const registry r = load(R"(tools:
  - {id: a.one, group: a, description: One}
  - {id: a.two, group: a, description: Two}
  - {id: b.only, group: b, description: Only, parameters: {loud: {type: boolean, instructions: "Loud?"}}}
  - {id: c.only, group: c, description: Plain}
)");
  const staged_questions s = compile_stages(r, request_limits::text_only()).value();
  ASSERT_TRUE(s.second.contains("b"));
  ASSERT_EQ(s.second.at("b").questions.size(), 1u);
  EXPECT_EQ(s.second.at("b").questions[0].id, "b.only.loud");
  EXPECT_FALSE(s.second.contains("c"));
  EXPECT_TRUE(routed_in_two_stages(r, 3, request_limits::text_only()));
  EXPECT_FALSE(routed_in_two_stages(r, 4, request_limits::text_only()));
  const registry one_group = load(grouped_registry(1, 70));
  EXPECT_FALSE(routed_in_two_stages(one_group, 64, request_limits::text_only()));
  // An MCP tool's group is its server: its registry's hash does not change for it.
  registry mcp = r;
  mcp.tools[0].executor = {{"type", "mcp"}, {"server", "a"}};
  registry plain = mcp;
  plain.tools[0].group.clear();
  EXPECT_EQ(mcp.canonical_json(), plain.canonical_json());
}

}  // namespace
}  // namespace baton::tools
