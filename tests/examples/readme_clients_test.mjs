// The README's "Use it from your framework" snippets, exactly as printed there, against a real
// `baton serve` on the README's own configuration (config/baton.yaml: keyword engine,
// config/tools.yaml, config/policy.yaml; its port and log moved to a temporary place): the
// TypeScript one with node, the Python one with /usr/bin/python3 (clients/python on PYTHONPATH,
// as the README allows), the LangGraph.js one with node while a reviewer resolves its escalation
// over HTTP. Each snippet's packages are the ones scripts/setup.sh installed: it runs in a
// temporary folder whose node_modules is the LangGraph example's (baton-client linked from
// clients/typescript, @langchain/langgraph as its lockfile pins it).
//
//   BATON_BIN=build/adapters/baton BATON_SOURCE_DIR=. node --test tests/examples/readme_clients_test.mjs
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import { baton_process } from "../support/baton_process.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const batonBin = process.env.BATON_BIN ?? process.argv[2];
const sourceDir = path.resolve(process.env.BATON_SOURCE_DIR ?? path.join(here, "..", ".."));
const STARTUP_MS = 20_000;
const RUN_MS = 30_000;

let server;
let baseURL;
let tmp;
let dbPath;
const snippets = new Map(); // language -> {file, code}

before(async () => {
  assert.ok(batonBin, "set BATON_BIN to the baton binary");
  const readme = await readFile(path.join(sourceDir, "README.md"), "utf8");
  for (const m of readme.matchAll(/^<!-- snippet: (\S+) (\S+) -->\n```\w+\n([\s\S]*?)^```$/gm)) {
    snippets.set(m[1], { file: m[2], code: m[3] });
  }
  assert.deepEqual([...snippets.keys()].sort(), ["langgraph", "python", "typescript"], "the README's three snippets");

  tmp = await mkdtemp(path.join(tmpdir(), "baton-readme-clients-"));
  await symlink(path.join(sourceDir, "examples", "agents", "langgraph", "node_modules"), path.join(tmp, "node_modules"));
  dbPath = path.join(tmp, "baton.db");
  // The README's configuration as it is, on another port and log.
  const shipped = await readFile(path.join(sourceDir, "config", "baton.yaml"), "utf8");
  const q = (s) => JSON.stringify(s);
  const config = shipped
    .replace(/^( {2}listen: ).*$/m, "$1127.0.0.1:0")
    .replace(/^registry: .*$/m, `registry: ${q(path.join(sourceDir, "config", "tools.yaml"))}`)
    .replace(/^policy: .*$/m, `policy: ${q(path.join(sourceDir, "config", "policy.yaml"))}`)
    .replace(/^( {2}path: )\.\.\/var\/baton\.db$/m, `$1${q(dbPath)}`);
  assert.notEqual(config, shipped);
  await writeFile(path.join(tmp, "baton.yaml"), config);
  server = new baton_process(batonBin);
  baseURL = await server.start(path.join(tmp, "baton.yaml"), {}, STARTUP_MS);
});

after(async () => {
  try {
    await server?.stopChecked(10_000, { listened: Boolean(baseURL), anyFailed: false });
  } finally {
    if (tmp) await rm(tmp, { recursive: true, force: true });
  }
});

// Runs a snippet as the README says; resolves with its stdout, rejects with its stderr.
function run(command, args, env) {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      cwd: tmp,
      env: { ...process.env, BATON_URL: `${baseURL.replace("http://", "ws://")}/v1/agent`, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    child.stdout.on("data", (c) => (out += c));
    child.stderr.on("data", (c) => (err += c));
    const timer = setTimeout(() => child.kill("SIGKILL"), RUN_MS);
    child.on("exit", (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve(out);
      else reject(new Error(`${command} ${args.join(" ")} exited ${code ?? signal}\nstdout:\n${out}\nstderr:\n${err}`));
    });
  });
}

async function write(language) {
  const { file, code } = snippets.get(language);
  const at = path.join(tmp, file);
  await writeFile(at, code);
  return at;
}

async function logRows(sql) {
  const out = await new Promise((resolve, reject) => {
    const child = spawn(batonBin, ["log", "sql", "--db", dbPath, sql], { stdio: ["ignore", "pipe", "pipe"] });
    let text = "";
    child.stdout.on("data", (c) => (text += c));
    child.on("exit", (code) => (code === 0 ? resolve(text) : reject(new Error(`baton log sql exited ${code}`))));
  });
  return out.trim().split("\n").filter(Boolean).map((l) => JSON.parse(l));
}

test("the TypeScript snippet decides a turn and reports the tool it ran", async () => {
  const out = await run(process.execPath, [await write("typescript")]);
  assert.match(out, /^execute search_docs \d\.\d\d lane:search_docs\n$/);
  const rows = await logRows("SELECT d.action, d.tool, t.ok FROM decisions d JOIN tool_runs t ON t.decision = d.id WHERE d.session = 'ticket-ts-1'");
  assert.deepEqual(rows, [{ action: "execute", tool: "search_docs", ok: 1 }]);
});

test("the Python snippet decides a turn and reports the tool it ran", async () => {
  const out = await run("/usr/bin/python3", [await write("python")], { PYTHONPATH: path.join(sourceDir, "clients", "python") });
  assert.match(out, /^execute search_docs \d\.\d\d lane:search_docs\n$/);
  const rows = await logRows("SELECT d.action, d.tool, t.ok FROM decisions d JOIN tool_runs t ON t.decision = d.id WHERE d.session = 'ticket-py-1'");
  assert.deepEqual(rows, [{ action: "execute", tool: "search_docs", ok: 1 }]);
});

test("the LangGraph snippet interrupts on the escalation and a person's resolution resumes it", async () => {
  const graph = run(process.execPath, [await write("langgraph")]);
  // The reviewer: the payment always goes to a person (config/policy.yaml); approve it.
  let pending = [];
  for (let i = 0; i < 200 && pending.length === 0; i++) {
    const res = await fetch(`${baseURL}/v1/escalations?status=pending`);
    pending = (await res.json()).escalations.filter((e) => e.session === "invoice-7");
    if (pending.length === 0) await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(pending.length, 1, "the graph's turn was escalated");
  assert.equal(pending[0].tool, "send_payment");
  const resolved = await fetch(`${baseURL}/v1/escalations/${pending[0].id}/resolve`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ outcome: "execute", reason: "invoice 7 is ours" }),
  });
  assert.equal(resolved.status, 200);
  const out = await graph;
  assert.equal(out, 'execute send_payment {"role":"tool","tool":"send_payment","ok":true,"output":{"done":"send_payment"}}\n');
  const rows = await logRows(
    "SELECT r.outcome, t.tool, (SELECT count(*) FROM deliveries v WHERE v.resolution = r.id) AS acks " +
      "FROM resolutions r JOIN escalations e ON e.id = r.escalation JOIN tool_runs t ON t.decision = e.decision WHERE e.session = 'invoice-7'",
  );
  assert.deepEqual(rows, [{ outcome: "execute", tool: "send_payment", acks: 1 }]);
});
