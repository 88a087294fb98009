#include "adapters/protocol/escalation_views.hpp"

namespace baton::protocol {

tool_run_object tool_run_view(const log::tool_run_record& r) {
  return {r.id, r.tool, r.executor, r.ok, r.error_code, r.detail, r.output, r.attempts, r.duration_ms, r.created_ms};
}

resolution_object resolution_view(const log::resolution_record& r, const log::escalation_record& e,
                                  std::optional<std::string> executor) {
  return {r.id,        r.escalation, e.decision, e.session, e.turn,   r.outcome,    r.tool,
          r.arguments, r.reason,     r.reviewer, r.by,      r.forced, r.created_ms, std::move(executor)};
}

escalation_object escalation_view(const log::escalation_record& r, json evidence,
                                  std::optional<resolution_object> resolution,
                                  std::optional<tool_run_object> tool_run) {
  return {r.id,          r.decision,       r.session,           r.turn,          r.created_ms,  r.deadline_ms,
          r.on_deadline, r.reason,         r.question,          r.tool,          r.arguments,   r.confidence,
          r.candidates,  parse_json_or_null(r.state), std::move(evidence), r.registry_hash, r.policy_hash,
          std::move(resolution), std::move(tool_run)};
}

}  // namespace baton::protocol
