#!/usr/bin/env bash
# Installs and builds what is missing, then runs every test suite; exits non-zero on any failure.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
ctest --test-dir "${BATON_BUILD_DIR:-$root/build}" --output-on-failure -j "$(nproc)"
