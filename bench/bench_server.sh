#!/usr/bin/env bash
# Sourced by the load scripts (ws_load.sh, http_load.sh): a `baton serve` for one benchmark, on
# the default registry and policy with the keyword engine and a fresh decision log in a temporary
# directory. Knobs: BATON_IO_THREADS (2), BATON_DURABLE_ACK (true), BATON_SYNC (full), BATON_POLICY
# (a policy file instead of config/policy.yaml).
#
#   start_bench_server "EXTRA SERVER OPTIONS"   # sets $dir, $pid and $port
#   stop_bench_server                           # SIGTERM, wait, then `baton log verify`

start_bench_server() {
  dir="$(mktemp -d)"
  trap 'kill "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
  cat >"$dir/baton.yaml" <<YAML
server: {listen: 127.0.0.1:0, io_threads: ${BATON_IO_THREADS:-2}$1}
engine: {name: keyword}
registry: $root/config/tools.yaml
policy: ${BATON_POLICY:-$root/config/policy.yaml}
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
}

stop_bench_server() {
  kill -TERM "$pid"
  wait "$pid"
  "$build/adapters/baton" log verify --db "$dir/decisions.db"
}
