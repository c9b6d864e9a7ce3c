#!/usr/bin/env bash
# Install the Node.js app of tests/integration/test_node.py (LangChain JS, its OpenInference instrumentation, the standard OTLP
# exporters) into tests/node/node_modules with `npm ci`: exact versions from tests/node/package-lock.json.
# Idempotent: a stamp records the lock's checksum. Without node and npm it says so and does nothing (the tests
# then skip, saying why).
set -euo pipefail
cd "$(dirname "$0")/../tests/node"
if ! command -v node > /dev/null || ! command -v npm > /dev/null; then
  echo "install-node: node and npm not found; tests/integration/test_node.py will skip" >&2
  exit 0
fi
sum=$(sha256sum package-lock.json | cut -c1-16)
stamp="node_modules/.cp-observe-$sum"
if [ ! -f "$stamp" ]; then
  if ! npm ci --no-audit --no-fund --loglevel=error; then
    echo "install-node: npm ci in tests/node failed" >&2
    exit 1
  fi
  touch "$stamp"
fi
echo "node app in tests/node/node_modules"
