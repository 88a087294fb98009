#!/usr/bin/python3
"""Issue 18's point 5 in one command: baton's forward (build/bench/clef_forward) and the reference's
(bench/reference_eager.py) alternated on the same random release and the same record, round after
round, as the issue asks (the VMs' speed moves between minutes). Prints each round's medians, the
speed-up of each round, and how far the two computations' logits are apart (they compute the same
function: a gap beyond ~1e-5 in f32 means a router near-tie or a fault, and clef_forward prints the
closest router call).

  bench/vs_reference.py [--build build] [--dtype f32|bf16] [--init transformers,bench]
                        [--tokens 512,2048] [--rounds 3] [--warmup 1] [--runs 3] [--threads 2] [--json]

A missing release is written by clef_forward in the first round. A bf16 release is computed in
bf16 by both (clef_forward --dtype bf16); where the CPU has no bf16 arithmetic both emulate it, and
the engine itself would pick f32 (docs/performance.md).
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run_json_lines(command):
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"vs_reference: {' '.join(command)} failed ({done.returncode}):\n{done.stderr.strip()}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def load_average():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def baton(args, init, release):
    lines = run_json_lines([os.path.join(args.build, "bench", "clef_forward"), "--dir", release, "--init", init,
                            "--dtype", args.dtype, "--tokens", args.tokens, "--warmup", str(args.warmup),
                            "--runs", str(args.runs), "--threads", str(args.threads), "--json"])
    return {f["tokens"]: (f["total_ms"]["median"], f["logits"]) for f in lines if f.get("kind") == "forward"}


def reference(args, release):
    (info,) = run_json_lines([sys.executable, os.path.join(HERE, "reference_eager.py"), "--dir", release,
                              "--tokens", args.tokens, "--warmup", str(args.warmup), "--runs", str(args.runs),
                              "--threads", str(args.threads), "--json"])
    return {r["tokens"]: (r["forward_ms"]["median"], r["logits"]) for r in info["results"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--dtype", choices=("f32", "bf16"), default="f32")
    parser.add_argument("--init", default="transformers,bench", help="the kinds of random release")
    parser.add_argument("--tokens", default="512,2048")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    inits = args.init.split(",")
    if any(init not in ("transformers", "bench") for init in inits):
        parser.error("--init takes transformers and/or bench")
    if args.rounds < 1 or args.runs < 1 or args.warmup < 0 or args.threads < 1:
        parser.error("--rounds, --runs and --threads must be positive, --warmup non-negative")
    rows = {}  # (init, tokens) -> rounds of (reference ms, baton ms, max |logit gap|)
    loads = []
    for _ in range(args.rounds):
        for init in inits:
            suffix = "-transformers" if init == "transformers" else ""  # clef_forward's own names
            release = os.path.join(args.build, f"bench-release-{args.dtype}{suffix}")
            loads.append(load_average())
            ours = baton(args, init, release)  # first: it writes the release when there is none
            loads.append(load_average())
            theirs = reference(args, release)
            for tokens, (ms, logits) in ours.items():
                their_ms, their_logits = theirs[tokens]
                if len(logits) != len(their_logits):
                    sys.exit(f"vs_reference: {len(logits)} logits from clef_forward, "
                             f"{len(their_logits)} from the reference")
                gap = max(abs(a - b) for a, b in zip(logits, their_logits))
                rows.setdefault((init, tokens), []).append((their_ms, ms, gap))
    if args.json:
        print(json.dumps({"dtype": args.dtype, "threads": args.threads, "load_average": [min(loads), max(loads)],
                          "rows": [{"init": init, "tokens": tokens,
                                    "rounds": [{"reference_ms": r, "baton_ms": b, "speedup": r / b, "logit_gap": g}
                                               for r, b, g in rounds]}
                                   for (init, tokens), rounds in rows.items()]}))
        return
    print(f"baton against the reference, {args.dtype}, {args.threads} threads, {args.rounds} rounds "
          f"(medians of {args.runs} after {args.warmup} warm-up; "
          f"1-min load average {min(loads):.2f}-{max(loads):.2f})")
    print(f"  {'release, tokens':<22} {'reference ms':<30} {'baton ms':<30} {'speed-up':<24} max |logit gap|")
    for (init, tokens), rounds in rows.items():
        print(f"  {init + ', ' + str(tokens):<22} {' / '.join(f'{r:,.1f}' for r, _, _ in rounds):<30} "
              f"{' / '.join(f'{b:,.1f}' for _, b, _ in rounds):<30} "
              f"{' / '.join(f'{r / b:.2f}x' for r, b, _ in rounds):<24} {max(g for _, _, g in rounds):.2g}")


if __name__ == "__main__":
    main()
