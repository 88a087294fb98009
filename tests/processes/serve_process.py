"""What the process tests (processes_test.py, shared_store_test.py) share: their checks, one
`baton serve` process on a free port, and reading an agent connection's frames."""

import asyncio
import json
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import websockets


failures = []  # what check() found wrong, in order


def check(condition, what):
    """Records (and prints) `what` when `condition` is false; the test goes on. Returns `condition`."""
    if not condition:
        failures.append(what)
        print(f"FAIL: {what}", file=sys.stderr)
    return condition


class serve_process:
    """`baton serve --config CONFIG`, started at once; `stderr` a file its log lines go to."""

    def __init__(self, binary, config, name, stderr, env=None):
        self.binary, self.config, self.name, self.stderr, self.env = binary, config, name, stderr, env
        self.start()

    def start(self):
        """Starts it (again) on a free port."""
        self.process = subprocess.Popen([self.binary, "serve", "--config", self.config], stdout=subprocess.PIPE,
                                        stderr=self.stderr, text=True, env=self.env)
        line = self.process.stdout.readline()
        port = re.search(r":(\d+)$", line.strip())
        if not port:
            raise RuntimeError(f"{self.name}: serve printed {line!r} (its log: {self.stderr.name})")
        self.port = int(port.group(1))

    @property
    def ws(self):
        return f"ws://127.0.0.1:{self.port}/v1/agent"

    def kill9(self):
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def http(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=15) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())


async def frames_until(ws, wanted, limit=10.0):
    """Reads frames until one of type `wanted`; None after `limit` seconds."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            frame = json.loads(await asyncio.wait_for(ws.recv(), deadline - time.monotonic()))
        except asyncio.TimeoutError:
            return None
        if frame.get("type") == wanted:
            return frame
    return None


async def resume(port, session, ack=False):
    """The resumed frame and the resolutions that follow it (acknowledged when `ack`: a resume
    after the acks is answered once they are written)."""
    async with websockets.connect(f"ws://127.0.0.1:{port}/v1/agent") as ws:
        await ws.send(json.dumps({"type": "resume", "id": 2, "session": session}))
        resumed = await frames_until(ws, "resumed")
        resolutions = [await frames_until(ws, "resolution") for _ in range(resumed["resolutions"])] if resumed else []
        if ack:
            for r in resolutions:
                await ws.send(json.dumps({"type": "ack", "resolution": r["resolution"]["id"]}))
            await ws.send(json.dumps({"type": "resume", "id": 3, "session": session}))
            await frames_until(ws, "resumed")
        return resumed, resolutions
