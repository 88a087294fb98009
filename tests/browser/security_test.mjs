// The attacks of a web page on a `baton serve` without keys (the default: "only this machine can
// call"), in headless Chromium: a page of another origin (a second HTTP server on another
// 127.0.0.1 port) posts a resolution with fetch(…, {mode: "no-cors"}) and opens /v1/review and
// /v1/agent; a page of attacker.example, which Chromium resolves to 127.0.0.1 (DNS rebinding),
// reads the API as its own origin. Each must fail, and the server must have answered each with a
// refusal (its /metrics says so); then the inbox, the server's own page, still connects its
// WebSocket under its CSP and resolves the escalation, which runs the `command` tool.
//
//   BATON_BIN=build/adapters/baton BATON_SOURCE_DIR=. node --test tests/browser/security_test.mjs
//
// ctest runs it as test_browser_security (tests/CMakeLists.txt). Every connection goes to
// 127.0.0.1 only.

import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";

import { baton_process } from "../support/baton_process.mjs";
import { AgentSocket, withTimeout } from "./agent_socket.mjs";
import { batonBin, chromiumBin } from "./env.mjs";

import { chromium } from "playwright-core";


const STARTUP_MS = 10_000;
const STOP_MS = 10_000;
const STEP_MS = 10_000;
const TEST_MS = 60_000;
const SOCKET_MS = 3_000; // how long an attacker's WebSocket is given to open

const PAYMENT_REQUEST = "Please pay the invoice from our supplier Acme: send the money today.";
const REBOUND = "attacker.example";

let server;
let baseURL;
let port;
let tmp;
let marker;
let attacker;
let attackerURL;
let browser;
let agent;
let escalation;
let anyFailed = false;
const pageErrors = [];

// GET from Node, which sends no Origin.
async function get(pathname) {
  const res = await fetch(`${baseURL}${pathname}`);
  assert.equal(res.status, 200, `GET ${pathname}`);
  return pathname === "/metrics" ? res.text() : res.json();
}

// How many answers of `status` the server counted for `endpoint`.
async function answered(endpoint, status) {
  const text = await get("/metrics");
  const line = text
    .split("\n")
    .find((l) => l.startsWith("baton_http_requests_total{") && l.includes(`endpoint="${endpoint}"`) && l.includes(`status="${status}"`));
  return line ? Number(line.split(" ").pop()) : 0;
}

async function expectPending(what) {
  const e = await get(`/v1/escalations/${escalation}`);
  assert.equal(e.status, "pending", `${what}: the escalation is still pending`);
  assert.equal(existsSync(marker), false, `${what}: the command tool did not run`);
}

// In the page: opens a WebSocket and reports whether it opened and what it received.
function probeSocket(page, url) {
  return page.evaluate(
    ([u, ms]) =>
      new Promise((resolve) => {
        const seen = { opened: false, messages: [] };
        let ws;
        try {
          ws = new WebSocket(u, ["baton.review", "bearer.anything"]);
        } catch (err) {
          resolve({ ...seen, thrown: String(err) });
          return;
        }
        const done = () => resolve(seen);
        ws.onopen = () => {
          seen.opened = true;
        };
        ws.onmessage = (m) => seen.messages.push(String(m.data));
        ws.onclose = done;
        setTimeout(() => {
          ws.close();
          done();
        }, ms);
      }),
    [url, SOCKET_MS],
  );
}

