// End to end: the LangGraph on-call graph (oncall.mjs, graph.mjs) against a real `baton serve`
// (keyword engine, config/examples/oncall; midway its policy is reloaded with a deny rule), its
// SQLite checkpoints in a temporary folder, a reviewer over the HTTP API, and the graph process
// killed while a thread waits for a person.
//
//   BATON_BIN=build/adapters/baton node --test examples/agents/langgraph/test/
//
// ctest runs it as test_langgraph (tests/CMakeLists.txt); scripts/setup.sh installs what it needs
// (npm ci here and in clients/typescript). Everything is on 127.0.0.1.

import "../web_crypto.mjs";
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { Command } from "@langchain/langgraph";
import { BatonClient } from "baton-client";

import { baton_process } from "../../../../tests/support/baton_process.mjs";
import { buildGraph, openCheckpointer, threadConfig, waitingFor } from "../graph.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const example = path.dirname(here);
const root = path.resolve(example, "../../..");
const oncall = path.join(root, "config/examples/oncall");
const batonBin = process.env.BATON_BIN ?? path.join(root, "build/adapters/baton");
const run = promisify(execFile);

const STARTUP_MS = 10_000;
const STOP_MS = 10_000;
const STEP_MS = 15_000; // the longest any one step below may take

let server;
let base; // http://127.0.0.1:PORT
let agentUrl;
let tmp;
let checkpoints;
let db;
let policyPath;
let anyFailed = false;

before(async () => {
  assert.ok(existsSync(batonBin), `no baton binary at ${batonBin}: build it (scripts/setup.sh) or set BATON_BIN`);
  assert.ok(existsSync(path.join(root, "clients/typescript/dist/index.js")) && existsSync(path.join(example, "node_modules/@langchain/langgraph")),
    "run scripts/setup.sh first: it builds clients/typescript and runs npm ci in examples/agents/langgraph");
  tmp = await mkdtemp(path.join(tmpdir(), "baton-langgraph-"));
  checkpoints = path.join(tmp, "checkpoints.sqlite");
  db = path.join(tmp, "baton.db");
  // The on-call example's registry and policy (a copy: it is changed and reloaded below).
  policyPath = path.join(tmp, "policy.yaml");
  await writeFile(policyPath, await readFile(path.join(oncall, "policy.yaml"), "utf8"));
  const config = path.join(tmp, "baton.yaml");
  await writeFile(config, [
    "server:",
    "  listen: 127.0.0.1:0",
    "engine:",
    "  name: keyword",
    `registry: ${path.join(oncall, "tools.yaml")}`,
    `policy: ${policyPath}`,
    "log:",
    `  path: ${db}`,
    "",
  ].join("\n"));
  server = new baton_process(batonBin);
  base = await server.start(config, {}, STARTUP_MS);
  agentUrl = `${base.replace(/^http/, "ws")}/v1/agent`;
});

after(async () => {
  try {
    await server?.stopChecked(STOP_MS, { listened: Boolean(base), anyFailed });
  } finally {
    if (tmp) await rm(tmp, { recursive: true, force: true });
  }
});

function step(name, fn) {
  test(name, { timeout: 2 * STEP_MS }, async (t) => {
    try {
      await fn(t);
    } catch (err) {
      anyFailed = true;
      throw err;
    }
  });
}

// ---- the reviewer (HTTP) ----

async function http(method, url, body) {
  const res = await fetch(`${base}${url}`, {
    method,
    headers: body ? { "Content-Type": "application/json" } : {},
    body: body ? JSON.stringify(body) : undefined,
  });
  const json = await res.json();
  assert.equal(res.status, 200, `${method} ${url}: ${JSON.stringify(json)}`);
  return json;
}

const pending = async () => (await http("GET", "/v1/escalations?status=pending")).escalations;
// The sessions baton holds: a thread's is ended when a run of it completes (graph.mjs, `done`).
const sessionsHeld = async () => (await http("GET", "/health")).sessions;

// The oldest pending escalation of a session, once there is one.
async function escalationOf(session) {
  return until(`a pending escalation of ${session}`, async () => (await pending()).find((e) => e.session === session));
}

const resolve = (escalation, body) => http("POST", `/v1/escalations/${escalation.id}/resolve`, body);

