#!/usr/bin/env bash
# Python side of the set-up, into the project's .venv (after setup-libtorch.sh put
# torch there): the lavender-protocol package from python/ (editable), pytest for its
# tests, and transformers + accelerate (scripts/hf-setup.sh) for the Hugging Face
# Trainer example and the tests that run it and torchrun under lavenderd, Lightning
# 2.6.x (scripts/lightning-setup.sh) for the Lightning example and its tests, and
# bergson (scripts/attribution-setup.sh) for attribution.
# Idempotent and quick when everything is there; torch is never upgraded (pinned to
# the version installed).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${LAVENDER_PYTHON:-$root/.venv/bin/python}"
if [ ! -x "$PY" ]; then
  echo "python-setup: $PY not found; run \`make setup\` first (scripts/setup-libtorch.sh creates .venv with torch)" >&2
  exit 1
fi
pins="$(mktemp)"
trap 'rm -f "$pins"' EXIT
# Written only when something is installed (importing torch takes seconds).
pin_torch() {
  [ -s "$pins" ] || "$PY" -c 'import torch; print("torch==" + torch.__version__.split("+")[0])' >"$pins" 2>/dev/null || : >"$pins"
}

installed_here=$("$PY" -c 'import os, lavender_protocol; print(os.path.realpath(os.path.dirname(lavender_protocol.__file__)))' 2>/dev/null || true)
if [ "$installed_here" != "$(realpath "$root/python/src/lavender_protocol")" ]; then
  echo "python-setup: installing lavender-protocol (python/, editable) into .venv"
  pin_torch
  "$PY" -m pip install --quiet --no-cache-dir --disable-pip-version-check -c "$pins" -e "$root/python"
fi
if ! "$PY" -c 'import pytest' 2>/dev/null; then
  echo "python-setup: installing pytest into .venv"
  pin_torch
  "$PY" -m pip install --quiet --no-cache-dir --disable-pip-version-check -c "$pins" pytest
fi
LAVENDER_PYTHON="$PY" bash "$root/scripts/hf-setup.sh"
LAVENDER_PYTHON="$PY" bash "$root/scripts/lightning-setup.sh"
# bergson 2.5.1 for `lavenderd attribute` and the attribution tests `make test` runs.
LAVENDER_PYTHON="$PY" bash "$root/scripts/attribution-setup.sh"
