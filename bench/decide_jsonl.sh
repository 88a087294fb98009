#!/usr/bin/env bash
# `baton decide` on 10,000 JSONL requests with the keyword engine, per request mix: requests/s as
# the median and range of RUNS runs (default 7), with minor page faults and peak RSS of the
# process (GNU time). Process start and file I/O are included. Usage: bench/decide_jsonl.sh [N] [RUNS]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BATON_BUILD_DIR:-$root/build}"
n="${1:-10000}"
runs="${2:-7}"

"$root/scripts/setup.sh" >/dev/null
if ! [ -x /usr/bin/time ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq time >/dev/null
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
printf '%-8s %8s %10s %12s %24s %10s %10s\n' mix requests bytes/req "median req/s" "range req/s" faults "max RSS"
for mix in routing compact; do
  "$build/bench/baton_make_requests" "$n" "$mix" > "$work/$mix.jsonl"
  bytes=$(stat -c %s "$work/$mix.jsonl")
  rates=()
  faults=""
  rss=""
  for ((i = 0; i < runs; i++)); do
    start=$(date +%s%N)
    /usr/bin/time -f "%R %M" -o "$work/time" "$build/adapters/baton" decide --engine keyword "$work/$mix.jsonl" > "$work/out.jsonl"
    end=$(date +%s%N)
    read -r faults rss < "$work/time"
    rates+=("$(awk -v n="$n" -v ns="$((end - start))" 'BEGIN { printf "%.0f", n / (ns / 1e9) }')")
    lines=$(wc -l < "$work/out.jsonl")
    [ "$lines" -eq "$n" ] || { echo "expected $n responses, got $lines" >&2; exit 1; }
  done
  sorted=($(printf '%s\n' "${rates[@]}" | sort -n))
  printf '%-8s %8d %10d %12d %11d - %-10d %10s %7s KiB\n' "$mix" "$n" "$((bytes / n))" \
    "${sorted[$((runs / 2))]}" "${sorted[0]}" "${sorted[$((runs - 1))]}" "$faults" "$rss"
done
