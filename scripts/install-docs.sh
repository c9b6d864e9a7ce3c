#!/usr/bin/env bash
# Install the documentation toolchain (MkDocs, Material, mkdocstrings) into its own venv, .venv-docs, pinned by
# scripts/docs.lock: the site's build never constrains the library's test venv, nor the reverse. The hook that
# generates the reference pages (scripts/docs_reference.py) reads the checkout's cp_observe from its path, so the
# library itself is not installed here.
# Idempotent and quick when present: a stamp records the lock's hash, so a second run does nothing. Quiet; fails
# loudly.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

VENV=.venv-docs
LOCK=scripts/docs.lock
hash=$(sha256sum "$LOCK" | cut -c1-16)
stamp="$VENV/.docs-$hash"

if [ ! -f "$stamp" ]; then
  if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
  fi
  if ! "$VENV/bin/python" -m pip install -q -r "$LOCK"; then
    echo "install-docs: pip install -r $LOCK into $VENV failed" >&2
    exit 1
  fi
  rm -f "$VENV"/.docs-*
  touch "$stamp"
fi
echo "mkdocs $("$VENV/bin/python" -c 'from importlib.metadata import version as v; print(v("mkdocs"), "material", v("mkdocs-material"), "mkdocstrings", v("mkdocstrings"))') in $VENV"
