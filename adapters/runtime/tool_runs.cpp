#include "adapters/runtime/tool_runs.hpp"

#include "core/ids.hpp"

namespace baton {

log::tool_run_record tool_run_of(const std::string& decision, const std::string& tool, std::string_view executor,
                                 const tools::tool_outcome& o) {
  log::tool_run_record run;
  run.id = new_id('r');
  run.decision = decision;
  run.tool = tool;
  run.executor = std::string(executor);
  run.created_ms = unix_ms();
  run.duration_ms = o.duration_ms;
  run.ok = o.ok;
  run.output = o.output;
  run.error_code = o.error_code;
  run.detail = o.detail;
  run.attempts = o.attempts;
  return run;
}

log::tool_run_record reported_tool_run(const std::string& decision, const std::string& tool, bool ok, json output) {
  log::tool_run_record run;
  run.id = new_id('r');
  run.decision = decision;
  run.tool = tool;
  run.executor = "agent";
  run.created_ms = unix_ms();
  run.ok = ok;
  run.output = std::move(output);
  run.attempts = 1;
  return run;
}

protocol::tool_outcome wire_outcome(tools::tool_outcome&& o) {
  return {o.ok, std::move(o.error_code), std::move(o.detail), o.attempts, std::move(o.output)};
}

std::string logged_tool_result(const std::optional<log::tool_run_record>& run) {
  if (!run || run->executor == "agent") return {};
  return protocol::render(protocol::tool_outcome_frame{
      run->decision, run->tool, {run->ok, run->error_code, run->detail, run->attempts, run->output}, {}});
}

}  // namespace baton
