// What runs in the graph's own process: the on-call tools whose executor is `agent`
// (config/examples/oncall/tools.yaml) and the fallback handler. Both are stand-ins: they return
// fixed data instead of calling a metrics system, a pager or a model.

// An agent-run tool's outcome: { ok, output }. A tool this process does not know fails (and
// baton logs it as failed) instead of throwing inside the graph.
export function runAgentTool(tool, args) {
  switch (tool) {
    case "query_metrics":
      return { ok: true, output: { service: args.service ?? null, p99_ms: 840, error_rate: 0.002, saturation: 0.93 } };
    case "silence_alert":
      return { ok: true, output: { silenced_for_minutes: 60 } };
    case "page_oncall":
      return { ok: true, output: { paged: "primary on-call" } };
    case "rollback_deploy":
      return { ok: true, output: { rolled_back_to: "api v2.41.0" } };
    default:
      return { ok: false, output: { error: `this graph does not run ${tool}` } };
  }
}

// STAND-IN FOR A LARGER MODEL. baton's `fallback` lane means "too unsure to act, not worth a
// person yet: let a stronger handler take this turn". In a real graph this node would call a
// large language model (or a subgraph around one); here it is a plain function so that the
// example runs without a model, and it says so in what it writes.
export function largerModelStandIn(messages, decision) {
  const alert = messages.find((m) => m.role === "user")?.content ?? "";
  return (
    `[larger-model stand-in] baton was unsure (${decision.tool} at confidence ${decision.confidence.toFixed(2)}, ` +
    `${decision.lane}); this handler takes the turn. It would read the alert ("${alert}") with a larger model; ` +
    `the stand-in only opens a ticket for the on-call queue.`
  );
}
