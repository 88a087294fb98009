#!/usr/bin/python3
"""End to end with real processes: a front `baton serve` (keyword engine) whose fallback engine is a
second `baton serve` answering POST /v1/systemone (the "larger model"), agents over WebSocket,
reviewers over HTTP; a front whose fallback is a misbehaving server of the same wire (garbage,
slow); then kill -9 of the front with escalations pending and a resolution not yet
delivered, and a restart on the same log; last, SIGHUP's reload of the registry and policy (one
applied, one refused) while the server goes on.

Usage: processes_test.py BATON_BINARY
"""

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import websockets

from serve_process import check, failures, frames_until, resume, serve_process

baton = os.path.abspath(sys.argv[1])

REGISTRY = """tools:
  - id: refund_payment
    description: Refund a payment to the customer
    executor: {type: agent}
  - id: search_docs
    description: Search the documentation for an answer
    executor: {type: agent}
  - id: ask_user
    description: Ask the user a question
    executor: {type: agent}
  - id: close_ticket
    description: Close the support ticket
    executor: {type: agent}
"""

# The first pass always falls back (no probability is 1); the larger model's answers execute a
# refund and escalate anything else. ask_user's escalations have two seconds.
POLICY = """confidence: p_max
lanes:
  default: {execute: 1.0, fallback: 0.0}
fallback_lanes:
  default: {execute: 1.0, fallback: 1.0}
  tools:
    refund_payment: {execute: 0.0, fallback: 0.0}
on_engine_error: escalate
escalation:
  deadline_s: 3600
  tools:
    ask_user: {deadline_s: 2}
"""


def server(directory, config_text, name):
    """One `baton serve` on `config_text`, its log lines in DIRECTORY/NAME.log."""
    config = os.path.join(directory, f"{name}.yaml")
    with open(config, "w") as f:
        f.write(config_text)
    return serve_process(baton, config, name, open(os.path.join(directory, f"{name}.log"), "a"))


async def decide(port, session, text):
    async with websockets.connect(f"ws://127.0.0.1:{port}/v1/agent") as ws:
        await ws.send(json.dumps({"type": "decide", "id": 1, "session": session,
                                  "history": [{"role": "user", "content": text}]}))
        return await frames_until(ws, "decision")


