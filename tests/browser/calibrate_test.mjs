// `baton calibrate --html` (adapters/cli/calibrate_cli.cpp) opened from a file in headless
// Chromium: a real `baton serve` with the keyword engine and a policy that escalates everything
// makes the log, a reviewer resolves the escalations over the reviewer API (approving some,
// denying others), and the page calibrate writes must show its plots with nothing fetched and no
// error.
//
//   BATON_BIN=build/adapters/baton BATON_SOURCE_DIR=. node --test tests/browser/calibrate_test.mjs
//
// ctest runs it as test_browser_calibrate (tests/CMakeLists.txt). A screenshot of the page is
// written to BATON_SCREENSHOT_DIR (default: the build folder above the binary) as calibrate.png.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { pathToFileURL } from "node:url";
import { promisify } from "node:util";

import { baton_process } from "../support/baton_process.mjs";
import { AgentSocket, withTimeout } from "./agent_socket.mjs";
import { batonBin, chromiumBin, screenshotDir, sourceDir } from "./env.mjs";

import { chromium } from "playwright-core";


const STARTUP_MS = 10_000;
const STOP_MS = 10_000;
const STEP_MS = 10_000;

// Requests the keyword engine maps to the repository registry's tools (config/tools.yaml), with
// more or less overlap: confidences spread over the range.
const REQUESTS = [
  "Search the documentation for the password reset policy",
  "Search the knowledge base for an answer about invoices",
  "Run a read-only SQL query on the reporting database for last week's sales",
  "Run the SQL query on the reporting database",
  "Open a ticket for the outage of the login page",
  "Open a ticket for a bug in the export",
  "Ask the user what they want exactly",
  "Ask the user a question to clarify the request",
  "Pay the invoice from our supplier",
  "Send money to a supplier by bank transfer",
  "The request is done; nothing more to do",
  "documentation answer",
  "ticket bug outage follow-up",
  "reporting database query",
  "clarify question user",
  "xyzzy plugh",
];

let server;
let baseURL;
let tmp;
let browser;
let dbPath;
let registryPath;
let policyPath;
let anyFailed = false;

before(async () => {
  assert.ok(batonBin, "set BATON_BIN to the baton binary");
  tmp = await mkdtemp(path.join(tmpdir(), "baton-calibrate-"));
  registryPath = path.join(sourceDir, "config", "tools.yaml");
  policyPath = path.join(tmp, "policy.yaml");
  dbPath = path.join(tmp, "calibrate.db");
  // Every decision goes to a person: each one can become a label.
  await writeFile(
    policyPath,
    "confidence: p_max\nlanes:\n  default: {execute: 1, fallback: 1}\non_engine_error: escalate\n",
  );
  const q = (s) => JSON.stringify(s);
  const config = path.join(tmp, "baton.yaml");
  await writeFile(
    config,
    [
      "server: {listen: 127.0.0.1:0}",
      "engine: {name: keyword}",
      `registry: ${q(registryPath)}`,
      `policy: ${q(policyPath)}`,
      `log: {path: ${q(dbPath)}}`,
      "",
    ].join("\n"),
  );
  server = new baton_process(batonBin);
  baseURL = await server.start(config, {}, STARTUP_MS);
  browser = await chromium.launch({ executablePath: chromiumBin, headless: true, timeout: STARTUP_MS });
});

after(async () => {
  if (browser) await withTimeout(browser.close(), STOP_MS, "closing chromium").catch(() => browser.process()?.kill("SIGKILL"));
  try {
    await server?.stopChecked(STOP_MS, { listened: Boolean(baseURL), anyFailed });
  } finally {
    if (tmp) await rm(tmp, { recursive: true, force: true });
  }
});

