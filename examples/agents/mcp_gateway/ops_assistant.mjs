#!/usr/bin/env node
// An MCP client that uses baton as its MCP gateway (docs/mcp.md). It is what Claude Code, the
// OpenAI Agents SDK or an MCP adapter of LangGraph does with its MCP servers, written with the
// official TypeScript SDK: connect, list the tools, call them. baton stands between it and the
// official reference server (config/examples/mcp/tools.yaml) and decides every call: get-sum runs
// at once; get-env (high risk: it prints the server's environment) waits for a person in baton's
// inbox, the client hearing progress notifications meanwhile, and runs only once approved.
//
// From the repository root, after scripts/setup.sh:
//   node examples/agents/mcp_gateway/ops_assistant.mjs                        # approve get-env in the inbox yourself
//   node examples/agents/mcp_gateway/ops_assistant.mjs --resolve-as-reviewer  # or let the script play the reviewer
//
// The script starts `baton serve --config config/examples/mcp/baton.yaml` (127.0.0.1:8474, a
// fresh decision log var/mcp-gateway.db, the last run's kept as .prev) and stops it at the end.
import { spawn } from "node:child_process";
import { existsSync, renameSync, rmSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");

const { values: opts } = parseArgs({
  options: {
    baton: { type: "string", default: resolve(root, "build/adapters/baton") },
    listen: { type: "string" }, // HOST:PORT instead of the config's (port 0: any free port)
    db: { type: "string", default: resolve(root, "var/mcp-gateway.db") }, // the decision log
    "resolve-as-reviewer": { type: "boolean", default: false },
    help: { type: "boolean", short: "h" },
  },
});
if (opts.help) {
  console.log(
    "usage: node examples/agents/mcp_gateway/ops_assistant.mjs [--resolve-as-reviewer] [--listen HOST:PORT] [--db PATH] [--baton PATH]",
  );
  process.exit(0);
}

function fail(message) {
  console.error(`ops_assistant: ${message}`);
  process.exitCode = 1;
}

// baton serve, from the repository root (the registry names the reference server from there), on
// a fresh decision log (the last run's kept as PATH.prev): an escalation a past run left pending
// is not this run's.
function startBaton() {
  if (existsSync(opts.db)) renameSync(opts.db, `${opts.db}.prev`);
  for (const suffix of ["-wal", "-shm"]) rmSync(`${opts.db}${suffix}`, { force: true });
  const args = ["serve", "--config", "config/examples/mcp/baton.yaml", "--db", opts.db];
  if (opts.listen) args.push("--listen", opts.listen);
  const child = spawn(opts.baton, args, { cwd: root, stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.setEncoding("utf8").on("data", (c) => (stderr += c));
  return new Promise((ok, no) => {
    let out = "";
    const timer = setTimeout(() => no(new Error(`baton did not start:\n${stderr}`)), 30_000);
    child.stdout.setEncoding("utf8").on("data", (c) => {
      out += c;
      const m = /listening on (http:\/\/[^\s]+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        ok({ child, url: m[1] });
      }
    });
    child.on("exit", (code) => no(new Error(`baton exited (${code}):\n${stderr}`)));
  });
}

// The reviewer's side, for --resolve-as-reviewer: what a person does in the inbox (/inbox), through
// the API the inbox uses.
async function approveWhenPending(base, tool) {
  for (let i = 0; i < 200; i++) {
    const pending = await (await fetch(`${base}/v1/escalations?status=pending`)).json();
    const e = pending.escalations.find((x) => x.tool === tool);
    if (e) {
      console.log(`  [reviewer] approves ${e.id}: ${e.question}`);
      const res = await fetch(`${base}/v1/escalations/${e.id}/resolve`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ outcome: "execute", reason: "read-only, and this host has no secrets in its environment" }),
      });
      if (!res.ok) throw new Error(`resolve answered ${res.status}: ${await res.text()}`);
      return;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`no escalation of ${tool} came`);
}

function text(result) {
  return result.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");
}

const { child, url } = await startBaton();
const client = new Client({ name: "ops-assistant", version: "1.0.0" });
try {
  await client.connect(new StreamableHTTPClientTransport(new URL(`${url}/mcp`)));
  const { tools } = await client.listTools();
  console.log(`baton offers ${tools.length} tools: ${tools.map((t) => t.name).join(", ")}`);

  const sum = await client.callTool({ name: "everything.get-sum", arguments: { a: 19, b: 23 } });
  console.log(`everything.get-sum(19, 23) → ${text(sum)}  [decision ${sum._meta["baton/decision"]}]`);
  if (!/42/.test(text(sum))) fail("get-sum did not run");

  console.log("everything.get-env() → baton holds it for a person:");
  const reviewer = opts["resolve-as-reviewer"] ? approveWhenPending(url, "everything.get-env") : null;
  if (!reviewer) console.log(`  open ${url}/inbox and approve it (or deny it)`);
  const env = await client.callTool({ name: "everything.get-env", arguments: {} }, CallToolResultSchema, {
    onprogress: (p) => console.log(`  [progress] ${p.message}`),
    resetTimeoutOnProgress: true,
    timeout: 15 * 60_000,
  });
  await reviewer;
  if (env.isError) {
    console.log(`  → not run: ${text(env)}`);
    if (opts["resolve-as-reviewer"]) fail("the approved call did not run");
  } else {
    console.log(`  → ran after approval (escalation ${env._meta["baton/escalation"]}): ${text(env).length} characters of environment`);
  }
  console.log(`the decisions: ${opts.baton} log tail --db ${opts.db}`);
} catch (err) {
  fail(err.stack ?? String(err));
} finally {
  await client.close().catch(() => {});
  child.kill("SIGTERM");
}
