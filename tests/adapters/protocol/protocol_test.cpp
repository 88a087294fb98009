// adapters/protocol: every frame and wire object renders byte for byte what the server sent before
// the frames moved here (the literal texts below were written by the runtime's former code), and
// reads back into the struct it came from.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "adapters/protocol/agent_protocol.hpp"
#include "adapters/protocol/review_protocol.hpp"
#include "support/protocol_readback.hpp"
#include "core/ids.hpp"
#include "support/files.hpp"

namespace baton {
namespace {

using namespace protocol;

response sample_answers() {
  response r;
  r.model = "baton-keyword-1";
  r.answers.emplace_back("tool", choice_answer{"refund_payment", 0.61324999, {{"refund_payment", 0.61324999}, {"ask_user", 0.38675001}}});
  r.answers.emplace_back("refund_payment.notify", noul_answer{0.81266});
  score_answer s;
  s.score = 1.35214;
  s.confidence = 0.45161;
  s.legend = {{"0", "Can wait"}, {"1", json{{"level", "soon"}}}};
  s.probabilities = {{"0", 0.2}, {"1", 0.8}};
  r.answers.emplace_back("urgency", std::move(s));
  return r;
}

decision_frame escalated_decision() {
  decision_frame d;
  d.id = 7;
  d.decision = "d-0192b7c5a3e1-4f2a9c01";
  d.session = "ticket-4411";
  d.turn = 1;
  d.action = "escalate";
  d.tool = "refund_payment";
  d.arguments = {{"reason", "duplicate"}, {"notify", true}, {"note", "duplicate charge on order 1182"}};
  d.lane = "rule:always_escalate";
  d.confidence = 0.61324999;
  d.executor = "http";
  d.answers = sample_answers();
  d.model = "baton-keyword-1";
  d.usage = {1843, 1792, false, 12, 5};
  d.escalation = decision_escalation{"e-0192b7c5a3e1-9b3d5e70", 1729660936065};
  d.timings_ms = {0.0204, 0.0312, 0.0149, 0.00004, 1.2, 1.40049};
  return d;
}

template <class T, class V>
T as(const V& v) {
  const T* t = std::get_if<T>(&v);
  EXPECT_TRUE(t) << "another frame: index " << v.index();
  return t ? *t : T{};
}

server_frame read_server(const std::string& text) {
  auto f = parse_server_frame(text);
  EXPECT_TRUE(f) << (f ? "" : f.error().message) << "\n" << text;
  return f ? *f : server_frame{};
}

review_server_frame read_review(const std::string& text) {
  auto f = parse_review_server_frame(text);
  EXPECT_TRUE(f) << (f ? "" : f.error().message) << "\n" << text;
  return f ? *f : review_server_frame{};
}

TEST(agent_protocol, the_decision_frame_is_the_text_the_server_sent) {
  const decision_frame d = escalated_decision();
  EXPECT_EQ(render(d),
            R"({"type":"decision","id":7,"decision":"d-0192b7c5a3e1-4f2a9c01","session":"ticket-4411","turn":1,)"
            R"("action":"escalate","tool":"refund_payment","arguments":{"reason":"duplicate","notify":true,)"
            R"("note":"duplicate charge on order 1182"},"lane":"rule:always_escalate","confidence":0.6132,)"
            R"("executor":"http","answers":{"tool":{"type":"choice","choice":"refund_payment","confidence":0.6132,)"
            R"("probabilities":{"refund_payment":0.6132,"ask_user":0.3868}},)"
            R"("refund_payment.notify":{"type":"noul","noul":0.8127},)"
            R"("urgency":{"type":"score","score":1.3521,"confidence":0.4516,"legend":{"0":"Can wait","1":{"level":"soon"}},)"
            R"("probabilities":{"0":0.2,"1":0.8}}},"model":"baton-keyword-1",)"
            R"("usage":{"input_tokens":1843,"cached_tokens":1792,"state_truncated":false,"events_dropped":12,"media_dropped":5},)"
            R"("escalation":"e-0192b7c5a3e1-9b3d5e70","deadline_at":"2024-10-23T05:22:16.065Z",)"
            R"("timings_ms":{"queue":0.02,"compile":0.031,"engine":0.015,"policy":0.0,"log":1.2,"total":1.4}})");
}

TEST(agent_protocol, every_shape_of_decision_frame_is_the_old_text) {
  std::vector<decision_frame> frames;
  frames.push_back(escalated_decision());
  // An engine failure: no tool, no answers, no executor, an error code; no id.
  decision_frame failed = escalated_decision();
  failed.id = nullptr;
  failed.action = "deny";
  failed.tool.clear();
  failed.arguments = json::object();
  failed.lane = "on_engine_error";
  failed.confidence = 0;
  failed.executor.reset();
  failed.answers.reset();
  failed.error_code = "ENGINE_TIMEOUT";
  failed.usage = {0, 0, false, 3};
  failed.escalation.reset();
  frames.push_back(failed);
  // The fallback engine's pass: fallback_of, and ids and strings that need escaping.
  decision_frame second = escalated_decision();
  second.id = json{{"n", 1.5}, {"s", "é\n\"x\""}};
  second.session = "a:b@c";
  second.action = "execute";
  second.lane = "fallback:lane:default";
  second.fallback_of = "d-0192b7c5a3e1-00000001";
  second.escalation.reset();
  second.turn = std::int64_t(1) << 53;
  second.confidence = 0.99995;
  second.usage = {64000, 0, true, 0};
  second.timings_ms = {1e-9, 1234567.8915, 0.0005, 2.5e-4, 100, 3e+16};
  frames.push_back(second);
  // What the server sent for each before the frames moved to adapters/protocol, with the `usage`
  // that prefix reuse (issue 19) added after `model`, and its `media_dropped` (issue 21).
  const std::vector<std::string> sent = {
      R"json({"type":"decision","id":7,"decision":"d-0192b7c5a3e1-4f2a9c01","session":"ticket-4411","turn":1,)json"
      R"json("action":"escalate","tool":"refund_payment","arguments":{"reason":"duplicate","notify":true,"note":"duplicate charge on order 1182"},)json"
      R"json("lane":"rule:always_escalate","confidence":0.6132,"executor":"http","answers":{"tool":{"type":"choice",)json"
      R"json("choice":"refund_payment","confidence":0.6132,"probabilities":{"refund_payment":0.6132,"ask_user":0.3868}},)json"
      R"json("refund_payment.notify":{"type":"noul","noul":0.8127},"urgency":{"type":"score","score":1.3521,)json"
      R"json("confidence":0.4516,"legend":{"0":"Can wait","1":{"level":"soon"}},"probabilities":{"0":0.2,"1":0.8}}},)json"
      R"json("model":"baton-keyword-1","usage":{"input_tokens":1843,"cached_tokens":1792,"state_truncated":false,"events_dropped":12,"media_dropped":5},)json"
      R"json("escalation":"e-0192b7c5a3e1-9b3d5e70","deadline_at":"2024-10-23T05:22:16.065Z",)json"
      R"json("timings_ms":{"queue":0.02,"compile":0.031,"engine":0.015,"policy":0.0,"log":1.2,"total":1.4}})json",
      R"json({"type":"decision","id":null,"decision":"d-0192b7c5a3e1-4f2a9c01","session":"ticket-4411","turn":1,)json"
      R"json("action":"deny","tool":null,"arguments":{},"lane":"on_engine_error","confidence":0.0,"executor":null,)json"
      R"json("answers":null,"model":"baton-keyword-1",)json"
      R"json("usage":{"input_tokens":0,"cached_tokens":0,"state_truncated":false,"events_dropped":3,"media_dropped":0},)json"
      R"json("error_code":"ENGINE_TIMEOUT","timings_ms":{"queue":0.02,)json"
      R"json("compile":0.031,"engine":0.015,"policy":0.0,"log":1.2,"total":1.4}})json",
      R"json({"type":"decision","id":{"n":1.5,"s":"é\n\"x\""},"decision":"d-0192b7c5a3e1-4f2a9c01","session":"a:b@c",)json"
      R"json("turn":9007199254740992,"action":"execute","tool":"refund_payment","arguments":{"reason":"duplicate",)json"
      R"json("notify":true,"note":"duplicate charge on order 1182"},"lane":"fallback:lane:default","confidence":1.0,)json"
      R"json("executor":"http","answers":{"tool":{"type":"choice","choice":"refund_payment","confidence":0.6132,)json"
      R"json("probabilities":{"refund_payment":0.6132,"ask_user":0.3868}},"refund_payment.notify":{"type":"noul",)json"
      R"json("noul":0.8127},"urgency":{"type":"score","score":1.3521,"confidence":0.4516,"legend":{"0":"Can wait",)json"
      R"json("1":{"level":"soon"}},"probabilities":{"0":0.2,"1":0.8}}},"model":"baton-keyword-1",)json"
      R"json("usage":{"input_tokens":64000,"cached_tokens":0,"state_truncated":true,"events_dropped":0,"media_dropped":0},)json"
      R"json("fallback_of":"d-0192b7c5a3e1-00000001",)json"
      R"json("timings_ms":{"queue":0.0,"compile":1234567.891,"engine":0.001,"policy":0.0,"log":100.0,"total":3e+16}})json"};
  for (std::size_t i = 0; i < frames.size(); ++i) {
    const decision_frame& d = frames[i];
    const std::string text = render(d);
    EXPECT_EQ(text, sent[i]);
    // Read back, the frame renders the same text.
    EXPECT_EQ(render(as<decision_frame>(read_server(text))), text);
  }
}

