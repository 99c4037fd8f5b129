#!/usr/bin/env bash
# `make test-gpu`: lavender-worker in bf16 on a CUDA GPU (worker/tests/gpu.rs): 50
# steps whose loss falls, a stop and resume within CUDA's rounding of a straight run,
# and steps/s beside the same PyTorch script on that GPU. Never part of `make test`.
# On a machine without a usable CUDA device it stops at once, non-zero, saying so.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$root/.venv/bin/python}"

if [ ! -x "$PYTHON" ]; then
  echo "make test-gpu: no Python at $PYTHON; run \`make setup\` first" >&2
  exit 1
fi
if ! "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  why="torch.cuda.is_available() is False (no NVIDIA GPU or driver, or a CPU-only torch)"
  if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
    why="$why; CUDA_VISIBLE_DEVICES='${CUDA_VISIBLE_DEVICES}' limits the GPUs it may see"
  fi
  echo "make test-gpu: no CUDA device here: $why. This target trains on a GPU; run it on a machine with one (make test runs everything else)." >&2
  exit 1
fi
cd "$root"
"$PYTHON" -c 'import torch; print("make test-gpu on", torch.cuda.get_device_name(0))'
cargo test --release -p lavender-worker --features gpu-tests --test gpu -- --nocapture --test-threads=1
