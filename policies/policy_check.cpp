#include "policies/policy_check.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "tools/yaml.hpp"

namespace baton::policies {

namespace {

using tools::yaml::ticked;

std::string number(double d) {
  std::ostringstream s;
  s.precision(3);
  s << d;
  return s.str();
}

std::string rule_taking(const policy& p, const tools::registry& r, const std::string& tool) {
  auto listed = [&](const std::vector<std::string>& ids) { return std::find(ids.begin(), ids.end(), tool) != ids.end(); };
  if (listed(p.deny)) return "`rules.deny` denies it";
  if (listed(p.always_escalate)) return "`rules.always_escalate` escalates it";
  const tools::tool* t = tools::find_tool(r, tool);
  if (t && p.max_risk && t->risk > *p.max_risk) {
    return "its risk (" + std::string(tools::to_string(t->risk)) + ") is above `rules.max_risk` (" +
           std::string(tools::to_string(*p.max_risk)) + "), which escalates it";
  }
  return {};
}

struct checker {
  const policy& p;
  const tools::registry& r;
  const check_options& options;
  std::vector<finding> out;

  void policy_finding(const std::string& path, std::string kind, std::string message) {
    out.push_back({p.source.file, p.source.line(path), std::move(kind), std::move(message)});
  }
  void registry_finding(const std::string& path, std::string kind, std::string message) {
    out.push_back({r.source.file, r.source.line(path), std::move(kind), std::move(message)});
  }

  // The tool whose parameter question `question` is, if it is one.
  const tools::tool* parameter_owner(const std::string& question) const {
    for (const tools::tool& t : r.tools) {
      for (const tools::parameter& param : t.parameters) {
        if (param.type != tools::parameter_type::text && tools::parameter_question_id(t, param) == question) return &t;
      }
    }
    return nullptr;
  }

  std::size_t tool_options() const { return r.tools.size() + (r.finish ? 1 : 0); }

  // With p_max, the chosen option's probability is at least 1/n: a threshold in (0, 1/n] is always
  // met. 0 is how a policy says "always" on purpose, so it is left alone.
  void lane_thresholds(const lane& l, const std::string& path, const std::string& name, bool second_pass) {
    if (p.metric != confidence_metric::p_max) return;
    const std::size_t n = tool_options();
    const double floor = 1.0 / static_cast<double>(n);
    const std::string why = "with `confidence: p_max` and " + std::to_string(n) +
                            " tool options, confidence is never below 1/" + std::to_string(n) + " (" +
                            number(floor) + ")";
    if (l.execute > 0 && l.execute <= floor) {
      policy_finding(path, "lane_threshold_unreachable",
                     name + "'s execute (" + number(l.execute) + ") is always met: " + why +
                         ", so this lane always executes; raise execute above " + number(floor) +
                         ", or write 0 if always is meant");
    } else if (!second_pass && l.fallback > 0 && l.fallback <= floor) {
      policy_finding(path, "lane_threshold_unreachable",
                     name + "'s fallback (" + number(l.fallback) + ") is always met: " + why +
                         ", so this lane never escalates; raise fallback above " + number(floor) +
                         ", or write 0 if never is meant");
    }
  }

  void lane_set(const policy::lane_set& lanes, const std::string& key, bool second_pass) {
    lane_thresholds(lanes.default_lane, key + ".default", ticked(key + ".default"), second_pass);
    if (second_pass && lanes.default_lane.fallback < lanes.default_lane.execute) fallback_unused(lanes.default_lane, key + ".default");
    for (const auto& [tool, l] : lanes.tool_lanes) {
      const std::string path = key + ".tools." + tool;
      if (const std::string rule = rule_taking(p, r, tool); !rule.empty()) {
        policy_finding(path, "lane_never_decides",
                       "the lane of " + ticked(tool) + " in " + ticked(key) + " never decides: " + rule +
                           " before any lane is looked at; remove the lane, or the rule if the lane is meant");
        continue;
      }
      lane_thresholds(l, path, ticked(path), second_pass);
      if (second_pass && l.fallback < l.execute) fallback_unused(l, path);
    }
  }

  // decide_after_fallback turns a second fallback into an escalation: only execute matters.
  void fallback_unused(const lane& l, const std::string& path) {
    policy_finding(path, "fallback_lane_fallback_unused",
                   ticked(path) + "'s fallback (" + number(l.fallback) +
                       ") has no effect: after a fallback, a confidence below execute (" + number(l.execute) +
                       ") escalates whatever it is; write fallback: " + number(l.execute) + " (its execute) to say so");
  }

  void lanes() {
    lane_set({p.default_lane, p.tool_lanes}, "lanes", false);
    if (!p.fallback_lanes) return;
    if (!options.fallback_engine) {
      policy_finding("fallback_lanes", "fallback_lanes_unused",
                     "`fallback_lanes` never apply: the config has no `routing.fallback`, so a fallback decision "
                     "goes to the agent as it is and no second pass is made; configure routing.fallback or remove "
                     "fallback_lanes");
    }
    lane_set(*p.fallback_lanes, "fallback_lanes", true);
  }

  void audit() {
    if (!p.audit) return;
    if (p.audit->rate == 0) {
      policy_finding("audit.rate", "audit_never_draws",
                     "`audit.rate: 0` draws no decision: nothing the policy executes is ever checked by a person, so "
                     "`baton calibrate` has no labels above the execute thresholds; give a share such as 0.02, or "
                     "remove audit");
    } else if (p.audit->rate == 1) {
      policy_finding("audit.rate", "audit_draws_everything",
                     "`audit.rate: 1` sends every decision the policy would execute to a person: no tool runs without "
                     "one, and the lanes' execute thresholds only decide what is labelled `audit`; lower the rate");
    }
  }

