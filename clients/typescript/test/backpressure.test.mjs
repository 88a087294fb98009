// baton-client's back-pressure: at most maxInFlight frames await an answer, the rest wait in
// order; a server with a low max_frames_per_second answers RATE_LIMITED, and the client waits
// retry_after_ms and sends again until every decide is decided; a server that holds one session
// forgets the idle one to make room for another (UNKNOWN_SESSION for its append, sent again as the
// full history). TOO_MANY_SESSIONS's retries: scripted.test.mjs.
import assert from "node:assert/strict";
import { after, afterEach, before, test } from "node:test";

import { BatonClient } from "baton-client";

import { BatonServer, SAY, spyFrames, uniqueName } from "./helpers.mjs";

const open = new BatonServer();
// 10 frames a second per connection (a bucket of 10), refusals in a row before close 1008: 10.
const limited = new BatonServer({ max_frames_per_second: 10, max_bad_frames: 10 });
// One session at a time: a new one makes room by forgetting the idle one.
const small = new BatonServer({ max_sessions: 1 });
const spy = spyFrames();
const clients = [];
let anyFailed = false;

before(async () => {
  await Promise.all([open.start(), limited.start(), small.start()]);
});

afterEach((t) => {
  if (t.passed === false) anyFailed = true;
});

after(async () => {
  await Promise.all(clients.map((c) => c.close()));
  spy.restore();
  await Promise.all([open.dispose(anyFailed), limited.dispose(anyFailed), small.dispose(anyFailed)]);
});

async function client(url, options) {
  const c = new BatonClient({ url, ...options });
  clients.push(c);
  await c.connect();
  return c;
}

test("100 decides at once with maxInFlight 4: never more than 4 await an answer, all are decided", async () => {
  const baton = await client(open.wsUrl, { maxInFlight: 4 });
  spy.reset();
  const names = Array.from({ length: 100 }, () => uniqueName("bp"));
  const decisions = await Promise.all(names.map((name) => baton.session(name).decide({ events: [{ role: "user", content: SAY.metrics }] })));
  decisions.forEach((d, i) => assert.equal(d.session, names[i]));
  assert.equal(spy.sent.filter((f) => f.type === "decide").length, 100);
  assert.equal(spy.maxOutstanding, 4, "4 awaiting at the most, and the window was used");
  // Sent in the order they were asked for.
  assert.deepEqual(spy.sent.map((f) => f.session), names);
});

test("RATE_LIMITED is retried after retry_after_ms until every decide is decided", async () => {
  const baton = await client(limited.wsUrl, { maxInFlight: 8, retries: 6 });
  let disconnects = 0;
  baton.on("disconnected", () => disconnects++);
  spy.reset();
  const names = Array.from({ length: 24 }, () => uniqueName("rate"));
  const started = Date.now();
  const decisions = await Promise.all(names.map((name) => baton.session(name).decide({ events: [{ role: "user", content: SAY.metrics }] })));
  const took = Date.now() - started;
  decisions.forEach((d, i) => {
    assert.equal(d.session, names[i]);
    assert.equal(d.turn, 1);
  });
  const refused = spy.received.filter((f) => f.type === "error");
  assert.ok(refused.length > 0, "baton refused some frames for their rate");
  assert.ok(refused.every((f) => f.code === "RATE_LIMITED" && f.retry_after_ms === 1000), JSON.stringify(refused[0]));
  // Every refusal was followed by a pause: 24 frames at 10 a second (a bucket of 10) take over a second.
  assert.ok(took >= 1000, `took ${took} ms`);
  // At most maxInFlight refusals in a row (those already sent when the first came back), below
  // server.max_bad_frames: the connection is not closed for them.
  const refusedIds = new Set(refused.map((f) => f.ref));
  let run = 0;
  let longest = 0;
  for (const f of spy.sent) {
    run = refusedIds.has(f.id) ? run + 1 : 0;
    longest = Math.max(longest, run);
  }
  assert.ok(longest <= 8, `${longest} refusals in a row`);
  assert.equal(disconnects, 0, "the connection stayed open");
});

test("a session baton forgot to make room for another goes again as the history on its next append", async () => {
  const baton = await client(small.wsUrl);
  spy.reset();
  const a = baton.session(uniqueName("room-a"));
  const b = baton.session(uniqueName("room-b"));
  const a1 = await a.decide({ events: [{ role: "user", content: SAY.metrics }] });
  assert.equal(a1.turn, 1);
  // baton holds one session: b's first decide makes room by forgetting a, which has no decision
  // being made (a new session is refused only when every one held has).
  const b1 = await b.decide({ events: [{ role: "user", content: SAY.restart }] });
  assert.equal(b1.session, b.name);
  assert.equal(spy.received.filter((f) => f.type === "error" && f.code === "TOO_MANY_SESSIONS").length, 0);

  const a2 = await a.decide({ events: [{ role: "user", content: SAY.metrics }] });
  const aFrames = spy.sent.filter((f) => f.type === "decide" && f.session === a.name);
  const refused = spy.received.find((f) => f.type === "error" && f.code === "UNKNOWN_SESSION");
  assert.ok(refused, "baton had forgotten a");
  assert.match(refused.error, /forgotten to make room/);
  assert.equal(aFrames.find((f) => f.id === refused.ref).append.length, 1, "the append it refused");
  const last = aFrames.at(-1);
  assert.equal(last.history.length, 2, "sent again with the whole history");
  assert.equal(a2.turn, 1, "a new session on baton's side");
});
