// What `baton check` warns a policy author about: parts of a loaded policy and registry that can
// never decide anything, or that are paid for on every turn and never used. A pure function of
// what loaded; every finding points at the line to change and says why and what to do.
#pragma once

#include <string>
#include <vector>

#include "policies/policy.hpp"
#include "tools/registry.hpp"

namespace baton::policies {

struct finding {
  std::string file;
  int line = 1;
  std::string kind;     // stable, for machines and tests: "lane_never_decides", …
  std::string message;  // why, and what to do
};

struct check_options {
  bool fallback_engine = false;  // config/baton.yaml has routing.fallback
};

// In file order within each kind. The kinds (policies/README.md, "Checking a policy"):
//   lane_threshold_unreachable  with `confidence: p_max`, a lane threshold in (0, 1/n] for n tool
//                               options: confidence is never below 1/n, so the lane always executes
//                               or never escalates
//   lane_never_decides          the lane of a tool that deny, always_escalate or max_risk takes first
//   fallback_lane_fallback_unused  a fallback_lanes lane whose fallback is below its execute: after a
//                               fallback, anything below execute escalates whatever it is
//   fallback_lanes_unused       fallback_lanes without routing.fallback
//   max_risk_never_fires        max_risk: high (no risk is above it)
//   trigger_never_fires         noul_above 1, or score_above the score's top level
//   trigger_always_fires        noul_above 0 or score_above 0: nearly every decision escalates
//   trigger_shadowed            a second trigger on the same question: they escalate alike, so only
//                               the lower threshold matters
//   trigger_on_parameter        a trigger on "<tool>.<param>": read whatever tool is chosen
//   denied_tool_offered         a denied tool: offered (and its parameters asked) every turn, only to
//                               be refused
//   escalation_terms_unused     escalation terms of a denied tool, which never escalates
//   question_unread             a global registry question no trigger reads: paid every turn
std::vector<finding> check_policy(const policy& p, const tools::registry& r, const check_options& options = {});

}  // namespace baton::policies
