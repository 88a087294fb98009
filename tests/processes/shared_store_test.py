#!/usr/bin/python3
"""Several `baton serve` processes on one PostgreSQL (tests/support/pg_cluster.py starts a real
server in a temporary folder): an escalation raised on one instance is listed, resolved and
delivered through another; two instances resolving it at once get one resolution; a deadline
fires once with both running; kill -9 of the instance holding pending escalations and deadlines
leaves them to the other; a tool baton runs for a resolution made on one reaches the agent on the
other; a database restart under load (turns wait; past `log.retry_ms` they are
refused LOG_UNAVAILABLE and retried) loses and duplicates no decision; `baton log verify` holds
each instance's chains at the end.

Usage: shared_store_test.py BATON_BINARY
"""

import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

import websockets

from serve_process import check, failures, frames_until, resume, serve_process

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from pg_cluster import cluster  # noqa: E402

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
  - id: close_account
    description: Close the customer account for good
    executor:
      type: command
      argv: [/usr/bin/python3, -c, "import json, sys; json.load(sys.stdin); print(json.dumps({'closed': True}))"]
      timeout_ms: 5000
"""

# Refunds and questions to the user go to a person; a question has three seconds.
POLICY = """confidence: p_max
rules:
  always_escalate: [refund_payment, ask_user, close_account]
lanes:
  default: {execute: 0.0, fallback: 0.0}
on_engine_error: escalate
escalation:
  deadline_s: 3600
  tools:
    ask_user: {deadline_s: 3, on_deadline: deny}
