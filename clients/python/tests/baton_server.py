"""A real `baton serve` for the tests: the on-call example's registry and policy (escalations, a
command tool, agent tools) on 127.0.0.1, a temporary decision log, stopped, killed and restarted
on the same port and log.

The binary is $BATON_BIN (ctest passes $<TARGET_FILE:baton>), else build/adapters/baton.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import time
import urllib.error
import urllib.request
from typing import Any, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ONCALL = os.path.join(ROOT, "config", "examples", "oncall")


def baton_binary() -> str:
    path = os.environ.get("BATON_BIN") or os.path.join(ROOT, "build", "adapters", "baton")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"no baton binary at {path}: set BATON_BIN (ctest does) or build build/adapters/baton")
    return os.path.abspath(path)


# The on-call example's alerts, by what baton decides for them (keyword engine).
RESTART = "Alert: checkout service pods are crashing, out of memory, memory leaking; restart the pods."  # command tool
METRICS = "Alert: search service latency is high. Query the dashboards and metrics for its error rate and saturation."
ROLLBACK = "The latest deploy of the public API is a bad release that broke login: roll back the deploy."  # escalates
RESOLVED = "The incident is resolved and the alert has cleared."


class BatonServer:
    """One `baton serve`; `server` holds extra keys of the config's server section, `keys`
    (name, role, env, value) API keys."""

    def __init__(self, directory: str, name: str, server: Optional[Dict[str, Any]] = None,
                 keys: Optional[List[Tuple[str, str, str, str]]] = None) -> None:
        self.directory = directory
        self.name = name
        self.db = os.path.join(directory, f"{name}.db")
        self.config = os.path.join(directory, f"{name}.yaml")
        self.env = dict(os.environ)
        section = {"listen": "127.0.0.1:0", **(server or {})}
        lines = ["server: {" + ", ".join(f"{k}: {v}" for k, v in section.items()) + "}",
                 f"registry: {os.path.join(ONCALL, 'tools.yaml')}",
                 f"policy: {os.path.join(ONCALL, 'policy.yaml')}",
                 f"log: {{path: {self.db}, store_state: true}}"]
        if keys:
            lines.append("auth: {keys: [" + ", ".join(f"{{name: {n}, role: {r}, env: {e}}}" for n, r, e, _ in keys) + "]}")
            self.env.update({e: value for _, _, e, value in keys})
        with open(self.config, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.port = 0
        self.process: Optional[subprocess.Popen] = None
        self.log = open(os.path.join(directory, f"{name}.serve.log"), "a")

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/agent"

    def start(self) -> "BatonServer":
        """Starts it: on a free port the first time, on the same port (and log) after."""
        command = [baton_binary(), "serve", "--config", self.config]
        if self.port:
            command += ["--listen", f"127.0.0.1:{self.port}"]
        deadline = time.monotonic() + 10
        while True:
            self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=self.log, text=True, env=self.env)
            assert self.process.stdout is not None
            line = self.process.stdout.readline()
            found = re.search(r"listening on http://127\.0\.0\.1:(\d+)$", line.strip())
            if found:
                self.port = int(found.group(1))
                return self
            self.process.wait()
            self.process.stdout.close()
            if time.monotonic() > deadline:  # the port may take a moment to be free again
                self.log.flush()
                with open(self.log.name) as log:
                    said = log.read().strip().splitlines()[-3:]
                raise RuntimeError(f"{self.name}: baton serve did not start: {' / '.join(said)}")
            time.sleep(0.1)

    def stop(self) -> int:
        """SIGTERM: a graceful stop (close 1001 to the agents)."""
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout:
            self.process.stdout.close()
        return self.process.returncode

    def kill9(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)
        if self.process.stdout:
            self.process.stdout.close()

    def pause(self) -> None:
        """SIGSTOP, returning once it is stopped: frames sent now are taken by the kernel and
        never read."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with open(f"/proc/{self.process.pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "T":
                    return
            time.sleep(0.001)
        raise RuntimeError(f"{self.name}: not stopped by SIGSTOP")

    def close(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
        self.stop()
        self.log.close()

    def http(self, method: str, path: str, body: Any = None) -> Tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def resolve(self, escalation: str, outcome: str = "execute", reason: str = "the test, as a reviewer") -> Dict[str, Any]:
        """A reviewer resolves the escalation over HTTP; returns the resolution."""
        status, body = self.http("POST", f"/v1/escalations/{escalation}/resolve", {"outcome": outcome, "reason": reason})
        if status != 200:
            raise AssertionError(f"resolve {escalation}: {status} {body}")
        return body

    def sql(self, query: str) -> List[Dict[str, Any]]:
        """Rows of the decision log (read here with sqlite3: `baton log sql` would start the
        binary, a second each)."""
        with contextlib.closing(sqlite3.connect(self.db, timeout=10)) as db:
            db.row_factory = sqlite3.Row
            return [dict(row) for row in db.execute(query)]

    def state(self, decision: str) -> List[Dict[str, Any]]:
        """The history baton decided `decision` on (the log keeps it: store_state)."""
        rows = self.sql(f"SELECT state FROM decisions WHERE id = '{decision}'")
        return json.loads(rows[0]["state"]) if rows else []
