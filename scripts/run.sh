#!/usr/bin/env bash
# The main job on the embedded defaults: installs and builds what is missing, then answers the
# example requests in config/examples/ with the keyword engine and prints the SystemOne responses.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh" >&2
exec "${BATON_BUILD_DIR:-$root/build}/adapters/baton" decide --engine keyword "$root/config/examples/requests.jsonl"
