// The agent's side of /v1/agent for the browser tests (Node's `ws`, which sends no Origin, as
// agents and SDKs do): every frame is kept, and a test waits for the one it expects.
import assert from "node:assert/strict";

import WebSocket from "ws";

// `promise`, or a rejection naming `what` after `ms`.
export function withTimeout(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: nothing within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

export class AgentSocket {
  // `key`: sent as a bearer key when given (a server without keys needs none); `stepMs`: how long
  // one frame may take.
  constructor(url, key, stepMs) {
    this.stepMs = stepMs;
    this.frames = [];
    this.waiters = [];
    this.nextId = 1;
    this.ws = new WebSocket(url, key ? { headers: { Authorization: `Bearer ${key}` } } : {});
    this.ws.on("message", (data) => {
      const frame = JSON.parse(String(data));
      this.frames.push(frame);
      for (const w of [...this.waiters]) if (w.match(frame)) w.resolve(frame);
    });
    this.opened = withTimeout(
      new Promise((resolve, reject) => {
        this.ws.once("open", resolve);
        this.ws.once("error", reject);
        this.ws.once("unexpected-response", (_, res) => reject(new Error(`agent upgrade answered ${res.statusCode}`)));
      }),
      stepMs,
      "the agent's WebSocket opening",
    );
  }

  send(frame) {
    this.ws.send(JSON.stringify(frame));
  }

  // The first frame, received or to come, that `match` accepts.
  next(match, what) {
    const seen = this.frames.find(match);
    if (seen) return Promise.resolve(seen);
    let waiter;
    const arrival = new Promise((resolve) => {
      waiter = { match, resolve };
      this.waiters.push(waiter);
    });
    return withTimeout(arrival, this.stepMs, what).finally(() => {
      this.waiters.splice(this.waiters.indexOf(waiter), 1);
    });
  }

  // Decides a fresh session whose answer must be escalate; returns the decision frame.
  async escalate(session, request, tool = "send_payment", role = "user") {
    const id = this.nextId++;
    this.send({ type: "decide", id, session, history: [{ role, content: request }] });
    const decision = await this.next((f) => f.ref === id || f.id === id, `the answer to decide ${session}`);
    assert.equal(decision.type, "decision", `decide ${session}: ${JSON.stringify(decision)}`);
    assert.equal(decision.action, "escalate", `decide ${session}: ${JSON.stringify(decision)}`);
    assert.equal(decision.tool, tool);
    assert.match(decision.escalation, /^e-/, "the decision names its escalation");
    assert.equal(typeof decision.deadline_at, "string");
    return decision;
  }

  resolutionOf(escalation) {
    return this.next(
      (f) => f.type === "resolution" && f.resolution?.escalation === escalation,
      `the resolution frame of ${escalation}`,
    );
  }

  close() {
    this.ws.terminate();
  }
}
