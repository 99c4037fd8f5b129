#!/usr/bin/env bash
# Provision libtorch for the worker: a project-local .venv holding the PyPI wheel
# torch==2.13.0, the exact version tch 0.26 builds against. Idempotent: when the
# venv already has that torch, it touches nothing and returns at once.
# A user-set LIBTORCH wins: then nothing is installed.
set -euo pipefail

TORCH_VERSION="2.13.0"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
marker="$venv/.lavender-torch-$TORCH_VERSION"

if [ -n "${LIBTORCH:-}" ]; then
  if [ ! -d "$LIBTORCH/lib" ]; then
    echo "setup-libtorch: LIBTORCH=$LIBTORCH has no lib/ folder; unset it to use .venv, or point it at a libtorch folder" >&2
    exit 1
  fi
  echo "setup-libtorch: using LIBTORCH=$LIBTORCH (set by you); .venv not touched"
  exit 0
fi

if [ -f "$marker" ] && [ -f "$venv/lib/torch-path" ] && [ -d "$(cat "$venv/lib/torch-path")/lib" ]; then
  echo "setup-libtorch: torch $TORCH_VERSION already in .venv; nothing to do"
  exit 0
fi

python="${PYTHON:-python3}"
if ! command -v "$python" >/dev/null 2>&1; then
  echo "setup-libtorch: python3 not found; install Python 3 (3.10+) and rerun" >&2
  exit 1
fi

start=$(date +%s)
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv" || {
    echo "setup-libtorch: could not create $venv; on Debian/Ubuntu install python3-venv" >&2
    exit 1
  }
fi
"$venv/bin/python" -m pip install --quiet --no-cache-dir "torch==$TORCH_VERSION" numpy >"$venv/pip-install.log" 2>&1 || {
  echo "setup-libtorch: pip install torch==$TORCH_VERSION failed; see $venv/pip-install.log" >&2
  tail -5 "$venv/pip-install.log" >&2
  exit 1
}
torch_dir=$("$venv/bin/python" -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null)
mkdir -p "$venv/lib"
printf '%s' "$torch_dir" >"$venv/lib/torch-path"
touch "$marker"
echo "setup-libtorch: installed torch $TORCH_VERSION into .venv in $(( $(date +%s) - start ))s ($torch_dir)"
