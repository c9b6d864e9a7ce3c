#!/usr/bin/env bash
# Install the real RAG frameworks and instrumentors (LangChain, LlamaIndex, Haystack, Chroma; OpenInference,
# OpenLLMetry and opentelemetry-util-genai) into their own venv, .venv-frameworks, for tests/integration/
# test_frameworks.py and test_genai_retrieval.py. A separate venv because their dependency trees (numpy,
# onnxruntime, SQLAlchemy, ...) must never constrain the library's test venv.
# Exact versions from scripts/frameworks.lock, installed with --no-deps (nothing to resolve: a minute or two from
# a warm cache), plus cp-observe itself (editable, so the apps run this checkout). Idempotent: a stamp records the
# lock's checksum, so a second run does nothing. Quiet; fails loudly.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

VENV=.venv-frameworks
LOCK=scripts/frameworks.lock
sum=$(sha256sum "$LOCK" pyproject.toml | sha256sum | cut -c1-16)
stamp="$VENV/.frameworks-$sum"

if [ ! -f "$stamp" ]; then
  if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
  fi
  if ! "$VENV/bin/python" -m pip install -q --no-deps -r "$LOCK"; then
    echo "install-frameworks: pip install -r $LOCK into $VENV failed" >&2
    exit 1
  fi
  if ! "$VENV/bin/python" -m pip install -q --no-deps -e .; then
    echo "install-frameworks: pip install -e . into $VENV failed" >&2
    exit 1
  fi
  rm -f "$VENV"/.frameworks-*
  touch "$stamp"
fi
"$VENV/bin/python" -c 'import langchain_core, llama_index.core, haystack, chromadb, opentelemetry.util.genai, cp_observe' || {
  echo "install-frameworks: $VENV is incomplete; delete it and run again" >&2
  exit 1
}
echo "frameworks in $VENV"
