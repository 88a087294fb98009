// baton-client across dropped connections: a graceful restart of baton mid-session, a kill -9
// with escalations pending (every resolution reaches the client exactly once, also one resolved
// while it was disconnected, and none again once acknowledged), a request whose answer never
// comes (TIMEOUT) and one in flight when the connection drops (CONNECTION_LOST).
import assert from "node:assert/strict";
import { after, afterEach, before, test } from "node:test";

import { BatonClient } from "baton-client";

import { BatonServer, Proxy, SAY, nextEvent, spyFrames, uniqueName, until } from "./helpers.mjs";

// One baton for all the tests (it takes a second or two to start): they restart and kill it.
const server = new BatonServer();
const spy = spyFrames();
const clients = [];
const proxies = [];
let anyFailed = false;

before(async () => {
  await server.start();
});

afterEach((t) => {
  if (t.passed === false) anyFailed = true;
});

after(async () => {
  await Promise.all(clients.map((c) => c.close()));
  await Promise.all(proxies.map((p) => p.close()));
  spy.restore();
  await server.dispose(anyFailed);
});

async function newProxy() {
  const proxy = await new Proxy(server.port).start();
  proxies.push(proxy);
  return proxy;
}

function newClient(url, options = {}) {
  const c = new BatonClient({ url, reconnect: { initialDelayMs: 50, maxDelayMs: 400 }, ...options });
  clients.push(c);
  return c;
}

test("baton restarts (SIGTERM) mid-session: the client reconnects, resumes, and decides on with the full history", async () => {
  const baton = newClient(server.wsUrl);
  await baton.connect();
  const reconnecting = [];
  baton.on("reconnecting", (e) => reconnecting.push(e));
  const s = baton.session(uniqueName("restart"));
  const d1 = await s.decide({ events: [{ role: "user", content: SAY.metrics }] });
  await s.toolResult(d1, { ok: true, output: { error_rate: 0.3 } });
  const d2 = await s.decide({ events: [{ role: "user", content: SAY.metrics }] });
  assert.equal(d2.turn, 2);

  const reconnected = nextEvent(baton, "reconnected");
  await server.stop();
  assert.equal(baton.connected, false);
  const sentBefore = spy.sent.length;
  // Asked while baton is down: it waits for the reconnect.
  const d3 = s.decide({ events: [{ role: "user", content: SAY.metrics }] });
  await server.start();
  const { sessions, attempt } = await reconnected;
  assert.equal(sessions, 1);
  assert.ok(attempt >= 1 && reconnecting.length >= attempt);
  assert.equal(reconnecting[0].error.code, "CONNECTION_LOST");
  assert.ok(reconnecting.every((e) => e.delayMs <= 400), "capped at maxDelayMs");

  const decided = await d3;
  assert.equal(decided.session, s.name);
  const sentAfter = spy.sent.slice(sentBefore).filter((f) => f.type === "decide" && f.session === s.name);
  assert.equal(sentAfter.length, 1, "sent once, as a full history (not an append refused with UNKNOWN_SESSION first)");
  const frame = sentAfter[0];
  assert.equal(frame.append, undefined);
  assert.equal(frame.turn, undefined);
  assert.deepEqual(
    frame.history.map((e) => e.role),
    ["user", "tool", "user", "user"],
    "the full history, the tool's event included",
  );
  assert.equal(decided.turn, 1, "the restarted baton had no copy of the session");
  assert.ok(spy.sent.some((f) => f.type === "resume" && f.session === s.name), "the session was resumed");
  // And it appends again after that.
  const d4 = await s.decide({ events: [{ role: "user", content: SAY.metrics }] });
  assert.equal(d4.turn, 2);
  assert.ok(spy.sent.filter((f) => f.type === "decide" && f.session === s.name).at(-1).append);
  await baton.close();
});

test("kill -9 with escalations pending: every resolution reaches the client exactly once, acknowledged ones never again", async () => {
  // Through a proxy that can keep the client away while baton is up again.
  const proxy = await newProxy();
  const baton = newClient(proxy.wsUrl);
  await baton.connect();
  const counts = new Map();
  baton.on("resolution", (r) => counts.set(r.id, (counts.get(r.id) ?? 0) + 1));

  const sessions = Array.from({ length: 4 }, () => baton.session(uniqueName("kill")));
  const decisions = await Promise.all(sessions.map((s) => s.decide({ events: [{ role: "user", content: SAY.rollback }] })));
  for (const d of decisions) assert.equal(d.action, "escalate");
  const [e1, e2, e3, e4] = decisions.map((d) => d.escalation);
  const [s1, s2, s3, s4] = sessions;

  // 1: resolved while connected.
  const v1 = (await server.resolve(e1)).id;
  assert.equal((await s1.resolution(e1, { timeoutMs: 5000 })).id, v1);

  // baton dies; the client may not come back before 2 is resolved.
  proxy.accepting = false;
  const dropped = nextEvent(baton, "disconnected");
  await server.kill();
  await dropped;
  await server.start();
  const v2 = (await server.resolve(e2)).id;
  assert.equal(baton.connected, false, "resolved while the client was disconnected");
  const reconnected = nextEvent(baton, "reconnected");
  proxy.accepting = true;
  await reconnected;

  // 2 comes with the resumes; 1 (not acknowledged) is sent again and not emitted again.
  assert.equal((await s2.resolution(e2, { timeoutMs: 5000 })).id, v2);
  assert.deepEqual(await s1.resume(), { pending: [], resolutions: 1 });
  await s1.resume();
  const v1Frames = spy.received.filter((f) => f.type === "resolution" && f.resolution.id === v1).length;
  assert.ok(v1Frames >= 3, `baton sent resolution 1 again after the restart (${v1Frames} frames)`);
  assert.equal(counts.get(v1), 1);

  // 3: resolved after the reconnect.
  const v3 = (await server.resolve(e3)).id;
  assert.equal((await s3.resolution(e3, { timeoutMs: 5000 })).id, v3);
  await Promise.all([baton.ack(v1), baton.ack(v2), baton.ack(v3)]);

  // Another kill -9 right after the acks: an ack is confirmed by the answer to the resume behind
  // it, which baton sends once the ack's delivery row is written, so nothing acknowledged comes
  // again; 4 is still pending, and comes once.
  const again = nextEvent(baton, "reconnected");
  await server.kill();
  await server.start();
  await again;
  for (const s of [s1, s2, s3]) assert.deepEqual(await s.resume(), { pending: [], resolutions: 0 });
  assert.deepEqual(await s4.resume(), { pending: [e4], resolutions: 0 });
  const v4 = (await server.resolve(e4, "deny", "not during the freeze")).id;
  const r4 = await s4.resolution(e4, { timeoutMs: 5000 });
  assert.equal(r4.outcome, "deny");
  await s4.resume(); // a barrier: a second copy of 4 would have come before its answer
  assert.deepEqual(Object.fromEntries(counts), { [v1]: 1, [v2]: 1, [v3]: 1, [v4]: 1 });
  await baton.close();
});

