#!/usr/bin/env bash
# The GPU check (docs/real-model.md): builds engine/clef/model with bench/clef_reference and
# bench/clef_forward against the machine's CUDA libtorch (Torch_DIR, else the one Python's torch
# ships), then
#   1. runs the tiny release's reference records on the GPU in fp32 (logits within 1e-4);
#   2. times bf16 and int8 forwards of the real-shape release at 1k, 4k and 16k tokens, with the
#      peak device memory in use (skipped with --reference-only).
# Needs CMake, Ninja, a C++20 compiler, the CUDA toolkit libtorch was built with, and
# nlohmann/json (CMAKE_PREFIX_PATH may point at a copy). Logs go to $OUT when set.
#
#   scripts/gpu_check.sh [--reference-only] [--device cuda]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
device=cuda
real_shape=1
while (($#)); do
  case "$1" in
    --reference-only) real_shape=0 ;;
    --device) device="$2"; shift ;;
    *) echo "usage: scripts/gpu_check.sh [--reference-only] [--device cuda[:N]]" >&2; exit 2 ;;
  esac
  shift
done
out="${OUT:-$root/build-gpu}"
mkdir -p "$out"
build="$root/build-gpu"
torch_dir="${Torch_DIR:-$(python3 -c 'import torch, os; print(os.path.join(torch.utils.cmake_prefix_path, "Torch"))')}"

stage() { printf '\n== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }

stage "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
python3 -c 'import torch; print("libtorch", torch.__version__, "cuda", torch.version.cuda, "cxx11 abi", torch.compiled_with_cxx11_abi())' || true
nproc

# libtorch's CMake config compiles nothing for the GPU here; naming the arch skips its probe.
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
stage "configure and build against $torch_dir"
start=$SECONDS
cuda_root=()
if command -v nvcc >/dev/null; then cuda_root=(-DCUDAToolkit_ROOT="$(dirname "$(dirname "$(command -v nvcc)")")"); fi
cmake -S engine/clef/model -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTorch_DIR="$torch_dir" \
  "${cuda_root[@]}" -DCMAKE_PREFIX_PATH="${CMAKE_PREFIX_PATH:-}" >"$out/configure.log" 2>&1 ||
  { tail -40 "$out/configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" --target clef_reference clef_forward >"$out/build.log" 2>&1 ||
  { grep -m 20 -B2 -A8 'error' "$out/build.log" || tail -40 "$out/build.log"; exit 1; }
echo "built in $((SECONDS - start)) s"

stage "reference records on $device (fp32)"
"$build/clef_reference" --device "$device" --release tests/data/vectors/clef-omni-tiny/release \
  --expected tests/data/vectors/clef-omni-tiny/expected.jsonl

stage "reference records in bf16 on the CPU and on $device (grouped experts and fused attention on libtorch >= 2.8)"
for d in cpu "$device"; do
  "$build/clef_reference" --device "$d" --dtype bf16 --tolerance 1 --release tests/data/vectors/clef-omni-tiny/release \
    --expected tests/data/vectors/clef-omni-tiny/expected.jsonl | tail -1
done

if ((real_shape)); then
  for dtype in bf16 int8; do
    stage "real-shape release, $dtype, 1k, 4k and 16k tokens on $device"
    # The device's memory in use, sampled every 100 ms while the bench runs (the weights, libtorch's
    # cache and the longest forward's activations; not a figure of one allocation).
    sampler=""
    if command -v nvidia-smi >/dev/null; then
      nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$out/memory-$dtype.log" &
      sampler=$!
    fi
    "$build/clef_forward" --shape real --layers 2 --dtype "$dtype" --device "$device" \
      --tokens 1024,4096,16384 --threads "$(nproc)" \
      --warmup 2 --runs 5 --dir "$build/real-release-$dtype" --from "$build/real-release-bf16"
    if [[ -n "$sampler" ]]; then
      kill "$sampler" && wait "$sampler" 2>/dev/null || true
      sort -n "$out/memory-$dtype.log" | tail -1 | awk '{print "  peak device memory in use: " $1 " MiB"}'
    fi
    # The same record on the CPU (the per-expert path): the logits' largest difference.
    for d in cpu "$device"; do
      "$build/clef_forward" --shape real --layers 2 --dtype "$dtype" --device "$d" --tokens 1024 --threads "$(nproc)" \
        --warmup 0 --runs 1 --json --dir "$build/real-release-$dtype" | grep '"kind":"forward"' >"$out/logits-$dtype-${d%%:*}.json"
    done
    python3 - "$out/logits-$dtype-cpu.json" "$out/logits-$dtype-${device%%:*}.json" <<'PY'
import json, sys
a, b = (json.load(open(p))["logits"] for p in sys.argv[1:])
print(f"  1,024 tokens, {len(a)} logits: max |cpu - gpu| {max(abs(x - y) for x, y in zip(a, b)):.3g}, max |logit| {max(map(abs, a)):.3g}")
PY
  done
fi
stage "done"
