#!/usr/bin/env bash
# Makes Hugging Face `transformers` importable in the project's .venv (torch is
# already there) for the export check (worker/tests/export_hf.rs). Idempotent and
# quick when it is already installed; prints the versions in use.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${LAVENDER_PYTHON:-.venv/bin/python}"
if [ ! -x "$PY" ]; then
  echo "hf-setup: $PY not found; run \`make setup\` first (it creates .venv with torch)" >&2
  exit 1
fi
if ! "$PY" -c "import transformers" 2>/dev/null; then
  echo "hf-setup: installing transformers from PyPI into $(dirname "$(dirname "$PY")")" >&2
  "$PY" -m pip install --quiet --no-cache-dir --disable-pip-version-check transformers >&2
fi
"$PY" - <<'PY'
import sys, torch, transformers, tokenizers, safetensors
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, transformers {transformers.__version__}, "
      f"tokenizers {tokenizers.__version__}, safetensors {safetensors.__version__}")
PY
