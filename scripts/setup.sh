#!/usr/bin/env bash
# Installs what baton needs on Debian 12 (apt-get, only what is missing) and builds it (Release,
# ccache). run.sh and test.sh call it; it prints nothing about packages that are already there.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BATON_BUILD_DIR:-$root/build}"

packages=(
  g++ cmake ninja-build ccache pkg-config
  nlohmann-json3-dev   # JSON model and parsing
  libboost1.81-dev     # Boost.System result<> now; Asio/Beast for the servers
  libgtest-dev         # tests
  libbenchmark-dev     # bench/
  libopenblas0-openmp  # BLAS for libtorch, threaded with OpenMP
  libtorch-dev         # the clef engine's tensors (Debian's CPU libtorch 1.13)
  libdnnl-dev          # oneDNN's GEMMs for the fused CPU attention (libtorch's bf16 matmuls run on it too)
  libxsmm-dev          # JIT small-GEMM kernels for fp32 experts packed at load, where they beat both
  libpcre2-dev         # the tokenizer's split regex needs Unicode classes
  libutf8proc-dev      # the tokenizer's NFC normalisation
  libssl-dev           # sha256 model fingerprints (libcrypto); TLS for the systemone engine (libssl)
  libyaml-cpp-dev      # the YAML tool registry and policies
  libspdlog-dev        # the server's log lines
  libsqlite3-dev       # the decision log
  libpq-dev            # the decision log's PostgreSQL store (several instances, one database)
  postgresql           # tests: a real PostgreSQL server, started by the tests in a temporary folder
  python3-psycopg2     # tests: an auditor's check of the PostgreSQL log's chains without baton (adapters/log/README.md)
  zlib1g-dev           # gzip request bodies on the SystemOne HTTP API
  libavformat-dev libavcodec-dev libswscale-dev libswresample-dev libavutil-dev  # engine/media: FFmpeg decodes images, audio, video
  python3-websockets   # the example agents and their end-to-end test
  python3-torch        # tests: writes the tiny broken checkpoints for the loader's error tests
  python3-av           # tests: the Clef reference's PyAV audio decode, which the resampling tests match
  chromium             # tests/browser: the reviewer inbox page, headless, driven by playwright-core
  make                 # node-gyp: better-sqlite3's addon for the LangGraph example's checkpoints
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node and npm for tests/sdk (the official TypeScript SDK against `baton serve`), only when the
# command is missing: a Node from elsewhere (nodesource, nvm) bundles its own npm, and Debian's
# npm package would conflict with it. The SDK declares engines node>=20 while Debian 12 ships
# Node 18.20; its dist/index.mjs only uses what Node 18 has (global fetch and Response.clone,
# AbortController with signal.reason and throwIfAborted, private class fields and methods, ??=),
# and `node --test` with before/after hooks is there since 18.8.
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
# The headers of the node that runs npm, for node-gyp (better-sqlite3 in the LangGraph example):
# a Node from elsewhere ships them next to itself; Debian's are in libnode-dev.
node_dir() { node -p 'require("path").resolve(process.execPath, "../..")'; }
if ! command -v node >/dev/null || [ ! -e "$(node_dir)/include/node/node.h" ]; then
  dpkg-query -W -f='${Status}' libnode-dev 2>/dev/null | grep -q "install ok installed" || missing+=(libnode-dev)
fi
if ((${#missing[@]})); then
  echo "baton: installing ${missing[*]}" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The SDK exactly as tests/sdk/package-lock.json pins it (integrity hashes checked by npm ci);
# again only when the lockfile is newer than what is installed.
sdk_installed="$root/tests/sdk/node_modules/@typesafe-ai/sdk/package.json"
if [ ! -e "$sdk_installed" ] || [ "$root/tests/sdk/package-lock.json" -nt "$sdk_installed" ]; then
  echo "baton: npm ci in tests/sdk" >&2
  npm ci --prefix "$root/tests/sdk" --no-audit --no-fund --loglevel=error >/dev/null
fi

# The same for tests/browser (playwright-core drives the chromium above: it downloads no browser).
browser_installed="$root/tests/browser/node_modules/playwright-core/package.json"
if [ ! -e "$browser_installed" ] || [ "$root/tests/browser/package-lock.json" -nt "$browser_installed" ]; then
  echo "baton: npm ci in tests/browser" >&2
  npm ci --prefix "$root/tests/browser" --no-audit --no-fund --loglevel=error >/dev/null
fi

# The same for tests/mcp (the official MCP SDK and reference server, the real peer of the MCP tests).
mcp_installed="$root/tests/mcp/node_modules/@modelcontextprotocol/sdk/package.json"
if [ ! -e "$mcp_installed" ] || [ "$root/tests/mcp/package-lock.json" -nt "$mcp_installed" ]; then
  echo "baton: npm ci in tests/mcp" >&2
  npm ci --prefix "$root/tests/mcp" --no-audit --no-fund --loglevel=error >/dev/null
fi

# The MCP gateway example (examples/agents/mcp_gateway: the same SDK and reference server).
gateway_installed="$root/examples/agents/mcp_gateway/node_modules/@modelcontextprotocol/sdk/package.json"
if [ ! -e "$gateway_installed" ] || [ "$root/examples/agents/mcp_gateway/package-lock.json" -nt "$gateway_installed" ]; then
  echo "baton: npm ci in examples/agents/mcp_gateway" >&2
  npm ci --prefix "$root/examples/agents/mcp_gateway" --no-audit --no-fund --loglevel=error >/dev/null
fi

# baton-client (clients/typescript): its dependencies as package-lock.json pins them, then tsc
# to dist/ when a source, tsconfig.json or package.json is newer than what was built.
client="$root/clients/typescript"
client_installed="$client/node_modules/typescript/package.json"
if [ ! -e "$client_installed" ] || [ "$client/package-lock.json" -nt "$client_installed" ]; then
  echo "baton: npm ci in clients/typescript" >&2
  npm ci --prefix "$client" --no-audit --no-fund --loglevel=error >/dev/null
fi
client_built="$client/dist/index.js"
if [ ! -e "$client_built" ] || [ -n "$(find "$client/src" "$client/tsconfig.json" "$client/package.json" -newer "$client_built" -print -quit)" ]; then
  echo "baton: building clients/typescript" >&2
  npm run build --prefix "$client" --silent >/dev/null
fi

# The LangGraph example (examples/agents/langgraph: @langchain/langgraph and its SQLite checkpointer
# as package-lock.json pins them, baton-client linked from clients/typescript, built just above).
# better-sqlite3 compiles its addon with node-gyp (g++, make, python3; a minute or two), against
# the headers of the node that runs it: no download.
langgraph="$root/examples/agents/langgraph"
langgraph_installed="$langgraph/node_modules/better-sqlite3/build/Release/better_sqlite3.node"
if [ ! -e "$langgraph_installed" ] || [ "$langgraph/package-lock.json" -nt "$langgraph_installed" ]; then
  echo "baton: npm ci in examples/agents/langgraph (builds better-sqlite3)" >&2
  nodedir="${npm_config_nodedir:-$(node_dir)}"
  [ -e "$nodedir/include/node/node.h" ] || { echo "baton: no Node headers in $nodedir/include/node (Debian: apt-get install libnode-dev)" >&2; exit 1; }
  npm_config_nodedir="$nodedir" npm ci --prefix "$langgraph" --no-audit --no-fund --loglevel=error >/dev/null
fi

if ! log=$(cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release 2>&1); then
  echo "$log" >&2
  exit 1
fi
cmake --build "$build" -j "$(nproc)"