async function until(what, probe, ms = STEP_MS) {
  const end = Date.now() + ms;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > end) throw new Error(`no ${what} within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

// ---- the graph process ----

function graphProcess(args) {
  const child = spawn(process.execPath, [path.join(example, "oncall.mjs"), "--url", agentUrl, "--checkpoints", checkpoints, ...args],
    { stdio: ["ignore", "pipe", "pipe"] });
  const p = { child, out: "", err: "" };
  child.stdout.setEncoding("utf8").on("data", (s) => { p.out += s; });
  child.stderr.setEncoding("utf8").on("data", (s) => { p.err += s; });
  p.exited = new Promise((r) => child.on("exit", (code, signal) => r(code ?? signal)));
  p.sees = (re) => until(`line ${re} from oncall.mjs (stdout so far:\n${p.out}\nstderr:\n${p.err})`, () => re.test(p.out));
  return p;
}

const line = (thread, what, rest) => new RegExp(`^${thread} +${what} +${rest}`, "m");

async function sql(query) {
  const { stdout } = await run(batonBin, ["log", "sql", "--db", db, query]);
  return stdout.trim().split("\n").filter(Boolean).map((l) => JSON.parse(l));
}

// Process 1 leaves two alerts to later steps.
const FIRST = "alert-checkout-oom,alert-search-latency,alert-api-release,alert-api-outage,alert-api-errors,alert-cleared";
const resolutionIds = {};

// ---- the story ----

step("process 1 runs every alert until it ends or waits for a person, and is killed while alert-api-release waits", async () => {
  const p1 = graphProcess(["--alerts", FIRST, "--wait", "60"]);
  try {
    // A person answers the outage while process 1 is up: not the silence baton proposed but a page.
    const outage = await escalationOf("alert-api-outage");
    assert.equal(outage.tool, "silence_alert");
    assert.equal(outage.reason, "rule:escalate_when:severity");
    resolutionIds.outage = (await resolve(outage, { outcome: "execute", tool: "page_oncall", arguments: {}, reason: "a SEV1 needs the on-call engineer" })).id;
    await p1.sees(line("alert-api-outage", "ack", `${resolutionIds.outage} acknowledged`));
    await p1.sees(line("alert-api-release", "waits", "interrupt\\(\\): escalation e-"));
  } finally {
    p1.child.kill("SIGKILL");
  }
  assert.equal(await p1.exited, "SIGKILL");
  assert.equal(await sessionsHeld(), 1, "the five threads that ended ended their sessions; alert-api-release's waits for a person");
  // Each lane as the graph took it.
  assert.match(p1.out, line("alert-checkout-oom", "route", "baton: execute +restart_service\\(service=checkout\\)"));
  assert.match(p1.out, line("alert-checkout-oom", "tool", 'restart_service: ok=true \\{"restarted":"checkout","pods":3\\}'));
  assert.match(p1.out, line("alert-checkout-oom", "END", "executed \\(baton\\): restart_service ran \\(by baton, command\\)"));
  assert.match(p1.out, line("alert-search-latency", "END", "executed \\(baton\\): query_metrics ran \\(in this graph\\)"));
  assert.match(p1.out, line("alert-api-outage", "review", `resumed with ${resolutionIds.outage}: execute page_oncall\\(\\)`));
  assert.match(p1.out, line("alert-api-outage", "tool", "page_oncall: ok=true"));
  assert.match(p1.out, line("alert-api-outage", "END", "executed \\(reviewer\\): page_oncall ran \\(in this graph\\)"));
  assert.match(p1.out, line("alert-api-errors", "fallback", "\\[larger-model stand-in\\]"));
  assert.match(p1.out, line("alert-cleared", "END", "finished \\(baton\\)"));
  assert.doesNotMatch(p1.out, /alert-search-index|alert-disk-flapping/);
});

step("the reviewer resolves alert-api-release while no graph process runs", async () => {
  const release = await escalationOf("alert-api-release");
  assert.equal(release.tool, "rollback_deploy");
  assert.equal(release.reason, "rule:max_risk");
  resolutionIds.release = (await resolve(release, { outcome: "execute", reason: "the release broke login: roll it back" })).id;
  assert.deepEqual(await sql(`SELECT resolution FROM deliveries WHERE resolution = '${resolutionIds.release}'`), []);
});

step("a process that resumed a thread with a resolution and died before its ack (simulated here)", async () => {
  const saver = openCheckpointer(checkpoints);
  const baton = new BatonClient({ url: agentUrl, reconnect: false });
  await baton.connect();
  try {
    const graph = buildGraph({ baton, checkpointer: saver });
    const config = threadConfig("alert-search-index");
    await graph.invoke({ messages: [{ role: "user", content: "The search index looks stale" }] }, config);
    const waiting = waitingFor(await graph.getState(config));
    assert.ok(waiting, "alert-search-index waits for a person");
    const escalation = await escalationOf("alert-search-index");
    assert.equal(escalation.id, waiting.escalation);
    await resolve(escalation, { outcome: "deny", reason: "a stale index is not an incident" });
    const r = await baton.session("alert-search-index").resolution(waiting.escalation, { timeoutMs: STEP_MS });
    resolutionIds.index = r.id;
    const done = await graph.invoke(new Command({ resume: r }), config);
    assert.equal(done.outcome.status, "denied");
    assert.deepEqual(done.resolutions, [r.id]);
    assert.equal(await sessionsHeld(), 1, "the resumed run ended alert-search-index's session (alert-api-release's is left)");
    // ... and no ack: the process "dies" here.
  } finally {
    await baton.close();
    saver.db.close();
  }
  assert.deepEqual(await sql(`SELECT resolution FROM deliveries WHERE resolution = '${resolutionIds.index}'`), []);
});

step("the policy is reloaded: silencing alerts is now denied", async () => {
  const policy = (await readFile(policyPath, "utf8")).replace(/^rules:\n/m, "rules:\n  deny: [silence_alert]\n");
  assert.match(policy, /^  deny: \[silence_alert\]$/m);
  await writeFile(policyPath, policy);
  const reload = await http("POST", "/v1/admin/reload", {});
  assert.notEqual(reload.new.policy_hash, reload.old.policy_hash);
  assert.equal(reload.escalations_resolved, 0);
});

step("process 2 restores every thread from the checkpoints, resumes alert-api-release with its resolution and acknowledges each once", async () => {
  const p2 = graphProcess(["--wait", "30"]);
  const code = await Promise.race([p2.exited, new Promise((r) => setTimeout(() => r("still running"), STEP_MS))]);
  if (code === "still running") p2.child.kill("SIGKILL");
  assert.equal(code, 0, `oncall.mjs exits 0\nstdout:\n${p2.out}\nstderr:\n${p2.err}`);
  const out = p2.out;
  assert.match(out, line("alert-api-release", "restored", "still waits for escalation e-"));
  assert.match(out, line("alert-api-release", "review", `resumed with ${resolutionIds.release}: execute rollback_deploy\\(\\)`));
  assert.match(out, line("alert-api-release", "tool", 'rollback_deploy: ok=true \\{"rolled_back_to":"api v2.41.0"\\}'));
  assert.match(out, line("alert-api-release", "ack", `${resolutionIds.release} acknowledged`));
  assert.match(out, line("alert-api-release", "END", "executed \\(reviewer\\): rollback_deploy ran \\(in this graph\\)"));
  // The resolution baton sent again is recognised: acknowledged, the thread not resumed twice.
  assert.match(out, line("alert-search-index", "ack", `${resolutionIds.index} came again: the thread already resumed with it; acknowledged, not applied twice`));
  assert.doesNotMatch(out, line("alert-search-index", "review", ""));
  for (const thread of ["alert-checkout-oom", "alert-api-outage", "alert-cleared"]) {
    assert.match(out, line(thread, "restored", "already ended"));
  }
  // A new thread on the reloaded policy: baton denies its turn.
  assert.match(out, line("alert-disk-flapping", "start", ""));
  assert.match(out, line("alert-disk-flapping", "END", "denied \\(baton\\): baton denied silence_alert \\(rule:deny\\)"));
  assert.equal((out.match(/ route /g) ?? []).length, 1, "only the new alert-disk-flapping asked baton");
  assert.equal(await sessionsHeld(), 0, "no session is left: each run that completed ended its thread's, close() any other");
});

step("the final graph states, read from the checkpoints", async () => {
  const saver = openCheckpointer(checkpoints);
  try {
    const graph = buildGraph({ baton: null, checkpointer: saver });
    const state = async (thread) => {
      const s = await graph.getState(threadConfig(thread));
      assert.deepEqual(s.next, [], `${thread} ended`);
      return s.values;
    };
    const tools = (v, tool) => v.messages.filter((m) => m.role === "tool" && m.tool === tool);

    const oom = await state("alert-checkout-oom");
    assert.deepEqual(oom.outcome, { status: "executed", by: "baton", reason: "restart_service ran (by baton, command)" });
    // baton's own event, as its tool_result frame carried it
    assert.deepEqual(tools(oom, "restart_service"), [{ role: "tool", tool: "restart_service", ok: true, output: { restarted: "checkout", pods: 3 } }]);

    const latency = await state("alert-search-latency");
    assert.deepEqual(latency.outcome, { status: "executed", by: "baton", reason: "query_metrics ran (in this graph)" });
    assert.deepEqual(latency.decision.arguments, { service: "search" });
    assert.equal(tools(latency, "query_metrics")[0].output.service, "search");

    const release = await state("alert-api-release");
    assert.deepEqual(release.outcome, { status: "executed", by: "reviewer", reason: "rollback_deploy ran (in this graph)" });
    assert.deepEqual(release.resolutions, [resolutionIds.release]);
    assert.equal(release.resolution.reason, "the release broke login: roll it back");
    assert.equal(tools(release, "rollback_deploy").length, 1, "the rollback ran once");

    const disk = await state("alert-disk-flapping");
    assert.deepEqual(disk.outcome, { status: "denied", by: "baton", reason: "baton denied silence_alert (rule:deny)" });
    assert.deepEqual(disk.messages.at(-1), { role: "assistant", content: "Refused: baton denied silence_alert (rule:deny)." });

    const outage = await state("alert-api-outage");
    assert.deepEqual(outage.resolutions, [resolutionIds.outage]);
    assert.deepEqual(outage.outcome, { status: "executed", by: "reviewer", reason: "page_oncall ran (in this graph)" });
    assert.equal(tools(outage, "page_oncall").length, 1);
    assert.equal(tools(outage, "silence_alert").length, 0, "the person's tool ran, not baton's proposal");

    const errors = await state("alert-api-errors");
    assert.equal(errors.outcome.status, "handed_off");
    assert.equal(errors.decision.action, "fallback");
    assert.match(errors.messages.at(-1).content, /^\[larger-model stand-in\]/);

    const index = await state("alert-search-index");
    assert.equal(index.outcome.status, "denied");
    assert.equal(index.outcome.by, "reviewer");
    assert.deepEqual(index.resolutions, [resolutionIds.index], "applied once, though delivered twice");
    assert.equal(index.messages.filter((m) => m.role === "assistant").length, 1);

    const cleared = await state("alert-cleared");
    assert.equal(cleared.outcome.status, "finished");
    assert.equal(cleared.outcome.by, "baton");
  } finally {
    saver.db.close();
  }
});

step("the decision log: each resolution acknowledged once, each tool run once, the chains intact", async () => {
  const deliveries = await sql(
    "SELECT r.id, e.session, r.outcome, r.tool, (SELECT COUNT(*) FROM deliveries d WHERE d.resolution = r.id) AS delivered " +
    "FROM resolutions r JOIN escalations e ON e.id = r.escalation ORDER BY r.seq");
  assert.deepEqual(deliveries, [
    { id: resolutionIds.outage, session: "alert-api-outage", outcome: "execute", tool: "page_oncall", delivered: 1 },
    { id: resolutionIds.release, session: "alert-api-release", outcome: "execute", tool: "rollback_deploy", delivered: 1 },
    { id: resolutionIds.index, session: "alert-search-index", outcome: "deny", tool: "", delivered: 1 },
  ]);
  const runs = await sql(
    "SELECT d.session, t.tool, t.executor, t.ok FROM tool_runs t JOIN decisions d ON d.id = t.decision ORDER BY d.session, t.tool");
  assert.deepEqual(runs, [
    { session: "alert-api-outage", tool: "page_oncall", executor: "agent", ok: 1 },
    { session: "alert-api-release", tool: "rollback_deploy", executor: "agent", ok: 1 },
    { session: "alert-checkout-oom", tool: "restart_service", executor: "command", ok: 1 },
    { session: "alert-search-latency", tool: "query_metrics", executor: "agent", ok: 1 },
  ]);
  const lanes = await sql("SELECT session, action, tool, lane FROM decisions ORDER BY seq");
  const of = (session) => lanes.filter((d) => d.session === session).map((d) => `${d.action} ${d.tool} ${d.lane}`);
  assert.deepEqual(of("alert-api-errors"), ["fallback restart_service lane:restart_service"]);
  assert.deepEqual(of("alert-disk-flapping"), ["deny silence_alert rule:deny"]);
  assert.deepEqual(of("alert-cleared"), ["finish finish lane:default"]);
  assert.deepEqual(of("alert-api-release"), ["escalate rollback_deploy rule:max_risk"]);
  assert.deepEqual(of("alert-checkout-oom"), ["execute restart_service lane:restart_service"]);
  assert.deepEqual(of("alert-search-index"), ["escalate query_metrics lane:default"]);
  assert.deepEqual(of("alert-api-outage"), ["escalate silence_alert rule:escalate_when:severity"]);
  await run(batonBin, ["log", "verify", "--db", db]);
});
