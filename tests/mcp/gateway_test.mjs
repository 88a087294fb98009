// Acceptance: baton as an MCP gateway. The official MCP TypeScript SDK's client (exactly as
// package-lock.json pins it, unmodified) against a real `baton serve` whose registry takes the
// tools of MCP servers over stdio and over Streamable HTTP: the official reference server
// (server-everything) and failing_server.mjs, each both ways (the HTTP one of ours wants a bearer
// token, which baton's registry takes from its environment). The keyword engine decides; the policy's rules make the lanes certain: one
// tool denied, one always escalated to a person (who approves with edited arguments, or denies),
// the rest executed.
//
//   BATON_BIN=build/adapters/baton node --test tests/mcp/gateway_test.mjs
//
// ctest runs it as test_mcp_gateway (tests/CMakeLists.txt); scripts/setup.sh installs tests/mcp
// with npm ci. Every request goes to 127.0.0.1 only.

import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { once } from "node:events";
import { connect as connectSocket, createServer } from "node:net";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";

import { baton_process, trackedTests } from "../support/baton_process.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const batonBin = process.env.BATON_BIN ?? process.argv[2];
const everything = path.join(here, "node_modules/@modelcontextprotocol/server-everything/dist/index.js");
const failing = path.join(here, "failing_server.mjs");

const agentKey = `mcp-agent-${randomBytes(16).toString("hex")}`;
const reviewerKey = `mcp-reviewer-${randomBytes(16).toString("hex")}`;

let server;
let baseURL;
let tmp;
const tracked = trackedTests(test);
const serverTest = tracked.test; // a failure also prints the server's log lines (in `after`)
const upstreams = []; // the HTTP MCP servers' processes
const upstreamToken = randomBytes(16).toString("hex");

// A port nothing listens on now (server-everything takes its port from PORT).
async function freePort() {
  const s = createServer();
  s.listen(0, "127.0.0.1");
  await once(s, "listening");
  const { port } = s.address();
  s.close();
  await once(s, "close");
  return port;
}

