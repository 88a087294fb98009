// The reviewer inbox page (adapters/inbox/, served at /inbox) in headless Chromium against a real
// `baton serve`: the keyword engine, the repository's registry and policy (send_payment is
// always escalated), an agent key and a reviewer key. An agent on /v1/agent raises escalations;
// the page shows them, live, and a reviewer resolves them by typing and clicking.
//
//   BATON_BIN=build/adapters/baton BATON_SOURCE_DIR=. node --test tests/browser/inbox_test.mjs
//
// ctest runs it as test_browser (tests/CMakeLists.txt); scripts/setup.sh installs Debian's
// chromium and, with npm ci, playwright-core and ws as package-lock.json pins them. A full-page
// screenshot of a pending card is written to BATON_SCREENSHOT_DIR (default: the build folder
// above the binary) and its path printed. Every connection goes to 127.0.0.1 only.

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import { baton_process } from "../support/baton_process.mjs";

import { chromium } from "playwright-core";
import WebSocket from "ws";

const here = path.dirname(fileURLToPath(import.meta.url));
const batonBin = process.env.BATON_BIN;
const sourceDir = path.resolve(process.env.BATON_SOURCE_DIR ?? path.join(here, "..", ".."));
const chromiumBin = process.env.BATON_CHROMIUM ?? "/usr/bin/chromium";
const screenshotDir = path.resolve(
  process.env.BATON_SCREENSHOT_DIR ?? path.join(path.dirname(batonBin ?? "."), ".."),
);

const STARTUP_MS = 10_000;
const STOP_MS = 10_000;
const STEP_MS = 10_000; // one frame, one page change
const TEST_MS = 60_000;

// New keys for every run (the server wants at least 16 characters); the reviewer's key name is
// what a resolution names as its reviewer.
const agentKey = `inbox-agent-${randomBytes(16).toString("hex")}`;
const reviewerKey = `inbox-reviewer-${randomBytes(16).toString("hex")}`;
const REVIEWER = "alice";

// The keyword engine matches these words with send_payment's description ("Pay an invoice or
// send money to a supplier"), and config/policy.yaml always escalates send_payment. The first
// also shares words with ask_user and search_docs: three bars of some width (about 69, 22, 10 %).
const MIXED_REQUEST =
  "Should we pay the supplier invoice by bank transfer? Search the knowledge base for the payment policy and ask the user what they want.";
const PAYMENT_REQUEST = "Please pay the invoice from our supplier Acme: send the money today.";

let server;
let baseURL;
let tmp;
let browser;
let page;
let agent;
let anyFailed = false;
const pageErrors = [];