before(async () => {
  assert.ok(batonBin, "set BATON_BIN to the baton binary");
  tmp = await mkdtemp(path.join(tmpdir(), "baton-security-"));
  marker = path.join(tmp, "tool-ran.json");
  const q = (s) => JSON.stringify(s); // a JSON string is a YAML double-quoted scalar
  // send_payment is a `command` tool (tee writes the call to the marker file) that is always
  // escalated: resolving it with `execute` runs it.
  await writeFile(
    path.join(tmp, "tools.yaml"),
    [
      "tools:",
      "  - id: send_payment",
      "    description: Pay an invoice or send money to a supplier",
      "    risk: high",
      `    executor: {type: command, argv: [/usr/bin/tee, ${q(marker)}], timeout_ms: 5000}`,
      "  - id: search_docs",
      "    description: Search the documentation and the knowledge base for an answer",
      "finish: {description: Nothing more to do}",
      "",
    ].join("\n"),
  );
  await writeFile(
    path.join(tmp, "policy.yaml"),
    [
      "confidence: p_max",
      "rules: {always_escalate: [send_payment]}",
      "lanes: {default: {execute: 0.85, fallback: 0.5}}",
      "on_engine_error: escalate",
      "",
    ].join("\n"),
  );
  const configPath = path.join(tmp, "baton.yaml");
  await writeFile(
    configPath,
    ["server: {listen: 127.0.0.1:0}", "engine: {name: keyword}", `log: {path: ${q(path.join(tmp, "decisions.db"))}}`, ""].join(
      "\n",
    ),
  );
  server = new baton_process(batonBin);
  baseURL = await server.start(configPath, {}, STARTUP_MS);
  port = Number(new URL(baseURL).port);

  // The agent, on /v1/agent from Node (no Origin header, as agents and SDKs send).
  agent = new AgentSocket(`${baseURL.replace(/^http/, "ws")}/v1/agent`, undefined, STEP_MS);
  await agent.opened;
  agent.send({ type: "decide", id: 1, session: "security", history: [{ role: "user", content: PAYMENT_REQUEST }] });
  const decision = await agent.next((f) => f.ref === 1 || f.id === 1, "the answer to decide");
  assert.equal(decision.action, "escalate", JSON.stringify(decision));
  assert.equal(decision.tool, "send_payment");
  escalation = decision.escalation;

  // The attacker's site: another port, so another origin.
  attacker = createServer((req, res) => {
    res.writeHead(200, { "Content-Type": "text/html; charset=utf-8" });
    res.end("<!doctype html><title>cute cats</title><p>nothing to see</p>");
  });
  await new Promise((resolve) => attacker.listen(0, "127.0.0.1", resolve));
  attackerURL = `http://127.0.0.1:${attacker.address().port}/`;

  browser = await chromium.launch({
    executablePath: chromiumBin,
    headless: true,
    timeout: STARTUP_MS,
    // DNS rebinding without a DNS server: attacker.example is this machine.
    args: [`--host-resolver-rules=MAP ${REBOUND} 127.0.0.1`],
  });
});

after(async () => {
  agent?.close();
  attacker?.close();
  if (browser) await withTimeout(browser.close(), STOP_MS, "closing chromium").catch(() => browser.process()?.kill("SIGKILL"));
  try {
    await server?.stopChecked(STOP_MS, { listened: Boolean(baseURL), anyFailed });
  } finally {
    if (tmp) await rm(tmp, { recursive: true, force: true });
  }
});

function securityTest(name, fn) {
  test(name, { timeout: TEST_MS }, async () => {
    const context = await browser.newContext();
    try {
      const page = await context.newPage();
      page.setDefaultTimeout(STEP_MS);
      page.on("pageerror", (err) => pageErrors.push(err.message));
      await fn(page);
      assert.deepEqual(pageErrors, [], "script errors on the page");
    } catch (err) {
      anyFailed = true;
      throw err;
    } finally {
      await context.close();
    }
  });
}

securityTest("a page of another origin cannot resolve an escalation", async (page) => {
  await page.goto(attackerURL);
  const before403 = await answered("/v1/escalations/{id}/resolve", 403);
  const sent = await page.evaluate(
    async ([url, body]) => {
      // A "simple" request: the browser sends it without asking first, and hides the answer.
      const res = await fetch(url, { method: "POST", mode: "no-cors", headers: { "Content-Type": "text/plain" }, body });
      return res.type;
    },
    [
      `${baseURL}/v1/escalations/${escalation}/resolve`,
      JSON.stringify({ outcome: "execute", tool: "send_payment", reason: "an attacker's page" }),
    ],
  );
  assert.equal(sent, "opaque", "the request left the page");
  assert.equal(await answered("/v1/escalations/{id}/resolve", 403), before403 + 1, "the server refused it with 403");
  await expectPending("after the no-cors fetch");

  // A form post (another simple request, from a navigation).
  await page.evaluate(
    ([url, body]) => {
      const form = document.createElement("form");
      form.method = "POST";
      form.action = url;
      form.enctype = "text/plain";
      const field = document.createElement("input");
      field.name = body.slice(0, -2);
      field.value = body.slice(-2);
      form.append(field);
      document.body.append(form);
      form.submit();
    },
    [`${baseURL}/v1/escalations/${escalation}/resolve`, JSON.stringify({ outcome: "execute", reason: "a form" })],
  );
  await page.waitForURL(/\/resolve$/);
  assert.match(await page.locator("body").textContent(), /ORIGIN_REFUSED/);
  await expectPending("after the form post");
});