// Starts an MCP server over Streamable HTTP; resolves once its output matches `ready`.
async function startUpstream(args, env, ready) {
  const child = spawn(process.execPath, args, { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  upstreams.push(child);
  let seen = "";
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${args[0]} did not start: ${seen}`)), 15_000);
    const look = (chunk) => {
      seen += chunk;
      if (ready.test(seen)) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout.setEncoding("utf8").on("data", look);
    child.stderr.setEncoding("utf8").on("data", look);
    child.on("exit", (code) => reject(new Error(`${args[0]} exited (${code}): ${seen}`)));
  });
  return seen;
}

before(async () => {
  assert.ok(batonBin, "set BATON_BIN (or pass the baton binary as the first argument)");
  tmp = await mkdtemp(path.join(tmpdir(), "baton-mcp-gateway-"));
  const q = (s) => JSON.stringify(s);
  const failingOut = await startUpstream(
    [failing],
    { FAILING_SERVER_HTTP_PORT: "0", FAILING_SERVER_TOKEN: upstreamToken },
    /listening on (http:\/\/127\.0\.0\.1:\d+\/mcp)/,
  );
  const failingURL = /listening on (http:\/\/127\.0\.0\.1:\d+\/mcp)/.exec(failingOut)[1];
  const everythingPort = await freePort();
  await startUpstream([everything, "streamableHttp"], { PORT: String(everythingPort) }, /listening on port/);
  await writeFile(
    path.join(tmp, "tools.yaml"),
    [
      "mcp_servers:",
      `  everything: {command: node, args: [${q(everything)}], include: [echo, get-sum, trigger-long-running-operation]}`,
      `  failing: {command: node, args: [${q(failing)}], include: [echo, pick, fail]}`,
      `  failing_http: {url: ${q(failingURL)}, headers: {Authorization: "Bearer \${UPSTREAM_TOKEN}"}, exclude: [pick, slow, crash, malformed, big, fail, hostile, delete_all]}`,
      `  everything_http: {url: "http://127.0.0.1:${everythingPort}/mcp", include: [echo, trigger-long-running-operation]}`,
      "",
    ].join("\n"),
  );
  await writeFile(
    path.join(tmp, "policy.yaml"),
    [
      "confidence: p_max",
      "rules:",
      "  deny: [failing.fail]",
      "  always_escalate: [failing.pick]",
      "lanes:",
      "  default: {execute: 0, fallback: 0}",
      "on_engine_error: escalate",
      "escalation: {deadline_s: 120}",
      "",
    ].join("\n"),
  );
  // Two configs, one log each: the shared server's, and one a test stops.
  for (const name of ["baton", "stopped"]) {
    await writeFile(
      path.join(tmp, `${name}.yaml`),
      [
        "server: {listen: 127.0.0.1:0}",
        "auth:",
        "  keys:",
        "    - {name: mcp-agent, role: agent, env: MCP_AGENT_KEY}",
        "    - {name: mcp-reviewer, role: reviewer, env: MCP_REVIEWER_KEY}",
        "engine: {name: keyword}",
        `registry: ${q(path.join(tmp, "tools.yaml"))}`,
        `policy: ${q(path.join(tmp, "policy.yaml"))}`,
        `log: {path: ${q(path.join(tmp, name === "baton" ? "decisions.db" : "stopped.db"))}}`,
        "",
      ].join("\n"),
    );
  }
  server = new baton_process(batonBin);
  baseURL = await server.start(path.join(tmp, "baton.yaml"), batonEnv(), 20_000);
});

after(async () => {
  try {
    await server?.stopChecked(10_000, { listened: Boolean(baseURL), anyFailed: tracked.failed });
  } finally {
    for (const child of upstreams) child.kill("SIGTERM");
    if (tmp) await rm(tmp, { recursive: true, force: true });
  }
});

const batonEnv = () => ({ MCP_AGENT_KEY: agentKey, MCP_REVIEWER_KEY: reviewerKey, UPSTREAM_TOKEN: upstreamToken });

async function connect(base = baseURL) {
  const client = new Client({ name: "baton-gateway-test", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(`${base}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${agentKey}` } },
  });
  await client.connect(transport);
  return { client, transport };
}

// Rows of a read-only query of the decision log (`baton log sql`).
async function sql(query) {
  const { stdout } = await promisify(execFile)(batonBin, ["log", "sql", "--db", path.join(tmp, "decisions.db"), query]);
  return stdout.split("\n").filter(Boolean).map((l) => JSON.parse(l));
}

async function reviewer(pathname, body, base = baseURL) {
  const res = await fetch(`${base}${pathname}`, {
    method: body ? "POST" : "GET",
    headers: { Authorization: `Bearer ${reviewerKey}`, ...(body ? { "Content-Type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  return { status: res.status, body: await res.json() };
}

// What `look` finds (asked each 100 ms, for 10 s at most); `what` names it when nothing comes.
async function until(what, look) {
  for (let i = 0; i < 100; i++) {
    const found = await look();
    if (found) return found;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`no ${what} within 10 s`);
}

// The pending escalation of `tool`, once it is there.
const pendingEscalation = (tool, base = baseURL) =>
  until(`pending escalation of ${tool}`, async () =>
    (await reviewer("/v1/escalations?status=pending", undefined, base)).body.escalations.find((e) => e.tool === tool));

// The escalation `id` once a resolution is on it.
const resolvedEscalation = (id) =>
  until(`resolution of ${id}`, async () => {
    const { body } = await reviewer(`/v1/escalations/${id}`);
    return body.status === "resolved" ? body : null;
  });

serverTest("an MCP client lists the upstream servers' tools through baton", async () => {
  const { client } = await connect();
  try {
    assert.equal(client.getServerVersion().name, "baton");
    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name).sort();
    assert.deepEqual(names, [
      "everything.echo",
      "everything.get-sum",
      "everything.trigger-long-running-operation",
      "everything_http.echo",
      "everything_http.trigger-long-running-operation",
      "failing.echo",
      "failing.fail",
      "failing.pick",
      "failing_http.add_tool",
      "failing_http.echo",
      "failing_http.whoami",
    ]);
    const pick = tools.find((t) => t.name === "failing.pick");
    assert.deepEqual(pick.inputSchema.properties.color.enum, ["red", "green", "blue"]);
    assert.deepEqual([...pick.inputSchema.required].sort(), ["color", "loud", "note"]);
  } finally {
    await client.close();
  }
});

serverTest("a call the policy executes runs upstream, and its decision and run are logged", async () => {
  const { client } = await connect();
  try {
    const echoed = await client.callTool({ name: "failing.echo", arguments: { text: "hello through baton" } });
    assert.equal(echoed.isError, undefined);
    assert.equal(echoed.content[0].text, "hello through baton");
    const decision = echoed._meta["baton/decision"];
    assert.match(decision, /^d-/);
    assert.match(echoed._meta["baton/arguments_hash"], /^sha256:[0-9a-f]{64}$/);
    const sum = await client.callTool({ name: "everything.get-sum", arguments: { a: 2, b: 40 } });
    assert.match(sum.content[0].text, /42/);
    const rows = await sql(`SELECT action, tool, lane, arguments, proposal FROM decisions WHERE id = '${decision}'`);
    assert.equal(rows.length, 1);
    assert.equal(rows[0].action, "execute");
    assert.equal(rows[0].tool, "failing.echo");
    assert.equal(rows[0].lane, "lane:default");
    assert.deepEqual(JSON.parse(rows[0].arguments), { text: "hello through baton" });
    const runs = await sql(`SELECT executor, ok FROM tool_runs WHERE decision = '${decision}'`);
    assert.deepEqual(runs, [{ executor: "mcp", ok: 1 }]);
  } finally {
    await client.close();
  }
});

serverTest("an upstream tool's progress reaches the client, over stdio and over Streamable HTTP", async () => {
  const { client } = await connect();
  try {
    for (const server of ["everything", "everything_http"]) {
      const progress = [];
      const result = await client.callTool(
        { name: `${server}.trigger-long-running-operation`, arguments: { duration: 0.6, steps: 3 } },
        CallToolResultSchema,
        { onprogress: (p) => progress.push(p) },
      );
      assert.match(result.content[0].text, /Long running operation completed/, JSON.stringify(result));
      assert.deepEqual(
        progress.map((p) => [p.progress, p.total]),
        [
          [1, 3],
          [2, 3],
          [3, 3],
        ],
        server,
      );
    }
  } finally {
    await client.close();
  }
});

serverTest("tools of MCP servers over Streamable HTTP run there, with the headers the registry names", async () => {
  const { client } = await connect();
  try {
    const who = await client.callTool({ name: "failing_http.whoami", arguments: {} });
    assert.equal(who.content[0].text, "http", JSON.stringify(who));
    const echoed = await client.callTool({ name: "failing_http.echo", arguments: { text: "over http" } });
    assert.equal(echoed.content[0].text, "over http");
    const everything = await client.callTool({ name: "everything_http.echo", arguments: { message: "hi" } });
    assert.match(everything.content[0].text, /hi/);
    const health = await (await fetch(`${baseURL}/health`)).json();
    assert.equal(health.mcp_servers.failing_http.up, true, JSON.stringify(health));
  } finally {
    await client.close();
  }
});

serverTest("an HTTP server that says its tools changed (on its own stream) is listed again, its new tool routed", async () => {
  const { client } = await connect();
  try {
    const added = await client.callTool({ name: "failing_http.add_tool", arguments: {} });
    assert.equal(added.isError, undefined, JSON.stringify(added));
    await until("failing_http.added in tools/list", async () =>
      (await client.listTools()).tools.find((t) => t.name === "failing_http.added"));
    const result = await client.callTool({ name: "failing_http.added", arguments: {} });
    assert.equal(result.content[0].text, "added", JSON.stringify(result));
    // Logged as the server's (with any other server's notification coalesced into it).
    const reloads = await sql("SELECT who, outcome FROM reloads WHERE who LIKE 'mcp:%failing_http%'");
    assert.equal(reloads.length, 1, JSON.stringify(reloads));
    assert.equal(reloads[0].outcome, "ok");
  } finally {
    await client.close();
  }
});

serverTest("a call the policy denies is an error result naming the rule, logged, and not run", async () => {
  const { client } = await connect();
  try {
    const denied = await client.callTool({ name: "failing.fail", arguments: {} });
    assert.equal(denied.isError, true);
    assert.match(denied.content[0].text, /denied.*rule:deny/);
    const decision = denied._meta["baton/decision"];
    const rows = await sql(`SELECT action FROM decisions WHERE id = '${decision}'`);
    assert.deepEqual(rows, [{ action: "deny" }]);
    assert.deepEqual(await sql(`SELECT * FROM tool_runs WHERE decision = '${decision}'`), []);
  } finally {
    await client.close();
  }
});

serverTest("an escalated call waits with progress until a person approves it, and what runs is what was approved", async () => {
  const { client } = await connect();
  try {
    const progress = [];
    const call = client.callTool(
      { name: "failing.pick", arguments: { color: "red", loud: false, note: "as the agent asked" } },
      CallToolResultSchema,
      { onprogress: (p) => progress.push(p), resetTimeoutOnProgress: true, timeout: 30_000 },
    );
    const escalation = await pendingEscalation("failing.pick");
    assert.deepEqual(escalation.arguments, { color: "red", loud: false, note: "as the agent asked" });
    const resolved = await reviewer(`/v1/escalations/${escalation.id}/resolve`, {
      outcome: "execute",
      tool: "failing.pick",
      arguments: { color: "blue", loud: true, note: "as a person approved" },
      reason: "blue is safer",
    });
    assert.equal(resolved.status, 200, JSON.stringify(resolved.body));
    const result = await call;
    assert.equal(result.isError, undefined, JSON.stringify(result));
    assert.equal(result.content[0].text, "blue true as a person approved");
    assert.equal(result._meta["baton/escalation"], escalation.id, JSON.stringify(result));
    assert.ok(progress.length >= 1, "a progress notification while it waited");
    assert.match(progress[0].message, new RegExp(`escalation ${escalation.id}`));
    const runs = await sql(`SELECT ok FROM tool_runs WHERE decision = '${escalation.decision}'`);
    assert.deepEqual(runs, [{ ok: 1 }]);
  } finally {
    await client.close();
  }
});

serverTest("an escalated call a person denies is an error result with the reason", async () => {
  const { client } = await connect();
  try {
    const call = client.callTool({ name: "failing.pick", arguments: { color: "green", loud: true, note: "no" } });
    const escalation = await pendingEscalation("failing.pick");
    const resolved = await reviewer(`/v1/escalations/${escalation.id}/resolve`, { outcome: "deny", reason: "not today" });
    assert.equal(resolved.status, 200, JSON.stringify(resolved.body));
    const result = await call;
    assert.equal(result.isError, true);
    assert.match(result.content[0].text, /a person denied the call: not today/);
  } finally {
    await client.close();
  }
});

// The events of an SSE response as they come: next() is the next one ({id, retry, data}), or null
// at the stream's end; each is awaited for 10 s at most.
function events(res) {
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  return {
    async next() {
      for (;;) {
        const end = text.indexOf("\n\n");
        if (end >= 0) {
          const block = text.slice(0, end);
          text = text.slice(end + 2);
          const e = { data: "" };
          for (const line of block.split("\n")) {
            const [field, ...rest] = line.split(": ");
            if (field === "id" || field === "retry" || field === "data" || field === "event") e[field] = rest.join(": ");
          }
          return e;
        }
        const timer = new Promise((_, reject) => setTimeout(() => reject(new Error("no event within 10 s")), 10_000).unref());
        const { value, done } = await Promise.race([reader.read(), timer]);
        if (done) return null;
        text += value;
      }
    },
    cancel: () => reader.cancel(),
  };
}

serverTest("a call whose stream the client loses is resumed with Last-Event-ID, to the approved call's answer", async () => {
  const { client, transport } = await connect();
  try {
    const session = transport.sessionId;
    const headers = { Authorization: `Bearer ${agentKey}`, "Mcp-Session-Id": session };
    const lost = new AbortController();
    const res = await fetch(`${baseURL}/mcp`, {
      method: "POST",
      headers: { ...headers, "Content-Type": "application/json", Accept: "application/json, text/event-stream" },
      body: JSON.stringify({
        jsonrpc: "2.0",
        id: 41,
        method: "tools/call",
        params: { name: "failing.pick", arguments: { color: "red", loud: true, note: "resume me" }, _meta: { progressToken: "p41" } },
      }),
      signal: lost.signal,
    });
    assert.equal(res.headers.get("content-type"), "text/event-stream");
    const posted = events(res);
    // 2025-11-25: a priming event first (an id, how long to wait before reconnecting, no message).
    const priming = await posted.next();
    assert.match(priming.id, /^\d+-0$/);
    assert.equal(priming.retry, "2000");
    assert.equal(priming.data, "");
    const stream = priming.id.split("-")[0];
    const progress = await posted.next();
    assert.equal(progress.id, `${stream}-1`);
    assert.equal(JSON.parse(progress.data).method, "notifications/progress");
    lost.abort(); // the connection is lost while a person decides
    await posted.cancel().catch(() => {});

    const resume = (last) => fetch(`${baseURL}/mcp`, { headers: { ...headers, Accept: "text/event-stream", "Last-Event-ID": last } });
    const resumed = await resume(progress.id);
    assert.equal(resumed.status, 200);
    assert.equal(resumed.headers.get("content-type"), "text/event-stream");
    const escalation = await pendingEscalation("failing.pick");
    const approved = await reviewer(`/v1/escalations/${escalation.id}/resolve`, { outcome: "execute", reason: "fine" });
    assert.equal(approved.status, 200, JSON.stringify(approved.body));
    const later = events(resumed);
    const number = (e) => Number(e.id.split("-")[1]);
    let answer = await later.next();
    // What comes is what came after the event named: nothing before it again.
    assert.ok(answer.id.startsWith(`${stream}-`) && number(answer) > number(progress), answer.id);
    while (answer && JSON.parse(answer.data).method === "notifications/progress") answer = await later.next();
    assert.ok(answer, "the resumed stream ended without the answer");
    assert.ok(answer.id.startsWith(`${stream}-`) && number(answer) > number(progress), answer.id);
    const result = JSON.parse(answer.data);
    assert.equal(result.id, 41);
    assert.equal(result.result.content[0].text, "red true resume me");
    assert.equal(result.result._meta["baton/escalation"], escalation.id);
    assert.equal(await later.next(), null);

    // The answered stream may be resumed again from its start: every event after the id, then its end.
    const again = events(await resume(`${stream}-0`));
    const replayed = [];
    for (let e = await again.next(); e; e = await again.next()) replayed.push(e);
    assert.equal(replayed[0].id, progress.id);
    assert.deepEqual(JSON.parse(replayed.at(-1).data), result);
    const after = events(await resume(progress.id));
    const rest = [];
    for (let e = await after.next(); e; e = await after.next()) rest.push(e);
    assert.ok(rest.length >= 1 && rest.every((e) => number(e) > number(progress)), JSON.stringify(rest));
    assert.deepEqual(JSON.parse(rest.at(-1).data), result);
    // An id no stream of the session has, one not baton's, and one without the session.
    assert.equal((await resume(`${Number(stream) + 50}-0`)).status, 400);
    assert.equal((await resume("not-an-id")).status, 400);
    const other = await fetch(`${baseURL}/mcp`, { headers: { Authorization: `Bearer ${agentKey}`, "Last-Event-ID": progress.id } });
    assert.equal(other.status, 400);
  } finally {
    await client.close();
  }
});

serverTest("a stream taken over before its first event answers its POST as an empty stream; HTTP/1.0 cannot resume", async () => {
  const raw = (body, headers = {}) =>
    fetch(`${baseURL}/mcp`, {
      method: "POST",
      headers: { Authorization: `Bearer ${agentKey}`, "Content-Type": "application/json", Accept: "application/json, text/event-stream", ...headers },
      body: JSON.stringify(body),
    });
  // Protocol 2025-06-18: no priming event, and without a progress token nothing goes before the answer.
  const opened = await raw({
    jsonrpc: "2.0",
    id: 1,
    method: "initialize",
    params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "raw", version: "1" } },
  });
  const session = opened.headers.get("mcp-session-id");
  assert.ok(session);
  const headers = { "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-06-18" };
  const posted = raw({ jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "failing.pick", arguments: { color: "red", loud: false, note: "taken" } } }, headers);
  const escalation = await pendingEscalation("failing.pick");
  const resumed = await fetch(`${baseURL}/mcp`, {
    headers: { Authorization: `Bearer ${agentKey}`, ...headers, Accept: "text/event-stream", "Last-Event-ID": "1-0" },
  });
  assert.equal(resumed.status, 200);
  const first = await posted;
  assert.equal(first.status, 200, "the POST taken over is not answered 202");
  assert.equal(first.headers.get("content-type"), "text/event-stream");
  assert.equal(await events(first).next(), null);
  const approved = await reviewer(`/v1/escalations/${escalation.id}/resolve`, { outcome: "execute", reason: "ok" });
  assert.equal(approved.status, 200, JSON.stringify(approved.body));
  const answer = await events(resumed).next();
  assert.equal(answer.id, "1-1");
  assert.equal(JSON.parse(answer.data).result.content[0].text, "red false taken");

  // HTTP/1.0 has no chunks to stream in: a resumption over it is refused, not sent chunked.
  const { port } = new URL(baseURL);
  const socket = connectSocket(Number(port), "127.0.0.1");
  await once(socket, "connect");
  socket.end(
    `GET /mcp HTTP/1.0\r\nHost: 127.0.0.1:${port}\r\nAuthorization: Bearer ${agentKey}\r\n` +
      `Mcp-Session-Id: ${session}\r\nLast-Event-ID: 1-0\r\n\r\n`,
  );
  let reply = "";
  socket.setEncoding("utf8").on("data", (chunk) => (reply += chunk));
  await once(socket, "close");
  assert.match(reply, /^HTTP\/1\.0 400 /);
  assert.doesNotMatch(reply, /chunked/i);
});

serverTest("the SDK client resumes a call it lost with its resumption token, in a transport of its own", async () => {
  const { client, transport } = await connect();
  let token;
  const first = client
    .request(
      { method: "tools/call", params: { name: "failing.pick", arguments: { color: "blue", loud: false, note: "again" } } },
      CallToolResultSchema,
      { onresumptiontoken: (t) => (token = t) },
    )
    .catch((e) => e);
  const escalation = await pendingEscalation("failing.pick");
  await until("a resumption token", async () => token);
  const session = transport.sessionId;
  await client.close(); // the first client goes, its stream with it (the session stays)
  await first;
  const again = new Client({ name: "baton-gateway-test-resumed", version: "1.0.0" });
  const resumedTransport = new StreamableHTTPClientTransport(new URL(`${baseURL}/mcp`), {
    sessionId: session,
    requestInit: { headers: { Authorization: `Bearer ${agentKey}` } },
  });
  await again.connect(resumedTransport);
  try {
    const result = again.request(
      { method: "tools/call", params: { name: "failing.pick", arguments: { color: "blue", loud: false, note: "again" } } },
      CallToolResultSchema,
      { resumptionToken: token },
    );
    const approved = await reviewer(`/v1/escalations/${escalation.id}/resolve`, { outcome: "execute", reason: "ok" });
    assert.equal(approved.status, 200, JSON.stringify(approved.body));
    const answer = await result;
    assert.equal(answer.content[0].text, "blue false again");
    assert.equal(answer._meta["baton/escalation"], escalation.id);
  } finally {
    await again.close();
  }
});

serverTest("a call the client cancels while a person decides is withdrawn from the inbox", async () => {
  const { client } = await connect();
  try {
    const controller = new AbortController();
    const call = client.callTool(
      { name: "failing.pick", arguments: { color: "red", loud: false, note: "cancel me" } },
      CallToolResultSchema,
      { signal: controller.signal },
    );
    const escalation = await pendingEscalation("failing.pick");
    controller.abort("the user changed their mind");
    await assert.rejects(call);
    const resolved = await resolvedEscalation(escalation.id);
    assert.equal(resolved.resolution.outcome, "deny");
    assert.match(resolved.resolution.reason, /the MCP client cancelled the call/);
    assert.equal(resolved.resolution.reviewer, "mcp-agent");
    // The session goes on.
    const echoed = await client.callTool({ name: "failing.echo", arguments: { text: "still here" } });
    assert.equal(echoed.content[0].text, "still here");
  } finally {
    await client.close();
  }
});

serverTest("ending a session answers its call that waits for a person and withdraws the escalation", async () => {
  const { client, transport } = await connect();
  try {
    const call = client.callTool({ name: "failing.pick", arguments: { color: "blue", loud: true, note: "end me" } });
    const escalation = await pendingEscalation("failing.pick");
    // Awaited from now: the answer may come before DELETE's own.
    const rejected = assert.rejects(call, /the MCP session has ended/);
    await transport.terminateSession();
    await rejected;
    const resolved = await resolvedEscalation(escalation.id);
    assert.equal(resolved.resolution.outcome, "deny");
    assert.match(resolved.resolution.reason, /the MCP session ended/);
    assert.deepEqual(await sql(`SELECT * FROM tool_runs WHERE decision = '${escalation.decision}'`), []);
  } finally {
    await client.close();
  }
});

serverTest("a server that stops answers the call waiting for a person at once, and no escalation of it outlives the stop", async () => {
  const own = new baton_process(batonBin);
  let url = await own.start(path.join(tmp, "stopped.yaml"), batonEnv(), 20_000);
  let { client } = await connect(url);
  const stoppedLog = (query) =>
    promisify(execFile)(batonBin, ["log", "sql", "--db", path.join(tmp, "stopped.db"), query]).then(({ stdout }) =>
      stdout.split("\n").filter(Boolean).map((l) => JSON.parse(l)),
    );
  // After a restart: the escalation is denied, its resolution acknowledged (nobody will come for it).
  const settled = async (escalation, reason) => {
    const { body } = await reviewer(`/v1/escalations/${escalation.id}`, undefined, url);
    assert.equal(body.status, "resolved", JSON.stringify(body));
    assert.equal(body.resolution.outcome, "deny");
    assert.match(body.resolution.reason, reason);
    const acked = await stoppedLog(
      `SELECT count(*) AS n FROM deliveries WHERE resolution IN (SELECT id FROM resolutions WHERE escalation = '${escalation.id}')`,
    );
    assert.deepEqual(acked, [{ n: 1 }]);
  };
  try {
    const call = client.callTool({ name: "failing.pick", arguments: { color: "red", loud: true, note: "stop" } });
    const escalation = await pendingEscalation("failing.pick", url);
    const asked = performance.now();
    const stopping = own.stop(10_000);
    await assert.rejects(call, new RegExp(`shutting down; escalation ${escalation.id} is withdrawn`));
    const { stopped, exit } = await stopping;
    assert.ok(stopped, `baton did not stop on SIGTERM (${exit})`);
    assert.equal(exit, 0);
    assert.ok(performance.now() - asked < 5_000, "the stop waited for the call");
    await client.close().catch(() => {});

    // Restarted: withdrawn by the stop itself, or, had its row not made it, denied at the start.
    url = await own.start(path.join(tmp, "stopped.yaml"), batonEnv(), 20_000);
    await settled(escalation, /baton stopped while the MCP call waited|denied at start-up: the MCP call that waited/);

    // A crash answers nobody and withdraws nothing: the next start denies what it left.
    ({ client } = await connect(url));
    const lost = client.callTool({ name: "failing.pick", arguments: { color: "blue", loud: true, note: "crash" } }).catch((e) => e);
    const crashed = await pendingEscalation("failing.pick", url);
    own.child.kill("SIGKILL");
    await once(own.child, "exit");
    await client.close().catch(() => {});
    await lost;
    url = await own.start(path.join(tmp, "stopped.yaml"), batonEnv(), 20_000);
    await settled(crashed, /denied at start-up: the MCP call that waited for it ended with baton's stop/);
    assert.deepEqual(await stoppedLog(`SELECT count(*) AS n FROM tool_runs WHERE decision = '${crashed.decision}'`), [{ n: 0 }]);
  } finally {
    await client.close().catch(() => {});
    await own.stop(10_000);
  }
});

serverTest("an unknown tool is -32602 and a missing required argument an error result, neither decided", async () => {
  const { client } = await connect();
  try {
    const before = (await sql("SELECT count(*) AS n FROM decisions"))[0].n;
    await assert.rejects(client.callTool({ name: "failing.nothing", arguments: {} }), (e) => e.code === -32602);
    const missing = await client.callTool({ name: "failing.echo", arguments: {} });
    assert.equal(missing.isError, true);
    assert.match(missing.content[0].text, /missing required argument `text`/);
    assert.equal((await sql("SELECT count(*) AS n FROM decisions"))[0].n, before);
  } finally {
    await client.close();
  }
});

serverTest("a session ends with DELETE, and bad messages get JSON-RPC errors", async () => {
  const { client, transport } = await connect();
  const session = transport.sessionId;
  assert.ok(session);
  await transport.terminateSession();
  await client.close();
  const post = (body, headers = {}) =>
    fetch(`${baseURL}/mcp`, {
      method: "POST",
      headers: {
        Authorization: `Bearer ${agentKey}`,
        "Content-Type": "application/json",
        Accept: "application/json, text/event-stream",
        ...headers,
      },
      body,
    });
  const ping = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping" });
  let res = await post(ping, { "Mcp-Session-Id": session });
  assert.equal(res.status, 404);
  res = await post(ping);
  assert.equal(res.status, 400);
  res = await post("{not json");
  assert.equal(res.status, 400);
  assert.equal((await res.json()).error.code, -32700);
  res = await post(JSON.stringify([{ jsonrpc: "2.0", id: 1, method: "ping" }]));
  assert.equal((await res.json()).error.code, -32600);
  // GET only resumes a stream (Last-Event-ID): baton sends nothing unasked.
  res = await fetch(`${baseURL}/mcp`, { headers: { Authorization: `Bearer ${agentKey}` } });
  assert.equal(res.status, 405);
  res = await post(ping, { Authorization: "Bearer wrong-key-0123456789abcdef" });
  assert.equal(res.status, 401);

  const { client: c2, transport: t2 } = await connect();
  try {
    const unknown = await post(JSON.stringify({ jsonrpc: "2.0", id: 7, method: "resources/list" }), { "Mcp-Session-Id": t2.sessionId });
    const body = await unknown.json();
    assert.equal(body.error.code, -32601);
    assert.equal(body.id, 7);
  } finally {
    await c2.close();
  }
});
