// The on-call graph: LangGraph.js with baton's engine in the place of a language model. A `route`
// node asks baton (decide) what comes next given the thread's conversation, and baton's action picks
// the next node:
//
//   execute  -> tool      runs the tool (agent-run here, or waits for baton's run)
//   escalate -> review    interrupt(): the thread waits, checkpointed, until a person resolves it;
//                         the driver resumes it with new Command({ resume: resolution })
//   fallback -> fallback  another handler takes the turn (a stand-in for a larger model)
//   deny     -> done      with a refusal in the state
//   finish   -> done
//
// Every run that completes goes through `done`, which ends the thread's baton session (baton frees
// it now, not once it has been idle for server.session_idle_s); a run stopped at an interrupt keeps
// it, for the turn the person's resolution goes on with.
//
// One run of the graph is one baton turn: a new alert update is a new invoke on the same thread, and
// baton decides again on the whole history. (tool -> route instead of tool -> done makes it an
// agent loop; with an engine that reads only the words of the history, as the keyword engine does,
// baton would just propose the same tool again, and run it again when baton runs it itself.)
//
// Every node's result is checkpointed (SqliteSaver, durability "sync"), so a thread that waits for a
// person survives the process: a fresh process builds the same graph on the same file and resumes it.
import "./web_crypto.mjs";
import { Annotation, Command, END, START, StateGraph, interrupt } from "@langchain/langgraph";
import { SqliteSaver } from "@langchain/langgraph-checkpoint-sqlite";
import { largerModelStandIn, runAgentTool } from "./tools.mjs";

const append = (left, right) => left.concat(right);

export const OncallState = Annotation.Root({
  // The conversation as baton reads it: the alert, the tool events, and the graph's own replies
  // (a refusal, the fallback's answer). The thread id is the baton session.
  messages: Annotation({ reducer: append, default: () => [] }),
  // baton's last decision, as route read it.
  decision: Annotation(),
  // The call the tool node runs next: from baton's decision or from a person's resolution.
  call: Annotation(),
  // The last resolution this thread resumed with, and the ids of all of them: a resolution that
  // baton sends again (it was not acknowledged before a crash) is recognised here and not applied twice.
  resolution: Annotation(),
  resolutions: Annotation({ reducer: append, default: () => [] }),
  // How the turn ended: { status: executed | finished | denied | handed_off, by: baton | reviewer | fallback, reason }.
  outcome: Annotation(),
});

// The checkpointer: LangGraph's SQLite saver on a file. Each checkpoint is a committed SQLite
// transaction; synchronous=FULL makes the commit durable (fsync) before put() returns, so "the
// checkpoint is written" also holds after a power cut, not only after a crash of this process.
export function openCheckpointer(path) {
  const saver = SqliteSaver.fromConnString(path);
  saver.db.pragma("synchronous = FULL");
  return saver;
}

// What every call on a thread passes: its id, and durability "sync" (each step's checkpoint is
// written before the next step starts and before invoke/stream returns).
export function threadConfig(threadId) {
  return { configurable: { thread_id: threadId }, durability: "sync" };
}

// The escalation a thread is interrupted on (the value review passed to interrupt()), or null.
export function waitingFor(snapshot) {
  for (const task of snapshot.tasks ?? []) {
    for (const i of task.interrupts ?? []) if (i.value?.escalation) return i.value;
  }
  return null;
}