function withTimeout(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: nothing within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

// The agent's side of /v1/agent: every frame is kept, and a test waits for the one it expects.
class AgentSocket {
  constructor(url, key) {
    this.frames = [];
    this.waiters = [];
    this.nextId = 1;
    this.ws = new WebSocket(url, { headers: { Authorization: `Bearer ${key}` } });
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
      STEP_MS,
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
    return withTimeout(arrival, STEP_MS, what).finally(() => {
      this.waiters.splice(this.waiters.indexOf(waiter), 1);
    });
  }

  // Decides a fresh session whose answer must be escalate; returns the decision frame.
  async escalate(session, request) {
    const id = this.nextId++;
    this.send({ type: "decide", id, session, history: [{ role: "user", content: request }] });
    const decision = await this.next((f) => f.ref === id || f.id === id, `the answer to decide ${session}`);
    assert.equal(decision.type, "decision", `decide ${session}: ${JSON.stringify(decision)}`);
    assert.equal(decision.action, "escalate", `decide ${session}: ${JSON.stringify(decision)}`);
    assert.equal(decision.tool, "send_payment");
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

async function reviewerGet(pathname) {
  const res = await fetch(`${baseURL}${pathname}`, { headers: { Authorization: `Bearer ${reviewerKey}` } });
  assert.equal(res.status, 200, `GET ${pathname}`);
  return res.json();
}

const card = (id) => `li.card[data-escalation="${id}"]`;

before(async () => {
  assert.ok(batonBin, "set BATON_BIN to the baton binary");
  tmp = await mkdtemp(path.join(tmpdir(), "baton-inbox-"));
  const configPath = path.join(tmp, "baton.yaml");
  const q = (s) => JSON.stringify(s); // a JSON string is a YAML double-quoted scalar
  await writeFile(
    configPath,
    [
      "server: {listen: 127.0.0.1:0}",
      "auth:",
      "  keys:",
      "    - {name: inbox-agent, role: agent, env: INBOX_AGENT_KEY}",
      `    - {name: ${REVIEWER}, role: reviewer, env: INBOX_REVIEWER_KEY}`,
      "engine: {name: keyword}",
      `registry: ${q(path.join(sourceDir, "config", "tools.yaml"))}`,
      `policy: ${q(path.join(sourceDir, "config", "policy.yaml"))}`,
      `log: {path: ${q(path.join(tmp, "decisions.db"))}}`,
      "",
    ].join("\n"),
  );
  server = new baton_process(batonBin);
  baseURL = await server.start(configPath, { INBOX_AGENT_KEY: agentKey, INBOX_REVIEWER_KEY: reviewerKey }, STARTUP_MS);
  agent = new AgentSocket(`${baseURL.replace(/^http/, "ws")}/v1/agent`, agentKey);
  await agent.opened;
  browser = await chromium.launch({ executablePath: chromiumBin, headless: true, timeout: STARTUP_MS });
  page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.setDefaultTimeout(STEP_MS);
  page.on("pageerror", (err) => pageErrors.push(err.message));
});

after(async () => {
  agent?.close();
  if (browser) await withTimeout(browser.close(), STOP_MS, "closing chromium").catch(() => browser.process()?.kill("SIGKILL"));
  try {
    await server?.stopChecked(STOP_MS, { listened: Boolean(baseURL), anyFailed });
  } finally {
    if (tmp) await rm(tmp, { recursive: true, force: true });
  }
});

// A test whose failure also prints the server's log lines (in `after`); none may leave a
// script error on the page.
function inboxTest(name, fn) {
  test(name, { timeout: TEST_MS }, async (t) => {
    try {
      await fn(t);
      assert.deepEqual(pageErrors, [], "script errors on the page");
    } catch (err) {
      anyFailed = true;
      throw err;
    }
  });
}

inboxTest("a pending escalation is shown, counted down and resolved from the page", async (t) => {
  const decision = await agent.escalate("inbox-first", MIXED_REQUEST);
  const escalation = await reviewerGet(`/v1/escalations/${decision.escalation}`);
  const likely = escalation.candidates.filter((c) => c.probability >= 0.05).map((c) => c.tool);
  assert.deepEqual(likely, ["send_payment", "ask_user", "search_docs"], "the keyword engine's likely candidates");

  const response = await page.goto(`${baseURL}/inbox#key=${reviewerKey}`);
  assert.equal(response.status(), 200, "GET /inbox");
  assert.match(response.headers()["content-type"], /^text\/html/);
  const el = page.locator(card(decision.escalation));
  await el.waitFor();
  assert.doesNotMatch(page.url(), /key=/, "the key is taken out of the address bar");
  assert.equal(await page.evaluate(() => localStorage.getItem("baton.inbox.key")), reviewerKey, "the key is remembered");
  await page.locator('#connection[data-state="live"]').waitFor();

  assert.equal(await el.locator(".session").textContent(), escalation.session);
  assert.equal(await el.locator(".turn").textContent(), "1");
  assert.equal(await el.locator(".reason-badge").textContent(), "rule:always_escalate");
  assert.equal(await el.locator(".question").textContent(), escalation.question);
  assert.equal(await el.locator(".state .content").textContent(), MIXED_REQUEST);

  // One bar per candidate, as wide as its probability, labelled with the tool and a percentage.
  assert.equal(await el.locator(".bar").count(), escalation.candidates.length);
  for (const { tool, probability } of escalation.candidates) {
    const row = el.locator(".bar-row", { has: page.locator(`.bar[data-tool="${tool}"]`) });
    assert.equal(await row.locator(".bar-tool").textContent(), tool);
    assert.equal(await row.locator(".pct").textContent(), `${(probability * 100).toFixed(1)}%`, tool);
    const [bar, track] = await Promise.all([
      row.locator(".bar").boundingBox(),
      row.locator(".bar-track").boundingBox(),
    ]);
    assert.ok(Math.abs(bar.width - probability * track.width) <= 1.5, `${tool}: bar ${bar.width} of ${track.width}`);
  }
  assert.equal(await el.locator(".bar-row.proposed .bar").getAttribute("data-tool"), "send_payment");

  // mm:ss, matching the deadline, and ticking.
  const countdown = el.locator(".countdown");
  const first = await countdown.textContent();
  assert.match(first, /^\d\d:\d\d$/);
  const [mm, ss] = first.split(":").map(Number);
  const left = (escalation.deadline_ms - Date.now()) / 1000;
  assert.ok(Math.abs(mm * 60 + ss - left) <= 3, `countdown ${first} for ${left.toFixed(1)} s left`);
  await page.waitForFunction(
    ([selector, shown]) => document.querySelector(selector)?.textContent !== shown,
    [`${card(decision.escalation)} .countdown`, first],
    { timeout: 3000 },
  );

  // The reason is required.
  const resolve = el.locator("button.resolve");
  assert.equal(await resolve.isDisabled(), true, "resolve is disabled without a reason");
  assert.equal(await el.locator("button.deny").isDisabled(), true, "deny is disabled without a reason");
  assert.equal(await el.locator("select.tool").inputValue(), "send_payment", "the proposed tool is selected");
  const choices = await el.locator("select.tool option").evaluateAll((options) => options.map((o) => o.value));
  const tools = escalation.candidates.map((c) => c.tool).filter((tool) => tool !== "finish");
  assert.deepEqual(choices, tools, "every candidate tool may be chosen; finish is no tool");
  const reason = "supplier Acme is known; invoice 7781 checked";
  await el.locator("textarea.reason").fill(reason);
  assert.equal(await resolve.isEnabled(), true);
  assert.equal(await resolve.textContent(), "Resolve: run send_payment");

  const shot = path.join(screenshotDir, "inbox.png");
  await page.screenshot({ path: shot, fullPage: true });
  t.diagnostic(`screenshot: ${shot}`);

  await resolve.click();
  const { resolution } = await agent.resolutionOf(decision.escalation);
  assert.equal(resolution.outcome, "execute");
  assert.equal(resolution.tool, "send_payment");
  assert.equal(resolution.reason, reason);
  assert.equal(resolution.reviewer, REVIEWER, "the reviewer is the key's name");
  assert.equal(resolution.by, "reviewer");
  assert.equal(resolution.decision, decision.decision);
  agent.send({ type: "ack", resolution: resolution.id });

  await el.waitFor({ state: "detached" });
  const done = page.locator(`#resolved li[data-escalation="${decision.escalation}"]`);
  assert.match(await done.textContent(), new RegExp(`^${REVIEWER} ran send_payment`));
  assert.equal(await page.locator("#pending-count").textContent(), "0");
});

inboxTest("an escalation raised while the page is open appears without a reload, and deny works", async () => {
  assert.ok(page.url().startsWith(`${baseURL}/inbox`), "the first test left the page open");
  await page.evaluate(() => {
    window.not_reloaded = true;
  });
  const decision = await agent.escalate("inbox-second", PAYMENT_REQUEST);
  const el = page.locator(card(decision.escalation));
  await el.waitFor();
  assert.equal(await page.evaluate(() => window.not_reloaded), true, "the page was not reloaded");
  assert.equal(await page.locator("#pending-count").textContent(), "1");

  await el.locator("textarea.reason").fill("not without a purchase order");
  await el.locator("button.deny").click();
  const { resolution } = await agent.resolutionOf(decision.escalation);
  assert.equal(resolution.outcome, "deny");
  assert.equal(resolution.tool, null);
  assert.equal(resolution.reviewer, REVIEWER);
  agent.send({ type: "ack", resolution: resolution.id });
  await el.waitFor({ state: "detached" });
  assert.match(
    await page.locator(`#resolved li[data-escalation="${decision.escalation}"]`).textContent(),
    new RegExp(`^${REVIEWER} denied`),
  );
});

inboxTest("a key that is not a reviewer's is refused, and the page says so", async () => {
  const context = await browser.newContext(); // its own storage: the reviewer's key stays
  try {
    const other = await context.newPage();
    other.setDefaultTimeout(STEP_MS);
    other.on("pageerror", (err) => pageErrors.push(err.message));
    await other.goto(`${baseURL}/inbox#key=${agentKey}`);
    await other.locator('#connection[data-state="refused"]').waitFor();
    assert.match(await other.locator("#notice").textContent(), /^The key was refused: 403 FORBIDDEN/);
    assert.equal(await other.locator("li.card").count(), 0);
  } finally {
    await context.close();
  }
});