"""

REFUND = "Refund the payment to the customer, it was charged twice"
QUESTION = "Ask the user a question about the order"
SEARCH = "Search the documentation for an answer about shipping"
CLOSE = "Close the customer account for good"


def server(directory, db, instance):
    """One `baton serve` on the shared database, writing as `instance`, its log lines in DIRECTORY/INSTANCE.log."""
    config = os.path.join(directory, f"{instance}.yaml")
    with open(config, "w") as f:
        f.write("server: {listen: 127.0.0.1:0}\n"
                f"registry: {os.path.join(directory, 'tools.yaml')}\n"
                f"policy: {os.path.join(directory, 'policy.yaml')}\n"
                f"log: {{url: '{db.url}', password: {{env: BATON_TEST_PG_PASSWORD}}, instance: {instance}, "
                "retry_ms: 3000}\n")
    s = serve_process(baton, config, instance, open(os.path.join(directory, f"{instance}.log"), "a"),
                      dict(os.environ, BATON_TEST_PG_PASSWORD=db.password))
    s.instance = instance
    return s


def log_sql(db, query):
    """`baton log sql` on the database: the rows as dicts."""
    out = subprocess.run([baton, "log", "sql", "--db", db.url, query], capture_output=True, text=True,
                         env=dict(os.environ, PGPASSWORD=db.password), timeout=30)
    if out.returncode != 0:
        raise RuntimeError(f"baton log sql: {out.stderr}")
    return [json.loads(line) for line in out.stdout.splitlines()]


async def decide(ws, session, text, frame_id=1):
    await ws.send(json.dumps({"type": "decide", "id": frame_id, "session": session,
                              "history": [{"role": "user", "content": text}]}))
    while True:
        frame = json.loads(await asyncio.wait_for(ws.recv(), 30))
        if (frame.get("type") == "decision" and frame.get("id") == frame_id) or \
                (frame.get("type") == "error" and frame.get("ref") == frame_id):
            return frame


async def cross_instance(a, b, db):
    # A reviewer watches B's /v1/review; the escalation is raised on A, the agent connected to A.
    reviewer = await websockets.connect(f"ws://127.0.0.1:{b.port}/v1/review")
    snapshot = await frames_until(reviewer, "snapshot")
    check(snapshot is not None, "B's review socket sends its snapshot")
    async with websockets.connect(a.ws) as agent:
        d = await decide(agent, "s1", REFUND)
        if not check(d and d.get("action") == "escalate", f"s1 escalates: {d}"):
            return
        esc = d["escalation"]
        live = await frames_until(reviewer, "escalation", 5)
        check(live and live["escalation"]["id"] == esc, f"B's reviewers hear of A's escalation: {live}")
        status, listed = b.http("GET", "/v1/escalations")
        check(status == 200 and esc in [e["id"] for e in listed["escalations"]], f"B lists A's escalation: {listed}")
        status, shown = b.http("GET", f"/v1/escalations/{esc}")
        check(status == 200 and shown.get("status") == "pending", f"B shows it pending: {shown}")
        # Resolved on B; A's agent hears of it (LISTEN/NOTIFY), without asking.
        started = time.monotonic()
        status, resolved = b.http("POST", f"/v1/escalations/{esc}/resolve", {"outcome": "deny", "reason": "no refund"})
        check(status == 200 and resolved.get("outcome") == "deny", f"B resolves it: {status} {resolved}")
        frame = await frames_until(agent, "resolution", 10)
        check(frame and frame["resolution"]["escalation"] == esc, f"A's agent gets B's resolution: {frame}")
        print(f"  resolved on B, on A's agent {time.monotonic() - started:.3f} s after the request")
        await agent.send(json.dumps({"type": "ack", "resolution": frame["resolution"]["id"]}))
        await agent.send(json.dumps({"type": "resume", "id": 5, "session": "s1"}))
        resumed = await frames_until(agent, "resumed")
        check(resumed and resumed["resolutions"] == 0 and resumed["pending"] == [], f"acknowledged on A: {resumed}")
        # Acknowledged on A: B does not send it again, and a second resolution is refused on
        # either, without the acknowledged resolution coming back to the agent.
        resumed, _ = await resume(b.port, "s1")
        check(resumed and resumed["resolutions"] == 0, f"B knows it was acknowledged on A: {resumed}")
        await agent.send(json.dumps({"type": "resume", "id": 6, "session": "s1"}))  # A's connection has it again
        await frames_until(agent, "resumed")
        for s in (a, b):
            status, again = s.http("POST", f"/v1/escalations/{esc}/resolve", {"outcome": "deny", "reason": "again"})
            check(status == 409 and again.get("code") == "ALREADY_RESOLVED",
                  f"{s.instance} refuses a second resolution: {status} {again}")
        extra = await frames_until(agent, "resolution", 2.5)
        check(extra is None, f"an acknowledged resolution is not sent again: {extra}")
        resolved = await frames_until(reviewer, "resolved", 1)
        check(resolved and resolved["escalation"]["id"] == esc, f"B's reviewers see it resolved: {resolved}")
    await reviewer.close()

    # A tool baton runs: resolved on B, run on B, its result reaches the agent on A.
    async with websockets.connect(a.ws) as agent:
        d = await decide(agent, "s2", CLOSE)
        if not check(d and d.get("action") == "escalate" and d.get("tool") == "close_account", f"s2 escalates: {d}"):
            return
        status, _ = b.http("POST", f"/v1/escalations/{d['escalation']}/resolve", {"outcome": "execute", "reason": "asked"})
        check(status == 200, f"B resolves s2: {status}")
        frame = await frames_until(agent, "resolution", 10)
        check(frame and frame["resolution"]["outcome"] == "execute", f"A's agent gets the execute: {frame}")
        started = time.monotonic()
        result = await frames_until(agent, "tool_result", 10)
        check(result and result.get("ok") is True and result.get("output") == {"closed": True},
              f"the run B made reaches the agent on A: {result}")
        print(f"  B's tool run reached the agent on A {time.monotonic() - started:.2f} s after the resolution")


async def concurrent_resolves(a, b, db):
    agent = await websockets.connect(a.ws)
    escalations = []
    for i in range(5):
        d = await decide(agent, f"race-{i}", REFUND, i + 1)
        escalations.append(d["escalation"])
    # Let B hear of them, then both resolve each at the same moment.
    time.sleep(1.5)
    wins = 0
    for esc in escalations:
        results = {}

        def resolve(s):
            results[s.instance] = s.http("POST", f"/v1/escalations/{esc}/resolve", {"outcome": "deny", "reason": s.instance})

        threads = [threading.Thread(target=resolve, args=(s,)) for s in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        statuses = sorted(r[0] for r in results.values())
        check(statuses == [200, 409], f"{esc}: one of two concurrent resolutions wins: {results}")
        loser = [r for r in results.values() if r[0] == 409]
        check(all(r[1].get("code") == "ALREADY_RESOLVED" for r in loser), f"loser: {loser}")
        wins += statuses == [200, 409]
        rows = log_sql(db, f"SELECT reason FROM resolutions WHERE escalation = '{esc}'")
        check(len(rows) == 1, f"{esc}: one resolution row: {rows}")
        # The agent on A gets the winner's resolution, whichever instance won.
        frame = await frames_until(agent, "resolution", 5)
        check(frame and frame["resolution"]["escalation"] == esc and rows and
              frame["resolution"]["reason"] == rows[0]["reason"], f"{esc}: the agent gets the winner's: {frame}")
    await agent.close()
    print(f"  {wins}/{len(escalations)} concurrent resolve pairs: one 200, one 409; the agent got each winner's")


async def deadline_once(a, b, db):
    async with websockets.connect(a.ws) as agent:
        d = await decide(agent, "q1", QUESTION)
        if not check(d and d.get("action") == "escalate", f"q1 escalates: {d}"):
            return
        esc = d["escalation"]
        frame = await frames_until(agent, "resolution", 10)
        check(frame and frame["resolution"]["by"] == "deadline", f"the deadline resolves q1: {frame}")
    time.sleep(1)
    rows = log_sql(db, f"SELECT \"by\", instance FROM resolutions WHERE escalation = '{esc}'")
    check(len(rows) == 1 and rows[0]["by"] == "deadline", f"q1: one deadline resolution with both running: {rows}")


async def instance_dies(a, b, db):
    async with websockets.connect(a.ws) as agent:
        refund = (await decide(agent, "k1", REFUND))["escalation"]
        question = (await decide(agent, "k2", QUESTION, 2))["escalation"]
    a.kill9()
    # B finishes both: a reviewer resolves one, the other's deadline fires there.
    status, _ = b.http("POST", f"/v1/escalations/{refund}/resolve", {"outcome": "execute", "reason": "ok"})
    check(status == 200, f"B resolves the dead A's escalation: {status}")
    # B fires the deadline of an escalation raised elsewhere 2 s after it (its own instance first).
    for _ in range(40):
        rows = log_sql(db, f"SELECT \"by\", instance FROM resolutions WHERE escalation = '{question}'")
        if rows:
            break
        time.sleep(0.25)
    check(len(rows) == 1 and rows[0]["by"] == "deadline" and rows[0]["instance"] == "b",
          f"the dead A's deadline fires on B: {rows}")
    # The agent comes back through B.
    for session in ("k1", "k2"):
        resumed, resolutions = await resume(b.port, session, ack=True)
        check(resumed and len(resolutions) == 1, f"{session}: resumed on B with its resolution: {resumed}")
        resumed, resolutions = await resume(b.port, session)
        check(resumed and resumed["resolutions"] == 0, f"{session}: acknowledged on B: {resumed}")
    # A comes back as itself: its chain goes on.
    a.start()


async def turns(s, session, until, refused, slowest):
    """Turns on `s` until the time `until` (at most 5000), each retried while the log is
    unavailable; the decision ids."""
    ids = []
    async with websockets.connect(s.ws) as agent:
        for i in range(5000):
            if time.monotonic() > until:
                break
            for attempt in range(100):
                started = time.monotonic()
                frame = await decide(agent, f"{session}", f"{SEARCH} {i}", 1000 * i + attempt)
                slowest.append(time.monotonic() - started)
                if frame["type"] == "decision":
                    ids.append(frame["decision"])
                    break
                refused.append(frame.get("code"))
                await asyncio.sleep(frame.get("retry_after_ms", 100) / 1000)
    return ids


async def database_restart(a, b, db, down_s):
    refused, latencies = [], []
    restart = threading.Timer(1.0, lambda: db.restart(down_s))
    restart.start()
    started = time.monotonic()
    # Load from before the database stops until after it is back.
    results = await asyncio.gather(*[turns(s, f"load-{s.instance}-{k}-{down_s}", started + down_s + 4, refused, latencies)
                                     for s in (a, b) for k in range(4)])
    restart.join()
    ids = [i for r in results for i in r]
    print(f"  {len(ids)} decisions in {time.monotonic() - started:.1f} s across a {down_s} s database restart; "
          f"the slowest turn {max(latencies):.2f} s; refused and retried: {len(refused)} ({sorted(set(refused))})")
    check(max(latencies) > 1.0, f"turns waited for the database: the slowest took {max(latencies):.2f} s")
    # Down for longer than log.retry_ms (3 s): turns are refused, with the reason, and retried. (A
    # shorter outage can outlast retry_ms too on a busy machine, where stopping and starting the
    # server takes its own seconds: refusals there are allowed, not required.)
    if down_s > 3.5:
        check(refused, f"refused past retry_ms: {len(refused)} refusals, {down_s} s down")
    check(len(ids) > 100 and len(set(ids)) == len(ids), f"every turn decided once: {len(ids)} ids, {len(set(ids))} distinct")
    check(set(refused) <= {"LOG_UNAVAILABLE", "LOG_WRITE_FAILED"}, f"refusals say why: {set(refused)}")
    rows = log_sql(db, f"SELECT id FROM decisions WHERE session LIKE 'load-%-{down_s}'")
    logged = [r["id"] for r in rows]
    check(sorted(logged) == sorted(ids), f"the log holds exactly the decisions the agents got: {len(logged)} rows")


def auditor_check(db):
    """adapters/log/README.md's psycopg2 check of the chains, without baton, as printed there."""
    with open(os.path.join(ROOT, "adapters", "log", "README.md")) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    snippet = [b for b in blocks if "psycopg2" in b]
    if not check(len(snippet) == 1, "the README has one psycopg2 block"):
        return
    out = subprocess.run([sys.executable, "-c", snippet[0]], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, BATON_LOG_URL=db.url, PGPASSWORD=db.password))
    check(out.returncode == 0, f"the auditor's psycopg2 check holds: {out.stderr[-2000:]}")


