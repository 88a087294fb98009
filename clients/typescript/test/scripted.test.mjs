// The client against a scripted peer (ws's WebSocketServer on 127.0.0.1), for orderings a real
// baton produces only by chance: frames that follow an answer in a later TCP segment, and an ack
// whose delivery row baton failed to write (it sends the resolution again with the answer).
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { WebSocketServer } from "ws";

import { BatonClient } from "baton-client";

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
