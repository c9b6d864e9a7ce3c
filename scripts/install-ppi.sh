#!/usr/bin/env bash
# Install the reference implementation of prediction-powered inference, ppi-python, into its own venv,
# .venv-ppi, for tests/judging/test_ppi_reference.py: the test runs ppi_py there as a subprocess on the same
# inputs as cp_observe/_judging/_ppi.py and compares estimates, intervals and the PPI++ weight. A separate venv
# because ppi-python pulls numpy, scipy, statsmodels and scikit-learn, which the library (numpy-free) must
# never depend on. Idempotent: a stamp records the pinned version, so a second run does nothing. Quiet; fails
# loudly.
#
# Bump PPI_VERSION only together with a green tests/judging/test_ppi_reference.py.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

PPI_VERSION=0.2.3
VENV=.venv-ppi
stamp="$VENV/.ppi-$PPI_VERSION"

if [ ! -f "$stamp" ]; then
  if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
  fi
  if ! "$VENV/bin/python" -m pip install -q "ppi-python==$PPI_VERSION"; then
    echo "install-ppi: pip install ppi-python==$PPI_VERSION into $VENV failed" >&2
    exit 1
  fi
  rm -f "$VENV"/.ppi-*
  touch "$stamp"
fi

installed=$("$VENV/bin/python" -c 'from importlib.metadata import version; print(version("ppi-python"))')
if [ "$installed" != "$PPI_VERSION" ]; then
  echo "install-ppi: $VENV has ppi-python $installed, expected $PPI_VERSION" >&2
  exit 1
fi
echo "ppi-python $installed in $VENV"
