// Media in agent turns (issue 21) end to end: an event's images, audio and videos reach the
// engine as the request's media while the history names them "image N"; the limits are the
// engine's (the oldest items left out past them, a kind it does not read refused as the SystemOne
// API refuses it); the state hash and the log's `media` column tell turns apart by their media;
// `baton replay --engine` does not decide such rows again without their media.
#include <gtest/gtest.h>

#include "core/sha256.hpp"
#include "support/http_client.hpp"
#include "support/server_fixture.hpp"

namespace baton {
namespace {

using namespace test_server;
using test::http_client;

const std::string png_a = "data:image/png;base64,iVBORw0KGgoAAAA=";
const std::string png_b = "data:image/png;base64,iVBORw0KGgoAAAE=";

json with_media(json event, const char* field, json items) {
  event[field] = std::move(items);
  return event;
}

json append(const std::string& session, json events) {
  return {{"type", "decide"}, {"session", session}, {"append", std::move(events)}};
}

std::vector<std::string> strings_of(const std::vector<media_item>& items) {
  std::vector<std::string> out;
  for (const media_item& m : items) out.push_back(m.data);
  return out;
}

class media_turns_test : public server_test {
 protected:
  void SetUp() override {
    server_test::SetUp();
    engine_limits_ = request_limits{};  // the scripted engine reads images, audio and videos
    config_.log.store_state = true;
  }
};

TEST_F(media_turns_test, the_engine_gets_the_items_and_the_history_names_them) {
  ws_client c(start());
  const json first = c.request(decide(
      "s1", {with_media(user("the page"), "images", json::array({png_a, "shots/b.png"})), script(json::object())}));
  ASSERT_EQ(first["type"], "decision") << first;
  EXPECT_EQ(first["usage"]["media_dropped"], 0);
  request r = engine_->last_request();
  EXPECT_EQ(strings_of(r.images), (std::vector<std::string>{png_a, "shots/b.png"}));
  EXPECT_EQ(r.state[0]["images"], json::array({"image 1", "image 2"}));

  const json second = c.request(append(
      "s1", {with_media(with_media(user("and now"), "images", json::array({"shots/c.png"})), "audio",
                        json::array({json{{"content_type", "audio/wav"}, {"base64", "UklGRg=="}}})),
             script(json::object())}));
  ASSERT_EQ(second["type"], "decision") << second;
  r = engine_->last_request();
  EXPECT_EQ(strings_of(r.images), (std::vector<std::string>{png_a, "shots/b.png", "shots/c.png"}));
  ASSERT_EQ(r.audio.size(), 1u);
  EXPECT_EQ(r.audio[0].mime, "audio/wav");
  // The earlier events are as the first turn rendered them: a prefix cache keeps them.
  EXPECT_EQ(r.state[0]["images"], json::array({"image 1", "image 2"}));
  EXPECT_EQ(r.state[2]["images"], json::array({"image 3"}));
  EXPECT_EQ(r.state[2]["audio"], json::array({"audio 1"}));

  const auto rows = sql("SELECT turn, media, media_dropped, state FROM decisions ORDER BY seq");
  ASSERT_EQ(rows.size(), 2u);
  const json media = test::parse(rows[1]["media"].get<std::string>());
  ASSERT_EQ(media.size(), 4u);
  EXPECT_EQ(media[0], json::parse(R"({"field":"images","number":1,"event":0,"source":"inline","content_type":"image/png","bytes":11,)"
                                  R"("sha256":")" + sha256_hex(std::string("\x89PNG\r\n\x1a\n\0\0\0", 11)) + R"("})"));
  EXPECT_EQ(media[1], json::parse(R"({"field":"images","number":2,"event":0,"source":"path","path":"shots/b.png"})"));
  EXPECT_EQ(media[2]["number"], 3);
  EXPECT_EQ(media[2]["event"], 2);
  EXPECT_EQ(media[3]["field"], "audio");
  EXPECT_EQ(media[3]["bytes"], 4);
  EXPECT_EQ(rows[1]["media_dropped"], 0);
  // The state the log keeps names the items; the media themselves are not kept.
  EXPECT_EQ(rows[1]["state"].get<std::string>().find("base64"), std::string::npos);
  EXPECT_NE(rows[1]["state"].get<std::string>().find(R"("images":["image 3"])"), std::string::npos);
}

// A computer-use agent sends a screenshot every turn: past the engine's limit the oldest are left out.
TEST_F(media_turns_test, the_oldest_items_are_left_out_past_the_engines_limit) {
  engine_limits_.images.max_items = 2;
  ws_client c(start());
  ASSERT_EQ(c.request(decide("cu", {with_media(user("screen"), "images", json::array({"s1.png"})), script(json::object())}))["type"],
            "decision");
  json d;
  for (const char* shot : {"s2.png", "s3.png", "s4.png"}) {
    d = c.request(append("cu", {with_media(user("screen"), "images", json::array({shot})), script(json::object())}));
    ASSERT_EQ(d["type"], "decision") << d;
  }
  EXPECT_EQ(d["usage"]["media_dropped"], 2);
  EXPECT_EQ(strings_of(engine_->last_request().images), (std::vector<std::string>{"s3.png", "s4.png"}));
  // The history still names every screenshot.
  EXPECT_EQ(engine_->last_request().state[6]["images"], json::array({"image 4"}));
  const auto rows = sql("SELECT media_dropped, json_group_array(json_extract(m.value, '$.number')) AS sent "
                        "FROM decisions, json_each(decisions.media) m GROUP BY decisions.seq ORDER BY decisions.seq");
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0], json::parse(R"({"media_dropped":0,"sent":"[1]"})"));
  EXPECT_EQ(rows[2], json::parse(R"({"media_dropped":1,"sent":"[2,3]"})"));
  EXPECT_EQ(rows[3], json::parse(R"({"media_dropped":2,"sent":"[3,4]"})"));
}