TEST(agent_protocol, a_read_decision_frame_has_its_answers_and_escalation) {
  const decision_frame back = as<decision_frame>(read_server(render(escalated_decision())));
  EXPECT_EQ(back.id, 7);
  EXPECT_EQ(back.turn, 1);
  ASSERT_TRUE(back.escalation);
  EXPECT_EQ(back.escalation->id, "e-0192b7c5a3e1-9b3d5e70");
  EXPECT_EQ(back.escalation->deadline_ms, 1729660936065);
  ASSERT_TRUE(back.answers);
  EXPECT_EQ(back.answers->model, "baton-keyword-1");
  ASSERT_EQ(back.answers->answers.size(), 3u);
  const auto* tool = std::get_if<choice_answer>(&back.answers->answers[0].second);
  ASSERT_TRUE(tool);
  EXPECT_EQ(tool->choice, "refund_payment");
  EXPECT_DOUBLE_EQ(tool->confidence, 0.6132);
  EXPECT_DOUBLE_EQ(back.timings_ms.total, 1.4);
  EXPECT_EQ(back.usage.input_tokens, 1843);
  EXPECT_EQ(back.usage.cached_tokens, 1792);
  EXPECT_FALSE(back.usage.state_truncated);
  EXPECT_EQ(back.usage.events_dropped, 12);
  EXPECT_EQ(back.usage.media_dropped, 5);
}

