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

# shellcheck source=bench_server.sh
source "$root/bench/bench_server.sh"
start_bench_server ", max_frames_per_second: 1000000"

for n in "${counts[@]}"; do
  "$build/bench/ws_load" --port "$port" --sessions "$n" --decisions "$decisions" --turns "${BATON_TURNS:-20}" --run "s$n"
done
stop_bench_server
