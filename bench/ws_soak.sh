#!/usr/bin/env bash
# Agent sessions under sustained load: `baton serve` on the default registry and policy (keyword
# engine, durable acks) with a fresh log, and ws_load for MINUTES at CONNECTIONS connections, each
# starting a new 20-turn session after the last (every second connection ends its sessions, the
# others abandon them). Every minute: the load's decisions/s, p99 and errors, and the server's
# resident memory, sessions held and their bytes (/metrics). Then a crash: a second load with
# every decision id it receives written down, `kill -9` of the server halfway through it, and the
# check that every decision the clients were sent is in the log, and `baton log verify`.
#
#   bench/ws_soak.sh [MINUTES] [CONNECTIONS]          (defaults: 30, 64)
#   BATON_SOAK_SERVER=", max_history_bytes_total: 67108864" bench/ws_soak.sh 5   # more server options
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BATON_BUILD_DIR:-$root/build}"
minutes="${1:-30}"
connections="${2:-64}"

# shellcheck source=bench_server.sh
source "$root/bench/bench_server.sh"
start_bench_server ", max_frames_per_second: 1000000${BATON_SOAK_SERVER:-}"

# One value of GET /metrics, through bash's own TCP (no curl needed).
metric() {
  local line
  exec 3<>"/dev/tcp/127.0.0.1/$port"
  printf 'GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:%s\r\nConnection: close\r\n\r\n' "$port" >&3
  line=$(grep -a "^$1 " <&3 || true)
  exec 3<&-
  echo "${line#* }"
}

sample() {
  local rss
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")
  echo "{\"minute\":$1,\"rss_mib\":$((rss / 1024)),\"sessions\":$(metric baton_sessions),\"session_mib\":$(( $(metric baton_session_bytes | cut -d. -f1) / 1048576 )),\"ended\":$(metric baton_sessions_ended_total),\"evicted\":$(metric baton_sessions_evicted_total),\"escalations_pending\":$(metric baton_escalations_pending)}"
}

echo "== soak: $minutes min, $connections connections, half the sessions ended, half abandoned"
sample 0
"$build/bench/ws_load" --port "$port" --sessions "$connections" --decisions 1000000000 --turns 20 \
  --duration-s $((minutes * 60)) --report-s 60 --end-every 2 --run soak &
load=$!
for m in $(seq "$minutes"); do
  sleep 60
  kill -0 "$pid" || { echo "the server died" >&2; exit 1; }
  sample "$m"
done
wait "$load" || { echo "the soak had errors" >&2; exit 1; }

echo "== crash: load for 60 s, kill -9 of the server after 30 s"
ids="$dir/ids"
"$build/bench/ws_load" --port "$port" --sessions "$connections" --decisions 1000000000 --turns 20 \
  --duration-s 60 --end-every 2 --run crash --ids "$ids" >"$dir/crash.json" 2>/dev/null &
load=$!
sleep 30
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
wait "$load" || true  # its connections drop: errors expected
"$build/adapters/baton" log sql --db "$dir/decisions.db" "SELECT id FROM decisions" | sed 's/.*"id":"\([^"]*\)".*/\1/' | sort >"$dir/logged"
sort "$ids" >"$dir/sent"
missing=$(comm -23 "$dir/sent" "$dir/logged" | wc -l)
echo "{\"decisions_sent_before_the_kill\":$(wc -l <"$dir/sent"),\"in_the_log\":$(wc -l <"$dir/logged"),\"sent_but_not_logged\":$missing}"
"$build/adapters/baton" log verify --db "$dir/decisions.db"
[ "$missing" -eq 0 ]