TEST(agent_protocol, a_decision_frame_that_is_not_as_rendered_is_refused) {
  const json good = test::parse(render(escalated_decision()));
  auto refused = [&](const char* key, json value) {
    json f = good;
    if (value.is_discarded()) {
      f.erase(key);
    } else {
      f[key] = std::move(value);
    }
    auto r = parse_server_frame(render_json(f, false));
    EXPECT_FALSE(r) << key;
    return r ? std::string() : r.error().code + ": " + r.error().message;
  };
  EXPECT_EQ(refused("turn", "1"), "BAD_UPSTREAM_RESPONSE: decision frame: `turn` is missing or not an integer");
  EXPECT_EQ(refused("model", json(json::value_t::discarded)),
            "BAD_UPSTREAM_RESPONSE: decision frame: `model` is missing or not a string");
  EXPECT_EQ(refused("deadline_at", "2024-10-23 05:22:16"),
            "BAD_UPSTREAM_RESPONSE: decision frame: `deadline_at` is not a UTC time such as 2024-05-01T12:34:56.789Z");
  EXPECT_EQ(refused("deadline_at", "2024-02-30T05:22:16.065Z"),
            "BAD_UPSTREAM_RESPONSE: decision frame: `deadline_at` is not a UTC time such as 2024-05-01T12:34:56.789Z");
  EXPECT_EQ(refused("escalation", json(json::value_t::discarded)),
            "BAD_UPSTREAM_RESPONSE: decision frame: `escalation` is missing or not a string");
  EXPECT_EQ(refused("answers", json{{"tool", {{"type", "choice"}}}}),
            "BAD_UPSTREAM_RESPONSE: not a SystemOne response: answers.tool.choice is missing or not a string");
  EXPECT_EQ(refused("usage", json(json::value_t::discarded)),
            "BAD_UPSTREAM_RESPONSE: decision frame: `usage` is missing or not present");
  EXPECT_EQ(refused("usage", json{{"input_tokens", 9}, {"cached_tokens", "8"}, {"state_truncated", false}, {"events_dropped", 0}}),
            "BAD_UPSTREAM_RESPONSE: decision frame: usage: `cached_tokens` is missing or not an integer");
  EXPECT_EQ(refused("usage", json{{"input_tokens", 9}, {"cached_tokens", 8}, {"state_truncated", false}}),
            "BAD_UPSTREAM_RESPONSE: decision frame: usage: `events_dropped` is missing or not an integer");
  EXPECT_EQ(refused("usage", json{{"input_tokens", 9}, {"cached_tokens", 8}, {"state_truncated", false}, {"events_dropped", 0}}),
            "BAD_UPSTREAM_RESPONSE: decision frame: usage: `media_dropped` is missing or not an integer");
  EXPECT_EQ(refused("type", "decisions"), "BAD_UPSTREAM_RESPONSE: agent frame: unknown type \"decisions\"");
  EXPECT_EQ(parse_server_frame("[1]").error().message, "agent frame: not a JSON object");
  EXPECT_EQ(parse_server_frame("{").error().code, "BAD_UPSTREAM_RESPONSE");
}

TEST(agent_protocol, the_tool_result_of_a_tool_baton_ran) {
  tool_outcome_frame f{"d-1", "reset_password", {false, "EXECUTOR_TIMEOUT", "no answer within 5000 ms", 2, nullptr}, std::nullopt};
  EXPECT_EQ(render(f),
            R"({"type":"tool_result","decision":"d-1","tool":"reset_password","ok":false,"error_code":"EXECUTOR_TIMEOUT",)"
            R"("detail":"no answer within 5000 ms","attempts":2,"output":null})");
  f.outcome = {true, "", "", 1, json{{"sent", 1.0}}};
  f.event = json{{"role", "tool"}, {"tool", "reset_password"}, {"ok", true}, {"output", {{"sent", 1.0}}}};
  const std::string text = render(f);
  EXPECT_EQ(text, R"({"type":"tool_result","decision":"d-1","tool":"reset_password","ok":true,"attempts":1,)"
                  R"("output":{"sent":1.0},"event":{"role":"tool","tool":"reset_password","ok":true,"output":{"sent":1.0}}})");
  EXPECT_EQ(render(as<tool_outcome_frame>(read_server(text))), text);
}

TEST(agent_protocol, resumed_ack_and_resolution_frames) {
  const resumed_frame resumed{9, "ticket-4411", {"e-1", "e-2"}, 1};
  EXPECT_EQ(render(resumed), R"({"type":"resumed","ref":9,"session":"ticket-4411","pending":["e-1","e-2"],"resolutions":1})");
  EXPECT_EQ(render(resumed_frame{nullptr, "s", {}, 0}), R"({"type":"resumed","ref":null,"session":"s","pending":[],"resolutions":0})");
  EXPECT_EQ(render(as<resumed_frame>(read_server(render(resumed)))), render(resumed));

  const tool_result_ack_frame ack{"x\"", "d-1"};
  EXPECT_EQ(render(ack), R"({"type":"ack","ref":"x\"","decision":"d-1"})");
  EXPECT_EQ(render(as<tool_result_ack_frame>(read_server(render(ack)))), render(ack));

  resolution_object r;
  r.id = "v-1";
  r.escalation = "e-1";
  r.decision = "d-1";
  r.session = "k/s";
  r.turn = 3;
  r.outcome = "deny";
  r.arguments = json::object();
  r.reason = "no";
  r.reviewer = "baton";
  r.by = "deadline";
  r.forced = true;
  r.created_ms = 1796306590000;
  const std::string text = render(resolution_frame{r});
  EXPECT_EQ(text, R"({"type":"resolution","resolution":{"id":"v-1","escalation":"e-1","decision":"d-1","session":"k/s",)"
                  R"("turn":3,"outcome":"deny","tool":null,"arguments":{},"reason":"no","reviewer":"baton","by":"deadline",)"
                  R"("forced":true,"created_at":"2026-12-03T14:03:10.000Z","created_ms":1796306590000,"executor":null}})");
  EXPECT_EQ(render(as<resolution_frame>(read_server(text))), text);
}

