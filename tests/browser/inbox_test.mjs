// The reviewer inbox page (adapters/server/inbox/, served at /inbox) in headless Chromium against a real
// `baton serve`: the keyword engine, the repository's registry and policy (send_payment is
// always escalated) with two tools baton runs itself added (restart_service, a command that
// succeeds; rollback_deploy, high risk, an http call to a closed port that fails), an agent key
// and a reviewer key. An agent on /v1/agent raises escalations; the page shows them, live, and a
// reviewer resolves them by typing and clicking. A second server without API keys checks that the
// page then needs none.
//
//   BATON_BIN=build/adapters/baton BATON_SOURCE_DIR=. node --test tests/browser/inbox_test.mjs
//
// ctest runs it as test_browser (tests/CMakeLists.txt); scripts/setup.sh installs Debian's
// chromium and, with npm ci, playwright-core and ws as package-lock.json pins them. A full-page
// screenshot of a pending card is written to BATON_SCREENSHOT_DIR (default: the build folder
// above the binary) and its path printed. Every connection goes to 127.0.0.1 only.

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";

import { baton_process } from "../support/baton_process.mjs";
import { AgentSocket, withTimeout } from "./agent_socket.mjs";
import { batonBin, chromiumBin, screenshotDir, sourceDir } from "./env.mjs";

import { chromium } from "playwright-core";


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
// rollback_deploy's words: it is high risk, over the policy's max_risk (medium).
const ROLLBACK_REQUEST = "Roll back the latest website release deployment.";
// No word of any option (not even `user`, which ask_user and finish have: it is an assistant's
// event): a flat tie, send_payment (listed first) proposed only by its place.
const FLAT_REQUEST = "xyzzy plugh";

// The tools baton runs itself, added to the repository's registry (before its `finish`).
const EXTRA_TOOLS = `  - id: restart_service
    description: Restart a crashed server process on the cluster
    risk: medium
    executor: {type: command, argv: [/bin/cat], timeout_ms: 5000}
    parameters:
      service:
        type: choice
        instructions: Which service?
        values: {api: The public HTTP API, worker: The background job worker}
      drain: {type: boolean, instructions: "Drain its connections first?"}
      note: {type: text}
  - id: rollback_deploy
    description: Roll back the latest website release deployment
    risk: high
    executor: {type: http, url: "http://127.0.0.1:1/rollback", timeout_ms: 500, retries: 0}
`;
// send_payment's escalations run it after two hours; the others are denied after 15 minutes.
const EXTRA_POLICY = `  tools:
    send_payment: {deadline_s: 7200, on_deadline: execute}
`;

let server;
let openServer; // no API keys
let baseURL;
let tmp;
let browser;
let page;
let agent;
let anyFailed = false;
const pageErrors = [];
const navigated = []; // every URL the main page's frames went to

async function reviewerGet(pathname) {
  const res = await fetch(`${baseURL}${pathname}`, { headers: { Authorization: `Bearer ${reviewerKey}` } });
  assert.equal(res.status, 200, `GET ${pathname}`);
  return res.json();
}

