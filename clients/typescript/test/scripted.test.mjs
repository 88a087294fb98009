// The client against a scripted peer (ws's WebSocketServer on 127.0.0.1), for orderings a real
// baton produces only by chance: frames that follow an answer in a later TCP segment, and an ack
// whose delivery row baton failed to write (it sends the resolution again with the answer); and
// `end` of a session as baton answers it (ended, or UNKNOWN_SESSION after a restart).
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import ts from "typescript";
import { WebSocketServer } from "ws";

import { BatonClient, BatonError } from "baton-client";

let wss;
let url;
const script = { onFrame: null };

before(async () => {
  wss = new WebSocketServer({ host: "127.0.0.1", port: 0 });
  await new Promise((resolve) => wss.once("listening", resolve));
  url = `ws://127.0.0.1:${wss.address().port}/v1/agent`;
  wss.on("connection", (socket) => {
    socket.on("message", (data) => script.onFrame?.(socket, JSON.parse(String(data))));
  });
});

after(async () => {
  for (const c of wss.clients) c.terminate();
  await new Promise((resolve) => wss.close(resolve));
});

const resolution = (id) => ({
  id, escalation: `e-${id}`, decision: `d-${id}`, session: "s1", turn: 1, outcome: "deny", tool: null,
  arguments: {}, reason: "no", reviewer: "r", by: "reviewer", forced: false, created_at: "", created_ms: 0,
});
const later = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

test("resume() returns once the resolutions its answer announced, sent 50 ms later, are handed over", async () => {
  script.onFrame = async (socket, f) => {
    if (f.type === "end") socket.send(JSON.stringify({ type: "ended", ref: f.id, session: f.session })); // by close()
    if (f.type !== "resume") return;
    socket.send(JSON.stringify({ type: "resumed", ref: f.id, session: f.session, pending: [], resolutions: 1 }));
    await later(50);
    socket.send(JSON.stringify({ type: "resolution", resolution: resolution("v-1") }));
  };
  const baton = new BatonClient({ url, reconnect: false });
  await baton.connect();
  try {
    const seen = [];
    baton.on("resolution", (r) => seen.push(r.id));
    assert.deepEqual(await baton.session("s1").resume(), { pending: [], resolutions: 1 });
    assert.deepEqual(seen, ["v-1"]);
  } finally {
    await baton.close();
  }
});

test("an ack whose resolution comes again with the confirming answer is sent again", async () => {
  let acks = 0;
  script.onFrame = (socket, f) => {
    if (f.type === "ack") acks += 1;
    if (f.type !== "resume") return;
    // The first ack's row "failed": its answer comes with the resolution again; the second holds.
    const again = acks === 1;
    socket.send(JSON.stringify({ type: "resumed", ref: f.id, session: f.session, pending: [], resolutions: again ? 1 : 0 }));
    if (again) socket.send(JSON.stringify({ type: "resolution", resolution: resolution("v-2") }));
  };
  const baton = new BatonClient({ url, reconnect: false });
  await baton.connect();
  try {
    const seen = [];
    baton.on("resolution", (r) => seen.push(r.id));
    await baton.ack("v-2");
    assert.equal(acks, 2, "the ack went again");
    assert.deepEqual(seen, ["v-2"], "the resolution is handed over once");
  } finally {
    await baton.close();
  }
});

// A peer that answers decides (after `decideMs`) and ends as baton does, and records every frame.
function endingPeer({ decideMs = 0, endMs = 0, onEnd = null, onDecide = null } = {}) {
  const log = [];
  const turns = new Map();
  script.onFrame = async (socket, f) => {
    log.push(f);
    if (f.type === "decide") {
      const refusal = onDecide?.(f);
      if (refusal) return socket.send(JSON.stringify({ type: "error", ref: f.id, ...refusal }));
      const turn = f.history ? 1 : turns.get(f.session) + 1;
      turns.set(f.session, turn);
      await later(decideMs);
      socket.send(JSON.stringify({ type: "decision", id: f.id, decision: `d-${f.id}`, session: f.session, turn, action: "finish", lane: "lane:default", confidence: 1 }));
    } else if (f.type === "end") {
      await later(endMs);
      const answer = onEnd?.(f) ?? { type: "ended", session: f.session };
      if (answer !== "silent") socket.send(JSON.stringify({ ...answer, ref: f.id }));
      log.push({ answered: f.id });
    }
  };
  return log;
}
const say = (content) => ({ events: [{ role: "user", content }] });

// baton refuses a new session only while every session it holds has a decision being made, which
// a real baton shows only by chance: the peer refuses twice, then decides.
test("TOO_MANY_SESSIONS is sent again after retry_after_ms until baton has room", async () => {
  let refused = 0;
  const log = endingPeer({
    onDecide: () =>
      refused++ < 2 ? { error: "full", code: "TOO_MANY_SESSIONS", detail: [], retry_after_ms: 100 } : null,
  });
  const baton = new BatonClient({ url, reconnect: false });
  await baton.connect();
  try {
    const started = Date.now();
    const d = await baton.session("full-1").decide(say("hello"));
    assert.equal(d.turn, 1);
    assert.equal(log.filter((f) => f.type === "decide").length, 3, "sent three times");
    assert.ok(Date.now() - started >= 200, "waited retry_after_ms each time");
  } finally {
    await baton.close();
  }
});

