// baton-client against a real `baton serve` (the on-call example's registry and policy, the
// keyword engine): decide with history then append, many sessions on one connection, tool
// results both ways, escalations, acks, the protocol's error codes, and sessions ended or evicted.
//
//   BATON_BIN=build/adapters/baton node --test clients/typescript/test/
import assert from "node:assert/strict";
import { after, afterEach, before, test } from "node:test";

import { BatonClient, BatonError } from "baton-client";

import { BatonServer, SAY, nextEvent, spyFrames, uniqueName } from "./helpers.mjs";

const server = new BatonServer();
const spy = spyFrames();
let baton;
let anyFailed = false;

before(async () => {
  await server.start();
  baton = new BatonClient({ url: server.wsUrl });
  await baton.connect();
});

afterEach((t) => {
  if (t.passed === false) anyFailed = true;
});

after(async () => {
  await baton?.close();
  spy.restore();
  await server.dispose(anyFailed);
});

const decidesOf = (name) => spy.sent.filter((f) => f.type === "decide" && f.session === name);

test("the first decide sends the history, the next only what is new", async () => {
  const s = baton.session(uniqueName("history"));
  assert.equal(baton.session(s.name), s, "the same Session object for the same name");
  s.add({ role: "user", content: SAY.metrics });
  const d1 = await s.decide();
  assert.equal(d1.type, "decision");
  assert.equal(d1.session, s.name);
  assert.equal(d1.turn, 1);
  assert.equal(d1.action, "execute");
  assert.equal(d1.tool, "query_metrics");
  assert.equal(d1.answers.tool.type, "choice");
  assert.equal(typeof d1.usage.input_tokens, "number");

  const d2 = await s.decide({ events: [{ role: "assistant", content: "looking at the api dashboards" }, { role: "user", content: SAY.metrics }] });
  assert.equal(d2.turn, 2);
  assert.notEqual(d2.decision, d1.decision);

  const [first, second] = decidesOf(s.name);
  assert.deepEqual(first.history, [{ role: "user", content: SAY.metrics }]);
  assert.equal(first.append, undefined);
  assert.equal(first.turn, undefined, "the client lets baton number the turns");
  assert.equal(second.history, undefined);
  assert.deepEqual(second.append.map((e) => e.role), ["assistant", "user"], "only the events since turn 1");
  assert.equal(s.history.length, 3);
  assert.ok(Number.isInteger(first.id) && Number.isInteger(second.id) && first.id !== second.id, "an integer id per frame");
  assert.equal(d2.id, second.id, "a decision is matched by its frame id");
});

test("many sessions decide at once on one connection, each its own turns", async () => {
  const names = Array.from({ length: 25 }, () => uniqueName("many"));
  const turn = (round) =>
    Promise.all(
      names.map((name, i) => baton.session(name).decide({ events: [{ role: "user", content: i % 2 ? SAY.metrics : SAY.rollback }] })),
    ).then((ds) => ds.map((d, i) => ({ d, name: names[i], round })));
  const results = [...(await turn(1)), ...(await turn(2))];
  for (const { d, name, round } of results) {
    assert.equal(d.session, name);
    assert.equal(d.turn, round);
  }
  const ids = results.map(({ d }) => d.decision);
  assert.equal(new Set(ids).size, ids.length, "every decision is its own");
  // Two decides of one session at once go one after the other (baton would say SESSION_BUSY).
  const s = baton.session(names[0]);
  const [a, b] = await Promise.all([s.decide({ events: [{ role: "user", content: SAY.metrics }] }), s.decide()]);
  assert.deepEqual([a.turn, b.turn], [3, 4]);
  const health = await (await fetch(`${server.baseUrl}/health`)).json();
  assert.ok(health.sessions >= names.length, `baton holds the ${names.length} sessions (${health.sessions})`);
});

test("toolResult is acknowledged by baton and its event goes with the next decide", async () => {
  const s = baton.session(uniqueName("tool"));
  const d = await s.decide({ events: [{ role: "user", content: SAY.metrics }] });
  assert.equal(d.executor, "agent");
  const ack = await s.toolResult(d, { ok: true, output: { error_rate: 0.12 } });
  assert.deepEqual(ack, { type: "ack", ref: ack.ref, decision: d.decision });
  assert.deepEqual(s.history.at(-1), { role: "tool", tool: "query_metrics", ok: true, output: { error_rate: 0.12 } });

  await assert.rejects(s.toolResult(d, { ok: true, output: null }), (e) => e instanceof BatonError && e.code === "DUPLICATE_TOOL_RESULT");
  assert.equal(s.history.filter((e) => e.role === "tool").length, 1, "a refused result does not join the history");

  await s.decide({ events: [{ role: "user", content: SAY.metrics }] });
  const appended = decidesOf(s.name).at(-1).append;
  assert.deepEqual(appended[0], { role: "tool", tool: "query_metrics", ok: true, output: { error_rate: 0.12 } });
  assert.equal(appended.length, 2);
});

