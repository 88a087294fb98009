#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "policies/policy_check.hpp"
#include "policy_fixture.hpp"

namespace baton::policies {
namespace {

using tools::registry;
using test::parse_ok;
using test::test_registry;
using test::registry_yaml;


// Both global questions read, every threshold meaningful: nothing to say.
const char* clean_policy = R"(confidence: p_max
rules:
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

std::vector<finding> of_kind(const std::vector<finding>& all, const std::string& kind) {
  std::vector<finding> out;
  std::copy_if(all.begin(), all.end(), std::back_inserter(out), [&](const finding& f) { return f.kind == kind; });
  return out;
}

bool says(const finding& f, const std::string& text) { return f.message.find(text) != std::string::npos; }

// The findings on a policy text (which must parse) against the test registry.
std::vector<finding> check(std::string_view text, const check_options& options = {}) {
  return check_policy(parse_ok(text), test_registry(), options);
}

TEST(policy_check, a_clean_policy_has_nothing_to_say) {
  const auto found = check(clean_policy);
  for (const finding& f : found) ADD_FAILURE() << f.file << ":" << f.line << ": " << f.kind << ": " << f.message;
}

TEST(policy_check, parsers_keep_lines_outside_the_hash) {
  const policy p = parse_ok(clean_policy);
  EXPECT_EQ(p.source.file, "p.yaml");
  EXPECT_EQ(p.source.line("confidence"), 1);
  EXPECT_EQ(p.source.line("rules.always_escalate.e"), 3);
  EXPECT_EQ(p.source.line("rules.max_risk"), 4);
  EXPECT_EQ(p.source.line("rules.escalate_when.0"), 6);
  EXPECT_EQ(p.source.line("rules.escalate_when.1"), 7);
  EXPECT_EQ(p.source.line("lanes.default"), 9);
  EXPECT_EQ(p.source.line("lanes.tools.b"), 11);
  EXPECT_EQ(p.source.line("no.such.path"), 1);
  // The same policy two lines lower: other lines, the same hash.
  const policy lower = parse_ok(std::string("# a comment\n\n") + clean_policy);
  EXPECT_EQ(lower.source.line("lanes.tools.b"), 13);
  EXPECT_EQ(lower.hash, p.hash);

  const registry& r = test_registry();
  EXPECT_EQ(r.source.file, "tools.yaml");
  EXPECT_EQ(r.source.line("tools.a"), 2);
  EXPECT_EQ(r.source.line("tools.a.parameters.mode"), 5);
  EXPECT_EQ(r.source.line("tools.a.parameters.note"), 7);
  EXPECT_EQ(r.source.line("tools.e"), 11);
  EXPECT_EQ(r.source.line("questions.needs_person"), 15);
  const registry lower_r = tools::parse_registry(std::string("\n") + registry_yaml, "tools.yaml", {}).value();
  EXPECT_EQ(lower_r.source.line("questions.needs_person"), 16);
  EXPECT_EQ(lower_r.hash, r.hash);
}

TEST(policy_check, p_max_thresholds_at_or_below_one_over_n_are_always_met) {
  const auto found = check(R"(confidence: p_max
rules:
  escalate_when:
    - {question: needs_person, noul_above: 0.7}
    - {question: urgency, score_above: 2.5}
lanes:
  default: {execute: 0.85, fallback: 0.15}
  tools:
    a: {execute: 0.1, fallback: 0.1}
    b: {execute: 0.5, fallback: 0}
    d: {execute: 0.5, fallback: 0.17}
on_engine_error: escalate
)");
  const auto unreachable = of_kind(found, "lane_threshold_unreachable");
  ASSERT_EQ(unreachable.size(), 2u) << (found.empty() ? "" : found[0].message);
  // 0.15 ≤ 1/6: the default lane never escalates.
  EXPECT_EQ(unreachable[0].line, 7);
  EXPECT_TRUE(says(unreachable[0], "fallback (0.15) is always met")) << unreachable[0].message;
  EXPECT_TRUE(says(unreachable[0], "never escalates"));
  EXPECT_TRUE(says(unreachable[0], "1/6 (0.167)"));
  // a's execute 0.1: always executes (its fallback is not reported twice). b's fallback 0 says
  // "never" on purpose; d's 0.17 is above 1/6.
  EXPECT_EQ(unreachable[1].line, 9);
  EXPECT_TRUE(says(unreachable[1], "`lanes.tools.a`'s execute (0.1) is always met")) << unreachable[1].message;
  EXPECT_TRUE(says(unreachable[1], "always executes"));
  EXPECT_EQ(unreachable[1].file, "p.yaml");

  // The margin metric spans [0, 1]: the same thresholds can be missed.
  const auto margin = check(R"(confidence: margin
rules:
  escalate_when:
    - {question: needs_person, noul_above: 0.7}
    - {question: urgency, score_above: 2.5}
lanes:
  default: {execute: 0.85, fallback: 0.15}
  tools:
    a: {execute: 0.1, fallback: 0.1}
on_engine_error: escalate
)");
  EXPECT_TRUE(of_kind(margin, "lane_threshold_unreachable").empty());
}

TEST(policy_check, lanes_of_tools_a_rule_takes_first_never_decide) {
  const auto found = check(R"(confidence: p_max
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
    c: {execute: 0.9, fallback: 0.6}
    d: {execute: 0.9, fallback: 0.6}
    e: {execute: 0.9, fallback: 0.6}
on_engine_error: escalate
)");
  const auto never = of_kind(found, "lane_never_decides");
  ASSERT_EQ(never.size(), 3u);
  EXPECT_EQ(never[0].line, 13);
  EXPECT_TRUE(says(never[0], "the lane of `c`")) << never[0].message;
  EXPECT_TRUE(says(never[0], "its risk (high) is above `rules.max_risk` (medium)"));
  EXPECT_EQ(never[1].line, 14);
  EXPECT_TRUE(says(never[1], "`rules.deny` denies it"));
  EXPECT_EQ(never[2].line, 15);
  EXPECT_TRUE(says(never[2], "`rules.always_escalate` escalates it"));
}

TEST(policy_check, fallback_lanes_need_a_fallback_engine_and_only_their_execute_counts) {
  const char* text = R"(confidence: p_max
rules:
  escalate_when:
    - {question: needs_person, noul_above: 0.7}
    - {question: urgency, score_above: 2.5}
lanes:
  default: {execute: 0.85, fallback: 0.5}
fallback_lanes:
  default: {execute: 0.7, fallback: 0.7}
  tools:
    b: {execute: 0.9, fallback: 0.4}
    c: {execute: 0.1, fallback: 0.1}
on_engine_error: escalate
)";
  const auto without = check(text, {.fallback_engine = false});
  const auto unused = of_kind(without, "fallback_lanes_unused");
  ASSERT_EQ(unused.size(), 1u);
  EXPECT_EQ(unused[0].line, 8);
  EXPECT_TRUE(says(unused[0], "no `routing.fallback`"));