TEST(agent_protocol, error_frames_say_when_to_come_back) {
  EXPECT_EQ(render(error_frame{7, make_error(429, "RATE_LIMITED", "slow down")}),
            R"({"type":"error","ref":7,"error":"slow down","code":"RATE_LIMITED","detail":[],"retry_after_ms":1000})");
  EXPECT_EQ(render(error_frame{nullptr, make_error(503, "OVERLOADED", "full")}),
            R"({"type":"error","ref":null,"error":"full","code":"OVERLOADED","detail":[],"retry_after_ms":100})");
  EXPECT_EQ(render(error_frame{nullptr, make_error(503, "SHUTTING_DOWN", "bye")}),
            R"({"type":"error","ref":null,"error":"bye","code":"SHUTTING_DOWN","detail":[]})");
  const error invalid = make_error(422, "INVALID_FRAME", {issue{json::array({"turn"}), "too big", "less_than_equal", json{{"le", 2}}}});
  EXPECT_EQ(render_error_frame("a", invalid),
            R"({"type":"error","ref":"a","error":"turn: too big","code":"INVALID_FRAME",)"
            R"("detail":[{"loc":["turn"],"msg":"too big","type":"less_than_equal","ctx":{"le":2}}]})");
  for (const error& e : {make_error(429, "RATE_LIMITED", "slow down"), make_error(503, "LOG_BACKLOG", "later"), invalid}) {
    const std::string text = render_error_frame(1, e);
    const error_frame back = as<error_frame>(read_server(text));
    EXPECT_EQ(back.error.status, e.status == 422 ? 0 : e.status) << "the status is on the wire only as retry_after_ms";
    EXPECT_EQ(render(back), text);
    EXPECT_EQ(render(as<error_frame>(read_review(text))), text);
  }
  EXPECT_FALSE(parse_server_frame(R"({"type":"error","ref":1,"error":"x","code":"X","detail":[],"retry_after_ms":5})"));
}

TEST(agent_protocol, client_frames_render_what_parse_frame_reads) {
  decide_frame d;
  d.session = "ticket-4411";
  d.turn = 2;
  d.append = true;
  d.events = json::array({{{"role", "user"}, {"content", "and again"}}});
  d.questions = json{{"language", {{"type", "noul"}, {"instructions", "English?"}}}};
  const std::string decide = render(d, 7);
  EXPECT_EQ(decide, R"({"type":"decide","id":7,"session":"ticket-4411","turn":2,"append":[{"role":"user","content":"and again"}],)"
                    R"("questions":{"language":{"type":"noul","instructions":"English?"}}})");
  const tool_result_frame tr{"d-1", false, nullptr};
  EXPECT_EQ(render(tr), R"({"type":"tool_result","decision":"d-1","ok":false,"output":null})");
  EXPECT_EQ(render(resume_frame{"s"}, "r"), R"({"type":"resume","id":"r","session":"s"})");
  EXPECT_EQ(render(ack_frame{"v-1"}), R"({"type":"ack","resolution":"v-1"})");
  for (const std::string& text : {decide, render(tr, json::array({1})), render(resume_frame{"s"}, "r"), render(ack_frame{"v-1"})}) {
    json id;
    auto f = parse_frame(text, request_limits{}, id);
    ASSERT_TRUE(f) << f.error().message;
    std::visit([&](const auto& frame) { EXPECT_EQ(render(frame, id), text); }, *f);
  }
}

// An event's media items are read as the SystemOne API reads them, taken out of the events, and
// put back by render().
TEST(agent_protocol, event_media_items_are_taken_out_and_rendered_back) {
  const std::string text =
      R"({"type":"decide","id":1,"session":"s","append":[{"role":"user","content":"look","images":["data:image/png;base64,AAAA",)"
      R"({"content_type":"image/jpeg","base64":"AAAA"}]},{"role":"tool","output":1},{"role":"user","audio":["clips/a.wav"],"videos":null}]})";
  json id;
  auto f = parse_frame(text, request_limits{}, id);
  ASSERT_TRUE(f) << f.error().message;
  const decide_frame& d = std::get<decide_frame>(*f);
  ASSERT_EQ(d.media.size(), 3u);
  EXPECT_EQ(d.media[0].event, 0u);
  EXPECT_EQ(d.media[0].field, "images");
  EXPECT_EQ(d.media[1].slot, 1u);
  EXPECT_EQ(d.media[1].item.mime, "image/jpeg");
  EXPECT_EQ(d.media[2].event, 2u);
  EXPECT_EQ(d.media[2].field, "audio");
  EXPECT_EQ(d.media[2].item.source, media_source::path);
  EXPECT_EQ(d.events[0]["images"], json::array({nullptr, nullptr}));  // the session names them
  EXPECT_TRUE(d.events[2]["videos"].is_null());
  EXPECT_EQ(render(d, id), text);
}