// The events left out to fit the window take their items with them.
TEST_F(media_turns_test, dropped_events_take_their_media) {
  ws_client c(start());
  engine_->set_window(4);
  json history = json::array({with_media(user("task"), "images", json::array({"task.png"}))});
  for (int i = 0; i < 4; ++i) history.push_back(with_media(user("step"), "images", json::array({"step" + std::to_string(i) + ".png"})));
  history.push_back(script(json::object()));
  const json d = c.request(decide("w", history));
  ASSERT_EQ(d["type"], "decision") << d;
  // 6 events in a window of 4: the first is kept, then the newest; steps 0 and 1 go with their images.
  EXPECT_EQ(d["usage"]["events_dropped"], 2);
  EXPECT_EQ(d["usage"]["media_dropped"], 2);
  EXPECT_EQ(strings_of(engine_->last_request().images), (std::vector<std::string>{"task.png", "step2.png", "step3.png"}));
  EXPECT_EQ(sql("SELECT media_dropped, json_array_length(media) AS sent FROM decisions")[0],
            json::parse(R"({"media_dropped":2,"sent":3})"));
}

// Two turns alike but for a picture: the same state text, another state hash, which is the hash
// the SystemOne API gives the same state with the same media.
TEST_F(media_turns_test, a_different_image_is_a_different_state_hash) {
  const unsigned short port = start();
  ws_client c(port);
  for (const auto& [session, png] : {std::pair{"x", png_a}, std::pair{"y", png_b}}) {
    ASSERT_EQ(c.request(decide(session, {with_media(user("look"), "images", json::array({png}))}))["type"], "decision");
  }
  ASSERT_EQ(c.request(decide("z", {with_media(user("look"), "images", json::array({png_a}))}))["type"], "decision");
  const auto rows = sql("SELECT session, state, state_hash FROM decisions ORDER BY seq");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0]["state"], rows[1]["state"]);
  EXPECT_NE(rows[0]["state_hash"], rows[1]["state_hash"]);
  EXPECT_EQ(rows[0]["state_hash"], rows[2]["state_hash"]);

  json body = {{"state", rows[0]["state"]},
               {"questions", {{"q", {{"type", "noul"}}}}},
               {"images", json::array({png_a})}};
  http_client h(port);
  ASSERT_EQ(h.post("/v1/systemone", render_json(body, false)).status, 200);
  EXPECT_EQ(sql("SELECT state_hash FROM decisions WHERE lane = 'systemone'")[0]["state_hash"], rows[0]["state_hash"]);
}