test("batonRan waits for the tool baton ran (a command) and keeps its event out of the next append", async () => {
  const s = baton.session(uniqueName("command"));
  const seen = [];
  const listener = (f) => seen.push(f.decision);
  baton.on("tool_result", listener);
  const d = await s.decide({ events: [{ role: "user", content: SAY.restart }] });
  assert.equal(d.tool, "restart_service");
  assert.equal(d.executor, "command");
  const tr = await s.batonRan(d);
  baton.off("tool_result", listener);
  assert.equal(tr.type, "tool_result");
  assert.equal(tr.decision, d.decision);
  assert.equal(tr.ok, true);
  assert.deepEqual(tr.output, { restarted: "checkout", pods: 3 });
  assert.deepEqual(s.history.at(-1), tr.event);
  assert.deepEqual(seen, [d.decision], "the tool_result event, once");

  await s.decide({ events: [{ role: "user", content: "is it healthy now?" }] });
  assert.deepEqual(decidesOf(s.name).at(-1).append, [{ role: "user", content: "is it healthy now?" }], "baton has the tool's event already");
  await assert.rejects(s.batonRan(d.action === "execute" ? { ...d, executor: "agent" } : d), TypeError);
});

test("an escalation's resolution comes once; ack is confirmed and idempotent; resume no longer sends it", async () => {
  const s = baton.session(uniqueName("escalate"));
  const events = [];
  const listener = (r) => events.push(r.id);
  baton.on("resolution", listener);
  const d = await s.decide({ events: [{ role: "user", content: SAY.rollback }] });
  assert.equal(d.action, "escalate");
  assert.equal(d.tool, "rollback_deploy");
  assert.match(d.escalation, /^e-/);
  assert.deepEqual((await s.resume()).pending, [d.escalation]);

  const resolved = await server.resolve(d.escalation);
  const r = await s.resolution(d.escalation, { timeoutMs: 5000 });
  assert.equal(r.id, resolved.id);
  assert.equal(r.outcome, "execute");
  assert.equal(r.session, s.name);

  // Not acknowledged yet: a resume sends it again, and the client does not emit it twice.
  assert.deepEqual(await s.resume(), { pending: [], resolutions: 1 });
  await s.resume(); // its answer comes after the resolution frame the first one announced
  await s.resume(); // and this one's after the second one's
  assert.deepEqual(events, [r.id]);
  const sent = spy.received.filter((f) => f.type === "resolution" && f.resolution.id === r.id).length;
  assert.ok(sent >= 3, `baton sent it at least three times (${sent})`);

  await baton.ack(r.id);
  await baton.ack(r.id); // idempotent
  assert.deepEqual(await s.resume(), { pending: [], resolutions: 0 });
  baton.off("resolution", listener);

  // The agent runs the resolved tool itself and reports it for the resolution's decision.
  const ack = await s.toolResult(r, { ok: true, output: { rolled_back: "checkout" } });
  assert.equal(ack.decision, r.decision);
});

test("error frames reject with their protocol code", async () => {
  const s = baton.session(uniqueName("errors"));
  await s.decide({ events: [{ role: "user", content: SAY.metrics }] });

  const turn = await baton.request({ type: "decide", session: s.name, turn: 1, history: [{ role: "user", content: "again" }] }).catch((e) => e);
  assert.ok(turn instanceof BatonError);
  assert.equal(turn.code, "TURN_OUT_OF_ORDER");
  assert.equal(turn.frame.type, "error");

  const invalid = await baton.request({ type: "decide", session: s.name, history: "not a list" }).catch((e) => e);
  assert.equal(invalid.code, "INVALID_FRAME");
  assert.deepEqual(invalid.detail[0].loc, ["history"]);

  const unknown = await baton.request({ type: "decide", session: uniqueName("never"), append: [] }).catch((e) => e);
  assert.equal(unknown.code, "UNKNOWN_SESSION");

  await assert.rejects(baton.ack("v-0000000000000-00000000"), (e) => e.code === "UNKNOWN_RESOLUTION");
  await assert.rejects(s.toolResult({ decision: "d-0000000000000-00000000", tool: "query_metrics" }, { ok: true, output: null }), (e) => e.code === "UNKNOWN_DECISION");
  await assert.rejects(baton.request({ type: "dance" }), (e) => e.code === "UNKNOWN_TYPE");
  await assert.rejects(s.resolution("e-0000000000000-00000000", { timeoutMs: 50 }), (e) => e.code === "TIMEOUT");

  // The session is as it was: its next decide appends.
  const d = await s.decide({ events: [{ role: "user", content: SAY.metrics }] });
  assert.equal(d.turn, 2);
  assert.ok(decidesOf(s.name).at(-1).append, "still an append");
});