std::vector<issue> media_issues(const std::string& events, const request_limits& limits = {}, int status = 422,
                                const char* code = "INVALID_FRAME") {
  json id;
  auto f = parse_frame(R"({"type":"decide","session":"s","append":)" + events + "}", limits, id);
  EXPECT_FALSE(f);
  if (f) return {};
  EXPECT_EQ(f.error().status, status);
  EXPECT_EQ(f.error().code, code);
  return f.error().detail;
}

TEST(agent_protocol, a_wrong_media_item_is_an_invalid_frame_at_its_place) {
  auto issues = media_issues(R"([{"role":"user"},{"role":"user","images":["a.png","data:text/plain;base64,AAAA"],"audio":"x.wav"}])");
  ASSERT_EQ(issues.size(), 2u);
  EXPECT_EQ(issues[0].loc, json::parse(R"(["append",1,"images",1])"));
  EXPECT_EQ(issues[0].type, "media_type");
  EXPECT_EQ(issues[0].msg, "unsupported media type 'text/plain' for images; expected image/png, image/jpeg or image/webp");
  EXPECT_EQ(issues[1].loc, json::parse(R"(["append",1,"audio"])"));
  EXPECT_EQ(issues[1].type, "list_type");
  issues = media_issues(R"([{"videos":[{"content_type":"video/mp4"},"ftp://h/v.mp4"]}])");
  ASSERT_EQ(issues.size(), 2u);
  EXPECT_EQ(issues[0].loc, json::parse(R"(["append",0,"videos",0,"base64"])"));
  EXPECT_EQ(issues[1].loc, json::parse(R"(["append",0,"videos",1])"));
  EXPECT_EQ(issues[1].type, "url_scheme");

  // An item over the engine's per-item size is the API's 413, with the frame's other issues 422.
  request_limits small;
  small.images.max_item_bytes = 2;
  issues = media_issues(R"([{"images":["data:image/png;base64,AAAA"]}])", small, 413, "REQUEST_TOO_LARGE");
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_EQ(issues[0].loc, json::parse(R"(["append",0,"images",0])"));
  EXPECT_EQ(issues[0].msg, "decoded size is 3 bytes; the limit is 2");
  issues = media_issues(R"([{"images":["data:image/png;base64,AAAA"]},7])", small);
  ASSERT_EQ(issues.size(), 2u);
  EXPECT_EQ(issues[0].type, "dict_type");
  EXPECT_EQ(issues[1].type, "media_too_large");
  // An engine that reads no images: the items read, and the turn is refused later as a whole.
  json id;
  EXPECT_TRUE(parse_frame(R"({"type":"decide","session":"s","history":[{"images":["data:image/png;base64,AAAA"]}]})",
                          request_limits::text_only(), id));
}

tool_run_object sample_run(bool ok) {
  tool_run_object r;
  r.id = "r-0192b7c5a3e1-5d6e7f80";
  r.tool = "restart_service";
  r.executor = "command";
  r.ok = ok;
  r.error_code = ok ? "" : "EXECUTOR_TIMEOUT";
  r.detail = ok ? "" : "the command ran past its 5000 ms";
  r.output = ok ? json{{"restarted", true}} : json();
  r.attempts = 1;
  r.duration_ms = 5003.24951;
  r.created_ms = 1796306595000;
  return r;
}

resolution_object sample_resolution() {
  resolution_object r;
  r.id = "v-0192b7c5a3e1-0c1d2e3f";
  r.escalation = "e-0192b7c5a3e1-4f2a9c01";
  r.decision = "d-0192b7c5a3e1-77aa0b12";
  r.session = "ticket-4411";
  r.turn = 3;
  r.outcome = "execute";
  r.tool = "restart_service";
  r.arguments = json{{"service", "api"}};
  r.reason = "it hangs";
  r.reviewer = "alice";
  r.by = "reviewer";
  r.created_ms = 1796306590000;
  r.executor = "command";
  return r;
}

escalation_object sample_escalation() {
  escalation_object e;
  e.id = "e-0192b7c5a3e1-4f2a9c01";
  e.decision = "d-0192b7c5a3e1-77aa0b12";
  e.session = "ticket-4411";
  e.turn = 3;
  e.created_ms = 1796306400000;
  e.deadline_ms = 1796307300000;
  e.on_deadline = "deny";
  e.reason = "lane:default";
  e.question = "Should restart_service run?";
  e.tool = "restart_service";
  e.arguments = json{{"service", "api"}};
  e.confidence = 0.41004999;
  e.candidates = json::array({{{"tool", "restart_service"}, {"description", "Restart"}, {"probability", 0.41}}});
  e.state = json::array({{{"role", "user"}, {"content", "the api hangs"}}});
  e.evidence = json{{"rule", "lane:default"}, {"why", "low"}, {"inputs", nullptr}, {"answers", json::array()}, {"tie", false}};
  e.registry_hash = "sha256:01";
  e.policy_hash = "sha256:02";
  return e;
}

TEST(review_protocol, objects_are_the_json_the_desk_built) {
  std::vector<escalation_object> shapes;
  shapes.push_back(sample_escalation());  // pending
  escalation_object resolved = sample_escalation();
  resolved.resolution = sample_resolution();  // resolved, its tool still running
  shapes.push_back(resolved);
  resolved.tool_run = sample_run(false);  // and ran
  shapes.push_back(resolved);
  escalation_object failed = sample_escalation();  // after an engine failure, denied
  failed.tool.clear();
  failed.arguments = json::object();
  failed.candidates = json::array();
  failed.state = nullptr;
  failed.resolution = sample_resolution();
  failed.resolution->outcome = "deny";
  failed.resolution->tool.clear();
  failed.resolution->executor.reset();
  shapes.push_back(failed);
  // What the desk built for each before the objects moved to adapters/protocol.
  const std::vector<std::string> built = {
      R"json({"id":"e-0192b7c5a3e1-4f2a9c01","status":"pending","decision":"d-0192b7c5a3e1-77aa0b12","session":"ticket-4411",)json"
      R"json("turn":3,"created_at":"2026-12-03T14:00:00.000Z","created_ms":1796306400000,"deadline_at":"2026-12-03T14:15:00.000Z",)json"
      R"json("deadline_ms":1796307300000,"on_deadline":"deny","reason":"lane:default","question":"Should restart_service run?",)json"
      R"json("tool":"restart_service","arguments":{"service":"api"},"confidence":0.41,"candidates":[{"tool":"restart_service",)json"
      R"json("description":"Restart","probability":0.41}],"state":[{"role":"user","content":"the api hangs"}],)json"
      R"json("evidence":{"rule":"lane:default","why":"low","inputs":null,"answers":[],"tie":false},"registry_hash":"sha256:01",)json"
      R"json("policy_hash":"sha256:02","resolution":null})json",
      R"json({"id":"e-0192b7c5a3e1-4f2a9c01","status":"resolved","decision":"d-0192b7c5a3e1-77aa0b12","session":"ticket-4411",)json"
      R"json("turn":3,"created_at":"2026-12-03T14:00:00.000Z","created_ms":1796306400000,"deadline_at":"2026-12-03T14:15:00.000Z",)json"
      R"json("deadline_ms":1796307300000,"on_deadline":"deny","reason":"lane:default","question":"Should restart_service run?",)json"
      R"json("tool":"restart_service","arguments":{"service":"api"},"confidence":0.41,"candidates":[{"tool":"restart_service",)json"
      R"json("description":"Restart","probability":0.41}],"state":[{"role":"user","content":"the api hangs"}],)json"
      R"json("evidence":{"rule":"lane:default","why":"low","inputs":null,"answers":[],"tie":false},"registry_hash":"sha256:01",)json"
      R"json("policy_hash":"sha256:02","resolution":{"id":"v-0192b7c5a3e1-0c1d2e3f","escalation":"e-0192b7c5a3e1-4f2a9c01",)json"
      R"json("decision":"d-0192b7c5a3e1-77aa0b12","session":"ticket-4411","turn":3,"outcome":"execute","tool":"restart_service",)json"
      R"json("arguments":{"service":"api"},"reason":"it hangs","reviewer":"alice","by":"reviewer","forced":false,)json"
      R"json("created_at":"2026-12-03T14:03:10.000Z","created_ms":1796306590000,"executor":"command","tool_run":null}})json",
      R"json({"id":"e-0192b7c5a3e1-4f2a9c01","status":"resolved","decision":"d-0192b7c5a3e1-77aa0b12","session":"ticket-4411",)json"
      R"json("turn":3,"created_at":"2026-12-03T14:00:00.000Z","created_ms":1796306400000,"deadline_at":"2026-12-03T14:15:00.000Z",)json"
      R"json("deadline_ms":1796307300000,"on_deadline":"deny","reason":"lane:default","question":"Should restart_service run?",)json"
      R"json("tool":"restart_service","arguments":{"service":"api"},"confidence":0.41,"candidates":[{"tool":"restart_service",)json"
      R"json("description":"Restart","probability":0.41}],"state":[{"role":"user","content":"the api hangs"}],)json"
      R"json("evidence":{"rule":"lane:default","why":"low","inputs":null,"answers":[],"tie":false},"registry_hash":"sha256:01",)json"
      R"json("policy_hash":"sha256:02","resolution":{"id":"v-0192b7c5a3e1-0c1d2e3f","escalation":"e-0192b7c5a3e1-4f2a9c01",)json"
      R"json("decision":"d-0192b7c5a3e1-77aa0b12","session":"ticket-4411","turn":3,"outcome":"execute","tool":"restart_service",)json"
      R"json("arguments":{"service":"api"},"reason":"it hangs","reviewer":"alice","by":"reviewer","forced":false,)json"
      R"json("created_at":"2026-12-03T14:03:10.000Z","created_ms":1796306590000,"executor":"command","tool_run":{"id":"r-0192b7c5a3e1-5d6e7f80",)json"
      R"json("tool":"restart_service","executor":"command","ok":false,"error_code":"EXECUTOR_TIMEOUT","detail":"the command ran past its 5000 ms",)json"
      R"json("output":null,"attempts":1,"duration_ms":5003.25,"created_at":"2026-12-03T14:03:15.000Z","created_ms":1796306595000}}})json",
      R"json({"id":"e-0192b7c5a3e1-4f2a9c01","status":"resolved","decision":"d-0192b7c5a3e1-77aa0b12","session":"ticket-4411",)json"
      R"json("turn":3,"created_at":"2026-12-03T14:00:00.000Z","created_ms":1796306400000,"deadline_at":"2026-12-03T14:15:00.000Z",)json"
      R"json("deadline_ms":1796307300000,"on_deadline":"deny","reason":"lane:default","question":"Should restart_service run?",)json"
      R"json("tool":null,"arguments":{},"confidence":0.41,"candidates":[],"state":null,"evidence":{"rule":"lane:default",)json"
      R"json("why":"low","inputs":null,"answers":[],"tie":false},"registry_hash":"sha256:01","policy_hash":"sha256:02",)json"
      R"json("resolution":{"id":"v-0192b7c5a3e1-0c1d2e3f","escalation":"e-0192b7c5a3e1-4f2a9c01","decision":"d-0192b7c5a3e1-77aa0b12",)json"
      R"json("session":"ticket-4411","turn":3,"outcome":"deny","tool":null,"arguments":{"service":"api"},"reason":"it hangs",)json"
      R"json("reviewer":"alice","by":"reviewer","forced":false,"created_at":"2026-12-03T14:03:10.000Z","created_ms":1796306590000,)json"
      R"json("executor":null,"tool_run":null}})json"};
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const escalation_object& e = shapes[i];
    const std::string text = render(e);
    EXPECT_EQ(text, built[i]);
    auto back = parse_escalation(test::parse(text));
    ASSERT_TRUE(back) << back.error().message;
    EXPECT_EQ(render(*back), text);
  }
  for (const bool ok : {true, false}) {
    const std::string text = render(sample_run(ok));
    EXPECT_EQ(text, ok ? R"json({"id":"r-0192b7c5a3e1-5d6e7f80","tool":"restart_service","executor":"command","ok":true,"error_code":null,)json"
                        R"json("detail":"","output":{"restarted":true},"attempts":1,"duration_ms":5003.25,"created_at":"2026-12-03T14:03:15.000Z",)json"
                        R"json("created_ms":1796306595000})json"
                       : R"json({"id":"r-0192b7c5a3e1-5d6e7f80","tool":"restart_service","executor":"command","ok":false,"error_code":"EXECUTOR_TIMEOUT",)json"
                        R"json("detail":"the command ran past its 5000 ms","output":null,"attempts":1,"duration_ms":5003.25,"created_at":"2026-12-03T14:03:15.000Z",)json"
                        R"json("created_ms":1796306595000})json");
    auto back = parse_tool_run(test::parse(text));
    ASSERT_TRUE(back) << back.error().message;
    EXPECT_EQ(render(*back), text);
  }
  EXPECT_EQ(render(sample_run(false)),
            R"({"id":"r-0192b7c5a3e1-5d6e7f80","tool":"restart_service","executor":"command","ok":false,)"
            R"("error_code":"EXECUTOR_TIMEOUT","detail":"the command ran past its 5000 ms","output":null,"attempts":1,)"
            R"("duration_ms":5003.25,"created_at":"2026-12-03T14:03:15.000Z","created_ms":1796306595000})");
  EXPECT_EQ(render(sample_resolution()),
            R"json({"id":"v-0192b7c5a3e1-0c1d2e3f","escalation":"e-0192b7c5a3e1-4f2a9c01","decision":"d-0192b7c5a3e1-77aa0b12",)json"
            R"json("session":"ticket-4411","turn":3,"outcome":"execute","tool":"restart_service","arguments":{"service":"api"},)json"
            R"json("reason":"it hangs","reviewer":"alice","by":"reviewer","forced":false,"created_at":"2026-12-03T14:03:10.000Z",)json"
            R"json("created_ms":1796306590000,"executor":"command"})json");
  EXPECT_EQ(render(escalation_list{shapes}), "{\"escalations\":[" + built[0] + "," + built[1] + "," + built[2] + "," + built[3] + "]}");
  EXPECT_EQ(render(escalation_list{}), R"({"escalations":[]})");
  auto list = parse_escalation_list(test::parse(render(escalation_list{shapes})));
  ASSERT_TRUE(list) << list.error().message;
  EXPECT_EQ(render(*list), render(escalation_list{shapes}));
}