// Polls (bounded) until the resolved escalation shows its tool run.
async function withToolRun(id) {
  for (let i = 0; i < 100; i++) {
    const e = await reviewerGet(`/v1/escalations/${id}`);
    if (e.resolution?.tool_run) return e;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.fail(`escalation ${id} shows no tool run`);
}

const card = (id) => `li.card[data-escalation="${id}"]`;
// The page's clock text for a time: "HH:MM", after its date when that is not today's (UTC), as
// the inbox writes it (a deadline two hours away is tomorrow's from 22:00 UTC on).
const utcClock = (ms) => {
  const iso = new Date(ms).toISOString(), today = new Date().toISOString().slice(0, 10);
  return `${iso.slice(0, 10) === today ? "" : `${iso.slice(0, 10)} `}${iso.slice(11, 16)}`;
};

// A page of its own (its own storage); script errors are collected like the main page's.
async function freshPage() {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const p = await context.newPage();
  p.setDefaultTimeout(STEP_MS);
  p.on("pageerror", (err) => pageErrors.push(err.message));
  return { context, page: p };
}

async function writeConfig(name, { registry, policy, keys }) {
  const q = (s) => JSON.stringify(s); // a JSON string is a YAML double-quoted scalar
  const file = path.join(tmp, `${name}.yaml`);
  await writeFile(
    file,
    [
      "server: {listen: 127.0.0.1:0}",
      ...(keys
        ? [
            "auth:",
            "  keys:",
            "    - {name: inbox-agent, role: agent, env: INBOX_AGENT_KEY}",
            `    - {name: ${REVIEWER}, role: reviewer, env: INBOX_REVIEWER_KEY}`,
          ]
        : []),
      "engine: {name: keyword}",
      `registry: ${q(registry)}`,
      `policy: ${q(policy)}`,
      `log: {path: ${q(path.join(tmp, `${name}.db`))}}`,
      "",
    ].join("\n"),
  );
  return file;
}

before(async () => {
  assert.ok(batonBin, "set BATON_BIN to the baton binary");
  tmp = await mkdtemp(path.join(tmpdir(), "baton-inbox-"));
  const tools = await readFile(path.join(sourceDir, "config", "tools.yaml"), "utf8");
  assert.ok(tools.includes("\nfinish:"), "config/tools.yaml has a finish option");
  const registry = path.join(tmp, "tools.yaml");
  await writeFile(registry, tools.replace("\nfinish:", `\n${EXTRA_TOOLS}finish:`));
  const policyText = await readFile(path.join(sourceDir, "config", "policy.yaml"), "utf8");
  assert.match(policyText, /\n {2}on_deadline: deny\n?$/, "config/policy.yaml ends with its escalation terms");
  const policy = path.join(tmp, "policy.yaml");
  await writeFile(policy, `${policyText.trimEnd()}\n${EXTRA_POLICY}`);

  server = new baton_process(batonBin);
  baseURL = await server.start(
    await writeConfig("keys", { registry, policy, keys: true }),
    { INBOX_AGENT_KEY: agentKey, INBOX_REVIEWER_KEY: reviewerKey },
    STARTUP_MS,
  );
  agent = new AgentSocket(`${baseURL.replace(/^http/, "ws")}/v1/agent`, agentKey, STEP_MS);
  await agent.opened;
  browser = await chromium.launch({ executablePath: chromiumBin, headless: true, timeout: STARTUP_MS });
  page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.setDefaultTimeout(STEP_MS);
  page.on("pageerror", (err) => pageErrors.push(err.message));
  page.on("framenavigated", (frame) => navigated.push(frame.url()));
  openServer = { process: new baton_process(batonBin), registry, policy };
});

after(async () => {
  agent?.close();
  if (browser) await withTimeout(browser.close(), STOP_MS, "closing chromium").catch(() => browser.process()?.kill("SIGKILL"));
  try {
    await server?.stopChecked(STOP_MS, { listened: Boolean(baseURL), anyFailed });
    await openServer?.process.stopChecked(STOP_MS, { listened: Boolean(openServer.url), anyFailed });
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

inboxTest("a pending escalation is shown, with its evidence and deadline, and resolved with edited arguments", async (t) => {
  const decision = await agent.escalate("inbox-first", MIXED_REQUEST);
  const escalation = await reviewerGet(`/v1/escalations/${decision.escalation}`);
  const likely = escalation.candidates.filter((c) => c.probability >= 0.05).map((c) => c.tool);
  assert.deepEqual(likely, ["send_payment", "ask_user", "search_docs"], "the keyword engine's likely candidates");

  // No key yet: the page says which key it needs, and lists nothing.
  const response = await page.goto(`${baseURL}/inbox`);
  assert.equal(response.status(), 200, "GET /inbox");
  assert.match(response.headers()["content-type"], /^text\/html/);
  await page.locator('#connection[data-state="idle"]').waitFor();
  assert.equal(
    await page.locator("#notice").textContent(),
    "This server has API keys: enter a key with role reviewer (or admin) above.",
  );
  assert.equal(await page.locator("#key-form").isVisible(), true);

  // The key form: the key goes to sessionStorage and into no URL.
  await page.locator("#api-key").fill(reviewerKey);
  await page.locator("#key-form button[type=submit]").click();
  const el = page.locator(card(decision.escalation));
  await el.waitFor();
  await page.locator('#connection[data-state="live"]').waitFor();
  assert.equal(page.url(), `${baseURL}/inbox`);
  assert.equal(await page.evaluate(() => sessionStorage.getItem("baton.inbox.key")), reviewerKey, "kept for the tab");
  assert.equal(await page.evaluate(() => localStorage.getItem("baton.inbox.key")), null, "not kept on disk");
  assert.ok(navigated.length > 0);
  assert.ok(!navigated.some((u) => u.includes(reviewerKey)), `no URL holds the key: ${navigated.join(" ")}`);

  assert.equal(await el.locator(".session").textContent(), escalation.session);
  assert.equal(await el.locator(".turn").textContent(), "1");
  assert.equal(await el.locator(".reason-badge").textContent(), "rule:always_escalate");
  // The question's confidence as the bars show it, a percentage; the API keeps the number.
  const confidence = `${(escalation.confidence * 100).toFixed(1)}%`;
  assert.equal(
    await el.locator(".question").textContent(),
    `Should send_payment run? It was escalated by rule:always_escalate at confidence ${confidence}.`,
  );
  assert.ok(escalation.question.endsWith(`at confidence ${escalation.confidence}.`), escalation.question);
  assert.equal(await el.locator(".bar-row.proposed .pct").textContent(), confidence);
  assert.equal(await el.locator(".state .content").textContent(), MIXED_REQUEST);

  // The evidence, in words: the rule, every other answer, when it was raised, the decision.
  assert.equal(escalation.evidence.why, "send_payment is always escalated by this policy (rules.always_escalate)");
  assert.equal(await el.locator(".why").textContent(), escalation.evidence.why);
  const answers = await el.locator(".answers li").allTextContents();
  assert.equal(answers.length, escalation.evidence.answers.length);
  assert.ok(answers.some((a) => /^urgency \(How urgent is this for the user\?\): scored [\d.]+ \(.+\)$/.test(a)), answers.join(" | "));
  assert.ok(answers.some((a) => /^needs_person \(Does this need a person to look at it\?\): P\(true\) [\d.]+$/.test(a)), answers.join(" | "));
  assert.equal(await el.locator(".decision-id").textContent(), escalation.decision);
  assert.equal(
    await el.locator(".raised-at").textContent(),
    `${new Date(escalation.created_ms).toISOString().slice(11, 19)} UTC`,
  );
  const age = await el.locator(".age").textContent();
  assert.match(age, /^\d+ s ago$/);
  await page.waitForFunction(
    ([selector, shown]) => document.querySelector(selector)?.textContent !== shown,
    [`${card(decision.escalation)} .age`, age],
    { timeout: 3000 },
  );

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
  assert.equal(await el.locator(".tie-note").isVisible(), false);

  // The deadline: a clock time in UTC, the configured outcome and the time left, in hours here.
  assert.equal(escalation.on_deadline, "execute");
  assert.match(
    await el.locator(".deadline").textContent(),
    new RegExp(`^send_payment runs at ${utcClock(escalation.deadline_ms)} UTC if nobody decides \\(in 1 h 5[89] min\\)$`),
  );

  // The reason is required.
  const resolve = el.locator("button.resolve");
  assert.equal(await resolve.isDisabled(), true, "resolve is disabled without a reason");
  assert.equal(await el.locator("button.deny").isDisabled(), true, "deny is disabled without a reason");
  assert.equal(await el.locator("select.tool").inputValue(), "send_payment", "the proposed tool is selected");
  const choices = await el.locator("select.tool option").evaluateAll((options) => options.map((o) => o.value));
  const tools = escalation.candidates.map((c) => c.tool).filter((tool) => tool !== "finish");
  assert.deepEqual(choices, tools, "every candidate tool may be chosen; finish is no tool");

  // One field per parameter, typed from the registry, prefilled from the proposal.
  const method = el.locator('.argument[data-parameter="method"] select');
  const notify = el.locator('.argument[data-parameter="notify"] input[type=checkbox]');
  const memo = el.locator('.argument[data-parameter="memo"] input[type=text]');
  assert.equal(await method.inputValue(), escalation.arguments.method);
  assert.equal(await notify.isChecked(), escalation.arguments.notify);
  assert.equal(await memo.inputValue(), "");
  const method_edited = escalation.arguments.method === "card" ? "transfer" : "card";
  await method.selectOption(method_edited);
  await notify.setChecked(!escalation.arguments.notify);
  await memo.fill("invoice 7781");

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
  assert.deepEqual(resolution.arguments, { method: method_edited, notify: !escalation.arguments.notify, memo: "invoice 7781" });
  assert.equal(resolution.reason, reason);
  assert.equal(resolution.reviewer, REVIEWER, "the reviewer is the key's name");
  assert.equal(resolution.by, "reviewer");
  assert.equal(resolution.decision, decision.decision);
  agent.send({ type: "ack", resolution: resolution.id });

  await el.waitFor({ state: "detached" });
  const done = page.locator(`#resolved li[data-escalation="${decision.escalation}"]`);
  assert.match(await done.textContent(), new RegExp(`^${REVIEWER} ran send_payment`));
  assert.equal(await done.locator(".tool-run").textContent(), "send_payment: the agent runs it");
  assert.equal(await page.locator("#pending-count").textContent(), "0");

  // A reload keeps the key (this tab's sessionStorage), still without it in the URL.
  await page.reload();
  await page.locator('#connection[data-state="live"]').waitFor();
  assert.equal(page.url(), `${baseURL}/inbox`);
  assert.ok(!navigated.some((u) => u.includes(reviewerKey)));
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
    const notice = await other.locator("#notice").textContent();
    assert.match(notice, /^The key was refused: 403 FORBIDDEN/);
    assert.match(notice, /This page needs a key with role reviewer \(or admin\)\.$/);
    assert.equal(await other.locator("li.card").count(), 0);
  } finally {
    await context.close();
  }
});

inboxTest("the evidence says which rule fired, a flat tie marks no tool, and a deadline names its outcome", async () => {
  const risky = await agent.escalate("inbox-rollback", ROLLBACK_REQUEST, "rollback_deploy");
  const flat = await agent.escalate("inbox-flat", FLAT_REQUEST, "send_payment", "assistant");
  const e = await reviewerGet(`/v1/escalations/${risky.escalation}`);
  const el = page.locator(card(risky.escalation));
  await el.waitFor();
  assert.equal(await el.locator(".reason-badge").textContent(), "rule:max_risk");
  assert.equal(await el.locator(".why").textContent(), "rollback_deploy is high risk; this policy allows at most medium");
  assert.equal(await el.locator(".bar-row.proposed .bar").getAttribute("data-tool"), "rollback_deploy");
  // Denied after 15 minutes (the policy's default terms).
  assert.match(
    await el.locator(".deadline").textContent(),
    new RegExp(`^denied at ${utcClock(e.deadline_ms)} UTC if nobody decides \\(in 1[45] min\\)$`),
  );

  const f = await reviewerGet(`/v1/escalations/${flat.escalation}`);
  assert.equal(f.evidence.tie, true, "no option stands out");
  const tie = page.locator(card(flat.escalation));
  await tie.waitFor();
  assert.equal(await tie.locator(".bar-row.proposed").count(), 0, "no tool in bold as if chosen");
  assert.equal(await tie.locator(".proposed-tool").textContent(), "send_payment (tie)");
  assert.match(await tie.locator(".tie-note").textContent(), /^A flat tie: the model prefers none of send_payment, .*; send_payment is proposed only because it comes first\.$/);
});

inboxTest("another tool with edited arguments: a refusal is shown inline, and tool runs show ok or failed", async () => {
  const flatId = await page.locator("li.card", { has: page.locator(".tie-note:visible") }).getAttribute("data-escalation");
  const rollbackId = await page
    .locator("li.card", { has: page.locator('.reason-badge:text-is("rule:max_risk")') })
    .getAttribute("data-escalation");
  const el = page.locator(card(rollbackId));
  assert.equal(await el.locator(".arguments").isVisible(), false, "rollback_deploy has no parameters");
  await el.locator("select.tool").selectOption("restart_service");
  const service = el.locator('.argument[data-parameter="service"] select');
  assert.equal(await service.inputValue(), "", "another tool's choice starts unchosen");
  assert.deepEqual(await service.locator("option").evaluateAll((o) => o.map((x) => x.value)), ["", "api", "worker"]);
  await el.locator("textarea.reason").fill("the worker is stuck, not the deploy");
  await el.locator("button.resolve").click();
  // The server's own rules refuse it; the page says why, next to the field.
  await el.locator(".error:visible").waitFor();
  assert.equal(await el.locator(".error").textContent(), "422 INVALID_RESOLUTION: arguments.service: Field required (a choice)");
  // Marked from the refusal's `loc`, ["arguments", "service"]; the others not.
  assert.equal(await el.locator('.argument[data-parameter="service"]').getAttribute("class"), "argument choice invalid");
  assert.equal(await el.locator('.argument[data-parameter="drain"]').getAttribute("class"), "argument boolean");
  assert.equal(await el.locator('.argument[data-parameter="note"]').getAttribute("class"), "argument text");

  await service.selectOption("worker");
  await el.locator('.argument[data-parameter="drain"] input').check();
  await el.locator('.argument[data-parameter="note"] input').fill("after the 14:00 alert");
  await el.locator("button.resolve").click();
  await el.waitFor({ state: "detached" });
  const done = page.locator(`#resolved li[data-escalation="${rollbackId}"] .tool-run`);
  await page.locator(`#resolved li[data-escalation="${rollbackId}"] .tool-run[data-state="ok"]`).waitFor();
  assert.equal(await done.textContent(), "restart_service: ok");
  const ran = await withToolRun(rollbackId);
  assert.deepEqual(ran.resolution.arguments, { service: "worker", drain: true, note: "after the 14:00 alert" });
  assert.equal(ran.resolution.tool_run.ok, true);

  // A run that fails: the http call to a closed port.
  const again = await agent.escalate("inbox-rollback-2", ROLLBACK_REQUEST, "rollback_deploy");
  const second = page.locator(card(again.escalation));
  await second.waitFor();
  await second.locator("textarea.reason").fill("roll it back");
  await second.locator("button.resolve").click();
  await page.locator(`#resolved li[data-escalation="${again.escalation}"] .tool-run[data-state="failed"]`).waitFor();
  const failed = await withToolRun(again.escalation);
  assert.equal(failed.resolution.tool_run.error_code, "EXECUTOR_UNREACHABLE");
  assert.equal(
    await page.locator(`#resolved li[data-escalation="${again.escalation}"] .tool-run`).textContent(),
    `rollback_deploy: failed with EXECUTOR_UNREACHABLE (${failed.resolution.tool_run.detail})`,
  );

  // A run that ends while the page is not listening (its `tool_run` frame lost with the socket)
  // is read again when the page reconnects.
  let drop_tool_runs = true;
  await page.routeWebSocket(/\/v1\/review$/, (ws) => {
    const server = ws.connectToServer();
    server.onMessage((m) => {
      if (!(drop_tool_runs && String(m).includes('"type":"tool_run"'))) ws.send(m);
    });
  });
  await page.evaluate(() => socket.close());
  await page.locator('#connection[data-state="live"]').waitFor();
  const offline = await agent.escalate("inbox-rollback-3", ROLLBACK_REQUEST, "rollback_deploy");
  const third = page.locator(card(offline.escalation));
  await third.waitFor();
  await third.locator("textarea.reason").fill("roll it back again");
  await third.locator("button.resolve").click();
  await withToolRun(offline.escalation);
  const lost = page.locator(`#resolved li[data-escalation="${offline.escalation}"] .tool-run`);
  assert.equal(await lost.getAttribute("data-state"), "running", "its tool_run frame was dropped");
  drop_tool_runs = false;
  await page.evaluate(() => socket.close());
  await page.locator(`#resolved li[data-escalation="${offline.escalation}"] .tool-run[data-state="failed"]`).waitFor();

  const tie = page.locator(card(flatId));
  await tie.locator("textarea.reason").fill("unclear request");
  await tie.locator("button.deny").click();
  await tie.waitFor({ state: "detached" });
  assert.equal(await page.locator("#pending-count").textContent(), "0");
});

inboxTest("without API keys the page needs no key and lists what is pending", async () => {
  openServer.url = await openServer.process.start(
    await writeConfig("open", { registry: openServer.registry, policy: openServer.policy, keys: false }),
    {},
    STARTUP_MS,
  );
  const openAgent = new AgentSocket(`${openServer.url.replace(/^http/, "ws")}/v1/agent`, "", STEP_MS);
  const { context, page: p } = await freshPage();
  try {
    await openAgent.opened;
    const decision = await openAgent.escalate("open-1", PAYMENT_REQUEST);
    await p.goto(`${openServer.url}/inbox`);
    await p.locator(card(decision.escalation)).waitFor();
    await p.locator('#connection[data-state="live"]').waitFor();
    assert.equal(await p.locator("#pending-count").textContent(), "1");
    assert.equal(await p.locator("#empty").isVisible(), false);
    assert.equal(await p.locator("#key-form").isVisible(), false, "no key is asked for");
    assert.match(await p.locator("#auth-note").textContent(), /^This server has no API keys/);
    assert.equal(await p.locator("#notice").isVisible(), false);

    // A leftover key (an old `#key=` link): the server, not the held key, says it needs none.
    await p.goto(`${openServer.url}/inbox#key=leftover-${randomBytes(8).toString("hex")}`);
    await p.locator(card(decision.escalation)).waitFor();
    await p.locator('#connection[data-state="live"]').waitFor();
    assert.equal(await p.locator("#key-form").isVisible(), false, "no key form for a leftover key");
    assert.match(await p.locator("#auth-note").textContent(), /^This server has no API keys/);
    assert.equal(await p.evaluate(() => sessionStorage.getItem("baton.inbox.key")), null, "the leftover key is dropped");
    assert.equal(await p.locator("#api-key").inputValue(), "");
  } finally {
    openAgent.close();
    await context.close();
  }
});