async function resolve(id, body) {
  const res = await fetch(`${baseURL}/v1/escalations/${id}/resolve`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  assert.equal(res.status, 200, `resolve ${id}: ${await res.text()}`);
}

test("the calibration report's plots render from a file, with nothing fetched", { timeout: 90_000 }, async () => {
  try {
    const agent = new AgentSocket(`${baseURL.replace(/^http/, "ws")}/v1/agent`, null, STEP_MS);
    await agent.opened;
    let escalated = 0;
    for (const [i, text] of REQUESTS.entries()) {
      const id = agent.nextId++;
      agent.send({ type: "decide", id, session: `cal-${i}`, history: [{ role: "user", content: text }] });
      const d = await agent.next((f) => f.ref === id || f.id === id, `the answer to decide ${i}`);
      assert.equal(d.type, "decision", JSON.stringify(d));
      if (d.action !== "escalate") continue;
      escalated++;
      // A reviewer approves two of three and denies the third.
      await resolve(d.escalation, i % 3 === 2 ? { outcome: "deny", reason: "not this" } : { outcome: "execute", reason: "right" });
    }
    agent.close();
    assert.ok(escalated >= 12, `most decisions escalate under execute: 1 (${escalated})`);
    await server.stop(STOP_MS);

    const html = path.join(tmp, "report.html");
    const { stdout } = await promisify(execFile)(batonBin, [
      "calibrate", "--db", dbPath, "--registry", registryPath, "--policy", policyPath,
      "--min-support", "1", "--html", html,
    ]);
    assert.match(stdout, new RegExp(`labels: ${escalated} from reviewers`), stdout);

    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    const problems = [];
    const fetched = [];
    page.on("pageerror", (err) => problems.push(err.message));
    page.on("console", (m) => {
      if (m.type() === "error" || m.type() === "warning") problems.push(m.text());
    });
    page.on("request", (r) => fetched.push(r.url()));
    const url = pathToFileURL(html).href;
    await page.goto(url, { waitUntil: "load", timeout: STEP_MS });

    const plots = await page.$$eval("svg", (svgs) =>
      svgs.map((s) => {
        const box = s.getBoundingClientRect();
        return { kind: s.getAttribute("class"), tool: s.dataset.tool, width: box.width, height: box.height };
      }),
    );
    const reliability = plots.filter((p) => p.kind === "reliability");
    const curves = plots.filter((p) => p.kind === "curve");
    assert.ok(reliability.length >= 2, `a reliability diagram for all tools and each tool: ${JSON.stringify(plots)}`);
    assert.equal(curves.length, reliability.length);
    assert.equal(reliability[0].tool, "all tools");
    for (const p of plots) assert.ok(p.width > 100 && p.height > 100, `plot ${p.kind} of ${p.tool} has a size: ${JSON.stringify(p)}`);

    // The marks themselves are drawn: bars with an area, lines with points inside their plot.
    const bars = await page.$$eval('svg.reliability[data-tool="all tools"] rect.bar', (rs) =>
      rs.map((r) => r.getBBox()).map((b) => ({ width: b.width, height: b.height })),
    );
    assert.ok(bars.length > 0, "the reliability diagram has bars");
    for (const b of bars) assert.ok(b.width > 0 && b.height > 0, JSON.stringify(b));
    const lines = await page.$$eval('svg.curve[data-tool="all tools"] polyline', (ls) =>
      ls.map((l) => ({ kind: l.getAttribute("class"), points: l.points.length, width: l.getBBox().width })),
    );
    for (const kind of ["precision", "lower", "coverage"]) {
      const line = lines.find((l) => l.kind === kind);
      assert.ok(line && line.points >= 2 && line.width > 0, `the ${kind} line is drawn: ${JSON.stringify(lines)}`);
    }
    assert.match(await page.textContent("pre.fragment"), /^lanes:$/m);

    await page.screenshot({ path: path.join(screenshotDir, "calibrate.png"), fullPage: true });
    console.log(`screenshot: ${path.join(screenshotDir, "calibrate.png")}`);
    assert.deepEqual(problems, [], "errors or warnings on the page");
    assert.deepEqual(fetched, [url], "the page fetched nothing but itself");
    await page.close();
  } catch (err) {
    anyFailed = true;
    throw err;
  }
});
