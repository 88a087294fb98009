#include "adapters/runtime/escalation_evidence.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>

namespace baton {

namespace {

// A number for people: `decimals` decimals, no trailing zeros ("1", "0.93").
std::string number_text(double v, int decimals = 4) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string s = buf;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

// A value and the threshold it was held against, with as many decimals (4 at least) as it takes
// for two different numbers to read differently: 0.80001 is above 0.8, and says so.
std::pair<std::string, std::string> compared_text(double value, double threshold) {
  int decimals = 4;
  while (decimals < 17 && value != threshold && number_text(value, decimals) == number_text(threshold, decimals)) {
    ++decimals;
  }
  return {number_text(value, decimals), number_text(threshold, decimals)};
}

// A question's instructions: a global question's, or a choice or boolean parameter's.
std::string instructions_of(const tools::registry& reg, const std::string& question) {
  if (const auto q = reg.questions.find(question); q != reg.questions.end() && q->is_object()) {
    return q->value("instructions", "");
  }
  for (const tools::tool& t : reg.tools) {
    for (const tools::parameter& p : t.parameters) {
      if (p.type != tools::parameter_type::text && tools::parameter_question_id(t, p) == question) return p.instructions;
    }
  }
  return {};
}

// One answer in words and numbers; the tool question's is the candidates.
json answer_json(const tools::registry& reg, const std::string& question, const answer& a) {
  json out = {{"question", question}, {"instructions", instructions_of(reg, question)}};
  if (const auto* n = std::get_if<noul_answer>(&a)) {
    out["type"] = "noul";
    out["p_true"] = round_decimals(n->noul, 4);
  } else if (const auto* c = std::get_if<choice_answer>(&a)) {
    out["type"] = "choice";
    out["choice"] = c->choice;
    out["confidence"] = round_decimals(c->confidence, 4);
  } else if (const auto* sc = std::get_if<score_answer>(&a)) {
    out["type"] = "score";
    out["score"] = round_decimals(sc->score, 4);
    out["confidence"] = round_decimals(sc->confidence, 4);
    // The level the score is nearest to, in the registry's words.
    const std::string nearest = std::to_string(static_cast<long long>(std::llround(sc->score)));
    for (const auto& [k, v] : sc->legend) {
      if (k == nearest) out["level"] = v.is_string() ? v : json(render_json(v, false));
    }
  }
  return out;
}

}  // namespace

json escalation_evidence(const log::escalation_record& r, const response* answers, std::string_view error_code,
                         const tools::registry& registry, const policies::policy& p) {
  json ev = {{"rule", r.reason}, {"why", ""}, {"inputs", nullptr}, {"answers", json::array()}, {"tie", false}};
  std::string why;
  // The thresholds are the serving policy's: only when it is the one that decided are they shown.
  const bool same_policy = r.policy_hash == p.hash;
  const bool second_pass = r.reason.starts_with("fallback:");
  const std::string rule = second_pass ? r.reason.substr(9) : r.reason;
  const tools::tool* t = tools::find_tool(registry, r.tool);
  if (rule == "on_engine_error") {
    why = std::string(second_pass ? "the fallback engine" : "the engine") + " could not decide (" +
          (error_code.empty() ? std::string("no answer") : std::string(error_code)) +
          ") and this policy escalates engine failures (on_engine_error: escalate)";
  } else if (!same_policy) {
    why = r.reason + " (the policy changed since this was raised: its thresholds then are not shown)";
  } else if (rule == "audit" && p.audit) {
    const std::string lane_name = policies::lane_for(p, r.tool, second_pass).name;
    why = "drawn for audit: the policy would have run " + r.tool + " (" + lane_name + ", confidence " +
          number_text(r.confidence, 4) + "); a share of " + render_json(json(p.audit->rate), false) +
          " of such decisions goes to a person so that its precision can be measured";
    ev["inputs"] = {{"confidence", round_decimals(r.confidence, 4)},
                    {"metric", std::string(to_string(p.metric))},
                    {"lane", lane_name.substr(5)},
                    {"audit_rate", p.audit->rate}};
  } else if (rule == "rule:always_escalate") {
    why = r.tool + " is always escalated by this policy (rules.always_escalate)";
  } else if (rule == "rule:max_risk" && t && p.max_risk) {
    why = r.tool + " is " + std::string(tools::to_string(t->risk)) + " risk; this policy allows at most " +
          std::string(tools::to_string(*p.max_risk));
    ev["inputs"] = {{"tool", r.tool},
                    {"risk", tools::to_string(t->risk)},
                    {"max_risk", tools::to_string(*p.max_risk)}};
  } else if (rule.starts_with("rule:escalate_when:")) {
    const std::string question = rule.substr(19);
    const auto trigger = std::find_if(p.escalate_when.begin(), p.escalate_when.end(),
                                      [&](const policies::escalation_trigger& x) { return x.question == question; });
    const answer* a = answers ? find_answer(*answers, question) : nullptr;
    if (trigger != p.escalate_when.end() && a) {
      const bool noul = trigger->when == policies::escalation_trigger::noul_above;
      const auto* n = std::get_if<noul_answer>(a);
      const auto* sc = std::get_if<score_answer>(a);
      const double value = n ? n->noul : sc ? sc->score : 0;
      const auto [value_text, threshold_text] = compared_text(value, trigger->threshold);
      why = noul ? question + ": P(true) " + value_text + " is above the trigger " + threshold_text + " (noul_above)"
                 : question + " scored " + value_text + ", above the trigger " + threshold_text + " (score_above)";
      ev["inputs"] = {{"question", question},
                      {noul ? "p_true" : "score", round_decimals(value, 4)},
                      {noul ? "noul_above" : "score_above", trigger->threshold}};
    }
  } else if (rule.starts_with("lane:")) {
    const std::string lane_name = rule.substr(5);
    const policies::lane& l = policies::lane_for(p, lane_name, second_pass).thresholds;
    const std::string metric(to_string(p.metric));
    // The first pass escalates below the lane's fallback; the fallback engine's pass below its execute.
    const bool below_fallback = !second_pass && r.confidence < l.fallback;
    const auto [confidence_text, threshold_text] = compared_text(r.confidence, below_fallback ? l.fallback : l.execute);
    why = std::string(second_pass ? "the fallback engine's " : "") + "confidence " + confidence_text + " (" + metric +
          ") is below the " + lane_name + " lane's " + (below_fallback ? "fallback " : "execute ") + threshold_text +
          (second_pass ? ": a second unsure answer goes to a person" : "");
    ev["inputs"] = {{"confidence", round_decimals(r.confidence, 4)},
                    {"metric", metric},
                    {"lane", lane_name},
                    {"execute", l.execute},
                    {"fallback", l.fallback}};
  }
  ev["why"] = why.empty() ? r.reason : why;
  auto own_parameter = [&](const std::string& id) {
    if (!t) return false;
    return std::any_of(t->parameters.begin(), t->parameters.end(),
                       [&](const tools::parameter& x) { return tools::parameter_question_id(*t, x) == id; });
  };
  if (answers) {
    for (const auto& [id, a] : answers->answers) {
      if (id == tools::tool_question_id) {
        // A flat tie: the proposed tool won only by coming first.
        if (const auto* c = std::get_if<choice_answer>(&a); c && c->probabilities.size() > 1) {
          double top = 0;
          for (const auto& [o, pr] : c->probabilities) top = std::max(top, pr);
          const auto tied = std::count_if(c->probabilities.begin(), c->probabilities.end(),
                                          [&](const auto& x) { return top - x.second < 1e-9; });
          ev["tie"] = tied > 1;
        }
        continue;
      }
      // Another tool's parameters do not bear on whether this tool runs: the global questions and
      // the escalated tool's parameters only.
      if (!registry.questions.contains(id) && !own_parameter(id)) continue;
      ev["answers"].push_back(answer_json(registry, id, a));
    }
  }
  return ev;
}

json escalation_evidence(const log::escalation_record& r, std::string_view logged_answers, std::string_view error_code,
                         const tools::registry& registry, const policies::policy& policy) {
  std::optional<response> answers;
  if (!logged_answers.empty()) {
    // The log keeps only the answers object: the rest of a response is filled in to read it.
    json parsed;
    json_parse_error err;
    if (parse_json(logged_answers, parsed, err, json_parse_options{})) {
      auto read = response_from_json(
          json{{"model", ""}, {"answers", std::move(parsed)}, {"usage", {{"input_tokens", 0}, {"output_tokens", 0}}}});
      if (read) answers = std::move(*read);
    }
  }
  return escalation_evidence(r, answers ? &*answers : nullptr, error_code, registry, policy);
}

}  // namespace baton
