#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "policies/policy.hpp"
#include "policy_fixture.hpp"

namespace baton::policies {
namespace {

using tools::registry;
using test::parse_ok;
using test::test_registry;


const char* policy_yaml = R"(confidence: p_max
rules:
  deny: [d]
  always_escalate: [e]
  max_risk: medium
  escalate_when:
    - {question: needs_person, noul_above: 0.7}
    - {question: urgency, score_above: 2.5}
lanes:
  default: {execute: 0.85, fallback: 0.5}
  tools:
    b: {execute: 0.9, fallback: 0.6}
on_engine_error: escalate
)";

struct answers_spec {
  std::string tool;
  double p = 0.9;  // of the chosen tool; the rest is spread evenly over the other options
  double needs_person = 0.1;
  double urgency = 1.0;
  std::string mode = "x";
  double notify = 0.2;
};

response make_answers(const answers_spec& s) {
  const std::vector<std::string> options{"a", "b", "c", "d", "e", "finish"};
  choice_answer tool{s.tool, 0, {}};
  for (const std::string& o : options) {
    tool.probabilities.emplace_back(o, o == s.tool ? s.p : (1 - s.p) / (options.size() - 1));
  }
  choice_answer mode{s.mode, 0, {{"x", s.mode == "x" ? 0.8 : 0.2}, {"y", s.mode == "y" ? 0.8 : 0.2}}};
  score_answer urgency;
  urgency.score = s.urgency;
  response r;
  r.answers = {{"tool", tool},
               {"a.mode", mode},
               {"a.notify", noul_answer{s.notify}},
               {"urgency", urgency},
               {"needs_person", noul_answer{s.needs_person}}};
  return r;
}

struct decision_case {
  const char* name;
  answers_spec answers;
  confidence_metric metric;
  action::kind what;
  const char* lane;
};

using enum confidence_metric;

const std::vector<decision_case> decision_cases = {
    {"deny", {"d", 0.99}, p_max, action::deny, "rule:deny"},
    {"deny before escalate_when", {"d", 0.99, 0.9}, p_max, action::deny, "rule:deny"},
    {"always_escalate", {"e", 0.99}, p_max, action::escalate, "rule:always_escalate"},
    {"max_risk", {"c", 0.99}, p_max, action::escalate, "rule:max_risk"},
    {"medium risk passes max_risk", {"b", 0.99}, p_max, action::execute, "lane:b"},
    {"needs_person above", {"a", 0.99, 0.71}, p_max, action::escalate, "rule:escalate_when:needs_person"},
    {"needs_person at the threshold", {"a", 0.99, 0.7}, p_max, action::execute, "lane:default"},
    {"urgency above", {"a", 0.99, 0.1, 2.51}, p_max, action::escalate, "rule:escalate_when:urgency"},
    {"urgency at the threshold", {"a", 0.99, 0.1, 2.5}, p_max, action::execute, "lane:default"},
    {"first trigger wins", {"a", 0.99, 0.9, 3.0}, p_max, action::escalate, "rule:escalate_when:needs_person"},
    {"default execute at", {"a", 0.85}, p_max, action::execute, "lane:default"},
    {"default execute below", {"a", 0.8499}, p_max, action::fallback, "lane:default"},
    {"default fallback at", {"a", 0.5}, p_max, action::fallback, "lane:default"},
    {"default fallback below", {"a", 0.4999}, p_max, action::escalate, "lane:default"},
    {"tool lane execute at", {"b", 0.9}, p_max, action::execute, "lane:b"},
    {"tool lane execute below", {"b", 0.8999}, p_max, action::fallback, "lane:b"},
    {"tool lane fallback at", {"b", 0.6}, p_max, action::fallback, "lane:b"},
    {"tool lane fallback below", {"b", 0.5999}, p_max, action::escalate, "lane:b"},
    // Six options: margin = (6·0.86 − 1)/5 = 0.832, below execute where p_max 0.86 is above it.
    {"p_max executes", {"a", 0.86}, p_max, action::execute, "lane:default"},
    {"margin falls back", {"a", 0.86}, margin, action::fallback, "lane:default"},
    {"margin escalates", {"a", 0.55}, margin, action::escalate, "lane:default"},
    {"finish at", {"finish", 0.85}, p_max, action::finish, "lane:default"},
    {"finish below", {"finish", 0.8499}, p_max, action::escalate, "lane:default"},
    {"finish under a trigger", {"finish", 0.99, 0.9}, p_max, action::escalate, "rule:escalate_when:needs_person"},
};

TEST(Policy, DecisionTable) {
  for (const decision_case& c : decision_cases) {
    policy p = parse_ok(policy_yaml);
    p.metric = c.metric;
    const action a = decide_action(p, test_registry(), make_answers(c.answers));
    EXPECT_EQ(to_string(a.what), to_string(c.what)) << c.name;
    EXPECT_EQ(a.lane, c.lane) << c.name;
    EXPECT_EQ(a.tool, c.answers.tool) << c.name;
  }
}

TEST(Policy, AfterAFallbackOnlyAPersonIsLeft) {
  const policy p = parse_ok(policy_yaml);
  action a = decide_after_fallback(p, test_registry(), make_answers({"a", 0.9}));
  EXPECT_EQ(to_string(a.what), "execute");
  EXPECT_EQ(a.lane, "fallback:lane:default");
  a = decide_after_fallback(p, test_registry(), make_answers({"a", 0.6}));  // would fall back again
  EXPECT_EQ(to_string(a.what), "escalate");
  EXPECT_EQ(a.lane, "fallback:lane:default");
  EXPECT_EQ(a.tool, "a");
  a = decide_after_fallback(p, test_registry(), make_answers({"d", 0.99}));
  EXPECT_EQ(to_string(a.what), "deny");
  EXPECT_EQ(a.lane, "fallback:rule:deny");
  a = on_fallback_failure(p);
  EXPECT_EQ(to_string(a.what), "escalate");
  EXPECT_EQ(a.lane, "fallback:on_engine_error");

  // The larger model's own lanes: 0.75 executes after a fallback, not on the first pass.
  const policy own = parse_ok(std::string(policy_yaml) + "fallback_lanes:\n  default: {execute: 0.7, fallback: 0.7}\n");
  ASSERT_TRUE(own.fallback_lanes);
  EXPECT_EQ(to_string(decide_action(own, test_registry(), make_answers({"a", 0.75})).what), "fallback");
  a = decide_after_fallback(own, test_registry(), make_answers({"a", 0.75}));
  EXPECT_EQ(to_string(a.what), "execute");
  EXPECT_EQ(a.lane, "fallback:lane:default");
  EXPECT_EQ(to_string(decide_after_fallback(own, test_registry(), make_answers({"a", 0.69})).what), "escalate");
  EXPECT_NE(own.hash, p.hash);
}

// A call the agent made itself (the MCP gateway): the engine's probability of that tool is its
// confidence, whichever tool the engine liked best, and what decides keeps the call as made.
TEST(Policy, JudgeCallReadsTheCalledToolsProbability) {
  policy p = parse_ok(policy_yaml);
  const json args = {{"mode", "y"}, {"note", "as called"}};
  // The engine's top choice is `b` at 0.9; `a` has 0.02 of the rest.
  action a = judge_call(p, test_registry(), nullptr, "a", args, false);
  EXPECT_EQ(to_string(a.what), "escalate");  // no answers: on_engine_error
  EXPECT_EQ(a.lane, "on_engine_error");
  EXPECT_EQ(a.tool, "a");
  EXPECT_EQ(a.arguments, args);
  const response top_b = make_answers({"b", 0.9});
  a = judge_call(p, test_registry(), &top_b, "a", args, false);
  EXPECT_DOUBLE_EQ(a.confidence, 0.1 / 5);
  EXPECT_EQ(to_string(a.what), "escalate");
  EXPECT_EQ(a.lane, "lane:default");
  EXPECT_EQ(a.arguments, args);  // not the engine's a.mode = x
  const response top_a = make_answers({"a", 0.9});
  a = judge_call(p, test_registry(), &top_a, "a", args, false);
  EXPECT_EQ(to_string(a.what), "execute");
  EXPECT_DOUBLE_EQ(a.confidence, 0.9);
  EXPECT_EQ(a.arguments, args);
  // margin: how far above an even share of the 6 options.
  p.metric = confidence_metric::margin;
  EXPECT_DOUBLE_EQ(judge_call(p, test_registry(), &top_a, "a", args, false).confidence, (6 * 0.9 - 1) / 5);
  EXPECT_DOUBLE_EQ(judge_call(p, test_registry(), &top_b, "a", args, false).confidence, 0.0);
  p.metric = confidence_metric::p_max;
  // The rules read the called tool: denied, always escalated, above max_risk.
  const response top_d = make_answers({"d", 0.99});
  EXPECT_EQ(judge_call(p, test_registry(), &top_a, "d", args, false).lane, "rule:deny");
  EXPECT_EQ(judge_call(p, test_registry(), &top_d, "e", args, false).lane, "rule:always_escalate");
  EXPECT_EQ(judge_call(p, test_registry(), &top_a, "c", args, false).lane, "rule:max_risk");
  // After a fallback what would fall back again escalates; the lane says so.
  const response mid = make_answers({"a", 0.6});
  EXPECT_EQ(to_string(judge_call(p, test_registry(), &mid, "a", args, false).what), "fallback");
  a = judge_call(p, test_registry(), &mid, "a", args, true);
  EXPECT_EQ(to_string(a.what), "escalate");
  EXPECT_EQ(a.lane, "fallback:lane:default");
  // Without answers the called tool's own rules still hold: denied, not sent to a person.
  a = judge_call(p, test_registry(), nullptr, "d", args, false);
  EXPECT_EQ(to_string(a.what), "deny");
  EXPECT_EQ(a.lane, "rule:deny");
  EXPECT_EQ(judge_call(p, test_registry(), nullptr, "c", args, true).lane, "fallback:rule:max_risk");
  // A tool the answers do not offer (an unknown one) fails closed, keeping the call.
  a = judge_call(p, test_registry(), &top_a, "zzz", args, false);
  EXPECT_EQ(a.lane, "on_engine_error");
  EXPECT_EQ(a.tool, "zzz");
}

// An MCP tool whose inputSchema requires an argument nobody supplied is not run by baton: its
// execute becomes an escalation, where a person can supply it.
TEST(Policy, CompleteEscalatesAnMcpToolMissingARequiredArgument) {
  tools::registry r;
  tools::tool& t = r.tools.emplace_back();
  t.id = "srv.lookup";
  t.executor = {{"type", "mcp"}, {"input_schema", {{"type", "object"}, {"required", {"query"}}}}};
  t.parameters.push_back({"query", tools::parameter_type::text, "", json::object(), std::nullopt});
  action a;
  a.what = action::execute;
  a.tool = "srv.lookup";
  a.lane = "lane:default";
  action done = complete(r, a, nullptr);
  EXPECT_EQ(to_string(done.what), "escalate");
  EXPECT_EQ(done.lane, "rule:missing_argument:query");
  a.lane = "fallback:lane:default";
  EXPECT_EQ(complete(r, a, nullptr).lane, "fallback:rule:missing_argument:query");
  const json proposal = {{"tool", "srv.lookup"}, {"arguments", {{"query", "order 7"}}}};
  done = complete(r, a, proposal);
  EXPECT_EQ(to_string(done.what), "execute");
  EXPECT_EQ(done.arguments, json({{"query", "order 7"}}));
  // Only an execute changes: a denial stays one.
  a.what = action::deny;
  EXPECT_EQ(to_string(complete(r, a, nullptr).what), "deny");
}

TEST(Policy, ConfidenceFollowsThePolicyMetric) {
  policy p = parse_ok(policy_yaml);
  EXPECT_DOUBLE_EQ(decide_action(p, test_registry(), make_answers({"a", 0.86})).confidence, 0.86);
  p.metric = margin;
  EXPECT_DOUBLE_EQ(decide_action(p, test_registry(), make_answers({"a", 0.86})).confidence, (6 * 0.86 - 1) / 5);
}

TEST(Policy, Arguments) {
  const policy p = parse_ok(policy_yaml);
  answers_spec s{"a", 0.99};
  s.mode = "y";
  s.notify = 0.5;
  EXPECT_EQ(decide_action(p, test_registry(), make_answers(s)).arguments, (json{{"mode", "y"}, {"notify", true}}));
  s.mode = "x";
  s.notify = 0.4999;
  EXPECT_EQ(decide_action(p, test_registry(), make_answers(s)).arguments, (json{{"mode", "x"}, {"notify", false}}));
  EXPECT_EQ(decide_action(p, test_registry(), make_answers({"b", 0.99})).arguments, json::object());
  EXPECT_EQ(decide_action(p, test_registry(), make_answers({"finish", 0.99})).arguments, json::object());
}

TEST(Policy, EngineFailure) {
  const policy escalating = parse_ok(policy_yaml);
  std::string text = policy_yaml;
  text.replace(text.find("on_engine_error: escalate"), 25, "on_engine_error: deny");
  const policy denying = parse_ok(text);
  for (const policy* p : {&escalating, &denying}) {
    const auto expected = p == &denying ? action::deny : action::escalate;
    const action a = on_engine_failure(*p);
    EXPECT_EQ(a.what, expected);
    EXPECT_EQ(a.lane, "on_engine_error");
    EXPECT_EQ(a.tool, "");

    // Answers that do not match the registry fail closed the same way.
    response no_tool = make_answers({"a"});
    no_tool.answers.erase(no_tool.answers.begin());
    response unknown = make_answers({"zz"});
    response no_param = make_answers({"a"});
    no_param.answers.erase(no_param.answers.begin() + 1);
    response no_trigger = make_answers({"a"});
    no_trigger.answers.pop_back();
    for (const response* r : {&no_tool, &unknown, &no_param, &no_trigger}) {
      const action b = decide_action(*p, test_registry(), *r);
      EXPECT_EQ(b.what, expected);
      EXPECT_EQ(b.lane, "on_engine_error");
    }
  }
}

const char* base = "confidence: p_max\nlanes:\n  default: {execute: 0.85, fallback: 0.5}\non_engine_error: escalate\n";

struct load_case {
  std::string text;
  const char* message;
};

TEST(Policy, LoadErrors) {
  const std::string b = base;
  const std::vector<load_case> cases = {
      {"", "p.yaml:1: the policy is empty: it needs confidence, lanes and on_engine_error"},
      {"confidence: [p_max\n", "p.yaml:2: end of sequence flow not found"},
      {"confidence: pmax\nlanes:\n  default: {execute: 0.85, fallback: 0.5}\non_engine_error: escalate\n",
       "p.yaml:1: unknown confidence metric `pmax` (p_max or margin)"},
      {"lanes:\n  default: {execute: 0.85, fallback: 0.5}\non_engine_error: escalate\n",
       "p.yaml:1: the policy has no `confidence` (p_max or margin)"},
      {"confidence: p_max\non_engine_error: escalate\n", "p.yaml:1: the policy has no `lanes`"},
      {b + "extra: 1\n", "p.yaml:5: unknown key `extra` in the policy"},
      {b + "rules:\n  deny: [a, zz]\n", "p.yaml:6: unknown tool `zz` in `rules.deny`"},
      {b + "rules:\n  deny: [finish]\n", "p.yaml:6: unknown tool `finish` in `rules.deny`"},
      {b + "rules:\n  always_escalate: [a, a]\n", "p.yaml:6: tool `a` twice in `rules.always_escalate`"},
      {b + "rules:\n  deny: [a]\n  always_escalate: [b, a]\n",
       "p.yaml:7: tool `a` is both denied and always escalated"},
      {b + "rules:\n  max_risk: extreme\n", "p.yaml:6: unknown max_risk `extreme` (low, medium or high)"},
      {b + "rules:\n  ask: [a]\n", "p.yaml:6: unknown key `ask` in `rules`"},
      {b + "rules:\n  escalate_when:\n    - {question: zz, noul_above: 0.5}\n",
       "p.yaml:7: unknown question `zz` in escalate_when"},
      {b + "rules:\n  escalate_when:\n    - {question: urgency, noul_above: 0.5}\n",
       "p.yaml:7: escalate_when `urgency`: noul_above needs a noul question"},
      {b + "rules:\n  escalate_when:\n    - {question: tool, score_above: 1}\n",
       "p.yaml:7: escalate_when `tool`: score_above needs a score question"},
      {b + "rules:\n  escalate_when:\n    - {question: needs_person, noul_above: 1.2}\n",
       "p.yaml:7: escalate_when `needs_person`'s noul_above must be within [0, 1]"},
      {b + "rules:\n  escalate_when:\n    - {question: urgency, score_above: 3.5}\n",
       "p.yaml:7: escalate_when `urgency`'s score_above must be within [0, 3]"},
      {b + "rules:\n  escalate_when:\n    - {question: needs_person}\n",
       "p.yaml:7: an escalate_when entry needs exactly one of noul_above and score_above"},
      {"confidence: p_max\nlanes:\n  default: {execute: 1.5, fallback: 0.5}\non_engine_error: escalate\n",
       "p.yaml:3: the default lane's execute must be within [0, 1]"},
      {"confidence: p_max\nlanes:\n  default: {execute: 0.5, fallback: -0.1}\non_engine_error: escalate\n",
       "p.yaml:3: the default lane's fallback must be within [0, 1]"},
      {"confidence: p_max\nlanes:\n  default: {execute: 0.5, fallback: 0.6}\non_engine_error: escalate\n",
       "p.yaml:3: the default lane's fallback is above its execute"},
      {"confidence: p_max\nlanes:\n  default: {execute: high, fallback: 0.6}\non_engine_error: escalate\n",
       "p.yaml:3: the default lane's execute must be a number"},
      {"confidence: p_max\nlanes:\n  default: {execute: 0.9}\non_engine_error: escalate\n",
       "p.yaml:3: the default lane has no fallback"},
      {"confidence: p_max\nlanes:\n  default: {execute: 0.9, fallback: 0.5, retry: 1}\non_engine_error: escalate\n",
       "p.yaml:3: unknown key `retry` in the default lane"},
      {"confidence: p_max\nlanes:\n  tools: {}\non_engine_error: escalate\n", "p.yaml:3: `lanes` has no default"},
      {"confidence: p_max\nlanes:\n  default: {execute: 0.9, fallback: 0.5}\n  tools:\n    finish: {execute: 0.9, fallback: 0.5}\n"
       "on_engine_error: escalate\n",
       "p.yaml:5: unknown tool `finish` in `lanes.tools`"},
      {"confidence: p_max\nlanes:\n  default: {execute: 0.9, fallback: 0.5}\n  tools:\n    b: {execute: 0.5, fallback: 0.9}\n"
       "on_engine_error: escalate\n",
       "p.yaml:5: the lane of `b`'s fallback is above its execute"},
      {"confidence: p_max\nlanes:\n  default: {execute: 0.85, fallback: 0.5}\non_engine_error: retry\n",
       "p.yaml:4: unknown on_engine_error `retry` (escalate or deny)"},
      {"confidence: p_max\nlanes:\n  default: {execute: 0.85, fallback: 0.5}\n",
       "p.yaml:1: the policy has no `on_engine_error` (escalate or deny)"},
  };
  for (const load_case& c : cases) {
    auto p = parse_policy(c.text, "p.yaml", test_registry());
    ASSERT_FALSE(p.has_value()) << c.text;
    EXPECT_EQ(p.error().status, 422) << c.text;
    EXPECT_EQ(p.error().code, "INVALID_POLICY") << c.text;
    EXPECT_EQ(p.error().message, c.message) << c.text;
  }
}

TEST(Policy, GeneratedQuestionsAndEmptyRules) {
  const policy p = parse_ok(std::string(base) + "rules:\n  escalate_when:\n    - {question: a.notify, noul_above: 0.5}\n");
  ASSERT_EQ(p.escalate_when.size(), 1u);
  EXPECT_EQ(p.escalate_when[0].question, "a.notify");
  answers_spec s{"a", 0.99};
  s.notify = 0.6;
  EXPECT_EQ(decide_action(p, test_registry(), make_answers(s)).lane, "rule:escalate_when:a.notify");
  const policy plain = parse_ok(base);
  EXPECT_TRUE(plain.deny.empty());
  EXPECT_FALSE(plain.max_risk.has_value());
  EXPECT_EQ(decide_action(plain, test_registry(), make_answers({"c", 0.99})).what, action::execute);
}

TEST(Policy, HashIsCanonical) {
  const policy p = parse_ok(policy_yaml);
  EXPECT_EQ(p.hash.rfind("sha256:", 0), 0u);
  EXPECT_EQ(p.hash.size(), 7u + 64u);
  // Other key order, block style, set order of the tool lists: the same policy.
  const policy same = parse_ok(R"(on_engine_error: escalate
lanes:
  tools:
    b:
      fallback: 0.6
      execute: 0.9
  default: {fallback: 0.5, execute: 0.85}
rules:
  escalate_when:
    - {noul_above: 0.7, question: needs_person}
    - {score_above: 2.5, question: urgency}
  max_risk: medium
  always_escalate: [e]
  deny: [d]
confidence: p_max
)");
  EXPECT_EQ(same.hash, p.hash);
  std::string changed = policy_yaml;
  changed.replace(changed.find("0.85"), 4, "0.86");
  EXPECT_NE(parse_ok(changed).hash, p.hash);
  std::string reordered = policy_yaml;
  const std::string first = "    - {question: needs_person, noul_above: 0.7}\n";
  reordered.erase(reordered.find(first), first.size());
  reordered.insert(reordered.find("lanes:"), first);
  EXPECT_NE(parse_ok(reordered).hash, p.hash);  // trigger order decides which one is reported
}

TEST(Policy, AuditSection) {
  const policy plain = parse_ok(base);
  EXPECT_FALSE(plain.audit.has_value());
  const policy p = parse_ok(std::string(base) + "audit: {rate: 0.02}\n");
  ASSERT_TRUE(p.audit.has_value());
  EXPECT_EQ(p.audit->rate, 0.02);
  // By default an audit nobody answers runs what the policy decided, after the default deadline.
  EXPECT_TRUE(p.audit->terms.execute_on_deadline);
  EXPECT_EQ(p.audit->terms.deadline_s, 900);
  EXPECT_NE(p.hash, plain.hash);  // present: counted; absent: old policies keep their hash
  EXPECT_NE(parse_ok(std::string(base) + "audit: {rate: 0.03}\n").hash, p.hash);

  const policy terms = parse_ok(std::string(base) +
                                "escalation: {deadline_s: 60}\naudit: {rate: 0.5, on_deadline: deny}\n");
  EXPECT_FALSE(terms.audit->terms.execute_on_deadline);
  EXPECT_EQ(terms.audit->terms.deadline_s, 60);  // the policy's default deadline
  EXPECT_EQ(parse_ok(std::string(base) + "audit: {rate: 0.5, deadline_s: 30}\n").audit->terms.deadline_s, 30);

  const std::string b = base;
  const std::vector<load_case> cases = {
      {b + "audit: {}\n", "p.yaml:5: `audit` has no rate (the share of would-execute decisions a person checks, e.g. 0.02)"},
      {b + "audit: {rate: 2}\n", "p.yaml:5: `audit.rate` must be within [0, 1]"},
      {b + "audit: {rate: some}\n", "p.yaml:5: `audit.rate` must be a number"},
      {b + "audit: {rate: 0.1, share: 1}\n", "p.yaml:5: unknown key `share` in `audit`"},
      {b + "audit: {rate: 0.1, on_deadline: retry}\n", "p.yaml:5: unknown on_deadline `retry` (deny or execute)"},
  };
  for (const load_case& c : cases) {
    auto bad = parse_policy(c.text, "p.yaml", test_registry());
    ASSERT_FALSE(bad.has_value()) << c.text;
    EXPECT_EQ(bad.error().message, c.message) << c.text;
  }
}

TEST(Policy, AuditSamplesByDecisionId) {
  // Reproducible: the same id is drawn or not whatever calls it.
  EXPECT_EQ(audit_sampled(0.3, "d_123"), audit_sampled(0.3, "d_123"));
  EXPECT_FALSE(audit_sampled(0, "d_123"));
  EXPECT_TRUE(audit_sampled(1, "d_123"));
  // The share drawn is the rate: 10,000 ids at 2 % give 200 ± 3σ (σ = 14).
  int drawn = 0;
  for (int i = 0; i < 10000; ++i) drawn += audit_sampled(0.02, "d_" + std::to_string(i) + "x") ? 1 : 0;
  EXPECT_GT(drawn, 200 - 42);
  EXPECT_LT(drawn, 200 + 42);
  // A larger rate draws every id a smaller one draws (one uniform number per id).
  for (int i = 0; i < 1000; ++i) {
    const std::string id = "d_" + std::to_string(i);
    if (audit_sampled(0.1, id)) {
      EXPECT_TRUE(audit_sampled(0.2, id)) << id;
    }
  }
}

TEST(Policy, AuditTurnsOnlyExecutionsIntoEscalations) {
  const policy p = parse_ok(std::string(policy_yaml) + "audit: {rate: 1}\n");
  const action executed = decide_action(p, test_registry(), make_answers({"a", 0.99}));
  ASSERT_EQ(executed.what, action::execute);
  const action audited = audit(p, executed, "d_1");
  EXPECT_EQ(audited.what, action::escalate);
  EXPECT_EQ(audited.lane, "audit");
  EXPECT_EQ(audited.tool, "a");
  EXPECT_EQ(audited.confidence, executed.confidence);
  EXPECT_EQ(audited.arguments, executed.arguments);
  EXPECT_TRUE(is_audit_lane(audited.lane));
  // Everything else stays as decided: fallback, escalate, deny, finish.
  for (const answers_spec& s : {answers_spec{"a", 0.6}, answers_spec{"a", 0.3}, answers_spec{"d", 0.99},
                                answers_spec{"finish", 0.99}}) {
    const action a = decide_action(p, test_registry(), make_answers(s));
    const action same = audit(p, a, "d_1");
    EXPECT_EQ(same.what, a.what) << s.tool << " " << s.p;
    EXPECT_EQ(same.lane, a.lane) << s.tool << " " << s.p;
  }
  const action second = audit(p, decide_after_fallback(p, test_registry(), make_answers({"a", 0.99})), "d_2");
  EXPECT_EQ(second.what, action::escalate);
  EXPECT_EQ(second.lane, "fallback:audit");
  // No audit section, or an id outside the sample: unchanged.
  EXPECT_EQ(audit(parse_ok(policy_yaml), executed, "d_1").what, action::execute);
  const policy rare = parse_ok(std::string(policy_yaml) + "audit: {rate: 0.5}\n");
  int kept = 0;
  for (int i = 0; i < 100; ++i) kept += audit(rare, executed, "d_" + std::to_string(i)).what == action::execute;
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, 100);
}