  const auto with = check(text, {.fallback_engine = true});
  EXPECT_TRUE(of_kind(with, "fallback_lanes_unused").empty());
  const auto fallback = of_kind(with, "fallback_lane_fallback_unused");
  ASSERT_EQ(fallback.size(), 1u);  // the default's fallback equals its execute; c's too
  EXPECT_EQ(fallback[0].line, 11);
  EXPECT_TRUE(says(fallback[0], "write fallback: 0.9")) << fallback[0].message;
  // Below 1/6, a second pass's execute is always met too.
  const auto unreachable = of_kind(with, "lane_threshold_unreachable");
  ASSERT_EQ(unreachable.size(), 1u);
  EXPECT_EQ(unreachable[0].line, 12);
  EXPECT_TRUE(says(unreachable[0], "always executes"));
}

TEST(policy_check, max_risk_high_escalates_nothing) {
  const auto found = check(R"(confidence: p_max
rules:
  max_risk: high
  escalate_when:
    - {question: needs_person, noul_above: 0.7}
    - {question: urgency, score_above: 2.5}
lanes:
  default: {execute: 0.85, fallback: 0.5}
on_engine_error: escalate
)");
  const auto never = of_kind(found, "max_risk_never_fires");
  ASSERT_EQ(never.size(), 1u);
  EXPECT_EQ(never[0].line, 3);
  EXPECT_TRUE(check(clean_policy).empty());  // max_risk: medium
}

TEST(policy_check, an_audit_that_draws_nothing_or_everything) {
  const std::string base = "confidence: p_max\nlanes:\n  default: {execute: 0.85, fallback: 0.5}\non_engine_error: escalate\n";
  for (const auto& [rate, kind] : {std::pair{"0", "audit_never_draws"}, std::pair{"1", "audit_draws_everything"}}) {
    const auto found = check(base + "audit:\n  rate: " + rate + "\n");
    const auto hits = of_kind(found, kind);
    ASSERT_EQ(hits.size(), 1u) << rate;
    EXPECT_EQ(hits[0].line, 6) << rate;  // the rate's own line
  }
  const auto sampled = check(base + "audit: {rate: 0.02}\n");
  EXPECT_TRUE(of_kind(sampled, "audit_never_draws").empty());
  EXPECT_TRUE(of_kind(sampled, "audit_draws_everything").empty());
  EXPECT_TRUE(check(std::string(clean_policy) + "audit: {rate: 0.02}\n").empty());
}

TEST(policy_check, triggers_that_never_fire_always_fire_or_are_shadowed) {
  const auto found = check(R"(confidence: p_max
rules:
  escalate_when:
    - {question: needs_person, noul_above: 1}
    - {question: urgency, score_above: 3}
    - {question: needs_person, noul_above: 0}
    - {question: urgency, score_above: 2.5}
    - {question: urgency, score_above: 1.5}
lanes:
  default: {execute: 0.85, fallback: 0.5}
on_engine_error: escalate
)");
  const auto never = of_kind(found, "trigger_never_fires");
  ASSERT_EQ(never.size(), 2u);
  EXPECT_EQ(never[0].line, 4);
  EXPECT_TRUE(says(never[0], "P(true) is never above 1"));
  EXPECT_EQ(never[1].line, 5);
  EXPECT_TRUE(says(never[1], "a score of 4 levels is never above 3")) << never[1].message;
  const auto always = of_kind(found, "trigger_always_fires");
  ASSERT_EQ(always.size(), 1u);
  EXPECT_EQ(always[0].line, 6);
  // needs_person: 0 fires whenever 1 would (line 4 reported). urgency: 3 (line 5) loses to 2.5,
  // which loses to 1.5 (line 7 reported, keeping line 8).
  const auto shadowed = of_kind(found, "trigger_shadowed");
  ASSERT_EQ(shadowed.size(), 3u);
  EXPECT_EQ(shadowed[0].line, 4);
  EXPECT_TRUE(says(shadowed[0], "the one on line 6 (noul_above 0)")) << shadowed[0].message;
  EXPECT_EQ(shadowed[1].line, 5);
  EXPECT_TRUE(says(shadowed[1], "the one on line 7 (score_above 2.5)")) << shadowed[1].message;
  EXPECT_EQ(shadowed[2].line, 7);
  EXPECT_TRUE(says(shadowed[2], "the one on line 8 (score_above 1.5)")) << shadowed[2].message;
  EXPECT_TRUE(says(shadowed[2], "`rule:escalate_when:urgency`"));
}

TEST(policy_check, a_trigger_on_a_parameter_reads_it_whatever_the_tool) {
  const auto found = check(R"(confidence: p_max
rules:
  escalate_when:
    - {question: needs_person, noul_above: 0.7}
    - {question: urgency, score_above: 2.5}
    - {question: a.notify, noul_above: 0.5}
lanes:
  default: {execute: 0.85, fallback: 0.5}
on_engine_error: escalate
)");
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, "trigger_on_parameter");
  EXPECT_EQ(found[0].line, 6);
  EXPECT_TRUE(says(found[0], "only when `a` is the tool")) << found[0].message;
}

