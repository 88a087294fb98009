#!/usr/bin/python3
"""End to end: each example agent as the README runs it (the interpreter the README names; the
script starts its own `baton serve` on its decision log and stops it), then the log's hash chain
and rows: the support example, the on-call example's round trip through a reviewer (escalate →
resolve → resolution → ack → the agent goes on), a person resolving in the inbox's place while the
agent waits, and a second run on the same --db, which starts on a fresh log.

Usage: examples_test.py BATON_BINARY SOURCE_DIR
"""

import json
import os
import queue
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

baton, source = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
agents = os.path.join(source, "examples", "agents")
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print(f"FAIL: {what}", file=sys.stderr)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The interpreter is the one the README's commands use, and the scripts' shebang names it too:
# python3 on PATH may be another one (a pyenv shim) without the websockets module.
commands = []
for readme in ("README.md", "examples/agents/README.md"):
    with open(os.path.join(source, readme)) as f:
        commands += re.findall(r"^\$ (\S+) examples/agents/(\w+\.py)", f.read(), re.M)
interpreters = {interpreter for interpreter, _ in commands}
check(len(interpreters) == 1, f"the README runs the examples with {interpreters or 'nothing'}")
python = interpreters.pop() if len(interpreters) == 1 else "/usr/bin/python3"
check(os.path.isabs(python), f"the README runs the examples with {python}, not an absolute path")
for script in ("oncall_incident.py", "support_triage.py"):
    with open(os.path.join(agents, script)) as f:
        shebang = f.readline().strip()
    check(shebang == f"#!{python}", f"{script} starts with {shebang!r}, not #!{python}")
    check(os.access(os.path.join(agents, script), os.X_OK), f"{script} is not executable")

# Each example has its own port, none of them scripts/run.sh's.
ports = {}
for config in ("config/baton.yaml", "config/examples/support/baton.yaml", "config/examples/oncall/baton.yaml"):
    with open(os.path.join(source, config)) as f:
        ports[config] = re.search(r"listen: \S+:(\d+)", f.read()).group(1)
check(len(set(ports.values())) == 3, f"the configs share a port: {ports}")


def write_config(tmp, example, registry_rewrite=None, keys=None):
    """A config like the example's, on any free port, with a rewritten registry or API keys."""
    folder = os.path.join(source, "config", "examples", example)
    registry = os.path.join(folder, "tools.yaml")
    if registry_rewrite:
        with open(registry) as f:
            text = registry_rewrite(f.read())
        registry = os.path.join(tmp, "tools.yaml")
        with open(registry, "w") as f:
            f.write(text)
    config = os.path.join(tmp, "baton.yaml")
    with open(config, "w") as f:
        f.write(f"server: {{listen: 127.0.0.1:0}}\nregistry: {registry}\npolicy: {os.path.join(folder, 'policy.yaml')}\n")
        if keys:
            f.write("auth: {keys: [" + ", ".join(f"{{name: {n}, role: {r}, env: {e}}}" for n, r, e in keys) + "]}\n")
    return config


def command(script, db, config=None, args=()):
    line = [python, os.path.join(agents, script), "--baton", baton, "--listen", "127.0.0.1:0", "--db", db, *args]
    return line + (["--config", config] if config else [])


def run(name, line, expected, env=None):
    t0 = time.monotonic()
    agent = subprocess.run(line, capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})
    check(agent.returncode == 0, f"{name}: the agent exited {agent.returncode}: {agent.stderr}")
    for pattern in expected:
        check(re.search(pattern, agent.stdout, re.M), f"{name}: no line matches {pattern!r} in\n{agent.stdout}")
    print(f"{name}: {time.monotonic() - t0:.2f} s, baton started and stopped included")
    return agent.stdout


def sql(db, query):
    r = subprocess.run([baton, "log", "sql", "--db", db, query], capture_output=True, text=True)
    check(r.returncode == 0, f"log sql {query}: {r.stderr}")
    return [json.loads(line) for line in r.stdout.splitlines()]


def verify(name, db, turns):
    """The chain holds and every turn the agent printed is one row; returns verify's line."""
    r = subprocess.run([baton, "log", "verify", "--db", db], capture_output=True, text=True)
    check(r.returncode == 0, f"{name}: log verify exited {r.returncode}: {r.stdout}{r.stderr}")
    n = sql(db, "SELECT count(*) AS n FROM decisions")
    check(n == [{"n": turns}], f"{name}: {n} rows for {turns} turns")
    return r.stdout.strip()


def turns(stdout):
    return len(re.findall(r" turn \d+: ", stdout))


