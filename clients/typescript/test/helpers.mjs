// What the baton-client tests share: a `baton serve` on the on-call example's registry and policy
// (rollback_deploy is high risk: it escalates; restart_service is a command baton runs), a
// reviewer's resolve over HTTP, a TCP proxy that can hold the client off or cut it, and a spy on
// the frames the client sends and receives. Everything listens on 127.0.0.1.
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

import WebSocket from "ws";

import { baton_process } from "../../../tests/support/baton_process.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
export const repoRoot = path.resolve(here, "..", "..", "..");
export const batonBin = process.env.BATON_BIN;

const STARTUP_MS = 10_000;
const STOP_MS = 10_000;

// Messages the keyword engine maps to one tool each on the on-call registry.
export const SAY = {
  metrics: "query metrics dashboards for api error rate latency",
  restart: "checkout pods are crashing and leaking memory, restart the service",
  rollback: "the checkout deploy is bad, roll back the latest deploy of checkout",
  // finish: no tool, nothing left in flight (an idle session baton may evict)
  cleared: "The incident is resolved and the alert has cleared.",
};

/** A `baton serve` with its own temp dir and db, restartable on the same port and db. */
export class BatonServer {
  constructor(serverOptions = {}) {
    this.serverOptions = serverOptions;
    this.proc = null;
    this.port = 0;
    this.baseUrl = null;
    this.dir = null;
    this.logs = "";
  }

  get wsUrl() {
    return `ws://127.0.0.1:${this.port}/v1/agent`;
  }

  async start() {
    assert.ok(batonBin, "set BATON_BIN to the baton binary");
    this.dir ??= await mkdtemp(path.join(tmpdir(), "baton-client-ts-"));
    const q = (s) => JSON.stringify(s); // a JSON string is a YAML double-quoted scalar
    const oncall = path.join(repoRoot, "config", "examples", "oncall");
    const lines = ["server:", `  listen: 127.0.0.1:${this.port}`];
    for (const [k, v] of Object.entries(this.serverOptions)) lines.push(`  ${k}: ${v}`);
    lines.push(
      "engine:",
      "  name: keyword",
      `registry: ${q(path.join(oncall, "tools.yaml"))}`,
      `policy: ${q(path.join(oncall, "policy.yaml"))}`,
      "log:",
      `  path: ${q(path.join(this.dir, "baton.db"))}`,
    );
    const config = path.join(this.dir, "baton.yaml");
    await writeFile(config, lines.join("\n") + "\n");
    this.proc = new baton_process(batonBin);
    this.baseUrl = await this.proc.start(config, {}, STARTUP_MS);
    this.port = Number(new URL(this.baseUrl).port);
    return this;
  }

  /** SIGTERM (graceful: exit 0) and keep its log lines. */
  async stop() {
    if (!this.proc) return;
    const proc = this.proc;
    this.proc = null;
    const { stopped, exit } = await proc.stop(STOP_MS);
    this.logs += proc.stderr;
    assert.ok(stopped, "baton serve stops within 10 s of SIGTERM");
    assert.equal(exit, 0, "baton serve stops gracefully on SIGTERM");
  }

  /** SIGKILL: no drain, no close frame. */
  async kill() {
    const child = this.proc.child;
    this.logs += this.proc.stderr;
    this.proc = null;
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill("SIGKILL");
    await exited;
  }

  /** For `after`: stops it, prints its log lines when a test failed, removes the temp dir. */
  async dispose(anyFailed) {
    try {
      if (this.proc) await this.stop();
    } finally {
      if (anyFailed) process.stderr.write(`--- baton serve stderr ---\n${this.logs}\n`);
      if (this.dir) await rm(this.dir, { recursive: true, force: true });
    }
  }