test("end() goes out after the decide under way, resolves on ended, and drops the session from the client", async () => {
  const log = endingPeer({ decideMs: 50 });
  const baton = new BatonClient({ url, reconnect: false });
  await baton.connect();
  try {
    const s = baton.session("e1");
    const decided = s.decide(say("hello"));
    await s.end();
    assert.equal((await decided).turn, 1);
    assert.deepEqual(log.map((f) => f.type ?? "answered"), ["decide", "end", "answered"], "the end waited for the decision");
    assert.deepEqual(log[1], { type: "end", session: "e1", id: log[1].id });
    await s.end(); // idempotent: nothing left to send
    assert.equal(log.filter((f) => f.type === "end").length, 1);
    await assert.rejects(s.decide(say("again")), TypeError);

    const fresh = baton.session("e1");
    assert.notEqual(fresh, s, "a new session object");
    await fresh.decide(say("hello again"));
    const last = log.at(-1);
    assert.deepEqual(last.history, [{ role: "user", content: "hello again" }], "its first decide sends the full history");
    assert.equal(last.append, undefined);
  } finally {
    await baton.close();
  }
});

test("end() answered UNKNOWN_SESSION resolves (nothing left to end); another error rejects", async () => {
  endingPeer({
    onEnd: (f) => (f.session === "gone"
      ? { type: "error", code: "UNKNOWN_SESSION", error: "no session gone" }
      : { type: "error", code: "INVALID_FRAME", error: "session: too long" }),
  });
  const baton = new BatonClient({ url, reconnect: false });
  await baton.connect();
  try {
    await baton.session("gone").end();
    await assert.rejects(baton.session("bad").end(), (e) => e instanceof BatonError && e.code === "INVALID_FRAME");
  } finally {
    await baton.close();
  }
});

test("a session of the same name made while the end is under way sends nothing before the end is answered", async () => {
  const log = endingPeer({ endMs: 50 });
  const baton = new BatonClient({ url, reconnect: false });
  await baton.connect();
  try {
    const s = baton.session("e2");
    await s.decide(say("one"));
    const ended = s.end();
    const d = await baton.session("e2").decide(say("two"));
    await ended;
    assert.equal(d.turn, 1);
    assert.deepEqual(log.map((f) => f.type ?? "answered"), ["decide", "end", "answered", "decide"]);
  } finally {
    await baton.close();
  }
});

test("after end, the name's new session still resends its history when an append is answered UNKNOWN_SESSION", async () => {
  let forget = false;
  const log = endingPeer({ onDecide: (f) => (forget && f.append ? { code: "UNKNOWN_SESSION", error: "send the full history" } : null) });
  const baton = new BatonClient({ url, reconnect: false });
  await baton.connect();
  try {
    await baton.session("e3").decide(say("one"));
    await baton.session("e3").end();
    const s = baton.session("e3");
    await s.decide(say("two"));
    forget = true; // baton forgot it (evicted): the next append is refused
    const d = await s.decide(say("three"));
    assert.equal(d.turn, 1, "baton took it as a new session");
    const decides = log.filter((f) => f.type === "decide").map((f) => (f.history ? `history ${f.history.length}` : `append ${f.append.length}`));
    assert.deepEqual(decides, ["history 1", "history 1", "append 1", "history 2"]);
  } finally {
    await baton.close();
  }
});

test("`await using` (TypeScript 5.9 compiled to ES2022) ends the session when its scope exits", async () => {
  const log = endingPeer();
  const source = `export async function turn(baton) {
    await using s = baton.session("e4");
    return await s.decide({ events: [{ role: "user", content: "hi" }] });
  }`;
  const js = ts.transpileModule(source, { compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ES2022 } }).outputText;
  assert.match(js, /__addDisposableResource/, "compiled down, not left to the runtime");
  const { turn } = await import(`data:text/javascript,${encodeURIComponent(js)}`);
  const baton = new BatonClient({ url, reconnect: false });
  await baton.connect();
  try {
    assert.equal((await turn(baton)).turn, 1);
    assert.deepEqual(log.map((f) => f.type ?? "answered"), ["decide", "end", "answered"]);
    assert.equal(log[1].session, "e4");
  } finally {
    await baton.close();
  }
});

test("close() ends every session first, waiting at most requestTimeoutMs for their answers", async () => {
  const log = endingPeer({ onEnd: (f) => (f.session === "mute" ? "silent" : null) });
  const baton = new BatonClient({ url, reconnect: false, requestTimeoutMs: 300 });
  await baton.connect();
  await baton.session("c1").decide(say("one"));
  await baton.session("c2").decide(say("two"));
  await baton.close();
  assert.deepEqual(log.filter((f) => f.type === "end").map((f) => f.session).sort(), ["c1", "c2"]);
  assert.equal(log.filter((f) => f.answered).length, 2, "both answered before the connection closed");

  const slow = new BatonClient({ url, reconnect: false, requestTimeoutMs: 300 });
  await slow.connect();
  slow.session("mute");
  const slowStarted = Date.now();
  await slow.close();
  const waited = Date.now() - slowStarted;
  assert.ok(waited >= 250 && waited < 2000, `close() waited for the unanswered end, within the bound (${waited} ms)`);
});
