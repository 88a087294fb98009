#!/usr/bin/env bash
# Installs and builds what is missing, checks that includes point down the layers
# (docs/architecture.md), then runs every test suite; exits non-zero on any failure.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
/usr/bin/python3 "$root/scripts/check_layers.py" "$root"
ctest --test-dir "${BATON_BUILD_DIR:-$root/build}" --output-on-failure -j "$(nproc)"