// baton (a connected BatonClient from baton-client) is used by route and tool; reading a thread's
// state (getState) needs neither. batonRunTimeoutMs: how long tool waits for a tool baton runs.
export function buildGraph({ baton, checkpointer, batonRunTimeoutMs = 60_000 }) {
  // The thread's baton session, given what the thread's state has and it lacks. The state is the
  // truth: the session object holds what this process told baton, so in a fresh process (or for a
  // new thread) it starts empty, and its first decide sends the whole history. Both nodes that talk
  // to baton call this first (a resumed thread may reach tool before route).
  function sessionOf(state, config) {
    const s = baton.session(config.configurable.thread_id);
    for (const event of state.messages.slice(s.history.length)) s.add(event);
    return s;
  }

  async function route(state, config) {
    const d = await sessionOf(state, config).decide();
    const decision = {
      id: d.decision, turn: d.turn, action: d.action, tool: d.tool ?? null, arguments: d.arguments ?? {},
      lane: d.lane, confidence: d.confidence ?? null, executor: d.executor ?? null,
      escalation: d.escalation ?? null, deadlineAt: d.deadline_at ?? null,
    };
    switch (d.action) {
      case "execute":
        return new Command({
          goto: "tool",
          update: { decision, call: { from: "decision", decision: d.decision, tool: d.tool, arguments: d.arguments ?? {}, executor: d.executor } },
        });
      case "escalate":
        return new Command({ goto: "review", update: { decision } });
      case "fallback":
        return new Command({ goto: "fallback", update: { decision } });
      case "deny": {
        const reason = `baton denied ${d.tool} (${d.lane})`;
        return new Command({
          goto: "done",
          update: { decision, outcome: { status: "denied", by: "baton", reason }, messages: [{ role: "assistant", content: `Refused: ${reason}.` }] },
        });
      }
      case "finish":
        return new Command({
          goto: "done",
          update: { decision, outcome: { status: "finished", by: "baton", reason: `${d.lane} at confidence ${fixed(d.confidence)}` } },
        });
      default:
        throw new Error(`baton answered an action this graph does not know: ${d.action}`);
    }
  }

  // A person decides. interrupt() stops the thread here (checkpointed); resuming it with
  // Command({ resume: resolution }) runs this node again from the top, and interrupt() then
  // returns the resolution.
  function review(state) {
    const d = state.decision;
    const r = interrupt({
      escalation: d.escalation, decision: d.id, tool: d.tool, arguments: d.arguments,
      lane: d.lane, confidence: d.confidence, deadlineAt: d.deadlineAt,
    });
    const resolution = {
      id: r.id, escalation: r.escalation, outcome: r.outcome, tool: r.tool ?? null, arguments: r.arguments ?? {},
      reviewer: r.reviewer, by: r.by, reason: r.reason,
    };
    const applied = { resolution, resolutions: [r.id] };
    if (r.outcome === "deny") {
      const reason = `${r.reviewer} (${r.by}) denied ${d.tool ?? "the turn"}: ${r.reason}`;
      return new Command({
        goto: "done",
        update: { ...applied, outcome: { status: "denied", by: "reviewer", reason }, messages: [{ role: "assistant", content: `Refused: ${reason}` }] },
      });
    }
    if (r.tool === "finish") {
      return new Command({
        goto: "done",
        update: { ...applied, outcome: { status: "finished", by: "reviewer", reason: `${r.reviewer}: ${r.reason}` } },
      });
    }
    return new Command({
      goto: "tool",
      update: { ...applied, call: { from: "resolution", decision: r.decision, tool: r.tool, arguments: r.arguments ?? {}, executor: r.executor } },
    });
  }

  async function tool(state, config) {
    const s = sessionOf(state, config);
    const call = state.call;
    let event;
    if (call.executor === "agent") {
      const { ok, output } = runAgentTool(call.tool, call.arguments);
      try {
        await s.toolResult({ decision: call.decision, tool: call.tool }, { ok, output });
      } catch (err) {
        // This node ran before, in a process that died before its checkpoint: a new connection
        // takes no result for that decision. The thread goes on; the first report is in baton's log.
        if (err.code !== "UNKNOWN_DECISION") throw err;
      }
      event = { role: "tool", tool: call.tool, ok, output };
    } else {
      // baton runs http and command tools itself and sends the outcome to the connected session.
      const of = call.from === "decision"
        ? { decision: call.decision, tool: call.tool, action: "execute", executor: call.executor }
        : { decision: call.decision, tool: call.tool, outcome: "execute", executor: call.executor };
      const frame = await s.batonRan(of, { timeoutMs: batonRunTimeoutMs });
      // The frame of a run after a resolution carries no `event` (baton adds none to the session).
      event = frame.event ?? { role: "tool", tool: call.tool, ok: frame.ok, output: frame.output };
    }
    const by = call.from === "decision" ? "baton" : "reviewer";
    const how = event.ok ? "ran" : `failed${event.error_code ? ` (${event.error_code})` : ""}`;
    return { messages: [event], outcome: { status: "executed", by, reason: `${call.tool} ${how} (${call.executor === "agent" ? "in this graph" : `by baton, ${call.executor}`})` } };
  }

  function fallback(state) {
    const answer = largerModelStandIn(state.messages, state.decision);
    return {
      messages: [{ role: "assistant", content: answer }],
      outcome: { status: "handed_off", by: "fallback", reason: `baton answered fallback (${state.decision.lane}): the fallback handler took the turn` },
    };
  }

  // The run is over: the session is ended. A later invoke on the thread starts a new one, whose
  // first decide sends the whole history (sessionOf), as in a fresh process. Ending is idempotent:
  // a process that died before this node's checkpoint ends it again on the next run.
  async function done(_state, config) {
    await baton.session(config.configurable.thread_id).end();
    return {};
  }

  return new StateGraph(OncallState)
    .addNode("route", route, { ends: ["tool", "review", "fallback", "done"] })
    .addNode("review", review, { ends: ["tool", "done"] })
    .addNode("tool", tool)
    .addNode("fallback", fallback)
    .addNode("done", done)
    .addEdge(START, "route")
    .addEdge("tool", "done")
    .addEdge("fallback", "done")
    .addEdge("done", END)
    .compile({ checkpointer });
}

function fixed(x) {
  return typeof x === "number" ? x.toFixed(2) : "n/a";
}