def main():
    with tempfile.TemporaryDirectory() as directory:
        db = cluster(os.path.join(directory, "pg")).start()
        servers = []
        try:
            with open(os.path.join(directory, "tools.yaml"), "w") as f:
                f.write(REGISTRY)
            with open(os.path.join(directory, "policy.yaml"), "w") as f:
                f.write(POLICY)
            a = server(directory, db, "a")
            servers.append(a)
            b = server(directory, db, "b")
            servers.append(b)
            for name, scenario in (("cross-instance resolve", cross_instance),
                                   ("concurrent resolves", concurrent_resolves),
                                   ("a deadline fires once", deadline_once),
                                   ("kill -9 of an instance", instance_dies),
                                   ("database restart under load", lambda *s: database_restart(*s, 2.0)),
                                   ("database down past retry_ms", lambda *s: database_restart(*s, 4.5))):
                print(f"{name}:", flush=True)
                asyncio.run(scenario(a, b, db))
            for s in servers:
                check(s.stop() == 0, f"{s.instance} stops cleanly")
            out = subprocess.run([baton, "log", "verify", "--db", db.url], capture_output=True, text=True,
                                 env=dict(os.environ, PGPASSWORD=db.password))
            print(out.stdout, end="")
            check(out.returncode == 0 and "decisions of a:" in out.stdout and "decisions of b:" in out.stdout,
                  f"verify holds both instances' chains: {out.stdout} {out.stderr}")
            auditor_check(db)
        finally:
            for s in servers:
                s.stop()
            db.stop()
            if failures:
                for name in sorted(os.listdir(directory)):
                    if name.endswith(".log"):
                        with open(os.path.join(directory, name)) as f:
                            print(f"--- {name}\n{f.read()[-4000:]}", file=sys.stderr)
    if failures:
        print(f"{len(failures)} failure(s)", file=sys.stderr)
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
