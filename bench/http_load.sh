#!/usr/bin/env bash
# The SystemOne HTTP API under load: starts `baton serve` on the default registry and policy
# (keyword engine, decision log on, durable acks) with a fresh log in a temporary directory, runs
# build/bench/http_load at each connection count, stops the server and checks the log's hash chain.
#
#   bench/http_load.sh [REQUESTS_PER_CONNECTION] [CONNECTION_COUNTS...]   (defaults: 200, 1 64 256)
#   BATON_SYNC=normal bench/http_load.sh       # SQLite synchronous mode (default full)
#   BATON_DURABLE_ACK=false bench/http_load.sh # answer before the row is committed
#   BATON_IO_THREADS=1 bench/http_load.sh      # server I/O threads (default 2)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BATON_BUILD_DIR:-$root/build}"
requests="${1:-200}"
shift || true
counts=("$@")
((${#counts[@]})) || counts=(1 64 256)

# shellcheck source=bench_server.sh
source "$root/bench/bench_server.sh"
start_bench_server ""

# The server's minor page faults, CPU seconds (fields 10, 14 and 15 of /proc/PID/stat) and RSS,
# after each run.
server_memory() {
  local stat
  stat=($(sed 's/.*) //' "/proc/$pid/stat"))
  echo "server after $1: minor_faults=${stat[7]}" \
    "cpu_s=$(awk -v t=$((stat[11] + stat[12])) -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", t / hz }')" \
    "rss_kib=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")"
}
server_memory start
for n in "${counts[@]}"; do
  "$build/bench/http_load" --port "$port" --connections "$n" --requests "$requests" --run "c$n"
  server_memory "c$n"
done
stop_bench_server
