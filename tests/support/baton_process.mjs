// `baton serve` as a child process for the Node tests (tests/sdk, tests/browser): started on the
// port its config names (0: any), its address read from the line it prints, stopped with SIGTERM.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";

// node:test's `test`, each failure remembered in `failed`: stopChecked then prints the server's log.
export function trackedTests(test) {
  const tracker = {
    failed: false,
    test: (name, fn) =>
      test(name, async (t) => {
        try {
          await fn(t);
        } catch (err) {
          tracker.failed = true;
          throw err;
        }
      }),
  };
  return tracker;
}

export class baton_process {
  constructor(bin) {
    this.bin = bin;
    this.child = null;
    this.stderr = "";
  }

  // Resolves with the base URL ("http://127.0.0.1:PORT") once it listens; rejects when it exits
  // first or prints no address within `startupMs`.
  start(configPath, env, startupMs) {
    return new Promise((resolve, reject) => {
      const child = spawn(this.bin, ["serve", "--config", configPath], {
        env: { ...process.env, ...env },
        stdio: ["ignore", "pipe", "pipe"],
      });
      this.child = child;
      let stdout = "";
      let settled = false;
      const settle = (fn, value) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        fn(value);
      };
      const timer = setTimeout(
        () => settle(reject, new Error(`baton serve printed no address within ${startupMs} ms; stderr:\n${this.stderr}`)),
        startupMs,
      );
      child.stderr.setEncoding("utf8");
      child.stderr.on("data", (chunk) => {
        this.stderr += chunk;
      });
      child.stdout.setEncoding("utf8");
      child.stdout.on("data", (chunk) => {
        stdout += chunk;
        const m = /^baton: listening on (http:\/\/127\.0\.0\.1:(\d+))$/m.exec(stdout);
        if (m && Number(m[2]) > 0) settle(resolve, m[1]);
      });
      child.on("error", (err) => settle(reject, new Error(`cannot start ${this.bin}: ${err.message}`)));
      child.on("exit", (code, signal) =>
        settle(reject, new Error(`baton serve exited (${code ?? signal}) before listening; stderr:\n${this.stderr}`)),
      );
    });
  }

  // SIGTERM, then SIGKILL if it has not exited within `ms`. Resolves with {stopped, exit}:
  // whether SIGTERM was enough, and its exit code (or signal); exit is "not started" without one.
  async stop(ms) {
    const child = this.child;
    if (!child) return { stopped: true, exit: "not started" };
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
    const stopped = await exited(child, ms);
    if (!stopped) {
      child.kill("SIGKILL");
      await exited(child, ms);
    }
    return { stopped, exit: child.exitCode ?? child.signalCode };
  }

  // For a test file's `after`: stops it, prints its log lines when a test failed or it did not
  // stop cleanly, and asserts a graceful stop (exit 0) of a server that listened.
  async stopChecked(ms, { listened, anyFailed }) {
    const { stopped, exit } = await this.stop(ms);
    if (anyFailed || !stopped || (listened && exit !== 0)) {
      process.stderr.write(`--- baton serve stderr ---\n${this.stderr}\n`);
    }
    assert.ok(stopped, `baton serve did not stop within ${ms} ms of SIGTERM`);
    // A server that never listened has already failed `before`, with its status and log lines.
    if (listened) assert.equal(exit, 0, "baton serve stops gracefully on SIGTERM (exit status 0)");
  }
}

function exited(child, ms) {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms);
    child.once("exit", () => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}
