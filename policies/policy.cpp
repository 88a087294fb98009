#include "policies/policy.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>

#include "core/error_codes.hpp"
#include "core/sha256.hpp"
#include "tools/arguments.hpp"
#include "tools/yaml.hpp"

namespace baton::policies {

namespace {

using namespace tools::yaml;

constexpr const char* invalid = codes::invalid_policy;

double read_number(const YAML::Node& v, const std::string& what) {
  const json n = to_json(v, what);
  if (!n.is_number()) fail(v, what + " must be a number");
  return n.get<double>();
}

double read_probability(const YAML::Node& v, const std::string& what) {
  const double d = read_number(v, what);
  if (d < 0 || d > 1) fail(v, what + " must be within [0, 1]");
  return d;
}

// A list of registry tool ids, each once.
std::vector<std::string> read_tool_list(const field& f, const tools::registry& r, tools::source_lines& source) {
  const std::string what = ticked("rules." + f.key);
  if (f.value.IsNull()) return {};
  if (!f.value.IsSequence()) fail(f.value, what + " must be a list of tool ids");
  std::vector<std::string> ids;
  for (const YAML::Node& n : f.value) {
    const std::string id = read_string(n, "a tool id in " + what);
    if (!tools::find_tool(r, id)) fail(n, "unknown tool " + ticked(id) + " in " + what);
    if (std::find(ids.begin(), ids.end(), id) != ids.end()) fail(n, "tool " + ticked(id) + " twice in " + what);
    ids.push_back(id);
    source.lines["rules." + f.key + "." + id] = line_of(n);
  }
  return ids;
}

lane read_lane(const YAML::Node& n, const std::string& what) {
  const auto fields = read_map(n, what, {"execute", "fallback"});
  const field* e = find(fields, "execute");
  const field* f = find(fields, "fallback");
  if (!e) fail(n, what + " has no execute");
  if (!f) fail(n, what + " has no fallback");
  lane l{read_probability(e->value, what + "'s execute"), read_probability(f->value, what + "'s fallback")};
  if (l.fallback > l.execute) fail(f->value, what + "'s fallback is above its execute");
  return l;
}

// What a question is, for the triggers: the questions the schema compiler makes of the registry.
struct question_info {
  std::string type;         // noul, score or choice
  std::size_t levels = 0;   // score: the number of criteria
};

std::map<std::string, question_info> questions_of(const tools::registry& r) {
  std::map<std::string, question_info> qs;
  qs[tools::tool_question_id] = {"choice"};
  for (const tools::tool& t : r.tools) {
    for (const tools::parameter& p : t.parameters) {
      if (p.type == tools::parameter_type::text) continue;
      qs[tools::parameter_question_id(t, p)] = {p.type == tools::parameter_type::choice ? "choice" : "noul"};
    }
  }
  for (const auto& [id, q] : r.questions.items()) {
    const std::string type = q.value("type", "");
    qs[id] = {type, type == "score" ? q["criteria"].size() : 0};
  }
  return qs;
}

escalation_trigger read_trigger(const YAML::Node& n, const std::map<std::string, question_info>& questions) {
  const auto fields = read_map(n, "an escalate_when entry", {"question", "noul_above", "score_above"});
  const field* q = find(fields, "question");
  if (!q) fail(n, "an escalate_when entry has no question");
  escalation_trigger t;
  t.question = read_string(q->value, "an escalate_when question");
  const auto info = questions.find(t.question);
  if (info == questions.end()) fail(q->value, "unknown question " + ticked(t.question) + " in escalate_when");
  const field* noul = find(fields, "noul_above");
  const field* score = find(fields, "score_above");
  if (!noul == !score) fail(n, "an escalate_when entry needs exactly one of noul_above and score_above");
  const std::string what = "escalate_when " + ticked(t.question);
  if (noul) {
    if (info->second.type != "noul") fail(noul->key_node, what + ": noul_above needs a noul question");
    t.when = escalation_trigger::noul_above;
    t.threshold = read_probability(noul->value, what + "'s noul_above");
  } else {
    if (info->second.type != "score") fail(score->key_node, what + ": score_above needs a score question");
    t.when = escalation_trigger::score_above;
    t.threshold = read_number(score->value, what + "'s score_above");
    const double top = static_cast<double>(info->second.levels - 1);
    if (t.threshold < 0 || t.threshold > top) {
      fail(score->value, what + "'s score_above must be within [0, " + std::to_string(info->second.levels - 1) + "]");
    }
  }
  return t;
}

void read_rules(const YAML::Node& n, const tools::registry& r, policy& p) {
  const auto fields = read_map(n, "`rules`", {"deny", "always_escalate", "max_risk", "escalate_when"});
  if (const field* f = find(fields, "deny")) p.deny = read_tool_list(*f, r, p.source);
  if (const field* f = find(fields, "always_escalate")) {
    p.always_escalate = read_tool_list(*f, r, p.source);
    for (std::size_t i = 0; i < p.always_escalate.size(); ++i) {
      if (std::find(p.deny.begin(), p.deny.end(), p.always_escalate[i]) != p.deny.end()) {
        fail(f->value[i], "tool " + ticked(p.always_escalate[i]) + " is both denied and always escalated");
      }
    }
  }
  if (const field* f = find(fields, "max_risk")) {
    const std::string s = read_string(f->value, "max_risk");
    if (s == "low") p.max_risk = tools::risk_level::low;
    else if (s == "medium") p.max_risk = tools::risk_level::medium;
    else if (s == "high") p.max_risk = tools::risk_level::high;
    else fail(f->value, "unknown max_risk " + ticked(s) + " (low, medium or high)");
    p.source.lines["rules.max_risk"] = line_of(f->value);
  }
  if (const field* f = find(fields, "escalate_when"); f && !f->value.IsNull()) {
    if (!f->value.IsSequence()) fail(f->value, "`rules.escalate_when` must be a list");
    const auto questions = questions_of(r);
    for (const YAML::Node& t : f->value) {
      p.source.lines["rules.escalate_when." + std::to_string(p.escalate_when.size())] = line_of(t);
      p.escalate_when.push_back(read_trigger(t, questions));
    }
  }
}

void read_lanes(const YAML::Node& n, const tools::registry& r, policy::lane_set& out, const std::string& key,
                tools::source_lines& source) {
  const auto fields = read_map(n, ticked(key), {"default", "tools"});
  const field* d = find(fields, "default");
  if (!d) fail(n, ticked(key) + " has no default");
  out.default_lane = read_lane(d->value, "the default lane");
  source.lines[key + ".default"] = line_of(d->key_node);
  if (const field* ts = find(fields, "tools"); ts && !ts->value.IsNull()) {
    for (const field& t : read_map(ts->value, ticked(key + ".tools"))) {
      // finish is not a tool: it follows the default lane.
      if (!tools::find_tool(r, t.key)) fail(t.key_node, "unknown tool " + ticked(t.key) + " in " + ticked(key + ".tools"));
      out.tool_lanes.emplace_back(t.key, read_lane(t.value, "the lane of " + ticked(t.key)));
      source.lines[key + ".tools." + t.key] = line_of(t.key_node);
    }
  }
}

// deadline_s and on_deadline of a map already read; what is absent stays as in `terms`.
escalation_terms read_terms(const std::vector<field>& fields, const std::string& what, escalation_terms terms) {
  if (const field* d = find(fields, "deadline_s")) {
    const double s = read_number(d->value, what + "'s deadline_s");
    // A year at most: a deadline is a promise to the agent, not a way to park a question.
    if (s < 1 || s > 366 * 86400 || s != std::floor(s)) fail(d->value, what + "'s deadline_s must be a whole number of seconds from 1 to 31622400");
    terms.deadline_s = static_cast<long long>(s);
  }
  if (const field* o = find(fields, "on_deadline")) {
    const std::string v = read_string(o->value, what + "'s on_deadline");
    if (v == "deny") terms.execute_on_deadline = false;
    else if (v == "execute") terms.execute_on_deadline = true;
    else fail(o->value, "unknown on_deadline " + ticked(v) + " (deny or execute)");
  }
  return terms;
}

void read_escalation(const YAML::Node& n, const tools::registry& r, policy& p) {
  const auto fields = read_map(n, "`escalation`", {"deadline_s", "on_deadline", "tools"});
  p.escalation = read_terms(fields, "`escalation`", escalation_terms{});
  if (const field* ts = find(fields, "tools"); ts && !ts->value.IsNull()) {
    for (const field& t : read_map(ts->value, "`escalation.tools`")) {
      if (!tools::find_tool(r, t.key)) fail(t.key_node, "unknown tool " + ticked(t.key) + " in `escalation.tools`");
      const std::string what = "the escalation of " + ticked(t.key);
      p.tool_escalation.emplace_back(t.key, read_terms(read_map(t.value, what, {"deadline_s", "on_deadline"}), what,
                                                       p.escalation));
      p.source.lines["escalation.tools." + t.key] = line_of(t.key_node);
    }
  }
  p.escalation_configured = true;
}

void read_audit(const YAML::Node& n, policy& p) {
  const auto fields = read_map(n, "`audit`", {"rate", "deadline_s", "on_deadline"});
  const field* rate = find(fields, "rate");
  if (!rate) fail(n, "`audit` has no rate (the share of would-execute decisions a person checks, e.g. 0.02)");
  audit_section a;
  a.rate = read_probability(rate->value, "`audit.rate`");
  p.source.lines["audit.rate"] = line_of(rate->value);
  a.terms.deadline_s = p.escalation.deadline_s;  // the policy's default deadline unless the audit sets one
  a.terms = read_terms(fields, "`audit`", a.terms);
  p.audit = a;
}

policy read_policy(const YAML::Node& root, const tools::registry& r) {
  if (root.IsNull() || !root.IsDefined()) fail(root, "the policy is empty: it needs confidence, lanes and on_engine_error");
  const auto top = read_map(root, "the policy", {"confidence", "rules", "lanes", "fallback_lanes", "on_engine_error", "escalation",
                                                   "audit"});
  policy p;
  // No defaults for what decides: a policy says which metric and what a failure does.
  const field* c = find(top, "confidence");
  if (!c) fail(root, "the policy has no `confidence` (p_max or margin)");
  const std::string metric = read_string(c->value, "confidence");
  const auto m = parse_confidence_metric(metric);
  if (!m) fail(c->value, "unknown confidence metric " + ticked(metric) + " (p_max or margin)");
  p.metric = *m;
  p.source.lines["confidence"] = line_of(c->value);
  if (const field* f = find(top, "rules"); f && !f->value.IsNull()) read_rules(f->value, r, p);
  const field* l = find(top, "lanes");
  if (!l) fail(root, "the policy has no `lanes`");
  policy::lane_set first;
  read_lanes(l->value, r, first, "lanes", p.source);
  p.default_lane = first.default_lane;
  p.tool_lanes = std::move(first.tool_lanes);
  if (const field* f = find(top, "fallback_lanes"); f && !f->value.IsNull()) {
    read_lanes(f->value, r, p.fallback_lanes.emplace(), "fallback_lanes", p.source);
    p.source.lines["fallback_lanes"] = line_of(f->key_node);
  }
  const field* e = find(top, "on_engine_error");
  if (!e) fail(root, "the policy has no `on_engine_error` (escalate or deny)");
  const std::string on_error = read_string(e->value, "on_engine_error");
  if (on_error == "escalate") p.on_engine_error = failure_action::escalate;
  else if (on_error == "deny") p.on_engine_error = failure_action::deny;
  else fail(e->value, "unknown on_engine_error " + ticked(on_error) + " (escalate or deny)");
  if (const field* f = find(top, "escalation"); f && !f->value.IsNull()) read_escalation(f->value, r, p);
  // After `escalation`: an audit without its own deadline takes the policy's.
  if (const field* f = find(top, "audit"); f && !f->value.IsNull()) read_audit(f->value, p);
  p.hash = sha256_hex(p.canonical_json());
  return p;
}

json lane_json(const lane& l) { return {{"execute", l.execute}, {"fallback", l.fallback}}; }

json sorted(std::vector<std::string> ids) {
  std::sort(ids.begin(), ids.end());
  return ids;
}

// Whether the trigger fires; nullopt when its answer is missing or of another type.
std::optional<bool> fires(const escalation_trigger& t, const response& r) {
  const answer* a = find_answer(r, t.question);
  if (!a) return std::nullopt;
  if (t.when == escalation_trigger::noul_above) {
    if (const auto* n = std::get_if<noul_answer>(a)) return n->noul > t.threshold;
    return std::nullopt;
  }
  if (const auto* s = std::get_if<score_answer>(a)) return s->score > t.threshold;
  return std::nullopt;
}
}  // namespace

std::string_view to_string(action::kind k) noexcept {
  switch (k) {
    case action::execute: return "execute";
    case action::fallback: return "fallback";
    case action::escalate: return "escalate";
    case action::deny: return "deny";
    case action::finish: return "finish";
  }
  return "escalate";
}

bool is_audit_lane(std::string_view lane) { return lane == "audit" || lane == "fallback:audit"; }

escalation_terms escalation_terms_for(const policy& p, std::string_view tool, std::string_view lane) {
  if (p.audit && is_audit_lane(lane) && !tool.empty()) return p.audit->terms;
  for (const auto& [id, t] : p.tool_escalation) {
    if (id == tool) return t;
  }
  escalation_terms t = p.escalation;
  if (tool.empty()) t.execute_on_deadline = false;  // nothing to execute
  return t;
}

std::string policy::canonical_json() const {
  json c = json::object();
  c["confidence"] = to_string(metric);
  json triggers = json::array();
  for (const escalation_trigger& t : escalate_when) {
    triggers.push_back({{"question", t.question},
                        {t.when == escalation_trigger::noul_above ? "noul_above" : "score_above", t.threshold}});
  }
  c["rules"] = {{"deny", sorted(deny)},
                {"always_escalate", sorted(always_escalate)},
                {"max_risk", max_risk ? json(tools::to_string(*max_risk)) : json(nullptr)},
                {"escalate_when", std::move(triggers)}};
  json lanes = json::object();
  for (const auto& [id, l] : tool_lanes) lanes[id] = lane_json(l);
  c["lanes"] = {{"default", lane_json(default_lane)}, {"tools", std::move(lanes)}};
  if (fallback_lanes) {  // only when present: policies without it keep their hash
    json tools = json::object();
    for (const auto& [id, l] : fallback_lanes->tool_lanes) tools[id] = lane_json(l);
    c["fallback_lanes"] = {{"default", lane_json(fallback_lanes->default_lane)}, {"tools", std::move(tools)}};
  }
  c["on_engine_error"] = on_engine_error == failure_action::deny ? "deny" : "escalate";
  if (escalation_configured) {  // only when present: policies without it keep their hash
    auto terms_json = [](const escalation_terms& t) {
      return json{{"deadline_s", t.deadline_s}, {"on_deadline", t.execute_on_deadline ? "execute" : "deny"}};
    };
    json tools = json::object();
    for (const auto& [id, t] : tool_escalation) tools[id] = terms_json(t);
    json e = terms_json(escalation);
    e["tools"] = std::move(tools);
    c["escalation"] = std::move(e);
  }
  if (audit) {  // only when present: policies without it keep their hash
    c["audit"] = {{"rate", audit->rate},
                  {"deadline_s", audit->terms.deadline_s},
                  {"on_deadline", audit->terms.execute_on_deadline ? "execute" : "deny"}};
  }
  return render_json(c, true);
}

result<policy> parse_policy(std::string_view yaml_text, std::string_view file_name,
                            const tools::registry& registry) {
  return parse(yaml_text, file_name, invalid, [&](const YAML::Node& root) {
    policy p = read_policy(root, registry);
    p.source.file = file_name;
    return p;
  });
}

result<policy> load_policy(const std::filesystem::path& file, const tools::registry& registry) {
  auto text = read_text(file, invalid);
  if (!text) return text.error();
  return parse_policy(*text, file.string(), registry);
}

action on_engine_failure(const policy& p) {
  action a;
  a.what = p.on_engine_error == failure_action::deny ? action::deny : action::escalate;
  a.lane = "on_engine_error";
  return a;
}

lane_choice lane_for(const policy& p, std::string_view tool, bool after_fallback) {
  const bool second = after_fallback && p.fallback_lanes;
  const auto& lanes = second ? p.fallback_lanes->tool_lanes : p.tool_lanes;
  const auto own = std::find_if(lanes.begin(), lanes.end(), [&](const auto& entry) { return entry.first == tool; });
  if (own == lanes.end()) return {second ? p.fallback_lanes->default_lane : p.default_lane, "lane:default"};
  return {own->second, "lane:" + own->first};
}

namespace {

// The rules that read the tool alone (deny, always_escalate, max_risk): what they decide, if any.
std::optional<std::pair<action::kind, const char*>> tool_rule(const policy& p, const tools::tool& t) {
  auto listed = [&](const std::vector<std::string>& ids) { return std::find(ids.begin(), ids.end(), t.id) != ids.end(); };
  if (listed(p.deny)) return std::pair{action::deny, "rule:deny"};
  if (listed(p.always_escalate)) return std::pair{action::escalate, "rule:always_escalate"};
  if (p.max_risk && t.risk > *p.max_risk) return std::pair{action::escalate, "rule:max_risk"};
  return std::nullopt;
}

// The rules, then the lanes, on `a` (its tool and confidence set; the rest passes through); `t` null for finish.
action rules_and_lanes(const policy& p, const tools::tool* t, const response& answers, action a, bool after_fallback) {
  const bool finishing = !t;
  auto decided = [&](action::kind k, std::string lane) {
    a.what = k;
    a.lane = std::move(lane);
    return a;
  };

  if (t) {
    if (const auto rule = tool_rule(p, *t)) return decided(rule->first, rule->second);
  }
  for (const escalation_trigger& trigger : p.escalate_when) {
    const auto fired = fires(trigger, answers);
    if (!fired) return on_engine_failure(p);
    if (*fired) return decided(action::escalate, "rule:escalate_when:" + trigger.question);
  }

  // `finish` has no lane of its own: the default lane's execute threshold.
  const lane_choice l = lane_for(p, finishing ? std::string_view() : std::string_view(a.tool), after_fallback);
  if (finishing) return decided(a.confidence >= l.thresholds.execute ? action::finish : action::escalate, l.name);
  if (a.confidence >= l.thresholds.execute) return decided(action::execute, l.name);
  if (a.confidence >= l.thresholds.fallback) return decided(action::fallback, l.name);
  return decided(action::escalate, l.name);
}

}  // namespace

double confidence_in(const choice_answer& c, std::string_view option, confidence_metric metric) {
  double p = -1;
  for (const auto& [o, probability] : c.probabilities) {
    if (o == option) p = probability;
  }
  if (p < 0) return p;
  const double n = static_cast<double>(c.probabilities.size());
  return metric == confidence_metric::p_max || n < 2 ? p : std::clamp((n * p - 1.0) / (n - 1.0), 0.0, 1.0);
}

namespace {

const choice_answer* tool_choice(const response& answers) {
  const answer* tool_answer = find_answer(answers, tools::tool_question_id);
  return tool_answer ? std::get_if<choice_answer>(tool_answer) : nullptr;
}

// The rules and lanes on one engine's answers; the fallback engine's lanes when `after_fallback`.
action decide(const policy& p, const tools::registry& registry, const response& answers, bool after_fallback) {
  const choice_answer* choice = tool_choice(answers);
  if (!choice) return on_engine_failure(p);
  const bool finishing = registry.finish && choice->choice == tools::finish_option;
  const tools::tool* t = tools::find_tool(registry, choice->choice);
  if (!finishing && !t) return on_engine_failure(p);

  action a;
  a.tool = choice->choice;
  // The policy's metric, not the engine's: a threshold means the same thing across engines.
  a.confidence = std::max(0.0, confidence_in(*choice, choice->choice, p.metric));
  if (t) {
    auto args = tools::arguments_from_answers(*t, answers);
    if (!args) return on_engine_failure(p);
    a.arguments = std::move(*args);
  }
  return rules_and_lanes(p, t, answers, std::move(a), after_fallback);
}

// A decision on the fallback engine's answers: only a person is left after it, and the lane says so.
action as_second_pass(action a) {
  if (a.what == action::fallback) a.what = action::escalate;
  a.lane = "fallback:" + a.lane;
  return a;
}

}  // namespace

action decide_after_fallback(const policy& p, const tools::registry& registry, const response& answers) {
  return as_second_pass(decide(p, registry, answers, true));
}

action on_fallback_failure(const policy& p) { return as_second_pass(on_engine_failure(p)); }

action decide_action(const policy& p, const tools::registry& registry, const response& answers) {
  return decide(p, registry, answers, false);
}

action complete(const tools::registry& registry, action a, const json& proposal) {
  const tools::tool* t = tools::find_tool(registry, a.tool);
  if (!t) return a;
  tools::add_text_arguments(*t, proposal, a.arguments);
  if (a.what != action::execute) return a;
  if (const auto missing = tools::missing_required_argument(*t, a.arguments)) {
    a.what = action::escalate;
    a.lane = (a.lane.starts_with("fallback:") ? "fallback:rule:missing_argument:" : "rule:missing_argument:") + *missing;
  }
  return a;
}

action decide_turn(const policy& p, const tools::registry& registry, const response* answers, const json& proposal, bool call,
                   bool after_fallback) {
  if (call) {
    return judge_call(p, registry, answers, proposal.value("tool", ""), proposal.value("arguments", json::object()), after_fallback);
  }
  if (after_fallback) return answers ? decide_after_fallback(p, registry, *answers) : on_fallback_failure(p);
  return answers ? decide_action(p, registry, *answers) : on_engine_failure(p);
}

action redecide(const policy& p, const tools::registry& registry, const response& answers, const json& proposal,
                bool after_fallback, std::string_view decision_id) {
  const bool call = proposal.is_object() && proposal.value("call", false);
  return audit(p, complete(registry, decide_turn(p, registry, &answers, proposal, call, after_fallback), proposal), decision_id);
}

action judge_call(const policy& p, const tools::registry& registry, const response* answers, std::string_view tool,
                  const json& arguments, bool after_fallback) {
  const tools::tool* t = tools::find_tool(registry, tool);
  const choice_answer* choice = answers ? tool_choice(*answers) : nullptr;
  const double confidence = choice ? confidence_in(*choice, tool, p.metric) : -1;
  action a;
  if (t && confidence >= 0) {
    a.tool = std::string(tool);
    a.confidence = confidence;
    a = rules_and_lanes(p, t, *answers, std::move(a), after_fallback);
  } else if (const auto rule = t ? tool_rule(p, *t) : std::nullopt) {
    // Without answers the tool's own rules still hold: a denied tool is not sent to a person.
    a.what = rule->first;
    a.lane = rule->second;
  } else {
    a = on_engine_failure(p);
  }
  // Whatever decided, the call is what a person approves or what runs: the tool and arguments as called.
  a.tool = std::string(tool);
  a.arguments = arguments;
  return after_fallback ? as_second_pass(std::move(a)) : a;
}

bool audit_sampled(double rate, std::string_view decision_id) {
  if (rate <= 0) return false;
  if (rate >= 1) return true;
  const std::string digest = sha256_hex(decision_id);  // "sha256:" and 64 hex digits
  const std::uint64_t bits = std::stoull(digest.substr(7, 16), nullptr, 16);
  return static_cast<double>(bits) / 18446744073709551616.0 < rate;
}

action audit(const policy& p, action a, std::string_view decision_id) {
  if (a.what != action::execute || !p.audit || !audit_sampled(p.audit->rate, decision_id)) return a;
  a.what = action::escalate;
  a.lane = a.lane.starts_with("fallback:") ? "fallback:audit" : "audit";
  return a;
}

}  // namespace baton::policies
