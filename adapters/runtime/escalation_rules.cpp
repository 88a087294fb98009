#include "adapters/runtime/escalation_rules.hpp"

#include <algorithm>
#include <vector>

#include "adapters/protocol/escalation_views.hpp"
#include "adapters/runtime/escalation_evidence.hpp"
#include "core/error_codes.hpp"
#include "core/ids.hpp"
#include "tools/arguments.hpp"
#include "tools/registry.hpp"
#include "tools/schema_compiler.hpp"

namespace baton {

namespace {

bool denied_by_policy(const routing_snapshot& routing, const std::string& tool) {
  const auto& deny = routing.policy.deny;
  return std::find(deny.begin(), deny.end(), tool) != deny.end();
}

protocol::resolve_input deadline_input(const log::escalation_record& r) {
  protocol::resolve_input in;
  in.execute = r.on_deadline == "execute" && !r.tool.empty();
  if (in.execute) {
    in.tool = r.tool;
    in.arguments = r.arguments;
  }
  in.reason = "nobody resolved it by its deadline, " + iso_utc(r.deadline_ms) + " (on_deadline: " + r.on_deadline + ")";
  in.force = true;  // the outcome configured when it was raised applies whatever changed since
  return in;
}

}  // namespace

error no_escalation(const std::string& id) { return make_error(404, codes::not_found, "no escalation " + id); }

escalation make_escalation(const routing_snapshot& routing, const log::decision_record& d, const response* answers,
                           std::string state) {
  log::escalation_record r;
  r.id = new_id('e');
  r.decision = d.id;
  r.session = d.session;
  r.turn = d.turn;
  r.created_ms = unix_ms();
  const policies::escalation_terms terms = policies::escalation_terms_for(routing.policy, d.tool, d.lane);
  r.deadline_ms = r.created_ms + terms.deadline_s * 1000;
  r.on_deadline = terms.execute_on_deadline ? "execute" : "deny";
  r.reason = d.lane;
  r.tool = d.tool;
  r.arguments = d.arguments;
  r.confidence = d.confidence;
  r.state = std::move(state);
  r.registry_hash = d.registry_hash;
  r.policy_hash = d.policy_hash;
  if (d.tool.empty()) {
    r.question = "The engine could not decide (" + (d.error_code.empty() ? std::string("no answer") : d.error_code) +
                 "). Which tool, if any, should run?";
  } else if (policies::is_audit_lane(d.lane)) {
    r.question = "Audit: the policy would have run " + d.tool + " at confidence " +
                 render_json(json(round_decimals(d.confidence, 4)), false) +
                 "; this decision was drawn for a person to check. Should it run?";
  } else {
    r.question = "Should " + d.tool + " run? It was escalated by " + d.lane + " at confidence " +
                 render_json(json(round_decimals(d.confidence, 4)), false) + ".";
  }
  if (answers) {
    for (const auto& [id, a] : answers->answers) {
      const auto* choice = std::get_if<choice_answer>(&a);
      if (id != tools::tool_question_id || !choice) continue;
      std::vector<std::pair<std::string, double>> sorted = choice->probabilities;
      std::stable_sort(sorted.begin(), sorted.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
      for (const auto& [tool, p] : sorted) {
        if (tool.starts_with(tools::group_option_prefix)) continue;  // two-stage routing's groups not asked about: no tool to pick
        std::string description;
        if (tool == tools::finish_option && routing.registry.finish) description = *routing.registry.finish;
        if (const tools::tool* t = tools::find_tool(routing.registry, tool)) description = t->description;
        r.candidates.push_back({{"tool", tool}, {"description", description}, {"probability", round_decimals(p, 4)}});
      }
    }
  }
  json evidence = escalation_evidence(r, answers, d.error_code, routing.registry, routing.policy);
  return {std::move(r), std::move(evidence)};
}

result<log::resolution_record> prepare_resolution(const routing_snapshot& routing, const log::escalation_record& r,
                                                  protocol::resolve_input&& in, const std::string& reviewer,
                                                  const char* by) {
  log::resolution_record res;
  res.outcome = in.execute ? "execute" : "deny";
  if (in.execute) {
    res.tool = in.tool.value_or(r.tool);
    if (res.tool.empty()) return protocol::invalid_resolution_field(json::array({"tool"}), "missing", "`tool` is required: the escalated decision names none");
    const bool finish = res.tool == tools::finish_option && routing.registry.finish;
    const tools::tool* t = tools::find_tool(routing.registry, res.tool);
    if (!finish && !t) return protocol::invalid_resolution_field(json::array({"tool"}), "literal_error", "unknown tool `" + res.tool + "`");
    res.arguments = in.arguments ? *in.arguments : res.tool == r.tool ? r.arguments : json::object();
    if (t) {
      if (auto issues = tools::complete_arguments(*t, res.arguments); !issues.empty()) {
        return make_error(422, codes::invalid_resolution, std::move(issues));
      }
    } else if (!res.arguments.is_object() || !res.arguments.empty()) {
      return protocol::invalid_resolution_field(json::array({"arguments"}), "extra_forbidden", "`finish` takes no arguments");
    }
  }
  const bool registry_changed = r.registry_hash != routing.registry.hash;
  const bool policy_changed = r.policy_hash != routing.policy.hash;
  if ((registry_changed || policy_changed) && !in.force) {
    const std::string what = registry_changed && policy_changed ? "the registry and the policy"
                             : registry_changed                 ? "the registry"
                                                                : "the policy";
    return make_error(409, codes::version_changed, what + " changed since escalation " + r.id +
                                                  " was raised; resolve with \"force\": true to resolve it anyway");
  }
  res.id = new_id('v');
  res.escalation = r.id;
  res.created_ms = unix_ms();
  res.reason = std::move(in.reason);
  res.reviewer = reviewer;
  res.by = by;
  res.forced = in.force && (registry_changed || policy_changed);
  res.registry_hash = routing.registry.hash;
  res.policy_hash = routing.policy.hash;
  return res;
}

log::resolution_record deadline_resolution(const routing_snapshot& routing, const log::escalation_record& r) {
  protocol::resolve_input in = deadline_input(r);
  std::string why;
  if (in.execute && denied_by_policy(routing, *in.tool)) {
    why = "the policy now denies `" + *in.tool + "` (rules.deny)";
  } else {
    auto res = prepare_resolution(routing, r, std::move(in), deadline_reviewer, "deadline");
    if (res) return std::move(*res);
    why = "its execute no longer fits the registry (" + res.error().message + ")";
  }
  // The configured `execute` is no longer allowed: denied, saying why, rather than run or left
  // pending for ever.
  protocol::resolve_input deny = deadline_input(r);
  deny.execute = false;
  deny.tool.reset();
  deny.arguments.reset();
  deny.reason += "; denied: " + why;
  auto denied = prepare_resolution(routing, r, std::move(deny), deadline_reviewer, "deadline");
  return std::move(*denied);  // a forced deny has nothing left to refuse
}

std::optional<std::string> misfit(const routing_snapshot& routing, const log::escalation_record& r) {
  if (r.tool.empty()) return std::nullopt;  // the reviewer chooses the tool
  if (r.registry_hash == routing.registry.hash && r.policy_hash == routing.policy.hash) return std::nullopt;
  if (r.tool == tools::finish_option) {
    if (routing.registry.finish) return std::nullopt;
    return std::string("the registry no longer has `finish`");
  }
  const tools::tool* t = tools::find_tool(routing.registry, r.tool);
  if (!t) return "tool `" + r.tool + "` is no longer in the registry";
  json arguments = r.arguments;
  if (const auto issues = tools::complete_arguments(*t, arguments); !issues.empty()) {
    // loc is ["arguments", NAME], or ["arguments"] for arguments that are no object.
    const issue& first = issues.front();
    const std::string where = first.loc.is_array() && !first.loc.empty() && first.loc.back().is_string()
                                  ? first.loc.back().get<std::string>()
                                  : std::string("arguments");
    return "its arguments no longer fit tool `" + r.tool + "` (" + where + ": " + first.msg + ")";
  }
  if (denied_by_policy(routing, r.tool)) return "the policy now denies `" + r.tool + "` (rules.deny)";
  return std::nullopt;
}

log::resolution_record misfit_denial(const routing_snapshot& routing, const log::escalation_record& r, std::string reason) {
  protocol::resolve_input in;
  in.reason = std::move(reason);
  in.force = true;
  return std::move(*prepare_resolution(routing, r, std::move(in), deadline_reviewer, "deadline"));  // a forced deny has nothing left to refuse
}

tools::executor* executor_for(const routing_snapshot& routing, const log::resolution_record& r) {
  if (r.outcome != "execute") return nullptr;
  const auto it = routing.executors.find(r.tool);
  return it == routing.executors.end() ? nullptr : it->second.get();
}

protocol::resolution_object resolution_object_of(const routing_snapshot& routing, const log::resolution_record& r,
                                                 const log::escalation_record& e) {
  const tools::executor* ex = executor_for(routing, r);
  return protocol::resolution_view(r, e, ex ? std::optional<std::string>(ex->kind()) : std::nullopt);
}

escalation read_back(const routing_snapshot& routing, const log::escalation_row& row) {
  return {row.escalation, escalation_evidence(row.escalation, row.decision_answers, row.decision_error,
                                              routing.registry, routing.policy)};
}

protocol::escalation_object history_object(const routing_snapshot& routing, const log::escalation_history& h) {
  const escalation e = read_back(routing, h.row);
  if (!h.resolution) return protocol::escalation_view(e.row, e.evidence);
  return protocol::escalation_view(e.row, e.evidence, resolution_object_of(routing, *h.resolution, e.row),
                                   h.tool_run ? std::optional(protocol::tool_run_view(*h.tool_run)) : std::nullopt);
}

}  // namespace baton
