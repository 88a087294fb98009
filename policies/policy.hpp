// The policy: hard rules first (deny, always escalate, risk ceiling, questions that
// force escalation), then confidence lanes per tool, and what an engine failure does.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/answers.hpp"
#include "core/error.hpp"
#include "core/json.hpp"
#include "tools/registry.hpp"

namespace baton::policies {

struct lane {
  double execute = 1;   // confidence ≥ execute → execute
  double fallback = 1;  // else confidence ≥ fallback → fallback, else escalate
};

// A question whose answer forces escalation: a noul's P(true) or a score above the threshold.
struct escalation_trigger {
  enum kind { noul_above, score_above };
  std::string question;
  kind when = noul_above;
  double threshold = 0;
};

enum class failure_action { escalate, deny };

// What an escalation gives a person (docs/escalations.md): how long, and what happens when nobody
// answers in time: deny, or execute the escalated decision's tool with its arguments.
struct escalation_terms {
  long long deadline_s = 900;
  bool execute_on_deadline = false;
};

// `audit:` (docs/policy-workflow.md): a share of the decisions the policy would execute is
// escalated anyway (lane "audit"), so that people's answers label confident decisions too and
// `baton calibrate` can measure precision above the execute threshold. Sampled from the decision
// id, so a replay of the log draws the same decisions. When nobody answers in time, the terms
// decide: by default the decision the policy made runs (an audit only asks for a label).
struct audit_section {
  double rate = 0;  // [0, 1]
  escalation_terms terms{900, true};
};

struct policy {
  confidence_metric metric = confidence_metric::p_max;
  std::vector<std::string> deny;
  std::vector<std::string> always_escalate;
  std::optional<tools::risk_level> max_risk;
  std::vector<escalation_trigger> escalate_when;  // in file order: the first that fires is reported
  lane default_lane;
  std::vector<std::pair<std::string, lane>> tool_lanes;  // tool id → lane, in file order
  // `fallback_lanes`: the lanes for the fallback engine's answers (its own calibration); absent:
  // the same lanes as the first pass.
  struct lane_set {
    lane default_lane;
    std::vector<std::pair<std::string, lane>> tool_lanes;
  };
  std::optional<lane_set> fallback_lanes;
  failure_action on_engine_error = failure_action::escalate;
  // `escalation`: the default terms and per-tool ones (tool id → terms), in file order.
  escalation_terms escalation;
  std::vector<std::pair<std::string, escalation_terms>> tool_escalation;
  bool escalation_configured = false;  // the section is present (it counts in the hash only then)
  std::optional<audit_section> audit;  // counts in the hash only when present
  std::string hash;  // "sha256:…" of canonical_json()
  // Where things were written (`baton check`): "confidence", "rules.max_risk", "rules.deny.ID",
  // "rules.always_escalate.ID", "rules.escalate_when.N" (from 0), "lanes.default", "lanes.tools.ID",
  // "fallback_lanes", "fallback_lanes.default", "fallback_lanes.tools.ID", "escalation.tools.ID".
  tools::source_lines source;

