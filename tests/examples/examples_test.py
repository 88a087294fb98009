#!/usr/bin/python3
"""End to end: each example agent against a real `baton serve` (keyword engine, the example's own
registry and policy, a fresh decision log), then a graceful stop and the log's hash chain.

Usage: examples_test.py BATON_BINARY SOURCE_DIR
"""

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

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


def run_example(name, script, expected, extra_args=(), registry_rewrite=None, api_key=None):
    with tempfile.TemporaryDirectory() as tmp:
        example = os.path.join(source, "config", "examples", name)
        registry = os.path.join(example, "tools.yaml")
        if registry_rewrite:
            with open(registry) as f:
                text = registry_rewrite(f.read())
            registry = os.path.join(tmp, "tools.yaml")
            with open(registry, "w") as f:
                f.write(text)
        db = os.path.join(tmp, "decisions.db")
        config = os.path.join(tmp, "baton.yaml")
        with open(config, "w") as f:
            f.write(
                "server: {listen: 127.0.0.1:0}\n"
                f"registry: {registry}\npolicy: {os.path.join(example, 'policy.yaml')}\n"
                f"log: {{path: {db}}}\n"
            )
            if api_key:
                f.write("auth: {keys: [{name: example-agent, role: agent, env: BATON_EXAMPLE_KEY}]}\n")
        server = subprocess.Popen(
            [baton, "serve", "--config", config], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "BATON_EXAMPLE_KEY": api_key or ""},
        )
        try:
            line = server.stdout.readline()
            port = re.search(r":(\d+)$", line.strip())
            check(port is not None, f"{name}: serve printed {line!r}")
            if port is None:
                print(server.stderr.read(), file=sys.stderr)
                return
            t0 = time.monotonic()
            agent = subprocess.run(
                ["/usr/bin/python3", os.path.join(agents, script), "--url",
                 f"ws://127.0.0.1:{port.group(1)}/v1/agent", *extra_args],
                capture_output=True, text=True, timeout=120,
                env={**os.environ, "BATON_API_KEY": api_key or ""},
            )
            check(agent.returncode == 0, f"{name}: the agent exited {agent.returncode}: {agent.stderr}")
            for pattern in expected:
                check(re.search(pattern, agent.stdout, re.M), f"{name}: no line matches {pattern!r} in\n{agent.stdout}")
            print(f"{name}: agent {time.monotonic() - t0:.2f} s")
            turns = len(re.findall(r" turn \d+: ", agent.stdout))
        finally:
            t0 = time.monotonic()
            server.send_signal(signal.SIGTERM)
            try:
                code = server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                code = "killed"
        print(f"{name}: stop {time.monotonic() - t0:.2f} s")
        check(code == 0, f"{name}: baton serve exited {code}: {server.stderr.read()}")
        verify = subprocess.run([baton, "log", "verify", "--db", db], capture_output=True, text=True)
        check(verify.returncode == 0, f"{name}: log verify exited {verify.returncode}: {verify.stdout}{verify.stderr}")
        count = subprocess.run(
            [baton, "log", "sql", "--db", db, "SELECT count(*) AS n FROM decisions"], capture_output=True, text=True
        )
        check(count.stdout.strip() == f'{{"n":{turns}}}', f"{name}: {count.stdout.strip()} rows for {turns} turns")


service_port = free_port()
run_example(
    "support",
    "support_triage.py",
    [
        r"^ticket-101 turn 1: execute +reset_password\(\)",
        r"^ticket-101   baton ran reset_password: ok=True",
        r"^ticket-102 turn 1: escalate refund_payment\(.*\) +\[rule:always_escalate",
        r"^ticket-103   ran search_help_center here: ok=True",
        r"^ticket-104 turn 1: execute +update_shipping_address\(address=12 Harbour Street\)",
        r"^ticket-105 turn 1: fallback search_help_center",
        r"^ticket-106: ends with escalate",
    ],
    extra_args=("--service-port", str(service_port)),
    registry_rewrite=lambda text: text.replace("127.0.0.1:8471", f"127.0.0.1:{service_port}"),
)
run_example(
    "oncall",
    "oncall_incident.py",
    [
        r"^alert-checkout-oom   baton ran restart_service: ok=True output=\{'restarted': 'checkout'",
        r"^alert-search-latency   ran query_metrics here",
        r"^alert-api-release turn 1: escalate rollback_deploy\(\) +\[rule:max_risk",
        r"^alert-api-outage turn 1: escalate .*rule:escalate_when:severity",
        r"^alert-api-errors turn 1: fallback restart_service\(service=api\)",
        r"^alert-search-index: ends with escalate",
        r"known_issue=0\.5",
    ],
    api_key="oncall-example-key-0123456789",  # the agent sends it as BATON_API_KEY
)
print(f"{len(failures)} failures" if failures else "examples: all checks passed")
sys.exit(1 if failures else 0)
