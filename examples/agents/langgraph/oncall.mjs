#!/usr/bin/env node
// The on-call alerts of examples/agents/oncall_incident.py as LangGraph threads (graph.mjs), one
// thread and one baton session per alert, checkpointed in SQLite. See README.md next to this file.
//
// A run brings every alert's thread to its end or to an interrupt (a person must decide), then
// waits for the resolutions: each one resumes its thread with new Command({ resume: resolution })
// and is acknowledged to baton only after that resumed run returned, its checkpoints written. A
// later run on the same --checkpoints file continues where the last one stopped (killed or not):
// it asks baton again (resume) for the resolutions it has not acknowledged, resumes the threads that
// wait for them, and acknowledges without resuming again those a thread already applied.
import "./web_crypto.mjs";
import { mkdirSync } from "node:fs";
import { dirname, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { Command } from "@langchain/langgraph";
import { BatonClient } from "baton-client";
import { buildGraph, openCheckpointer, threadConfig, waitingFor } from "./graph.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");

// Each alert opens a thread; its id is also the baton session's name.
const ALERTS = {
  "alert-checkout-oom": "Alert: checkout service pods are crashing, out of memory, memory leaking; restart the pods.",
  "alert-search-latency": "Alert: search service latency is high. Query the dashboards and metrics for its error rate and saturation.",
  "alert-api-release": "The latest deploy of the public API is a bad release that broke login: roll back the deploy.",
  "alert-disk-flapping": "A noisy disk alert keeps flapping with no customer impact; silence the alert.",
  "alert-api-outage": "SEV1 outage: the public API is down for every customer, all requests fail. Customers are affected right now.",
  "alert-api-errors": "api errors up; restart?",
  "alert-search-index": "The search index looks stale",
  "alert-cleared": "The incident is resolved and the alert has cleared.",
};

const usage = `usage: node examples/agents/langgraph/oncall.mjs [options]

  --url URL            baton's agent endpoint (default ws://127.0.0.1:8472/v1/agent, the port of
                       config/examples/oncall/baton.yaml); sends $BATON_API_KEY when set
  --checkpoints FILE   the graph's SQLite checkpoints (default var/langgraph-oncall.sqlite); a
                       second run on the same file continues the threads the first one left
  --alerts A,B         only these alerts (default: all of them)
  --wait SECONDS       how long an interrupted thread waits for a person (default 600; 0: the run
                       ends at the interrupts, which stay in the checkpoints for the next run)
  -h, --help`;