  void max_risk() {
    if (p.max_risk != tools::risk_level::high) return;
    policy_finding("rules.max_risk", "max_risk_never_fires",
                   "`max_risk: high` escalates nothing: only a risk above max_risk escalates, and none is above "
                   "high; to send high-risk tools to a person write `max_risk: medium`, else remove max_risk");
  }

  void triggers() {
    std::map<std::string, std::size_t> lowest;  // question → the trigger with the lowest threshold
    for (std::size_t i = 0; i < p.escalate_when.size(); ++i) {
      const escalation_trigger& t = p.escalate_when[i];
      const std::string path = "rules.escalate_when." + std::to_string(i);
      const std::string what = "the escalate_when trigger on " + ticked(t.question);
      const bool noul = t.when == escalation_trigger::noul_above;
      const std::string key = noul ? "noul_above" : "score_above";
      double top = 1;
      if (!noul) {
        const json& q = r.questions[t.question];
        top = static_cast<double>(q["criteria"].size()) - 1;
      }
      if (t.threshold >= top) {
        policy_finding(path, "trigger_never_fires",
                       what + " never fires: " + (noul ? "P(true) is never above 1" : "a score of " + number(top + 1) +
                       " levels is never above " + number(top)) + "; lower " + key + " or remove the trigger");
      } else if (t.threshold <= 0) {
        policy_finding(path, "trigger_always_fires",
                       what + " fires on nearly every decision: " +
                           (noul ? std::string("P(true) is above 0 whenever the model gives true any probability")
                                 : std::string("the score is above 0 whenever a level above the first has any probability")) +
                           ", so nearly everything escalates; raise " + key);
      }
      if (const tools::tool* owner = parameter_owner(t.question)) {
        policy_finding(path, "trigger_on_parameter",
                       what + " reads it whatever tool is chosen: the parameter question is asked every turn, "
                       "and its answer means something only when " + ticked(owner->id) +
                           " is the tool; to send " + ticked(owner->id) + " to a person, list it in "
                           "`rules.always_escalate` or give it a stricter lane");
      }
      // Two triggers on one question escalate alike (lane rule:escalate_when:QUESTION): whichever
      // has the lower threshold fires whenever the other would, so the other never changes a decision.
      const auto [seen, first] = lowest.emplace(t.question, i);
      if (first) continue;
      const std::size_t kept_i = p.escalate_when[seen->second].threshold <= t.threshold ? seen->second : i;
      const std::size_t dropped_i = kept_i == i ? seen->second : i;
      seen->second = kept_i;
      const escalation_trigger& kept = p.escalate_when[kept_i];
      const escalation_trigger& dropped = p.escalate_when[dropped_i];
      policy_finding("rules.escalate_when." + std::to_string(dropped_i), "trigger_shadowed",
                     "this trigger on " + ticked(t.question) + " (" + key + " " + number(dropped.threshold) +
                         ") never changes a decision: the one on line " +
                         std::to_string(p.source.line("rules.escalate_when." + std::to_string(kept_i))) + " (" + key +
                         " " + number(kept.threshold) + ") fires whenever it does, and both escalate as " +
                         ticked("rule:escalate_when:" + t.question) + "; remove it");
    }
  }

  void denied_tools() {
    for (const std::string& id : p.deny) {
      const tools::tool* t = tools::find_tool(r, id);
      std::vector<std::string> asked;
      for (const tools::parameter& param : t->parameters) {
        if (param.type != tools::parameter_type::text) asked.push_back(ticked(tools::parameter_question_id(*t, param)));
      }
      std::string message = ticked(id) + " is denied whatever the answers, yet the registry offers it in the `tool` question";
      if (!asked.empty()) {
        message += " and asks its parameter question" + std::string(asked.size() > 1 ? "s " : " ");
        for (std::size_t i = 0; i < asked.size(); ++i) message += (i ? ", " : "") + asked[i];
        message += " (answers nothing uses)";
      }
      message += " on every turn, paid for in the schema; remove it from the registry unless the model must be able "
                 "to pick it and be refused";
      policy_finding("rules.deny." + id, "denied_tool_offered", std::move(message));
    }
    for (const auto& [id, terms] : p.tool_escalation) {
      if (std::find(p.deny.begin(), p.deny.end(), id) == p.deny.end()) continue;
      policy_finding("escalation.tools." + id, "escalation_terms_unused",
                     "the escalation terms of " + ticked(id) + " never apply: it is denied, never escalated; "
                     "remove them, or the deny");
    }
  }

  void unread_questions() {
    std::set<std::string> read;
    for (const escalation_trigger& t : p.escalate_when) read.insert(t.question);
    for (const auto& [id, q] : r.questions.items()) {
      if (read.contains(id)) continue;
      registry_finding("questions." + id, "question_unread",
                       "question " + ticked(id) + " is asked and paid for on every turn, but the policy (" +
                           p.source.file + ") reads no answer of it: no `rules.escalate_when` trigger names it; "
                           "add a trigger, or remove it (an agent that wants the answer can ask it itself, in its "
                           "decide frames' `questions`)");
    }
  }
};

}  // namespace

std::vector<finding> check_policy(const policy& p, const tools::registry& r, const check_options& options) {
  checker c{p, r, options, {}};
  c.lanes();
  c.max_risk();
  c.audit();
  c.triggers();
  c.denied_tools();
  c.unread_questions();
  std::stable_sort(c.out.begin(), c.out.end(), [](const finding& a, const finding& b) {
    return a.file != b.file ? a.file < b.file : a.line < b.line;
  });
  return std::move(c.out);
}

}  // namespace baton::policies