// A wrong item is refused where it is, and the session goes on as it was.
TEST_F(media_turns_test, a_wrong_item_is_an_invalid_frame_and_the_session_is_unchanged) {
  ws_client c(start());
  ASSERT_EQ(c.request(decide("p", {with_media(user("a"), "images", json::array({"one.png"}))}))["type"], "decision");
  const json bad = c.request(append("p", {with_media(user("b"), "images", json::array({"two.png", "ftp://h/x.png"}))}));
  ASSERT_EQ(bad["type"], "error") << bad;
  EXPECT_EQ(bad["code"], "INVALID_FRAME");
  EXPECT_EQ(bad["detail"][0]["loc"], json::parse(R"(["append",0,"images",1])"));
  EXPECT_EQ(bad["detail"][0]["type"], "url_scheme");
  const json ok = c.request(append("p", {with_media(user("b"), "images", json::array({"two.png"}))}));
  ASSERT_EQ(ok["type"], "decision") << ok;
  EXPECT_EQ(ok["turn"], 2);
  EXPECT_EQ(engine_->last_request().state[1]["images"], json::array({"image 2"}));
  EXPECT_EQ(strings_of(engine_->last_request().images), (std::vector<std::string>{"one.png", "two.png"}));
}

// `baton replay --engine` decides logged states again, but a state decided with media it does not have.
TEST_F(media_turns_test, replay_does_not_decide_again_without_the_media) {
  {
    ws_client c(start());
    ASSERT_EQ(c.request(decide("r1", {user("look up order 5")}))["type"], "decision");
    ASSERT_EQ(c.request(decide("r2", {with_media(user("look up this order"), "images", json::array({"order.png"}))}))["type"],
              "decision");
    ASSERT_EQ(c.request(append("r2", {user("thanks")}))["type"], "decision");  // the image is still in the history
  }
  server_.reset();
  const auto r = cli({"replay", "--db", db(), "--registry", (dir_ / "tools.yaml").string(), "--policy",
                      (dir_ / "policy.yaml").string(), "--engine", "keyword", "--json"});
  ASSERT_EQ(r.code, exit_ok) << r.err << r.out;
  const json drift = test::parse(r.out)["drift"];
  EXPECT_EQ(drift["redecided"], 1);
  EXPECT_EQ(drift["with_media"], 2);
  const auto text = cli({"replay", "--db", db(), "--registry", (dir_ / "tools.yaml").string(), "--policy",
                         (dir_ / "policy.yaml").string(), "--engine", "keyword"});
  EXPECT_NE(text.out.find("2 with media the log does not keep"), std::string::npos) << text.out;
  EXPECT_EQ(cli({"replay", "--db", db(), "--registry", (dir_ / "tools.yaml").string(), "--policy",
                 (dir_ / "policy.yaml").string(), "--engine", "keyword", "--fail-if", "drift.with_media>0"})
                .code,
            1);
}

// The keyword engine reads no media: a turn with an image is refused with the error a SystemOne
// request with an image gets from it, and the session goes on as it was.
TEST_F(media_turns_test, an_engine_that_reads_no_images_refuses_the_turn_as_the_systemone_api_does) {
  server_ = running_server::start(config_);  // the configured engine: keyword
  ws_client c(server_->port());
  ASSERT_EQ(c.request(decide("k", {user("hello")}))["type"], "decision");
  const json refused = c.request(append("k", {with_media(user("see this"), "images", json::array({png_a}))}));
  ASSERT_EQ(refused["type"], "error") << refused;
  http_client h(server_->port());
  const auto systemone = h.post(
      "/v1/systemone", render_json(json{{"state", "see this"}, {"questions", {{"q", {{"type", "noul"}}}}}, {"images", json::array({png_a})}}, false));
  EXPECT_EQ(systemone.status, 422);
  const json want = systemone.body_json();
  EXPECT_EQ(refused["code"], want["code"]);
  EXPECT_EQ(refused["code"], "INVALID_REQUEST");
  EXPECT_EQ(refused["error"], want["error"]);
  EXPECT_EQ(refused["detail"], want["detail"]);
  EXPECT_EQ(refused["error"], "images: this model does not read images");

  const json next = c.request(append("k", {user("never mind")}));
  ASSERT_EQ(next["type"], "decision") << next;
  EXPECT_EQ(next["turn"], 2);
  const auto rows = sql("SELECT turn, json_array_length(state) AS events, media FROM decisions WHERE lane != 'systemone' ORDER BY seq");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1], json::parse(R"({"turn":2,"events":2,"media":null})"));
}

}  // namespace
}  // namespace baton
