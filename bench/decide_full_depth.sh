#!/bin/bash
# `baton decide` on a real SystemOne request (an agent's state with a 600-line tool result, a choice,
# a score and a noul question) through a random release's whole depth, at several record lengths:
# the state is cut to each length by --max-length, one process per length, each timed by
# /usr/bin/time (wall time, peak resident memory, page faults), after a run that only loads. The
# engine logs its load choices. --media adds a 1280 x 720 image, a 2.5 s audio clip and a 2 s video
# with its soundtrack (the tests' media) to the request, read from a media root.
#
#   bench/decide_full_depth.sh [--media] RELEASE [TOKENS ...]     (default 512 2048 8192)
#
# RELEASE: a random real-shape release, e.g. the 48-layer int4 one of docs/performance.md ("int4
# experts": clef_forward --shape real --dtype int4, then bench/tile_layers.py ... 48), given a
# tokenizer first (bench/release_tokenizer.sh). Run from the repository root, after a build.
set -euo pipefail

media=0
if [ "${1:-}" = --media ]; then media=1; shift; fi
release=${1:?usage: bench/decide_full_depth.sh [--media] RELEASE [TOKENS ...]}
shift
lengths=("$@")
[ ${#lengths[@]} -gt 0 ] || lengths=(512 2048 8192)
baton=build/adapters/baton
[ -x "$baton" ] || { echo "no $baton: build first" >&2; exit 1; }

bench/release_tokenizer.sh "$release"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/media"
media_args=()
if [ $media = 1 ]; then
  cp tests/data/vectors/clef-omni-tiny/media/tone_16k_mono_2p5s.wav tests/data/vectors/clef-omni-tiny/media/clip_sound_2s.mp4 "$work/media/"
  python3 - "$work/media/frame.png" <<'EOF'
import struct, sys, zlib
w, h = 1280, 720  # a gradient with a grid, as a screenshot might be
rows = b"".join(b"\0" + bytes(v for x in range(w) for v in ((x * 255 // w), (y * 255 // h), 255 if (x // 40 + y // 40) % 2 else 60)) for y in range(h))
chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
open(sys.argv[1], "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
                              chunk(b"IDAT", zlib.compress(rows, 6)) + chunk(b"IEND", b""))
EOF
  media_args=(--media-root "$work/media")
fi
python3 - $media >"$work/request.json" <<'EOF'
import json, random, sys
random.seed(3)
words = ("invoice shipment pallet customs broker freight delayed refund warehouse carrier damaged signature "
         "address customer priority express ticket escalation").split()
lines = [{"line": i, "sku": f"SKU-{random.randint(1000, 9999)}", "note": " ".join(random.choice(words) for _ in range(8)),
          "qty": random.randint(1, 50)} for i in range(600)]
state = {"agent": "support-bot", "history": [
    {"role": "user", "content": "My order arrived damaged and I want a refund, see the invoice lines below."},
    {"role": "tool", "name": "lookup_order", "content": {"order": "A-1182", "lines": lines}}]}
questions = {
    "next_tool": {"type": "choice", "instructions": "Which tool should the agent call next?",
                  "criteria": {"issue_refund": "Refund the customer's payment", "open_ticket": "Open a support ticket",
                              "escalate": "Hand the case to a person", "ask_user": "Ask the customer for more details"}},
    "urgency": {"type": "score", "instructions": "How urgent is this case?",
                "criteria": ["can wait", "today", "immediately"]},
    "refund_justified": {"type": "noul", "instructions": "Is a refund justified?",
                         "criteria": {"true": "The goods arrived damaged.", "false": "Nothing was wrong with the goods."}}}
request = {"model": "clef-omni", "state": state, "questions": questions}
if sys.argv[1] == "1":
    request.update(images=["frame.png"], audio=["tone_16k_mono_2p5s.wav"], videos=["clip_sound_2s.mp4"])
print(json.dumps(request))
EOF

# Load only: an empty input is refused once the engine has loaded (its time and memory are the load's).
echo "== load only"
printf '\n' | /usr/bin/time -v "$baton" decide --engine clef --model "$release" - >/dev/null 2>"$work/err.txt" || true
grep -E "Elapsed|Maximum resident|page faults" "$work/err.txt" | sed 's/^\s*/  /'

for n in "${lengths[@]}"; do
  echo "== $n tokens"
  /usr/bin/time -v "$baton" decide --engine clef --model "$release" --max-length "$n" "${media_args[@]}" "$work/request.json" \
    >"$work/out.json" 2>"$work/err.txt" || { cat "$work/err.txt" "$work/out.json" >&2; exit 1; }
  grep -E "clef engine: (bench|.*on cpu|.*experts)" "$work/err.txt" | sed 's/^.*\] //' | head -3
  grep -E "Elapsed|Maximum resident|page faults" "$work/err.txt" | sed 's/^\s*/  /'
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('  answer:', json.dumps(r)[:300]); print('  usage:', r['usage'])" "$work/out.json"
done
