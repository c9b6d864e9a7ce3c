#!/usr/bin/env bash
# Fill .cache/wheelhouse with the wheels of cp-observe's dependencies (at the versions .venv holds) and of its
# build backend, for tests/integration/test_wheel_deploy.py: that test builds the wheel from this checkout and
# installs it alone into a fresh venv with `pip --no-index --find-links .cache/wheelhouse`, so the test itself
# touches no network (only this set-up step reaches the package index, like the other install scripts).
# Idempotent: a stamp holds a hash of the pinned versions, so a second run with the same .venv does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

HOUSE=.cache/wheelhouse
mkdir -p "$HOUSE"
pins="$HOUSE/pins.txt"
# What the fresh venv will need: the project's dependencies pinned to .venv's versions, and the build backend.
.venv/bin/python - "$pins" <<'EOF'
import re
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, version

project = tomllib.load(open("pyproject.toml", "rb"))
wanted = list(project["project"]["dependencies"]) + list(project["build-system"]["requires"])
lines = []
for requirement in wanted:
    name = re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0]
    try:
        lines.append(f"{name}=={version(name)}")
    except PackageNotFoundError:  # the build backend may be absent from .venv: take what the index has
        lines.append(requirement)
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
EOF
freeze=$(.venv/bin/python -m pip freeze --exclude-editable | grep '==' | grep -v ' @ ' || true)
printf '%s\n' "$freeze" > "$HOUSE/constraints.txt"
sum=$(cat "$pins" "$HOUSE/constraints.txt" | sha256sum | cut -c1-16)
stamp="$HOUSE/.stamp-$sum"
if [ ! -f "$stamp" ]; then
  # pip wheel resolves the whole tree under .venv's versions (-c) and writes a wheel per distribution.
  if ! .venv/bin/python -m pip wheel -q -w "$HOUSE" -c "$HOUSE/constraints.txt" -r "$pins"; then
    echo "install-wheelhouse: pip wheel of cp-observe's dependencies into $HOUSE failed" >&2
    exit 1
  fi
  rm -f "$HOUSE"/.stamp-*
  touch "$stamp"
fi
echo "wheelhouse: $(find "$HOUSE" -name '*.whl' | wc -l) wheels in $HOUSE"
