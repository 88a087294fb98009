#include <gtest/gtest.h>

#include <malloc.h>

#include <thread>

#include "adapters/runtime/session_table.hpp"
#include "core/request.hpp"
#include "core/sha256.hpp"

namespace baton {
namespace {

json user(const std::string& text) { return {{"role", "user"}, {"content", text}}; }

session_turn begin_ok(session_table& s, const std::string& id, std::optional<std::int64_t> turn, bool append,
                      json events) {
  auto t = s.begin(id, turn, append, std::move(events));
  EXPECT_TRUE(t) << (t ? "" : t.error().message);
  return t ? std::move(*t) : session_turn{};
}

std::string code(session_table& s, const std::string& id, std::optional<std::int64_t> turn, bool append, json events) {
  auto t = s.begin(id, turn, append, std::move(events));
  return t ? "ok" : t.error().code;
}

// What the table should count for sessions with these histories (rendered: their state texts'
// lengths): within the slack of their arrays' spare capacity.
void expect_holds(const session_table& s, const std::vector<const session_turn*>& turns) {
  std::size_t want = 0, slack = 0;
  for (const session_turn* t : turns) {
    want += session_entry_bytes + json_held_bytes(t->history) + t->state_text().size() + t->media_bytes;
    slack += 48 + 16 * t->history.size();
  }
  EXPECT_NEAR(static_cast<double>(s.held_bytes()), static_cast<double>(want), static_cast<double>(slack));
}

// A session "id" with one decided turn of `events`, idle.
void hold(session_table& s, const std::string& id, json events) {
  session_turn t = begin_ok(s, id, std::nullopt, false, std::move(events));
  s.commit(std::move(t));
  s.release(id);
}

std::string message(session_table& s, const std::string& id, bool append, json events) {
  auto t = s.begin(id, std::nullopt, append, std::move(events));
  return t ? "ok" : t.error().message;
}

TEST(session_table, appends_build_the_history_and_its_rendering) {
  session_table s({});
  session_turn t = begin_ok(s, "a", std::nullopt, false, json::array({user("hi")}));
  EXPECT_EQ(t.turn, 1);
  EXPECT_EQ(t.state_text(), R"([{"content":"hi","role":"user"}])");
  s.commit(std::move(t));
  s.release("a");

  t = begin_ok(s, "a", 2, true, json::array({user("more"), user("again")}));
  EXPECT_EQ(t.history.size(), 3u);
  EXPECT_EQ(t.state_text(), render_json(t.history, true));
  EXPECT_EQ(t.state_hash(), sha256_hex(t.state_text()));
  expect_holds(s, {&t});
  s.commit(std::move(t));
  s.add_event("a", {{"role", "tool"}, {"output", 1}});
  s.release("a");
  t = begin_ok(s, "a", std::nullopt, true, json::array());
  EXPECT_EQ(t.turn, 3);
  EXPECT_EQ(t.history.size(), 4u);
  EXPECT_EQ(t.state_text(), render_json(t.history, true));
  expect_holds(s, {&t});
}

TEST(session_table, the_implicit_next_turn_has_the_explicit_limit) {
  constexpr std::int64_t last = std::int64_t(1) << 53;
  session_table s({});
  session_turn t = begin_ok(s, "a", last, false, json::array({user("hi")}));
  s.commit(std::move(t));
  s.release("a");
  for (const bool append : {true, false}) {
    auto refused = s.begin("a", std::nullopt, append, json::array({user("more")}));
    ASSERT_FALSE(refused) << "turn " << refused->turn;
    EXPECT_EQ(refused.error().code, "INVALID_FRAME");
    ASSERT_EQ(refused.error().detail.size(), 1u);
    EXPECT_EQ(refused.error().detail[0].loc, json::array({"turn"}));
    EXPECT_EQ(refused.error().detail[0].type, "less_than_equal");
  }
  // Refused, not busy: the session still has its history and its last turn.
  EXPECT_EQ(code(s, "a", last, false, json::array()), "TURN_OUT_OF_ORDER");
  t = begin_ok(s, "b", last - 1, false, json::array({user("hi")}));
  s.commit(std::move(t));
  s.release("b");
  EXPECT_EQ(begin_ok(s, "b", std::nullopt, true, json::array()).turn, last);
}

TEST(session_table, refusals_leave_the_session_as_it_was) {
  session_table s({});
  EXPECT_EQ(code(s, "a", std::nullopt, true, json::array({user("x")})), "UNKNOWN_SESSION");
  session_turn t = begin_ok(s, "a", 5, false, json::array({user("hi")}));
  EXPECT_EQ(code(s, "a", std::nullopt, false, json::array()), "SESSION_BUSY");
  s.commit(std::move(t));
  s.release("a");
  EXPECT_EQ(code(s, "a", 7, true, json::array()), "TURN_OUT_OF_ORDER");
  EXPECT_EQ(code(s, "a", 5, false, json::array()), "TURN_OUT_OF_ORDER");

  // An aborted append gives the history back without its events.
  t = begin_ok(s, "a", 6, true, json::array({user("dropped")}));
  EXPECT_EQ(t.history.size(), 2u);
  s.abort(std::move(t));
  t = begin_ok(s, "a", 6, true, json::array());
  EXPECT_EQ(t.history, json::array({user("hi")}));
  EXPECT_EQ(t.state_text(), R"([{"content":"hi","role":"user"}])");
  s.abort(std::move(t));
  // A session whose first turn is aborted is forgotten.
  t = begin_ok(s, "b", std::nullopt, false, json::array({user("x")}));
  s.abort(std::move(t));
  EXPECT_EQ(s.size(), 1u);
  t = begin_ok(s, "a", 6, true, json::array());
  expect_holds(s, {&t});
  s.abort(std::move(t));
}

// The budget counts what holding a session costs: its JSON as kept (several times its text), its
// rendering and the entry; json_held_bytes agrees with malloc's own count.
TEST(session_table, the_budget_counts_what_a_session_holds) {
  const auto before = mallinfo2().uordblks;
  json history = json::array();
  for (int i = 0; i < 500; ++i) {
    history.push_back(user("turn " + std::to_string(i) + " of a session where the agent asks for something long"));
    history.push_back({{"role", "tool"}, {"ok", true}, {"output", {{"n", i}, {"status", "a status longer than sixteen"}}}});
  }
  const auto grew = mallinfo2().uordblks - before;
  EXPECT_NEAR(static_cast<double>(json_held_bytes(history)), static_cast<double>(grew), 0.01 * static_cast<double>(grew));
  EXPECT_GT(json_held_bytes(history), 4 * render_json(history, true).size());

  session_table s({});
  session_turn t = begin_ok(s, "a", std::nullopt, false, std::move(history));
  expect_holds(s, {&t});
  s.commit(std::move(t));
  s.release("a");
  t = begin_ok(s, "a", std::nullopt, true, json::array({user("one more")}));
  expect_holds(s, {&t});
}

TEST(session_table, one_history_over_its_limit_is_refused) {
  session_limits l;
  l.max_history_bytes = 100;
  session_table s(l);
  EXPECT_EQ(code(s, "big", std::nullopt, false, json::array({user(std::string(100, 'x'))})), "HISTORY_TOO_LARGE");
  EXPECT_EQ(s.size(), 0u);
  EXPECT_EQ(code(s, "small", std::nullopt, false, json::array({user(std::string(50, 'x'))})), "ok");
}

// Past max_sessions a new session evicts the least recently used one with nothing in flight; an
// agent that comes back to it is told to send its full history.
TEST(session_table, a_new_session_evicts_the_least_recently_used_idle_one) {
  session_limits l;
  l.max_sessions = 2;
  session_table s(l);
  hold(s, "a", json::array({user("x")}));
  hold(s, "b", json::array({user("y")}));
  session_turn t = begin_ok(s, "a", std::nullopt, true, json::array({user("a again")}));  // "b" is now the oldest
  s.commit(std::move(t));
  s.release("a");
  EXPECT_EQ(code(s, "c", std::nullopt, false, json::array({user("z")})), "ok");
  EXPECT_EQ(s.size(), 2u);
  EXPECT_EQ(s.counted().evicted, 1u);
  const std::string why = message(s, "b", true, json::array({user("b again")}));
  EXPECT_NE(why.find("forgotten to make room"), std::string::npos) << why;
  EXPECT_NE(why.find("send the full history"), std::string::npos) << why;
  EXPECT_EQ(code(s, "b", std::nullopt, true, json::array()), "UNKNOWN_SESSION");
  EXPECT_EQ(begin_ok(s, "a", std::nullopt, true, json::array()).history.size(), 2u);
}

// A session with work in flight elsewhere (an agent-run tool's result awaited, escalation work:
// has_work) is evicted only after every idle one; a session with a turn out never is. Only when
// every session has a turn out is a new one refused.
TEST(session_table, sessions_with_work_in_flight_are_evicted_last) {
  session_limits l;
  l.max_sessions = 3;
  std::string with_work = "a";
  session_table s(l, [&](const std::string& session) { return session == with_work; });
  hold(s, "a", json::array({user("x")}));
  hold(s, "b", json::array({user("y")}));
  s.await_tool("b", "d-1");
  hold(s, "idle", json::array({user("z")}));
  EXPECT_EQ(code(s, "c", std::nullopt, false, json::array({user("w")})), "ok");  // busy from now on
  EXPECT_EQ(code(s, "idle", std::nullopt, true, json::array()), "UNKNOWN_SESSION");  // the idle one went first
  EXPECT_EQ(s.counted().evicted, 1u);
  // No idle one left: the least recently used with work elsewhere, "a".
  EXPECT_EQ(code(s, "d", std::nullopt, false, json::array({user("v")})), "ok");
  EXPECT_EQ(code(s, "a", std::nullopt, true, json::array()), "UNKNOWN_SESSION");
  // An agent-run tool reported: "b" has nothing in flight again.
  s.tool_reported("b", "d-other");  // another decision's result: "b" still waits
  s.tool_reported("b", "d-1");
  EXPECT_EQ(code(s, "e", std::nullopt, false, json::array({user("u")})), "ok");
  EXPECT_EQ(code(s, "b", std::nullopt, true, json::array()), "UNKNOWN_SESSION");
  // Every session has a turn out ("c", "d", "e"): refused.
  EXPECT_EQ(code(s, "f", std::nullopt, false, json::array({user("t")})), "TOO_MANY_SESSIONS");
  EXPECT_EQ(s.size(), 3u);
  EXPECT_EQ(s.counted().evicted, 3u);
}

// Looking past a session with work in flight does not make it younger: once free, it is still the
// least recently used.
TEST(session_table, eviction_keeps_the_order_of_use) {
  session_limits l;
  l.max_sessions = 3;
  session_table s(l);
  hold(s, "a", json::array({user("x")}));
  s.await_tool("a", "d-1");
  hold(s, "b", json::array({user("y")}));
  hold(s, "c", json::array({user("z")}));
  hold(s, "d", json::array({user("w")}));  // "a" waits: "b" goes
  EXPECT_EQ(code(s, "b", std::nullopt, true, json::array()), "UNKNOWN_SESSION");
  s.tool_reported("a", "d-1");
  hold(s, "e", json::array({user("v")}));  // "a" is now the least recently used with nothing in flight
  EXPECT_EQ(code(s, "a", std::nullopt, true, json::array()), "UNKNOWN_SESSION");
  EXPECT_EQ(code(s, "c", std::nullopt, true, json::array()), "ok");
}

// The bytes the sessions hold are bounded the same way: idle ones make room.
TEST(session_table, the_byte_budget_evicts_idle_sessions) {
  session_table probe({});
  hold(probe, "a", json::array({user(std::string(50, 'x'))}));
  const std::size_t one = probe.held_bytes();
  session_limits l;
  l.max_history_bytes_total = 2 * one + one / 2;
  session_table s(l);
  hold(s, "a", json::array({user(std::string(50, 'x'))}));
  hold(s, "b", json::array({user(std::string(50, 'x'))}));
  hold(s, "c", json::array({user(std::string(50, 'x'))}));
  EXPECT_LE(s.held_bytes(), l.max_history_bytes_total);
  EXPECT_EQ(s.counted().evicted, 1u);
  EXPECT_EQ(code(s, "a", std::nullopt, true, json::array()), "UNKNOWN_SESSION");
  // A history that grows past the budget evicts another, never itself.
  session_turn t = begin_ok(s, "b", std::nullopt, true, json::array({user(std::string(400, 'y'))}));
  EXPECT_LE(s.held_bytes(), l.max_history_bytes_total);
  EXPECT_EQ(s.size(), 1u);
  s.abort(std::move(t));
}

TEST(session_table, idle_sessions_make_room) {
  session_limits l;
  l.max_sessions = 1;
  l.idle = std::chrono::seconds(0);
  session_table s(l);
  session_turn a = begin_ok(s, "a", std::nullopt, false, json::array({user("x")}));
  EXPECT_EQ(code(s, "b", std::nullopt, false, json::array()), "TOO_MANY_SESSIONS");  // "a" is busy
  s.commit(std::move(a));
  s.release("a");
  s.await_tool("a", "d-1");  // idle past the limit: forgotten even so
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(code(s, "b", std::nullopt, false, json::array({user("y")})), "ok");
  EXPECT_EQ(s.size(), 1u);
  EXPECT_EQ(s.counted().expired, 1u);
  EXPECT_NE(message(s, "a", true, json::array()).find("idle"), std::string::npos);
}

// A refused first turn leaves no empty entry behind (it would count towards max_sessions).
TEST(session_table, a_refused_first_turn_leaves_no_session) {
  session_limits l;
  l.max_history_bytes = 100;
  l.max_sessions = 1;
  session_table s(l);
  EXPECT_EQ(code(s, "big", std::nullopt, false, json::array({user(std::string(100, 'x'))})), "HISTORY_TOO_LARGE");
  EXPECT_EQ(s.size(), 0u);
  session_turn a = begin_ok(s, "a", std::nullopt, false, json::array({user(std::string(50, 'x'))}));
  EXPECT_EQ(code(s, "c", std::nullopt, false, json::array({user(std::string(50, 'x'))})), "TOO_MANY_SESSIONS");
  EXPECT_EQ(s.size(), 1u);
  s.abort(std::move(a));
  EXPECT_EQ(s.size(), 0u);
  EXPECT_EQ(s.held_bytes(), 0u);
}

// end(): forgotten now, or when the turn out comes back; idempotent; the name may start again.
TEST(session_table, end_forgets_now_or_when_the_turn_is_handed_back) {
  session_table s({});
  hold(s, "a", json::array({user("x")}));
  EXPECT_EQ(s.end("a"), session_table::end_result::ended);
  EXPECT_EQ(s.size(), 0u);
  EXPECT_EQ(s.held_bytes(), 0u);
  EXPECT_EQ(s.end("a"), session_table::end_result::ended);  // again: no error
  EXPECT_EQ(s.end("never"), session_table::end_result::unknown);
  EXPECT_NE(message(s, "a", true, json::array()).find("ended"), std::string::npos);

  session_turn b = begin_ok(s, "b", std::nullopt, false, json::array({user("y")}));
  EXPECT_EQ(s.end("b"), session_table::end_result::pending);
  EXPECT_EQ(code(s, "b", std::nullopt, false, json::array()), "SESSION_BUSY");
  s.commit(std::move(b));
  EXPECT_TRUE(s.release("b"));
  EXPECT_EQ(s.size(), 0u);

  hold(s, "c", json::array({user("z")}));
  session_turn c = begin_ok(s, "c", std::nullopt, true, json::array({user("refused")}));
  EXPECT_EQ(s.end("c"), session_table::end_result::pending);
  EXPECT_TRUE(s.abort(std::move(c)));
  EXPECT_EQ(s.size(), 0u);
  EXPECT_EQ(s.counted().ended, 3u);

  EXPECT_EQ(code(s, "a", std::nullopt, false, json::array({user("afresh")})), "ok");  // the name again
}

// A decide frame's events and media as parse_frame takes them out.
protocol::decide_frame parsed(json events, bool append = false) {
  json id;
  auto f = protocol::parse_frame(
      render_json(json{{"type", "decide"}, {"session", "m"}, {append ? "append" : "history", std::move(events)}}, false),
      request_limits{}, id);
  EXPECT_TRUE(f) << (f ? "" : f.error().message);
  return f ? std::get<protocol::decide_frame>(std::move(*f)) : protocol::decide_frame{};
}

session_turn begin_media(session_table& s, std::optional<std::int64_t> turn, bool append, json events) {
  protocol::decide_frame f = parsed(std::move(events), append);
  auto t = s.begin("m", turn, append, std::move(f.events), std::move(f.media));
  EXPECT_TRUE(t) << (t ? "" : t.error().message);
  return t ? std::move(*t) : session_turn{};
}

json seen(const std::string& text, json images, json audio = nullptr) {
  json e = user(text);
  e["images"] = std::move(images);
  if (!audio.is_null()) e["audio"] = std::move(audio);
  return e;
}

std::vector<std::string> names(const session_turn& t) {
  std::vector<std::string> out;
  for (const tools::history_item& m : t.media) out.push_back(tools::placeholder(m.kind, m.number) + "@" + std::to_string(m.event) + "=" + m.item.data);
  return out;
}

// Items are named per kind across the history, in event order, and the names stay put.
TEST(session_table, media_items_become_placeholders_numbered_across_turns) {
  session_table s({});
  session_turn t = begin_media(s, std::nullopt, false,
                               json::array({seen("first", json::array({"a.png", "b.png"}), json::array({"x.wav"})), user("no media"),
                                            seen("then", json::array({"c.png"}))}));
  EXPECT_EQ(t.state_text(), R"([{"audio":["audio 1"],"content":"first","images":["image 1","image 2"],"role":"user"},)"
                            R"({"content":"no media","role":"user"},{"content":"then","images":["image 3"],"role":"user"}])");
  EXPECT_EQ(names(t), (std::vector<std::string>{"image 1@0=a.png", "image 2@0=b.png", "audio 1@0=x.wav", "image 3@2=c.png"}));
  const std::string rendered_before = t.rendered;
  s.commit(std::move(t));
  s.release("m");

  t = begin_media(s, std::nullopt, true, json::array({seen("next", json::array({"d.png"}), json::array({"y.wav"}))}));
  EXPECT_TRUE(t.rendered.starts_with(rendered_before)) << "the rendered prefix stays as it was";
  EXPECT_TRUE(t.state_text().ends_with(R"({"audio":["audio 2"],"content":"next","images":["image 4"],"role":"user"}])"))
      << t.state_text();
  EXPECT_EQ(names(t).back(), "audio 2@3=y.wav");
  EXPECT_EQ(names(t)[4], "image 4@3=d.png");
  // Refused after begin: the session gets its items back without this turn's.
  s.abort(std::move(t));
  t = begin_media(s, std::nullopt, true, json::array({seen("again", json::array({"e.png"}))}));
  EXPECT_EQ(names(t).back(), "image 4@3=e.png");
  EXPECT_EQ(t.media.size(), 5u);
  s.commit(std::move(t));
  s.release("m");

  // A full history starts again at 1.
  t = begin_media(s, std::nullopt, false, json::array({seen("restart", json::array({"f.png"}))}));
  EXPECT_EQ(t.state_text(), R"([{"content":"restart","images":["image 1"],"role":"user"}])");
  EXPECT_EQ(names(t), (std::vector<std::string>{"image 1@0=f.png"}));
}

// The items' bytes count against the history's limits; the state hash covers them.
TEST(session_table, media_bytes_count_and_the_state_hash_covers_them) {
  session_limits l;
  l.max_history_bytes = 200;
  session_table s(l);
  const std::string big = "data:image/png;base64," + std::string(200, 'A');
  protocol::decide_frame f = parsed(json::array({seen("look", json::array({big}))}));
  auto refused = s.begin("m", std::nullopt, false, std::move(f.events), std::move(f.media));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, "HISTORY_TOO_LARGE");
  EXPECT_NE(refused.error().message.find("222 of them media"), std::string::npos) << refused.error().message;
  EXPECT_EQ(s.size(), 0u);

  session_table a({}), b({});
  session_turn ta = begin_media(a, std::nullopt, false, json::array({seen("look", json::array({"data:image/png;base64,AAAA"}))}));
  session_turn tb = begin_media(b, std::nullopt, false, json::array({seen("look", json::array({"data:image/png;base64,AAAB"}))}));
  EXPECT_EQ(ta.state_text(), tb.state_text());
  EXPECT_NE(ta.state_hash(), tb.state_hash());
  request r;
  r.images.push_back(ta.media[0].item);
  EXPECT_EQ(ta.state_hash(), state_hash(ta.state_text(), &r));
  EXPECT_EQ(ta.media_bytes, std::string("data:image/png;base64,AAAA").size());
  expect_holds(a, {&ta});
}

}  // namespace
}  // namespace baton