  // Sorted keys; deny and always_escalate are sets (sorted), escalate_when keeps its order.
  std::string canonical_json() const;
};

struct action {
  enum kind { execute, fallback, escalate, deny, finish };
  kind what = escalate;
  std::string tool;       // the chosen tool (or "finish"); empty after an engine failure
  double confidence = 0;  // of the tool choice, per the policy's metric
  std::string lane;       // what decided: "rule:deny", "lane:default", "on_engine_error", …
  json arguments = json::object();  // the chosen tool's choice and boolean parameters
};

std::string_view to_string(action::kind k) noexcept;

// The confidence in `option` of a choice under the metric: p_max its probability; margin how far
// above an even share of the n options it is, (n·p − 1)/(n − 1) in [0, 1]. For the engine's own
// choice (its most probable option) this is choice_confidence; for a call, or a choice made in two
// stages (another option may hold more: a group not asked about), it is that option's: what the
// policy's lanes read, and what `baton calibrate` fits. Negative when the choice has no such option.
double confidence_in(const choice_answer& c, std::string_view option, confidence_metric metric);

// The lane `tool`'s confidence is held against: its own, else the default; from the fallback
// engine's lanes (`fallback_lanes`, when the policy has them) for the fallback engine's answers.
// `name` is what a decision records: "lane:TOOL" or "lane:default".
struct lane_choice {
  const lane& thresholds;
  std::string name;
};
lane_choice lane_for(const policy& p, std::string_view tool, bool after_fallback = false);

// The terms of an escalation of `tool` ("" after an engine failure: the defaults, and deny); an
// escalation the audit lane made (`lane` "audit" or "fallback:audit") has the audit's terms.
escalation_terms escalation_terms_for(const policy& p, std::string_view tool, std::string_view lane = {});

// "audit" or "fallback:audit": the lanes of decisions the audit sampled.
bool is_audit_lane(std::string_view lane);

// Whether the decision `decision_id` falls in an audit sample of `rate`: the first 64 bits of the
// id's sha256 as a fraction of 2^64, below `rate`. Ids are random, so the share is `rate`.
bool audit_sampled(double rate, std::string_view decision_id);
// `a` itself, or, when it executes a tool and `decision_id` is sampled under the policy's audit
// rate, an escalation of the same tool and arguments with lane "audit" ("fallback:audit" after a
// fallback). Applied once the decision has its id: the live server and `baton replay` alike.
action audit(const policy& p, action a, std::string_view decision_id);

// 422 INVALID_POLICY, message "FILE:LINE: reason", for the first problem: unknown keys, tools or
// questions, a bad metric, thresholds outside [0, 1], fallback above execute, …
result<policy> parse_policy(std::string_view yaml_text, std::string_view file_name,
                            const tools::registry& registry);
result<policy> load_policy(const std::filesystem::path& file, const tools::registry& registry);

// The decision for one answered request. `finish` is not a tool: only escalate_when and the
// default lane apply (confident → finish, else escalate). An answer set that does not match the
// registry (no `tool` choice, an unknown option, a missing parameter or trigger answer) fails
// closed like an engine failure.
action decide_action(const policy& p, const tools::registry& registry, const response& answers);

// The decision on a call the agent made itself (baton as an MCP gateway): `tool` with `arguments`
// as called, its confidence the engine's probability of that tool under the policy's metric (p_max:
// the probability; margin: how far above an even share of the options), then the same rules and
// lanes. Null `answers`, or answers without that tool's probability: the tool's own rules (deny,
// always_escalate, max_risk) where one holds, else on_engine_failure;
// the action keeps the call's tool and arguments whatever decided, so that a person approves, and
// baton runs, exactly the call. `after_fallback`: the fallback engine's answers, as in
// decide_after_fallback.
action judge_call(const policy& p, const tools::registry& registry, const response* answers, std::string_view tool,
                  const json& arguments, bool after_fallback);

// The action as it runs, once the decision has its answers (live and in `baton replay` alike): the
// tool's text arguments from the registry and `proposal` (tools::add_text_arguments); then an
// execute of an MCP tool whose required arguments are still missing escalates instead, lane
// "rule:missing_argument:NAME": baton does not run it, and the person who decides can supply them.
action complete(const tools::registry& registry, action a, const json& proposal);

// A turn's action before complete() and audit(), live and in `baton replay` alike: an agent's own
// call (`call`: `proposal` is {"tool","arguments"}) by judge_call; a chosen tool's by
// decide_action or, for a second pass, decide_after_fallback; without answers (the engine failed)
// on_engine_failure or on_fallback_failure.
action decide_turn(const policy& p, const tools::registry& registry, const response* answers, const json& proposal, bool call,
                   bool after_fallback);

// A logged decision decided again on `answers` as the live server decides (`baton replay`):
// decide_turn, a call being one whose logged proposal says `"call": true`; then complete() and
// audit().
action redecide(const policy& p, const tools::registry& registry, const response& answers, const json& proposal,
                bool after_fallback, std::string_view decision_id);

// What an engine error or timeout becomes: escalate or deny, lane "on_engine_error".
action on_engine_failure(const policy& p);

// The decision on the fallback engine's answers (only a person ends the chain): the
// same rules and lanes, but what would fall back again escalates. The lane says it came after a
// fallback: "fallback:lane:default", "fallback:rule:deny", …
action decide_after_fallback(const policy& p, const tools::registry& registry, const response& answers);
// The fallback engine failed or timed out: on_engine_failure, lane "fallback:on_engine_error".
action on_fallback_failure(const policy& p);

}  // namespace baton::policies