TEST(Policy, AuditEscalationsHaveTheAuditsTerms) {
  const policy p = parse_ok(std::string(policy_yaml) +
                            "escalation:\n  deadline_s: 600\n  tools:\n    a: {deadline_s: 5}\naudit: {rate: 0.1, deadline_s: 120}\n");
  EXPECT_EQ(escalation_terms_for(p, "a").deadline_s, 5);
  EXPECT_FALSE(escalation_terms_for(p, "a").execute_on_deadline);
  EXPECT_EQ(escalation_terms_for(p, "a", "audit").deadline_s, 120);
  EXPECT_TRUE(escalation_terms_for(p, "a", "audit").execute_on_deadline);
  EXPECT_TRUE(escalation_terms_for(p, "a", "fallback:audit").execute_on_deadline);
  EXPECT_FALSE(escalation_terms_for(p, "a", "lane:default").execute_on_deadline);
}

TEST(Policy, ConfigLoadsAgainstTheConfigRegistry) {
  const auto r = tools::load_registry(BATON_SOURCE_DIR "/config/tools.yaml", request_limits::text_only());
  ASSERT_TRUE(r.has_value()) << r.error().message;
  const auto p = load_policy(BATON_SOURCE_DIR "/config/policy.yaml", *r);
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_EQ(p->metric, p_max);
  EXPECT_EQ(p->always_escalate, std::vector<std::string>{"send_payment"});
  EXPECT_EQ(p->max_risk, tools::risk_level::medium);
  EXPECT_EQ(p->escalate_when.size(), 2u);
  EXPECT_EQ(p->tool_lanes.size(), 2u);
  EXPECT_EQ(p->on_engine_error, failure_action::escalate);

  const auto missing = load_policy(BATON_SOURCE_DIR "/config/no-such-policy.yaml", *r);
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().message, BATON_SOURCE_DIR "/config/no-such-policy.yaml: cannot read the file (No such file or directory)");
}

}  // namespace
}  // namespace baton::policies