class misbehaving(BaseHTTPRequestHandler):
    """A SystemOne server gone wrong: `garbage` answers 200 with what is not an answer, `slow`
    answers after 3 s (past the front's fallback timeout)."""

    mode = "garbage"

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if misbehaving.mode == "slow":
            time.sleep(3)
        body = json.dumps({"model": "big-1", "answers": {"tool": {"type": "choice", "choice": "nonsense"}}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def db_rows(db, query):
    out = subprocess.run([baton, "log", "sql", "--db", db, query], capture_output=True, text=True, timeout=30)
    return [json.loads(l) for l in out.stdout.splitlines()]


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in (("tools.yaml", REGISTRY), ("policy.yaml", POLICY)):
            with open(os.path.join(tmp, name), "w") as f:
                f.write(text)
        back_db, front_db = os.path.join(tmp, "back.db"), os.path.join(tmp, "front.db")
        files = f"registry: {tmp}/tools.yaml\npolicy: {tmp}/policy.yaml\n"
        back = server(tmp, f"server: {{listen: 127.0.0.1:0}}\n{files}log: {{path: {back_db}}}\n", "back")
        front_config = (
            f"server: {{listen: 127.0.0.1:0}}\n{files}log: {{path: {front_db}}}\n"
            f"routing: {{fallback: {{name: systemone, url: 'http://127.0.0.1:{back.port}', timeout_ms: 3000, "
            "retries: 0}}\n"
        )
        front = server(tmp, front_config, "front")
        try:
            run(front, back, front_db, back_db)
        finally:
            front.stop()
            back.stop()
        faults(tmp, files)
        sighup(tmp)


def faults(tmp, files):
    """A fallback that answers garbage or too late fails closed, with the reason logged."""
    wrong = ThreadingHTTPServer(("127.0.0.1", 0), misbehaving)
    threading.Thread(target=wrong.serve_forever, daemon=True).start()
    db = os.path.join(tmp, "faults.db")
    front = server(tmp, f"server: {{listen: 127.0.0.1:0}}\n{files}log: {{path: {db}}}\n"
                        f"routing: {{fallback: {{name: systemone, url: 'http://127.0.0.1:{wrong.server_address[1]}', "
                        "timeout_ms: 1000, retries: 0}}\n", "faults")
    try:
        for mode, code in (("garbage", "BAD_UPSTREAM_RESPONSE"), ("slow", "FALLBACK_TIMEOUT")):
            misbehaving.mode = mode
            d = asyncio.run(decide(front.port, f"s-{mode}", "please refund the payment"))
            check(d and d["action"] == "escalate" and d["lane"] == "fallback:on_engine_error"
                  and d.get("error_code") == code, f"a fallback answering {mode}: {d}")
            if d:
                rows = db_rows(db, f"SELECT error_code, fallback_of FROM decisions WHERE id = '{d['decision']}'")
                check(rows and rows[0]["error_code"] == code and rows[0]["fallback_of"], f"{mode} logged: {rows}")
    finally:
        check(front.stop() == 0, "graceful stop of the faults front")
        wrong.shutdown()


def wait_health(srv, done, limit=10.0):
    """GET /health until `done(health)` holds; the last answer either way."""
    deadline = time.monotonic() + limit
    while True:
        _, health = srv.http("GET", "/health")
        if done(health) or time.monotonic() > deadline:
            return health
        time.sleep(0.05)


def sighup(tmp):
    """SIGHUP reloads the registry and the policy and the server goes on; a bad file changes nothing."""
    home = os.path.join(tmp, "sighup")
    os.makedirs(home)
    registry, policy, db = (os.path.join(home, n) for n in ("tools.yaml", "policy.yaml", "sighup.db"))
    for path, text in ((registry, REGISTRY), (policy, POLICY)):
        with open(path, "w") as f:
            f.write(text)
    srv = server(home, f"server: {{listen: 127.0.0.1:0}}\nregistry: {registry}\npolicy: {policy}\nlog: {{path: {db}}}\n",
                 "sighup")
    err = ""
    try:
        _, before = srv.http("GET", "/health")
        # No probability is 1 and no fallback engine serves: the first pass's fallback is the answer.
        d = asyncio.run(decide(srv.port, "h-1", "please refund the payment"))
        check(d and d["action"] == "fallback", f"before SIGHUP: {d}")
        with open(policy, "w") as f:
            f.write(POLICY.replace("default: {execute: 1.0, fallback: 0.0}", "default: {execute: 0.0, fallback: 0.0}", 1))
        srv.process.send_signal(signal.SIGHUP)
        after = wait_health(srv, lambda h: h.get("policy_hash") != before["policy_hash"])
        check(srv.process.poll() is None, "SIGHUP does not stop the server")
        check(after.get("reloads") == 1 and after["policy_hash"] != before["policy_hash"]
              and after["registry_hash"] == before["registry_hash"], f"/health after SIGHUP: {before} {after}")
        d = asyncio.run(decide(srv.port, "h-2", "please refund the payment"))
        check(d and d["action"] == "execute", f"after SIGHUP, the new lanes: {d}")

        with open(policy, "w") as f:
            f.write("confidence: p_max\nlanes:\n  default: {execute: 2.0, fallback: 0.0}\non_engine_error: escalate\n")
        srv.process.send_signal(signal.SIGHUP)
        refused = wait_health(srv, lambda h: h.get("reloads_failed") == 1)
        check(srv.process.poll() is None and refused.get("reloads_failed") == 1
              and refused["policy_hash"] == after["policy_hash"], f"a bad policy changes nothing: {refused}")
        d = asyncio.run(decide(srv.port, "h-3", "please refund the payment"))
        check(d and d["action"] == "execute", f"after a refused reload, still the reloaded lanes: {d}")
    finally:
        check(srv.stop() == 0, "graceful stop after SIGHUPs")
        srv.stderr.flush()
        with open(srv.stderr.name) as f:
            err = f.read()
    check(f"{policy}:3:" in err, f"the refused reload says where: {err[-2000:]}")
    rows = db_rows(db, "SELECT who, outcome, reason = '' AS no_reason FROM reloads ORDER BY seq")
    check(rows == [{"who": "signal", "outcome": "ok", "no_reason": 1}, {"who": "signal", "outcome": "failed", "no_reason": 0}],
          f"reload rows: {rows}")
    verify = subprocess.run([baton, "log", "verify", "--db", db], capture_output=True, text=True, timeout=30)
    check(verify.returncode == 0 and verify.stdout.strip().endswith("2 reloads"), f"log verify: {verify.stdout}{verify.stderr}")


def run(front, back, front_db, back_db):
    t0 = time.monotonic()
    # Execute after fallback: the first pass and the larger model's, linked.
    d = asyncio.run(decide(front.port, "s-refund", "please refund the payment, I was charged twice"))
    check(d and d["action"] == "execute" and d["tool"] == "refund_payment", f"execute after fallback: {d}")
    check(d and d["lane"].startswith("fallback:") and d.get("fallback_of"), f"the fallback's lane and link: {d}")
    if d:
        rows = db_rows(front_db, f"SELECT id, action, engine FROM decisions WHERE id = '{d['fallback_of']}'")
        check(rows and rows[0]["action"] == "fallback" and rows[0]["engine"] == "keyword", f"first pass row: {rows}")
    check(db_rows(back_db, "SELECT count(*) AS n FROM decisions")[0]["n"] >= 1,
          "the larger model logged the question it answered")

    # Escalate after fallback: a person decides.
    e1 = asyncio.run(decide(front.port, "s-docs", "search the documentation for an answer about limits"))
    check(e1 and e1["action"] == "escalate" and e1["lane"].startswith("fallback:") and e1.get("escalation"),
          f"escalate after fallback: {e1}")
    e2 = asyncio.run(decide(front.port, "s-ask", "ask the user a question about it"))
    check(e2 and e2["action"] == "escalate" and e2["tool"] == "ask_user", f"an ask_user escalation: {e2}")
    e3 = asyncio.run(decide(front.port, "s-docs-2", "search the documentation for an answer about quotas"))
    check(e3 and e3["action"] == "escalate", f"a third escalation: {e3}")
    if not (e1 and e2 and e3 and e1.get("escalation") and e2.get("escalation") and e3.get("escalation")):
        return
    # Resolved while its agent is away: the resolution waits.
    status, r1 = front.http("POST", f"/v1/escalations/{e1['escalation']}/resolve",
                            {"outcome": "execute", "reason": "the docs cover it"})
    check(status == 200 and r1["reviewer"] == "anonymous", f"resolve: {status} {r1}")

    # The fallback engine down: fail closed (escalate), with the reason logged.
    back.stop()
    down = asyncio.run(decide(front.port, "s-down", "please refund the payment"))
    check(down and down["action"] == "escalate" and down["lane"] == "fallback:on_engine_error"
          and down.get("error_code") == "UPSTREAM_UNREACHABLE", f"fallback down: {down}")

    # kill -9 with three escalations pending (one due in 2 s) and one resolution undelivered.
    front.kill9()
    time.sleep(2.5)
    restarted_ms = int(time.time() * 1000)
    front.start()
    status, pending = front.http("GET", "/v1/escalations?status=pending")
    ids = {e["id"] for e in pending.get("escalations", [])}
    check(ids == {e3["escalation"], down["escalation"]}, f"pending after the restart: {ids}")
    status, late = front.http("GET", f"/v1/escalations/{e2['escalation']}")
    check(late.get("status") == "resolved" and late["resolution"]["by"] == "deadline"
          and late["resolution"]["outcome"] == "deny" and late["resolution"]["created_ms"] >= restarted_ms,
          f"the deadline passed while down, resolved at start-up: {late}")

    resumed, got = asyncio.run(resume(front.port, "s-docs", ack=True))
    check(resumed and resumed["resolutions"] == 1 and got and got[0]["resolution"]["id"] == r1["id"],
          f"the undelivered resolution survived: {resumed} {got}")
    resumed, got = asyncio.run(resume(front.port, "s-docs"))
    check(resumed and resumed["resolutions"] == 0, f"acknowledged: not sent again: {resumed}")
    resumed, got = asyncio.run(resume(front.port, "s-ask"))
    check(resumed and resumed["resolutions"] == 1 and got[0]["resolution"]["by"] == "deadline",
          f"the deadline's resolution reaches its session: {got}")

    # Exactly once, across the restart too.
    status, body = front.http("POST", f"/v1/escalations/{e3['escalation']}/resolve",
                              {"outcome": "deny", "reason": "not now"})
    check(status == 200, f"resolve after the restart: {status} {body}")
    status, body = front.http("POST", f"/v1/escalations/{e3['escalation']}/resolve",
                              {"outcome": "deny", "reason": "again"})
    check(status == 409 and body["code"] == "ALREADY_RESOLVED", f"second resolve: {status} {body}")
    status, body = front.http("POST", f"/v1/escalations/{e1['escalation']}/resolve",
                              {"outcome": "deny", "reason": "again"})
    check(status == 409, f"resolved before the kill: {status} {body}")

    check(front.stop() == 0, "graceful stop after the restart")
    verify = subprocess.run([baton, "log", "verify", "--db", front_db], capture_output=True, text=True, timeout=30)
    check(verify.returncode == 0, f"log verify: {verify.stdout}{verify.stderr}")
    counts = db_rows(front_db, "SELECT (SELECT count(*) FROM escalations) AS e, (SELECT count(*) FROM resolutions) AS r, "
                               "(SELECT count(*) FROM deliveries) AS d")
    check(counts == [{"e": 4, "r": 3, "d": 1}], f"rows: {counts}")
    print(f"processes: {time.monotonic() - t0:.2f} s; {verify.stdout.strip()}")


if __name__ == "__main__":
    main()
    if failures:
        print(f"{len(failures)} failure(s)", file=sys.stderr)
        sys.exit(1)
    print("ok")