TEST(policy_check, denied_tools_are_offered_and_their_parameters_asked_for_nothing) {
  const auto found = check(R"(confidence: p_max
rules:
  deny: [d, a]
  escalate_when:
    - {question: needs_person, noul_above: 0.7}
    - {question: urgency, score_above: 2.5}
lanes:
  default: {execute: 0.85, fallback: 0.5}
on_engine_error: escalate
escalation:
  tools:
    a: {deadline_s: 60}
    b: {deadline_s: 60}
)");
  const auto offered = of_kind(found, "denied_tool_offered");
  ASSERT_EQ(offered.size(), 2u);
  // Both on line 3, in list order.
  EXPECT_EQ(offered[0].line, 3);
  EXPECT_TRUE(says(offered[0], "`d` is denied")) << offered[0].message;
  EXPECT_FALSE(says(offered[0], "parameter"));
  EXPECT_TRUE(says(offered[1], "`a` is denied")) << offered[1].message;
  EXPECT_TRUE(says(offered[1], "parameter questions `a.mode`, `a.notify`"));
  EXPECT_FALSE(says(offered[1], "a.note"));  // a text parameter is no question
  const auto terms = of_kind(found, "escalation_terms_unused");
  ASSERT_EQ(terms.size(), 1u);
  EXPECT_EQ(terms[0].line, 12);
}