test("an ack sent as the connection drops is sent again after the reconnect and confirmed", async () => {
  const proxy = await newProxy();
  const baton = newClient(proxy.wsUrl);
  await baton.connect();
  const s = baton.session(uniqueName("ack"));
  const d = await s.decide({ events: [{ role: "user", content: SAY.rollback }] });
  const v = (await server.resolve(d.escalation)).id;
  await s.resolution(d.escalation, { timeoutMs: 5000 });

  proxy.stall(); // the ack and its resume never reach baton
  const acked = baton.ack(v);
  await until(() => spy.sent.some((f) => f.type === "ack" && f.resolution === v), "the ack to go out");
  const reconnected = nextEvent(baton, "reconnected");
  proxy.cut();
  await reconnected;
  await acked;
  const acks = spy.sent.filter((f) => f.type === "ack" && f.resolution === v);
  assert.equal(acks.length, 2, "sent again on the new connection");
  assert.deepEqual(await s.resume(), { pending: [], resolutions: 0 }, "baton has it");
  await baton.close();
});

test("no answer: TIMEOUT; a connection lost under a request: CONNECTION_LOST; the next decide sends the full history", async () => {
  const proxy = await newProxy();
  const baton = newClient(proxy.wsUrl, { requestTimeoutMs: 400, maxInFlight: 1 });
  await baton.connect();
  const s = baton.session(uniqueName("lost"));
  await s.decide({ events: [{ role: "user", content: SAY.metrics }] });

  proxy.stall();
  const started = Date.now();
  const [inFlight, queued] = await Promise.allSettled([
    s.decide({ events: [{ role: "user", content: SAY.metrics }] }),
    baton.session(uniqueName("lost-queued")).resume(),
  ]);
  assert.equal(inFlight.reason?.code, "TIMEOUT");
  assert.equal(queued.reason?.code, "TIMEOUT", "the one queued behind it too");
  assert.ok(Date.now() - started >= 400);

  // Still stalled: the next decide is in flight when the connection goes.
  const lost = s.decide({ events: [{ role: "user", content: SAY.metrics }] }).catch((e) => e);
  await until(() => spy.sent.filter((f) => f.type === "decide" && f.session === s.name).length === 3, "the third decide to go out");
  const reconnected = nextEvent(baton, "reconnected");
  proxy.cut();
  assert.equal((await lost).code, "CONNECTION_LOST");
  await reconnected;

  const d = await s.decide({ events: [{ role: "user", content: SAY.metrics }] });
  const frame = spy.sent.filter((f) => f.type === "decide" && f.session === s.name).at(-1);
  assert.equal(frame.turn, undefined);
  assert.equal(frame.history.length, 4, "everything the session has, also the events of the turns that failed");
  assert.equal(d.turn, 2, "baton had turn 1: the full history is its turn 2");
  await baton.close();
});

test("reconnect: false fails what waits with CONNECTION_LOST; maxAttempts gives up with an error event", async () => {
  const proxy = await newProxy();

  const once = newClient(proxy.wsUrl, { reconnect: false });
  await once.connect();
  const s = once.session(uniqueName("noreconnect"));
  proxy.stall();
  const pending = s.decide({ events: [{ role: "user", content: SAY.metrics }] }).catch((e) => e);
  await until(() => spy.sent.some((f) => f.type === "decide" && f.session === s.name), "the decide to go out");
  proxy.cut();
  assert.equal((await pending).code, "CONNECTION_LOST");
  await assert.rejects(s.resume(), (e) => e.code === "CONNECTION_LOST");

  const giving = newClient(proxy.wsUrl, { reconnect: { initialDelayMs: 20, maxDelayMs: 40, maxAttempts: 3 } });
  await giving.connect();
  proxy.accepting = false;
  const attempts = [];
  giving.on("reconnecting", (e) => attempts.push(e.attempt));
  const gaveUp = nextEvent(giving, "error");
  proxy.cut();
  const err = await gaveUp;
  assert.equal(err.code, "CONNECTION_LOST");
  assert.deepEqual(attempts, [1, 2, 3]);
  await assert.rejects(giving.session(uniqueName("after")).resume(), (e) => e.code === "CONNECTION_LOST");
  await Promise.all([once.close(), giving.close()]);
});