securityTest("a page of another origin cannot open /v1/review nor /v1/agent", async (page) => {
  await page.goto(attackerURL);
  const ws = baseURL.replace(/^http/, "ws");
  for (const [endpoint, route] of [
    ["/v1/review", "/v1/review"],
    ["/v1/agent", "/v1/agent"],
  ]) {
    const refused = await answered(route, 403);
    const seen = await probeSocket(page, `${ws}${endpoint}`);
    assert.equal(seen.opened, false, `${endpoint} opened for another origin`);
    assert.deepEqual(seen.messages, [], `${endpoint} sent frames to another origin`);
    assert.equal(await answered(route, 403), refused + 1, `the server refused ${endpoint} with 403`);
  }
});

securityTest("a rebound name (DNS rebinding) is not answered", async (page) => {
  const rebound = `http://${REBOUND}:${port}`;
  const refused = await answered("/inbox", 403);
  const response = await page.goto(`${rebound}/inbox`);
  assert.equal(response.status(), 403, "the page itself is refused");
  assert.equal(await answered("/inbox", 403), refused + 1);
  // The page's script now runs in the rebound origin, where the API is its own.
  const read = await page.evaluate(async () => {
    const res = await fetch("/v1/escalations?status=pending");
    return { status: res.status, body: await res.text() };
  });
  assert.equal(read.status, 403, read.body);
  assert.equal(JSON.parse(read.body).code, "HOST_REFUSED");
  const resolved = await page.evaluate(async ([id]) => {
    const res = await fetch(`/v1/escalations/${id}/resolve`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ outcome: "execute", reason: "rebound" }),
    });
    return res.status;
  }, [escalation]);
  assert.equal(resolved, 403);
  const seen = await probeSocket(page, `ws://${REBOUND}:${port}/v1/review`);
  assert.equal(seen.opened, false, "/v1/review opened for a rebound name");
  assert.deepEqual(seen.messages, []);
  await expectPending("after the rebound page");
});

securityTest("the inbox, the server's own page, connects its WebSocket and resolves", async (page) => {
  const violations = [];
  page.on("console", (m) => {
    if (/Content Security Policy/i.test(m.text()) && /connect-src/.test(m.text())) violations.push(m.text());
  });
  // Without keys the page needs none.
  const response = await page.goto(`${baseURL}/inbox`);
  assert.equal(response.status(), 200);
  const csp = response.headers()["content-security-policy"];
  assert.match(csp, /connect-src 'self';/);
  assert.doesNotMatch(csp, /ws:/);
  await page.locator('#connection[data-state="live"]').waitFor();
  const card = page.locator(`li.card[data-escalation="${escalation}"]`);
  await card.waitFor();
  await card.locator("textarea.reason").fill("checked by a person");
  await card.locator("button.resolve").click();
  const frame = await agent.next(
    (f) => f.type === "resolution" && f.resolution?.escalation === escalation,
    "the resolution frame",
  );
  assert.equal(frame.resolution.outcome, "execute");
  await card.waitFor({ state: "detached" });
  // The command tool ran: what the refused requests would have done. tee creates the file before
  // it writes the call, so the file is read until the call is in it (or 10 s have passed).
  let written = "";
  for (let i = 0; i < 100 && !/send_payment/.test(written); i++) {
    await new Promise((r) => setTimeout(r, 100));
    written = existsSync(marker) ? await readFile(marker, "utf8") : "";
  }
  assert.match(written, /send_payment/);
  assert.deepEqual(violations, [], "connect-src violations");
});