TEST(policy_check, global_questions_no_trigger_reads_are_reported_in_the_registry) {
  const auto found = check(R"(confidence: p_max
rules:
  escalate_when:
    - {question: urgency, score_above: 2.5}
lanes:
  default: {execute: 0.85, fallback: 0.5}
on_engine_error: escalate
)");
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, "question_unread");
  EXPECT_EQ(found[0].file, "tools.yaml");
  EXPECT_EQ(found[0].line, 15);
  EXPECT_TRUE(says(found[0], "question `needs_person`")) << found[0].message;
}

TEST(policy_check, findings_come_sorted_by_file_and_line) {
  const auto found = check(R"(confidence: p_max
rules:
  max_risk: high
  deny: [d]
lanes:
  default: {execute: 0.85, fallback: 0.1}
on_engine_error: escalate
)");
  ASSERT_EQ(found.size(), 5u);
  const std::vector<std::pair<std::string, int>> expected{
      {"p.yaml", 3}, {"p.yaml", 4}, {"p.yaml", 6}, {"tools.yaml", 14}, {"tools.yaml", 15}};
  for (std::size_t i = 0; i < found.size(); ++i) {
    EXPECT_EQ(found[i].file, expected[i].first) << i;
    EXPECT_EQ(found[i].line, expected[i].second) << i;
  }
}

// The repository's own configs: clean, but for the on-call example's customer_impact, a global
// question its policy never reads.
TEST(policy_check, the_repository_configs) {
  const std::string root = BATON_SOURCE_DIR;
  auto check = [&](const std::string& dir) {
    const auto r = tools::load_registry(root + "/" + dir + "/tools.yaml", {});
    EXPECT_TRUE(r) << (r ? "" : r.error().message);
    if (!r) return std::vector<finding>{};
    const auto p = load_policy(root + "/" + dir + "/policy.yaml", *r);
    EXPECT_TRUE(p) << (p ? "" : p.error().message);
    return p ? check_policy(*p, *r) : std::vector<finding>{};
  };
  for (const std::string dir : {"config", "config/examples/support"}) {
    for (const finding& f : check(dir)) ADD_FAILURE() << f.file << ":" << f.line << ": " << f.message;
  }
  const auto oncall = check("config/examples/oncall");
  ASSERT_EQ(oncall.size(), 1u);
  EXPECT_EQ(oncall[0].kind, "question_unread");
  EXPECT_TRUE(says(oncall[0], "`customer_impact`"));
}

}  // namespace
}  // namespace baton::policies
