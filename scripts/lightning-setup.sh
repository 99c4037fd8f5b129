#!/usr/bin/env bash
# Makes PyTorch Lightning 2.6.x importable in the project's .venv (torch is already
# there) for the Lightning example (examples/lightning), its callback's tests
# (python/tests/test_lightning.py) and the tests that run it under lavenderd
# (daemon/tests/it/python_lightning.rs). lavender_protocol.lightning is written for
# 2.6.x and refuses another version. Idempotent and quick when it is installed;
# prints the versions in use.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${LAVENDER_PYTHON:-.venv/bin/python}"
LIGHTNING_VERSION="2.6.6"
if [ ! -x "$PY" ]; then
  echo "lightning-setup: $PY not found; run \`make setup\` first (it creates .venv with torch)" >&2
  exit 1
fi
if ! "$PY" -c 'import sys; from importlib.metadata import version; sys.exit(version("lightning") != sys.argv[1])' \
  "$LIGHTNING_VERSION" 2>/dev/null; then
  echo "lightning-setup: installing lightning $LIGHTNING_VERSION from PyPI into $(dirname "$(dirname "$PY")")" >&2
  # torch stays the version installed.
  pins="$(mktemp)"
  trap 'rm -f "$pins"' EXIT
  "$PY" -c 'import torch; print("torch==" + torch.__version__.split("+")[0])' >"$pins" 2>/dev/null || : >"$pins"
  "$PY" -m pip install --quiet --no-cache-dir --disable-pip-version-check -c "$pins" "lightning==$LIGHTNING_VERSION" >&2
fi
"$PY" - <<'PY'
import sys, torch, lightning
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, lightning {lightning.__version__}")
PY
