#!/usr/bin/python3
"""The agent API with the decision log on one PostgreSQL shared by 1, 2 and 4 `baton serve`
instances, against SQLite on one instance: each instance gets its own build/bench/ws_load with 64
sessions (closed loop, durable acks, keyword engine), all at once. Prints one JSON line per setup
and a table: decisions/s (all instances), p99 (the worst driver's), and the CPU the database and
the batons used, as a share of the machine (all cores).

  bench/shared_log.py [--decisions M] [--sessions N] [--instances 1,2,4] [--repeat R]

Starts its own PostgreSQL (tests/support/pg_cluster.py) in a temporary folder; bounded: N × M
decisions per driver, then everything stops. Each setup also runs with `log.chains: global` (one
chain per table, an advisory lock per batch) to measure what instance chains save.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("BATON_BUILD_DIR", os.path.join(ROOT, "build"))
BATON = os.path.join(BUILD, "adapters", "baton")
WS_LOAD = os.path.join(BUILD, "bench", "ws_load")
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from pg_cluster import BINDIR, cluster  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
CORES = os.cpu_count()


def cpu_seconds(pids):
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total / TICKS


def postgres_pids(data_dir):
    """The postmaster and every backend it forked."""
    with open(os.path.join(data_dir, "postmaster.pid")) as f:
        master = int(f.readline())
    pids = [master]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == master:
                        pids.append(int(entry))
            except (FileNotFoundError, ProcessLookupError):
                pass
    return pids


def start_baton(directory, name, log_line, env):
    config = os.path.join(directory, f"{name}.yaml")
    with open(config, "w") as f:
        f.write("server: {listen: 127.0.0.1:0, io_threads: 2, max_frames_per_second: 1000000}\n"
                "engine: {name: keyword}\n"
                f"registry: {ROOT}/config/tools.yaml\npolicy: {ROOT}/config/policy.yaml\n"
                f"log: {log_line}\n")
    process = subprocess.Popen([BATON, "serve", "--config", config], stdout=subprocess.PIPE,
                               stderr=open(os.path.join(directory, f"{name}.err"), "w"), text=True, env=env)
    line = process.stdout.readline()
    port = re.search(r":(\d+)$", line.strip())
    if not port:
        raise RuntimeError(f"{name}: {line!r}; see {directory}/{name}.err")
    return process, int(port.group(1))


def run_setup(directory, db, label, instances, chains, args, run_index):
    env = dict(os.environ, BATON_BENCH_PG_PASSWORD=db.password if db else "")
    servers = []
    if db:
        database = f"bench_{label.replace('-', '_')}_{run_index}"
        subprocess.run([os.path.join(BINDIR, "createdb"), "-h", "127.0.0.1", "-p",
                        str(db.port), "-U", "baton", database], env=dict(os.environ, PGPASSWORD=db.password),
                       check=True)
        url = f"postgresql://baton@127.0.0.1:{db.port}/{database}"
    for i in range(instances):
        if db:
            log_line = (f"{{url: '{url}', password: {{env: BATON_BENCH_PG_PASSWORD}}, instance: i{i}, "
                        f"chains: {chains}}}")
        else:
            log_line = f"{{path: {directory}/{label}-{run_index}.db}}"
        servers.append(start_baton(directory, f"{label}-{run_index}-{i}", log_line, env))
    baton_pids = [p.pid for p, _ in servers]
    pg_pids = postgres_pids(db.data) if db else []
    before = (cpu_seconds(pg_pids), cpu_seconds(baton_pids), time.monotonic())
    drivers = [subprocess.Popen([WS_LOAD, "--port", str(port), "--sessions", str(args.sessions), "--decisions",
                                 str(args.decisions), "--run", f"{label}{run_index}i{i}"],
                                stdout=subprocess.PIPE, text=True) for i, (_, port) in enumerate(servers)]
    outputs = [d.communicate()[0] for d in drivers]
    pg_pids = postgres_pids(db.data) if db else []
    after = (cpu_seconds(pg_pids), cpu_seconds(baton_pids), time.monotonic())
    wall = after[2] - before[2]
    results = [json.loads(o.strip().splitlines()[-1]) for o in outputs]
    for process, _ in servers:
        process.terminate()
        process.wait(timeout=30)
    verify_env = dict(os.environ, PGPASSWORD=db.password) if db else dict(os.environ)
    verified = subprocess.run([BATON, "log", "verify", "--db", url if db else f"{directory}/{label}-{run_index}.db"],
                              capture_output=True, text=True, env=verify_env)
    decisions = sum(r["decisions"] for r in results)
    return {
        "setup": label, "instances": instances, "chains": chains if db else "sqlite",
        "sessions_per_instance": args.sessions, "decisions": decisions,
        "errors": sum(r["errors"] for r in results),
        "decisions_per_s": round(decisions / max(r["seconds"] for r in results)),
        "p50_ms": round(statistics.median(r["p50_ms"] for r in results), 2),
        "p99_ms": round(max(r["p99_ms"] for r in results), 2),
        "db_cpu_share": round((after[0] - before[0]) / (wall * CORES), 3),
        "baton_cpu_share": round((after[1] - before[1]) / (wall * CORES), 3),
        "verify": verified.stdout.splitlines()[0] if verified.returncode == 0 else "FAILED: " + verified.stdout,
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--decisions", type=int, default=100, help="per session")
    parser.add_argument("--sessions", type=int, default=64, help="per instance")
    parser.add_argument("--instances", default="1,2,4")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    counts = [int(n) for n in args.instances.split(",")]
    with open("/proc/loadavg") as f:
        print(f"# load before: {f.read().strip()}; {CORES} cores", file=sys.stderr)
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        db = cluster(os.path.join(directory, "pg")).start()
        try:
            for r in range(args.repeat):
                rows.append(run_setup(directory, None, "sqlite-1", 1, "", args, r))
                print(json.dumps(rows[-1]), flush=True)
                for n in counts:
                    for chains in ("instance", "global"):
                        if n == 1 and chains == "global":
                            continue  # one writer: the same as instance chains
                        rows.append(run_setup(directory, db, f"pg-{chains}-{n}", n, chains, args, r))
                        print(json.dumps(rows[-1]), flush=True)
        finally:
            db.stop()
    print(f"\n{'setup':<18}{'decisions/s':>12}{'p50 ms':>9}{'p99 ms':>9}{'db cpu':>8}{'baton cpu':>10}  verify")
    for row in rows:
        print(f"{row['setup']:<18}{row['decisions_per_s']:>12}{row['p50_ms']:>9}{row['p99_ms']:>9}"
              f"{row['db_cpu_share']:>8.0%}{row['baton_cpu_share']:>10.0%}  {row['verify']}")
    # Medians and ranges over the repeats, and each setup against SQLite on one instance.
    setups = list(dict.fromkeys(r["setup"] for r in rows))
    base = statistics.median(r["decisions_per_s"] for r in rows if r["setup"] == "sqlite-1")
    print(f"\nmedian (range) of {args.repeat} run(s); ratio: decisions/s against sqlite-1's median")
    print(f"{'setup':<16}{'decisions/s':>22}{'ratio':>7}{'p99 ms':>22}{'db cpu':>14}")
    for name in setups:
        mine = [r for r in rows if r["setup"] == name]

        def span(key, fmt):
            values = [r[key] for r in mine]
            return f"{fmt(statistics.median(values))} ({fmt(min(values))}-{fmt(max(values))})"

        rate = statistics.median(r["decisions_per_s"] for r in mine)
        print(f"{name:<16}{span('decisions_per_s', lambda v: f'{v:.0f}'):>22}{rate / base:>7.2f}"
              f"{span('p99_ms', lambda v: f'{v:.0f}'):>22}{span('db_cpu_share', lambda v: f'{v:.0%}'):>14}")


if __name__ == "__main__":
    main()