TEST(review_protocol, an_object_that_is_not_as_rendered_is_refused) {
  auto message = [](const result<escalation_object>& r) { return r ? std::string("read") : r.error().message; };
  json e = test::parse(render(sample_escalation()));
  e["created_at"] = "2026-12-03T14:00:00.001Z";
  EXPECT_EQ(message(parse_escalation(e)),
            "escalation: `created_at` is not `created_ms` in UTC (2026-12-03T14:00:00.000Z)");
  e = test::parse(render(sample_escalation()));
  e["status"] = "resolved";
  EXPECT_EQ(message(parse_escalation(e)), "escalation: `status` is resolved, but the resolution is null");
  escalation_object resolved = sample_escalation();
  resolved.resolution = sample_resolution();
  e = test::parse(render(resolved));
  e["resolution"].erase("reviewer");
  EXPECT_EQ(message(parse_escalation(e)), "resolution: `reviewer` is missing or not a string");
  json run = test::parse(render(sample_run(true)));
  run["error_code"] = "X";
  EXPECT_EQ(parse_tool_run(run).error().message, "tool run: `error_code` is not null, but the run is ok");
  EXPECT_EQ(parse_escalation_list(json{{"escalations", 1}}).error().message, "escalation list: `escalations` is not a list");
}

tools_list sample_tools() {
  tools_list t;
  t.tools.push_back({"refund_payment", "Refund a charge", "high", "http",
                     {{"reason", "choice", "Why?", {{"duplicate", "Charged twice"}, {"fraud", "Not the customer"}}, std::nullopt},
                      {"notify", "boolean", "Email the customer?", {}, std::nullopt},
                      {"note", "text", "", {}, std::nullopt},
                      {"queue", "text", "", {}, "refunds"}}});
  t.tools.push_back({"hand_to_person", "Hand over", "low", "agent", {}});
  t.finish = "Nothing more to do";
  t.registry_hash = "sha256:ab";
  return t;
}

