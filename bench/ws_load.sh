#!/usr/bin/env bash
# The agent WebSocket API under load: starts `baton serve` on the default registry and policy
# (keyword engine, decision log on, durable acks) with a fresh log in a temporary directory, runs
# build/bench/ws_load at each session count, checks the log's hash chain, and stops the server.
#
#   bench/ws_load.sh [DECISIONS_PER_CONNECTION] [SESSION_COUNTS...]     (defaults: 200, 1 64 512)
#   BATON_TURNS=20 bench/ws_load.sh       # turns per agent session (default 20)
#   BATON_SYNC=normal bench/ws_load.sh    # SQLite synchronous mode (default full)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BATON_BUILD_DIR:-$root/build}"
decisions="${1:-200}"
shift || true
counts=("$@")
((${#counts[@]})) || counts=(1 64 512)

dir="$(mktemp -d)"
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
cat >"$dir/baton.yaml" <<YAML
server: {listen: 127.0.0.1:0, io_threads: ${BATON_IO_THREADS:-2}, max_frames_per_second: 1000000}
engine: {name: keyword}
registry: $root/config/tools.yaml
policy: $root/config/policy.yaml
log: {path: $dir/decisions.db, durable_ack: ${BATON_DURABLE_ACK:-true}, synchronous: ${BATON_SYNC:-full}}
YAML

"$build/adapters/baton" serve --config "$dir/baton.yaml" >"$dir/out" 2>"$dir/err" &
pid=$!
for _ in $(seq 100); do
  grep -q 'listening on' "$dir/out" 2>/dev/null && break
  sleep 0.1
done
port="$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$dir/out")"
[ -n "$port" ] || { cat "$dir/err" >&2; exit 1; }

for n in "${counts[@]}"; do
  "$build/bench/ws_load" --port "$port" --sessions "$n" --decisions "$decisions" --turns "${BATON_TURNS:-20}" --run "s$n"
done
kill -TERM "$pid"
wait "$pid"
"$build/adapters/baton" log verify --db "$dir/decisions.db"
