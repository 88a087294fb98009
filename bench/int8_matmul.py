#!/usr/bin/python3
"""One expert matmul (x @ w.T, w 512 x 1024, one thread) with bf16 weights, with int8 weights
converted to bf16 for the matmul and scaled on the output (what the thinker does), and with
oneDNN's int8 matmul (quantized::linear_dynamic): the candidates for int8 experts in
docs/performance.md. Debian's python3-torch is the same 1.13 build as libtorch-dev.

    /usr/bin/python3 bench/int8_matmul.py [ROWS ...]     # default 64 256
"""
import sys
import time

import torch

torch.set_num_threads(1)
torch.backends.quantized.engine = "onednn"
EXPERTS, K, N = 64, 1024, 512


def median_ms(f, n=9):
    f()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return sorted(times)[n // 2] * 1e3


def main(rows_list):
    torch.manual_seed(0)
    # As the random release: uniform weights of std 0.02; the 64 experts cycled so that their
    # weights come from memory, as in a forward.
    w = [(torch.rand(N, K) * 2 - 1) * 0.0346 for _ in range(EXPERTS)]
    scale = [x.abs().amax(1) / 127 for x in w]
    q = [torch.clamp(torch.round(x / s[:, None]), -127, 127).to(torch.int8) for x, s in zip(w, scale)]
    wb = [x.bfloat16() for x in w]
    packed = [torch.ops.quantized.linear_prepack(
        torch.quantize_per_channel(x, s, torch.zeros(N, dtype=torch.long), 0, torch.qint8), None)
        for x, s in zip(w, scale)]
    for rows in rows_list:
        x = torch.randn(rows, K)
        xb = x.bfloat16()
        candidates = {
            "bf16 weights": lambda e: torch.mm(xb, wb[e].t()),
            "int8 -> bf16, scaled output": lambda e: torch.mm(xb, q[e].to(torch.bfloat16).t()).mul_(scale[e]),
            "oneDNN int8 (linear_dynamic)": lambda e: torch.ops.quantized.linear_dynamic(xb.float(), packed[e], False),
        }
        exact = x @ w[0].t()
        for name, f in candidates.items():
            ms = median_ms(lambda: [f(e) for e in range(EXPERTS)])
            error = ((f(0).float() - exact).norm() / exact.norm()).item()
            print(f"{rows:4d} rows  {name:30s} {ms:7.2f} ms / {EXPERTS} experts  relative error {error:.4f}")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [64, 256])