function options() {
  const { values } = parseArgs({
    options: {
      url: { type: "string", default: "ws://127.0.0.1:8472/v1/agent" },
      checkpoints: { type: "string", default: resolve(root, "var/langgraph-oncall.sqlite") },
      alerts: { type: "string" },
      wait: { type: "string", default: "600" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help) {
    console.log(usage);
    process.exit(0);
  }
  const wait = Number(values.wait);
  if (!Number.isFinite(wait) || wait < 0) fail(`--wait takes seconds (0 or more), not ${values.wait}`);
  const alerts = values.alerts ? values.alerts.split(",") : Object.keys(ALERTS);
  for (const a of alerts) if (!(a in ALERTS)) fail(`no alert ${a}; there are ${Object.keys(ALERTS).join(", ")}`);
  return { url: values.url, checkpoints: resolve(values.checkpoints), alerts, waitMs: wait * 1000 };
}

function fail(message) {
  console.error(`oncall.mjs: ${message}\n${usage}`);
  process.exit(64);
}

const width = Math.max(...Object.keys(ALERTS).map((a) => a.length));
function say(thread, what, text) {
  console.log(`${thread.padEnd(width)}  ${what.padEnd(8)} ${text}`);
}

function call(tool, args) {
  const list = Object.entries(args ?? {}).map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`);
  return `${tool ?? "(no tool)"}(${list.join(", ")})`;
}

// One line per node update of a run (streamMode "updates").
function show(thread, chunk) {
  for (const [node, update] of Object.entries(chunk)) {
    if (node === "__interrupt__") {
      for (const i of update) say(thread, "waits", `interrupt(): escalation ${i.value.escalation} waits for a person (checkpointed)`);
    } else if (node === "route") {
      const d = update.decision;
      const confidence = typeof d.confidence === "number" ? d.confidence.toFixed(2) : "n/a";
      say(thread, "route", `baton: ${d.action.padEnd(8)} ${call(d.tool, d.arguments)}  [${d.lane}, confidence ${confidence}]`);
    } else if (node === "review") {
      const r = update.resolution;
      say(thread, "review", `resumed with ${r.id}: ${r.outcome}${r.tool ? ` ${call(r.tool, r.arguments)}` : ""} by ${r.reviewer} (${r.by}): "${r.reason}"`);
    } else if (node === "tool") {
      const e = update.messages[0];
      say(thread, "tool", `${e.tool}: ok=${e.ok} ${JSON.stringify(e.output)}`);
    } else if (node === "fallback") {
      say(thread, "fallback", update.messages[0].content);
    }
    if (update?.outcome) say(thread, "END", `${update.outcome.status} (${update.outcome.by}): ${update.outcome.reason}`);
  }
}

async function main() {
  const opts = options();
  mkdirSync(dirname(opts.checkpoints), { recursive: true });
  const checkpointer = openCheckpointer(opts.checkpoints);
  const baton = new BatonClient({ url: opts.url });
  await baton.connect();
  const graph = buildGraph({ baton, checkpointer });
  const shown = relative(process.cwd(), opts.checkpoints);
  console.log(`baton ${opts.url}, checkpoints ${shown.startsWith("..") ? opts.checkpoints : shown}`);

  // Runs a thread (a new input, a Command, or null to go on from its checkpoint) until it ends or
  // is interrupted; returns the escalation it waits for, or null.
  async function run(thread, input) {
    const stream = await graph.stream(input, { ...threadConfig(thread), streamMode: "updates" });
    for await (const chunk of stream) show(thread, chunk);
    return waitingFor(await graph.getState(threadConfig(thread)));
  }

  // A resolution resumes its thread once, then is acknowledged. One this thread already applied
  // (the process that applied it stopped before its ack) is only acknowledged.
  async function apply(thread, r) {
    const snapshot = await graph.getState(threadConfig(thread));
    if (snapshot.values.resolutions?.includes(r.id)) {
      await baton.ack(r.id);
      say(thread, "ack", `${r.id} came again: the thread already resumed with it; acknowledged, not applied twice`);
      return waitingFor(snapshot);
    }
    const waiting = await run(thread, new Command({ resume: r }));
    await baton.ack(r.id);
    say(thread, "ack", `${r.id} acknowledged: the thread resumed with it and its checkpoints are written`);
    return waiting;
  }

  // Escalations a thread of this run waits for: their resolutions go to that thread's loop. Any
  // other resolution baton sends (again, after a resume) is acknowledged here if its thread
  // already applied it.
  const awaited = new Set();
  const late = [];
  const unfinished = [];
  let received = 0;
  baton.on("resolution", (r) => {
    received += 1;
    if (awaited.has(r.escalation)) return;
    const thread = r.session.split("/").pop(); // KEY/SESSION when the server has API keys
    late.push((async () => {
      const snapshot = await graph.getState(threadConfig(thread));
      if (snapshot.values.resolutions?.includes(r.id) && snapshot.next.length) {
        // Resumed with it, then stopped before the nodes after it were checkpointed (a tool baton
        // runs still to be heard of): acknowledged once the restore below has run them.
        unfinished.push({ thread, r });
      } else if (snapshot.values.resolutions?.includes(r.id)) {
        await baton.ack(r.id);
        say(thread, "ack", `${r.id} came again: the thread already resumed with it; acknowledged, not applied twice`);
      } else if (waitingFor(snapshot)?.escalation !== r.escalation) {
        say(thread, "ignored", `${r.id} resolves ${r.escalation}, which this thread does not wait for (left unacknowledged)`);
      }
    })());
  });

  // First every thread as far as it goes without a person, one after the other.
  const waits = new Map();
  let resent = 0;
  for (const thread of opts.alerts) {
    const snapshot = await graph.getState(threadConfig(thread));
    let waiting = null;
    if (!snapshot.createdAt) {
      say(thread, "start", ALERTS[thread]);
      waiting = await run(thread, { messages: [{ role: "user", content: ALERTS[thread] }] });
    } else {
      // A thread of an earlier run: baton sends again the resolutions not acknowledged yet.
      waiting = waitingFor(snapshot);
      if (waiting) awaited.add(waiting.escalation);
      resent += (await baton.session(thread).resume()).resolutions;
      if (waiting) say(thread, "restored", `still waits for escalation ${waiting.escalation}`);
      else if (snapshot.next.length) {
        say(thread, "restored", `stopped before ${snapshot.next.join(", ")}; going on`);
        waiting = await run(thread, null);
      } else say(thread, "restored", `already ended: ${snapshot.values.outcome?.status}`);
    }
    if (waiting) waits.set(thread, waiting);
  }

  // Then the interrupted ones wait for people, all at once.
  await Promise.all([...waits].map(async ([thread, waiting]) => {
    while (waiting && opts.waitMs > 0) {
      awaited.add(waiting.escalation);
      let r;
      try {
        r = await baton.session(thread).resolution(waiting.escalation, { timeoutMs: opts.waitMs });
      } catch (err) {
        if (err.code !== "TIMEOUT") throw err;
        say(thread, "waits", `no resolution of ${waiting.escalation} within ${opts.waitMs / 1000} s; a later run picks it up`);
        return;
      }
      waiting = await apply(thread, r);
    }
  }));

  // The resolutions baton sent again after the resumes above (frames come in order after each
  // `resumed`), and their acknowledgements, before closing.
  const until = Date.now() + 5000;
  while (received < resent && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
  await Promise.all(late);
  for (const { thread, r } of unfinished) {
    const snapshot = await graph.getState(threadConfig(thread));
    if (snapshot.next.length) {
      say(thread, "waits", `${r.id} stays unacknowledged: the thread stopped before ${snapshot.next.join(", ")}`);
      continue;
    }
    await baton.ack(r.id);
    say(thread, "ack", `${r.id} came again: the thread already resumed with it and has now gone on; acknowledged, not applied twice`);
  }

  console.log("");
  for (const thread of opts.alerts) {
    const snapshot = await graph.getState(threadConfig(thread));
    const waiting = waitingFor(snapshot);
    const o = snapshot.values.outcome;
    console.log(`${thread.padEnd(width)}  ${waiting ? `waits for a person (${waiting.escalation})` : `${o.status} (${o.by}): ${o.reason}`}`);
  }
  await baton.close();
  checkpointer.db.close();
}

main().catch((err) => {
  console.error(`oncall.mjs: ${err.code ? `${err.code}: ` : ""}${err.message}`);
  process.exit(1);
});
