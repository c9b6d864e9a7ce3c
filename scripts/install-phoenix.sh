#!/usr/bin/env bash
# Install Arize Phoenix into its own venv, .venv-phoenix, for tests/integration/test_otlp_phoenix.py: a real OTLP receiver
# (HTTP and gRPC) on loopback whose API reads the spans back. A separate venv because Phoenix pins a large
# dependency tree (FastAPI, SQLAlchemy, gRPC, pandas, ...) that must never constrain the library's test venv.
# Idempotent: a stamp records the pinned version, so a second run does nothing. Quiet; fails loudly.
#
# Bump PHOENIX_VERSION only together with a green tests/integration/test_otlp_phoenix.py: the test reads spans back through
# Phoenix's REST API and its server environment variables, both of which change between major versions.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

PHOENIX_VERSION=20.26.1
VENV=.venv-phoenix
stamp="$VENV/.phoenix-$PHOENIX_VERSION"

if [ ! -f "$stamp" ]; then
  if [ ! -x "$VENV/bin/python" ]; then
    if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
      echo "install-phoenix: arize-phoenix $PHOENIX_VERSION needs Python >= 3.11; python3 is $(python3 -V 2>&1)" >&2
      exit 1
    fi
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
  fi
  if ! "$VENV/bin/python" -m pip install -q "arize-phoenix==$PHOENIX_VERSION"; then
    echo "install-phoenix: pip install arize-phoenix==$PHOENIX_VERSION into $VENV failed" >&2
    exit 1
  fi
  rm -f "$VENV"/.phoenix-*
  touch "$stamp"
fi

installed=$("$VENV/bin/python" -c 'from importlib.metadata import version; print(version("arize-phoenix"))')
if [ "$installed" != "$PHOENIX_VERSION" ]; then
  echo "install-phoenix: $VENV has arize-phoenix $installed, expected $PHOENIX_VERSION" >&2
  exit 1
fi
echo "arize-phoenix $installed in $VENV"
