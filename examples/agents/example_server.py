"""Starts the `baton serve` an example runs against, on a fresh decision log, and stops it after.

Each run of an example gets a log of its own (the previous run's is kept next to it as
NAME.db.prev), so its counts are the same on every run; --keep-log appends instead, and --url
talks to a baton that is already running (then that server's log is what it writes to).
"""

import asyncio
import os
import re
import signal
from contextlib import asynccontextmanager

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def shown(path):
    """A path as a reader typed it: relative to the working directory when it is under it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def add_server_arguments(parser, example):
    group = parser.add_argument_group("the server")
    group.add_argument("--url", help="the agent URL of a baton that is already running (ws://HOST:PORT/v1/agent); "
                                     "without it the example starts its own")
    group.add_argument("--baton", default=os.environ.get("BATON_BIN", os.path.join(ROOT, "build", "adapters", "baton")),
                       help="the baton binary (default: build/adapters/baton, or $BATON_BIN)")
    group.add_argument("--config", default=os.path.join(ROOT, "config", "examples", example, "baton.yaml"),
                       help=f"the server configuration (default: config/examples/{example}/baton.yaml)")
    group.add_argument("--listen", help="HOST:PORT instead of the config's server.listen (port 0: any free port)")
    group.add_argument("--db", default=os.path.join(ROOT, "var", f"{example}.db"),
                       help=f"the decision log (default: var/{example}.db), fresh on every run")
    group.add_argument("--keep-log", action="store_true", help="append to the log at --db instead of starting a fresh one")


def start_fresh(db):
    """Moves the previous run's log (and its WAL files) to DB.prev, replacing an older one."""
    moved = False
    for suffix in ("", "-wal", "-shm"):
        previous = f"{db}.prev{suffix}"
        if os.path.exists(previous):
            os.remove(previous)
        if os.path.exists(db + suffix):
            os.replace(db + suffix, previous)
            moved = True
    return moved


def http_base(ws_url):
    return re.sub(r"^ws", "http", ws_url).removesuffix("/v1/agent")


@asynccontextmanager
async def example_server(args, out):
    """Yields the agent URL: --url as given, or that of a `baton serve` started here (lines for
    people go to `out`). A server started here is stopped gracefully on the way out."""
    if args.url:
        yield args.url
        return
    db = os.path.abspath(args.db)
    os.makedirs(os.path.dirname(db), exist_ok=True)
    note = "appended to" if args.keep_log else "fresh"
    if not args.keep_log and start_fresh(db):
        note += f"; the last run's is {shown(db)}.prev"
    server_log = os.path.splitext(db)[0] + ".serve.log"
    command = [args.baton, "serve", "--config", args.config, "--db", db]
    if args.listen:
        command += ["--listen", args.listen]
    with open(server_log, "w") as log:
        try:
            server = await asyncio.create_subprocess_exec(*command, stdout=asyncio.subprocess.PIPE, stderr=log)
        except OSError as e:
            raise SystemExit(f"cannot start {args.baton}: {e.strerror} (build it with scripts/setup.sh, or pass --baton)")
    try:
        try:
            line = (await asyncio.wait_for(server.stdout.readline(), timeout=60)).decode()
        except asyncio.TimeoutError:
            line = ""
        listening = re.search(r"listening on http://(.+):(\d+)$", line.strip())
        if not listening:
            with open(server_log) as log:
                raise SystemExit(f"baton serve did not start:\n{log.read().strip()}")
        host, port = listening.groups()
        host = f"[{host}]" if ":" in host else host
        out(f"baton serve --config {shown(args.config)}: http://{host}:{port}, decision log {shown(db)} ({note}), "
            f"server log {shown(server_log)}")
        yield f"ws://{host}:{port}/v1/agent"
    finally:
        if server.returncode is None:
            server.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.wait_for(server.wait(), timeout=30)
        except asyncio.TimeoutError:
            server.kill()
            code = await server.wait()
        if code != 0:
            raise SystemExit(f"baton serve exited {code}; its log: {shown(server_log)}")