test("connect failures and a closed client reject with the client's own codes", async () => {
  const nobody = new BatonClient({ url: "ws://127.0.0.1:1/v1/agent" });
  await assert.rejects(nobody.connect(), (e) => e instanceof BatonError && e.code === "CONNECT_FAILED");
  await nobody.close();

  const wrongPath = new BatonClient({ url: `ws://127.0.0.1:${server.port}/v1/nothing` });
  await assert.rejects(wrongPath.connect(), (e) => e instanceof BatonError && e.code === "NOT_FOUND");
  await wrongPath.close();

  const other = new BatonClient({ url: server.wsUrl });
  await other.connect();
  const s = other.session(uniqueName("closing"));
  const pending = s.resolution("e-0000000000000-00000000").catch((e) => e);
  await other.close();
  assert.equal((await pending).code, "CLOSED");
  await assert.rejects(s.decide({ events: [{ role: "user", content: SAY.metrics }] }), (e) => e.code === "CLOSED");
  await assert.rejects(other.connect(), (e) => e.code === "CLOSED");
});

test("a frame over baton's max_frame_bytes: an error event (ref null), CONNECTION_LOST for the request, and a reconnect", async () => {
  const big = new BatonClient({ url: server.wsUrl, reconnect: { initialDelayMs: 20, maxDelayMs: 100 } });
  try {
    await big.connect();
    const errors = [];
    big.on("error", (e) => errors.push(e));
    const closed = nextEvent(big, "disconnected");
    const reconnected = nextEvent(big, "reconnected");
    const s = big.session(uniqueName("big"));
    const lost = await s.decide({ events: [{ role: "user", content: "x".repeat(1_100_000) }] }).catch((e) => e);
    assert.equal(lost.code, "CONNECTION_LOST");
    assert.equal((await closed).code, 1009);
    assert.deepEqual(errors.map((e) => [e.code, e.frame.ref]), [["FRAME_TOO_LARGE", null]]);
    await reconnected;
    assert.deepEqual(await s.resume(), { pending: [], resolutions: 0 }, "the connection works again");
  } finally {
    await big.close();
  }
});


const health = async (srv) => (await fetch(`${srv.baseUrl}/health`)).json();

test("end is answered ended, the session leaves baton, and the name's next decide starts afresh", async () => {
  const name = uniqueName("end");
  const s = baton.session(name);
  await s.decide({ events: [{ role: "user", content: SAY.cleared }] });
  await s.decide({ events: [{ role: "user", content: SAY.cleared }] });
  const held = (await health(server)).sessions;
  await s.end();
  const end = spy.sent.filter((f) => f.type === "end" && f.session === name);
  assert.equal(end.length, 1);
  assert.deepEqual(spy.received.find((f) => f.ref === end[0].id), { type: "ended", ref: end[0].id, session: name });
  assert.equal((await health(server)).sessions, held - 1, "baton no longer holds it");

  const fresh = baton.session(name);
  assert.notEqual(fresh, s);
  const d = await fresh.decide({ events: [{ role: "user", content: SAY.cleared }] });
  assert.equal(d.turn, 1, "a new session on baton's side");
  assert.deepEqual(decidesOf(name).at(-1).history, [{ role: "user", content: SAY.cleared }], "sent as the full history");

  // Ended twice (baton remembers the name) and a name baton never had: both resolve.
  await fresh.end();
  await baton.session(name).end();
  const never = uniqueName("never-had");
  await baton.session(never).end();
  const answers = spy.sent.filter((f) => f.type === "end" && (f.session === name || f.session === never))
    .map((f) => spy.received.find((r) => r.ref === f.id));
  assert.deepEqual(answers.map((a) => a.type === "error" ? a.code : a.type), ["ended", "ended", "ended", "UNKNOWN_SESSION"]);
});

test("max_sessions 2: a third session evicts the least recently used idle one, whose next append is resent as the full history", async () => {
  const small = new BatonServer({ max_sessions: 2 });
  let failed = true;
  const other = new BatonClient({ url: (await small.start()).wsUrl });
  try {
    await other.connect();
    const say = { events: [{ role: "user", content: SAY.cleared }] };
    // The name was used and ended before: its new session behaves as any other.
    const name = uniqueName("evicted");
    await other.session(name).decide(say);
    await other.session(name).end();
    const a = other.session(name);
    await a.decide(say);
    await other.session(uniqueName("b")).decide(say);
    await other.session(uniqueName("c")).decide(say); // baton is full: `a`, the least recently used, goes
    assert.equal((await health(small)).sessions, 2);

    const d = await a.decide(say);
    assert.equal(d.turn, 1, "baton had forgotten it: the full history is a new session's first turn");
    const frames = decidesOf(name).slice(-3);
    assert.deepEqual(frames.map((f) => (f.history ? `history ${f.history.length}` : `append ${f.append.length}`)), ["history 1", "append 1", "history 2"]);
    const refused = spy.received.find((f) => f.ref === frames[1].id);
    assert.equal(refused.code, "UNKNOWN_SESSION");
    assert.equal((await health(small)).sessions, 2, "it evicted another idle one in turn");
    failed = false;
  } finally {
    await other.close();
    await small.dispose(failed);
  }
});
