#!/bin/bash
# Two-stage routing (docs/two-stage.md) against one stage, through a real `baton serve` on the
# clef engine: a registry of 1,000 tools in 20 groups (20 generated services of 50 tools, routed
# group then tool: routing.max_options 64) against one of 64 tools (one question: max_options
# 255), neither with finish (so that every decision asks both stages), each decision
# a new agent session whose history (~2,300 tokens: a few turns and a log the agent read) no
# earlier one shares. Per registry: the decision
# time the decision frames report (engine and total, median and range), the tokens the engine
# read and those its prefix cache served; and the 1,000-tool registry again with the prefix cache
# off, which the second stage then computes whole.
#
#   bench/two_stage.sh [RELEASE] [DECISIONS]     (default build/bench-release-real-bf16, 8)
#
# RELEASE: a random release (bench/clef_forward.cpp --shape real writes one); it is given the tests'
# Qwen3-Omni tokenizer (bench/release_tokenizer.sh). Run from the repository root, after a build.
set -euo pipefail

release=${1:-build/bench-release-real-bf16}
decisions=${2:-8}
baton=build/adapters/baton
[ -x "$baton" ] || { echo "no $baton: build first" >&2; exit 1; }
bench/release_tokenizer.sh "$release"

work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
python3 - "$work" <<'PY'
import sys
work = sys.argv[1]
verbs = "create list update delete search export archive restore approve assign close reopen merge tag sync".split()
things = "invoice ticket deploy incident user order refund alert report dashboard backup secret build release page".split()
def tool(g, t):
    v, th = verbs[(g * 7 + t) % len(verbs)], things[(g * 3 + t * 5) % len(things)]
    return f"  - {{id: svc{g}.{v}_{th}_{t}, group: svc{g}, description: \"{v.capitalize()} a {th} in service {g} (operation {t})\"}}\n"
with open(f"{work}/tools-1000.yaml", "w") as f:
    f.write("tools:\n" + "".join(tool(g, t) for g in range(20) for t in range(50)))
with open(f"{work}/tools-64.yaml", "w") as f:
    f.write("tools:\n" + "".join(tool(g, t) for g in range(2) for t in range(32)).replace(", group: svc0", "").replace(", group: svc1", ""))
with open(f"{work}/policy.yaml", "w") as f:
    f.write("confidence: p_max\nlanes:\n  default: {execute: 0.5, fallback: 0.3}\non_engine_error: escalate\n")
PY

# One server: its config, started, the decisions sent, stopped. Prints one JSON line of results.
run() {  # NAME REGISTRY CACHE(true|false) MAX_OPTIONS
  local name=$1 registry=$2 cache=$3 max_options=$4
  cat >"$work/$name.yaml" <<YAML
server: {listen: 127.0.0.1:0}
engine:
  name: clef
  model: $PWD/$release
  threads: 2
  prefix_cache: {enabled: $cache}
  timeout_ms: 600000
routing: {max_options: $max_options}
registry: $work/$registry
policy: $work/policy.yaml
log: {path: $work/$name.db}
YAML
  "$baton" serve --config "$work/$name.yaml" >"$work/$name.out" 2>"$work/$name.err" &
  local pid=$!
  local url=""
  for _ in $(seq 600); do
    url=$(grep -o 'listening on http://[0-9.:]*' "$work/$name.out" | head -1 | cut -d' ' -f3) || true
    [ -n "$url" ] && break
    kill -0 $pid 2>/dev/null || { cat "$work/$name.err" >&2; exit 1; }
    sleep 0.5
  done
  /usr/bin/python3 - "${url/http/ws}/v1/agent" "$name" "$decisions" <<'PY'
import asyncio, json, statistics, sys
import websockets
url, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
words = "the checkout service returns errors after the last deploy and customers cannot pay their invoices".split()
async def main():
    rows = []
    async with websockets.connect(url, max_size=None) as ws:
        for i in range(n + 1):  # the first one warms the engine up and is not counted
            history = [{"role": "user", "content": f"Case {i}: " + " ".join(words[(i + k) % len(words)] for k in range(40))}]
            history += [{"role": "assistant", "content": "Looking at " + " ".join(words[(i * 3 + k) % len(words)] for k in range(30))},
                        {"role": "tool", "tool": "lookup", "output": {"status": "degraded", "errors": 120 + i, "region": "eu"}}] * 2
            # A log the agent read: what makes agent histories long.
            history.append({"role": "tool", "tool": "logs", "output": [
                f"2026-12-07T10:{k // 60:02d}:{k % 60:02d}Z checkout-{k % 7} ERROR payment gateway timeout after {200 + 13 * k} ms (order {4000 + k})"
                for k in range(60)]})
            await ws.send(json.dumps({"type": "decide", "id": i, "session": f"{name}-{i}", "history": history}))
            while True:
                f = json.loads(await ws.recv())
                if f.get("type") in ("decision", "error"):
                    break
            if f["type"] == "error":
                sys.exit(f"error: {f}")
            if i:
                rows.append((f["timings_ms"]["engine"], f["timings_ms"]["total"], f["usage"]["input_tokens"], f["usage"]["cached_tokens"]))
    def stat(k):
        v = [r[k] for r in rows]
        return {"median": statistics.median(v), "min": min(v), "max": max(v)}
    print(json.dumps({"run": name, "decisions": len(rows), "engine_ms": stat(0), "total_ms": stat(1),
                      "input_tokens": stat(2), "cached_tokens": stat(3)}))
asyncio.run(main())
PY
  kill $pid
  wait $pid 2>/dev/null || true
}

grep -m1 "model name" /proc/cpuinfo | sed 's/^.*: /cpu: /'
run one-stage-64 tools-64.yaml true 255
run two-stage-1000 tools-1000.yaml true 64
run two-stage-1000-no-cache tools-1000.yaml false 64