  /** A reviewer resolves an escalation (docs/escalations.md): the resolution object. */
  async resolve(escalation, outcome = "execute", reason = "checked by the test") {
    const res = await fetch(`${this.baseUrl}/v1/escalations/${escalation}/resolve`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ outcome, reason }),
    });
    const body = await res.json();
    assert.equal(res.status, 200, `resolve ${escalation}: ${JSON.stringify(body)}`);
    return body;
  }
}

/**
 * A TCP proxy in front of a port: `accepting = false` refuses new connections (the client stays
 * disconnected while baton is up), `stall()` swallows what the client sends (its request stays
 * unanswered), `cut()` drops every connection.
 */
export class Proxy {
  constructor(targetPort) {
    this.targetPort = targetPort;
    this.accepting = true;
    this.stalled = false;
    this.pairs = new Set();
    this.connections = 0;
    this.server = net.createServer((client) => this.onConnection(client));
  }

  async start() {
    await new Promise((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    this.port = this.server.address().port;
    return this;
  }

  get wsUrl() {
    return `ws://127.0.0.1:${this.port}/v1/agent`;
  }

  onConnection(client) {
    if (!this.accepting) {
      client.destroy();
      return;
    }
    this.connections += 1;
    const upstream = net.connect(this.targetPort, "127.0.0.1");
    const pair = { client, upstream };
    this.pairs.add(pair);
    client.on("data", (d) => {
      if (!this.stalled) upstream.write(d);
    });
    upstream.on("data", (d) => client.write(d));
    const end = () => {
      this.pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    for (const s of [client, upstream]) {
      s.on("close", end);
      s.on("error", end);
    }
  }

  stall() {
    this.stalled = true;
  }

  cut() {
    this.stalled = false;
    for (const { client, upstream } of this.pairs) {
      client.destroy();
      upstream.destroy();
    }
    this.pairs.clear();
  }

  async close() {
    this.cut();
    await new Promise((resolve) => this.server.close(resolve));
  }
}

/**
 * Records the frames every WebSocket of this process sends and receives (the client's `ws` is this
 * one: the package's own dependency), and how many requests await an answer at most.
 */
export function spyFrames() {
  const spy = { sent: [], received: [], outstanding: new Set(), maxOutstanding: 0 };
  const send = WebSocket.prototype.send;
  const emit = WebSocket.prototype.emit;
  WebSocket.prototype.send = function (data, ...rest) {
    const frame = JSON.parse(String(data));
    spy.sent.push(frame);
    // An ack is answered only when refused; every other frame gets an answer with its id.
    if (frame.type !== "ack") {
      spy.outstanding.add(frame.id);
      spy.maxOutstanding = Math.max(spy.maxOutstanding, spy.outstanding.size);
    }
    return send.call(this, data, ...rest);
  };
  WebSocket.prototype.emit = function (event, ...args) {
    if (event === "message") {
      const frame = JSON.parse(String(args[0]));
      spy.received.push(frame);
      spy.outstanding.delete(frame.type === "decision" ? frame.id : frame.ref);
    }
    if (event === "close") spy.outstanding.clear();
    return emit.call(this, event, ...args);
  };
  spy.reset = () => {
    spy.sent.length = 0;
    spy.received.length = 0;
    spy.outstanding.clear();
    spy.maxOutstanding = 0;
  };
  spy.restore = () => {
    WebSocket.prototype.send = send;
    WebSocket.prototype.emit = emit;
  };
  return spy;
}

/** Resolves with the next `event` of the client (rejects after `ms`). */
export function nextEvent(client, event, ms = 10_000) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no "${event}" event within ${ms} ms`)), ms);
    client.once(event, (value) => {
      clearTimeout(timer);
      resolve(value);
    });
  });
}

/** Calls `fn` until it returns something truthy (rejects after `ms`). */
export async function until(fn, what, ms = 10_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await fn();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A session name unique to this run. */
let counter = 0;
export function uniqueName(prefix) {
  counter += 1;
  return `${prefix}-${process.pid}-${counter}`;
}
