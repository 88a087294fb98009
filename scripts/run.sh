#!/usr/bin/env bash
# The main job on the embedded defaults: installs and builds what is missing, then runs the routing
# server with config/baton.yaml (keyword engine, config/tools.yaml, config/policy.yaml, decision log
# in var/baton.db) on ws://127.0.0.1:8470/v1/agent until Ctrl-C. Extra arguments go to `baton serve`
# (e.g. --listen 127.0.0.1:9000).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Quiet when there is nothing to build: only ninja's "no work to do" is dropped; a build's progress
# and any error still show (set -o pipefail keeps setup.sh's exit status).
"$root/scripts/setup.sh" 2>&1 | { grep --line-buffered -vx 'ninja: no work to do\.' || true; } >&2
mkdir -p "$root/var"
exec "${BATON_BUILD_DIR:-$root/build}/adapters/baton" serve --config "$root/config/baton.yaml" "$@"
