#!/usr/bin/env bash
# Makes Hugging Face `transformers` (and `accelerate`, which its Trainer needs)
# importable in the project's .venv (torch is already there) for the export check
# (worker/tests/it/export_hf.rs) and the Trainer example (daemon/tests/it/python_hf.rs). Idempotent and
# quick when it is already installed; prints the versions in use.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${LAVENDER_PYTHON:-.venv/bin/python}"
if [ ! -x "$PY" ]; then
  echo "hf-setup: $PY not found; run \`make setup\` first (it creates .venv with torch)" >&2
  exit 1
fi
if ! "$PY" -c "import transformers, accelerate" 2>/dev/null; then
  echo "hf-setup: installing transformers and accelerate (the Trainer's) from PyPI into $(dirname "$(dirname "$PY")")" >&2
  # torch stays the version installed (accelerate depends on torch).
  pins="$(mktemp)"
  "$PY" -c 'import torch; print("torch==" + torch.__version__.split("+")[0])' >"$pins" 2>/dev/null || : >"$pins"
  "$PY" -m pip install --quiet --no-cache-dir --disable-pip-version-check -c "$pins" transformers accelerate >&2
  rm -f "$pins"
fi
"$PY" - <<'PY'
import sys, torch, transformers, tokenizers, safetensors, accelerate
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, transformers {transformers.__version__}, "
      f"accelerate {accelerate.__version__}, "
      f"tokenizers {tokenizers.__version__}, safetensors {safetensors.__version__}")
PY