with tempfile.TemporaryDirectory() as tmp:
    # The support example (its password service on a free port, so the registry is rewritten).
    service_port = free_port()
    os.mkdir(os.path.join(tmp, "support"))
    config = write_config(os.path.join(tmp, "support"), "support",
                          registry_rewrite=lambda text: text.replace("127.0.0.1:8471", f"127.0.0.1:{service_port}"))
    db = os.path.join(tmp, "support", "support.db")
    out = run("support", command("support_triage.py", db, config, ("--service-port", str(service_port))), [
        r"^ticket-101 turn 1: execute +reset_password\(\)",
        r"^ticket-101   baton ran reset_password: ok=True",
        r"^ticket-102 turn 1: escalate refund_payment\(.*\) +\[rule:always_escalate",
        r"^ticket-103   ran search_help_center here: ok=True",
        r"^ticket-104 turn 1: execute +update_shipping_address\(address=12 Harbour Street\)",
        r"^ticket-105 turn 1: fallback search_help_center",
        r"^ticket-106: ends with escalate",
    ])
    verify("support", db, turns(out))

    # A week of tickets with a simulated reviewer (the log docs/policy-workflow.md works on): every
    # ticket is one decision, every escalation the reviewer answered has its resolution.
    db = os.path.join(tmp, "support", "week.db")
    out = run("support week", command("support_week.py", db, config, ("--service-port", str(service_port),
                                                                      "--tickets", "60")),
              [r"^60 tickets: escalate \d+, execute \d+"])
    counts = dict(re.findall(r"(escalate|left pending|resolved deny|resolved execute) (\d+)", out))
    verify("support week", db, 60)
    escalated = sql(db, "SELECT count(*) AS n FROM escalations")[0]["n"]
    resolved = sql(db, "SELECT count(*) AS n FROM resolutions WHERE by = 'reviewer'")[0]["n"]
    check(escalated == int(counts.get("escalate", -1)), f"support week: {escalated} escalations for {counts}")
    check(resolved == int(counts.get("resolved deny", 0)) + int(counts.get("resolved execute", 0)),
          f"support week: {resolved} resolutions for {counts}")
    check(escalated - resolved == int(counts.get("left pending", 0)), f"support week: pending rows for {counts}")

    # The on-call example with API keys (the agent's and the reviewer's), the script as reviewer:
    # each escalation is resolved over the reviewer API, the agent gets the resolution, acks it,
    # runs what the reviewer chose and goes on with the alert.
    os.mkdir(os.path.join(tmp, "keys"))
    config = write_config(os.path.join(tmp, "keys"), "oncall", keys=[
        ("example-agent", "agent", "BATON_EXAMPLE_AGENT_KEY"), ("example-reviewer", "reviewer", "BATON_EXAMPLE_REVIEWER_KEY")])
    agent_key, reviewer_key = "oncall-example-key-0123456789", "oncall-reviewer-key-0123456789"
    db = os.path.join(tmp, "keys", "oncall.db")
    out = run("oncall round trip", command("oncall_incident.py", db, config, ("--resolve-as-reviewer",)), [
        r"^alert-checkout-oom   baton ran restart_service: ok=True output=\{'restarted': 'checkout'",
        r"^alert-search-latency   ran query_metrics here",
        r"^alert-api-release turn 1: escalate rollback_deploy\(\) +\[rule:max_risk",
        r"^alert-api-release   resolution v-\S+: execute rollback_deploy\(\) by example-reviewer \(reviewer\): "
        r"\"the release broke login: roll it back\"; acknowledged, 0 left for this alert$",
        r"^alert-api-release   ran rollback_deploy here: ok=True",
        r"^alert-api-release turn 2: ",  # it goes on with the alert's next message
        r"^alert-api-release   resolution v-\S+: execute finish\(\) by example-reviewer",
        r"^alert-api-release: ends with finished by a person$",
        r"^alert-api-outage turn 1: escalate silence_alert\(\) .*rule:escalate_when:severity",
        r"^alert-api-outage   resolution v-\S+: execute page_oncall\(\) by example-reviewer",
        r"^alert-api-outage   ran page_oncall here: ok=True",
        r"^alert-api-errors turn 1: fallback restart_service\(service=api\)",
        r"^alert-search-index   resolution v-\S+: deny by example-reviewer \(reviewer\)",
        r"^alert-search-index: ends with denied by a person$",
        r"known_issue=0\.5",
        r"^0 escalations wait for a person",
    ], env={"BATON_API_KEY": agent_key, "BATON_EXAMPLE_AGENT_KEY": agent_key,
            "BATON_REVIEWER_KEY": reviewer_key, "BATON_EXAMPLE_REVIEWER_KEY": reviewer_key})
    line = verify("oncall round trip", db, turns(out))
    check(line.endswith("4 escalations, 4 resolutions, 4 deliveries"), f"oncall round trip: log verify says {line}")
    rows = sql(db, "SELECT e.session, r.outcome, r.tool, r.reviewer, d.resolution IS NOT NULL AS delivered "
                   "FROM escalations e JOIN resolutions r ON r.escalation = e.id "
                   "LEFT JOIN deliveries d ON d.resolution = r.id ORDER BY e.session, r.seq")
    check(rows == [
        {"session": "example-agent/alert-api-outage", "outcome": "execute", "tool": "page_oncall",
         "reviewer": "example-reviewer", "delivered": 1},
        {"session": "example-agent/alert-api-release", "outcome": "execute", "tool": "rollback_deploy",
         "reviewer": "example-reviewer", "delivered": 1},
        {"session": "example-agent/alert-api-release", "outcome": "execute", "tool": "finish",
         "reviewer": "example-reviewer", "delivered": 1},
        {"session": "example-agent/alert-search-index", "outcome": "deny", "tool": "", "reviewer": "example-reviewer",
         "delivered": 1},
    ], f"oncall round trip: resolutions and deliveries {rows}")
    # The tools the reviewer approved ran as tool runs of the escalated decisions.
    runs = sql(db, "SELECT t.tool, t.ok FROM tool_runs t JOIN escalations e ON e.decision = t.decision ORDER BY t.tool")
    check(runs == [{"tool": "page_oncall", "ok": 1}, {"tool": "rollback_deploy", "ok": 1}], f"oncall round trip: runs {runs}")

    # The shipped config (no keys), twice on one --db: the second run starts on a fresh log, so its
    # counts are the first run's and the first run's pending escalations do not return.
    db = os.path.join(tmp, "again", "oncall.db")
    first = run("oncall first run", command("oncall_incident.py", db, args=("--wait", "0")), [
        r"^alert-api-release: ends with escalate$", r"^3 escalations wait for a person"])
    first_line = verify("oncall first run", db, turns(first))
    check(first_line.endswith("3 escalations, 0 resolutions, 0 deliveries"), f"oncall first run: {first_line}")

    # The second run waits for a person, whom this test plays over HTTP when the agent says so.
    agent = subprocess.Popen(command("oncall_incident.py", db, args=("--wait", "60")), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    said = queue.Queue()

    def read_stderr():
        for line in agent.stderr:
            said.put(line)
        said.put(None)

    threading.Thread(target=read_stderr, daemon=True).start()
    resolved, told, deadline = [], [], time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            line = said.get(timeout=1)
        except queue.Empty:
            continue
        if line is None:
            break
        told.append(line)
        waiting = re.search(r"escalated \((e-\S+)\); resolve it at (\S+)/inbox", line)
        if waiting:
            escalation, base = waiting.groups()
            body = json.dumps({"outcome": "deny", "reason": "the test, as a person"}).encode()
            request = urllib.request.Request(f"{base}/v1/escalations/{escalation}/resolve", body,
                                             {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=30) as r:
                resolved.append(json.load(r)["id"])
    try:
        second = agent.stdout.read()
        code = agent.wait(timeout=30)
    except subprocess.TimeoutExpired:
        agent.kill()
        second, code = "", "killed"
    check(code == 0, f"oncall second run: the agent exited {code}: {''.join(told)}")
    check(len(resolved) == 3, f"oncall second run: the agent waited for {len(resolved)} escalations: {''.join(told)}")
    for pattern in (r"^alert-api-release   resolution v-\S+: deny by anonymous \(reviewer\): \"the test, as a person\"; "
                    r"acknowledged", r"^alert-api-release: ends with denied by a person$", r"^0 escalations wait for a person",
                    r"decision log \S+oncall\.db \(fresh; the last run's is \S+oncall\.db\.prev\)"):
        check(re.search(pattern, second, re.M), f"oncall second run: no line matches {pattern!r} in\n{second}")
    second_line = verify("oncall second run", db, turns(second))
    check(second_line.endswith("3 escalations, 3 resolutions, 3 deliveries"), f"oncall second run: {second_line}")
    check(second_line.split(",")[0] == first_line.split(",")[0], f"oncall: {first_line} then {second_line}")
    check(sql(db + ".prev", "SELECT count(*) AS n FROM escalations") == [{"n": 3}], "oncall: the first run's log is not kept")

    # --keep-log appends instead: the second run's rows stay and new ones join them.
    third = run("oncall --keep-log", command("oncall_incident.py", db, args=("--wait", "0", "--keep-log")), [
        r"decision log \S+oncall\.db \(appended to\)", r"^3 escalations wait for a person"])
    verify("oncall --keep-log", db, turns(second) + turns(third))

print(f"{len(failures)} failures" if failures else "examples: all checks passed")
sys.exit(1 if failures else 0)