TEST(review_protocol, the_tools_body) {
  const std::string text = render(sample_tools());
  EXPECT_EQ(text,
            R"({"tools":[{"id":"refund_payment","description":"Refund a charge","risk":"high","executor":"http","parameters":[)"
            R"({"name":"reason","type":"choice","instructions":"Why?","values":[{"value":"duplicate","description":"Charged twice"},)"
            R"({"value":"fraud","description":"Not the customer"}],"fixed":null},)"
            R"({"name":"notify","type":"boolean","instructions":"Email the customer?","values":[],"fixed":null},)"
            R"({"name":"note","type":"text","instructions":"","values":[],"fixed":null},)"
            R"({"name":"queue","type":"text","instructions":"","values":[],"fixed":"refunds"}]},)"
            R"({"id":"hand_to_person","description":"Hand over","risk":"low","executor":"agent","parameters":[]}],)"
            R"("finish":"Nothing more to do","registry_hash":"sha256:ab"})");
  auto back = parse_tools_list(test::parse(text));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(render(*back), text);
  tools_list none;
  none.registry_hash = "sha256:00";
  EXPECT_EQ(render(none), R"({"tools":[],"finish":null,"registry_hash":"sha256:00"})");
  EXPECT_EQ(render(*parse_tools_list(test::parse(render(none)))), render(none));
}

TEST(review_protocol, review_frames) {
  escalation_object resolved = sample_escalation();
  resolved.resolution = sample_resolution();
  const std::string escalation = render(sample_escalation());
  const std::string with_resolution = render(resolved);
  EXPECT_EQ(render(snapshot_frame{{sample_escalation()}}), R"({"type":"snapshot","escalations":[)" + escalation + "]}");
  EXPECT_EQ(render(snapshot_frame{}), R"({"type":"snapshot","escalations":[]})");
  EXPECT_EQ(render(escalation_frame{sample_escalation()}), R"({"type":"escalation","escalation":)" + escalation + "}");
  EXPECT_EQ(render(resolved_frame{resolved}), R"({"type":"resolved","escalation":)" + with_resolution + "}");
  EXPECT_EQ(render(tool_run_frame{"e-1", sample_run(true)}),
            R"({"type":"tool_run","escalation":"e-1","tool_run":)" + render(sample_run(true)) + "}");
  EXPECT_EQ(render(resolve_result_frame{4, sample_resolution()}),
            R"({"type":"resolve_result","ref":4,"resolution":)" + render(sample_resolution()) + "}");
  EXPECT_EQ(render(as<snapshot_frame>(read_review(render(snapshot_frame{{sample_escalation(), resolved}})))),
            render(snapshot_frame{{sample_escalation(), resolved}}));
  EXPECT_EQ(render(as<escalation_frame>(read_review(render(escalation_frame{sample_escalation()})))),
            render(escalation_frame{sample_escalation()}));
  EXPECT_EQ(render(as<resolved_frame>(read_review(render(resolved_frame{resolved})))), render(resolved_frame{resolved}));
  EXPECT_EQ(render(as<tool_run_frame>(read_review(render(tool_run_frame{"e-1", sample_run(false)})))),
            render(tool_run_frame{"e-1", sample_run(false)}));
  EXPECT_EQ(render(as<resolve_result_frame>(read_review(render(resolve_result_frame{nullptr, sample_resolution()})))),
            render(resolve_result_frame{nullptr, sample_resolution()}));
  EXPECT_EQ(parse_review_server_frame(R"({"type":"decision"})").error().message, "review frame: unknown type \"decision\"");
}

TEST(review_protocol, the_resolve_frame_and_body_render_what_they_parse) {
  resolve_input in;
  in.execute = true;
  in.tool = "refund_payment";
  in.arguments = json{{"reason", "duplicate"}};
  in.reason = "confirmed";
  EXPECT_EQ(render(in), R"({"outcome":"execute","tool":"refund_payment","arguments":{"reason":"duplicate"},"reason":"confirmed","force":false})");
  const std::string frame = render(resolve_frame{"e-1", in}, 3);
  EXPECT_EQ(frame, R"({"type":"resolve","id":3,"escalation":"e-1","outcome":"execute","tool":"refund_payment",)"
                   R"("arguments":{"reason":"duplicate"},"reason":"confirmed","force":false})");
  json id;
  auto back = parse_review_frame(frame, id);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(render(*back, id), frame);
  resolve_input deny;
  deny.reason = "no";
  deny.force = true;
  EXPECT_EQ(render(deny), R"({"outcome":"deny","reason":"no","force":true})");
  auto body = parse_resolve_input(test::parse(render(deny)));
  ASSERT_TRUE(body) << body.error().message;
  EXPECT_EQ(render(*body), render(deny));
}

}  // namespace
}  // namespace baton
