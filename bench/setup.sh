#!/usr/bin/env bash
# What the benchmarks need, installed once: wrk, hyperfine, b3sum and rclone (Debian/Ubuntu apt),
# supervisord in a scratch venv (bench/.supervisor-venv, gitignored) and release
# builds of lavenderd, lavender-fake-worker (a binary of the testkit), lavender-worker
# and bench/loadgen.
# Benchmarks are not tests: nothing here is part of CI.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

missing=()
for tool in wrk hyperfine jq curl b3sum rclone; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if ! command -v apt-get >/dev/null; then
    echo "bench: install ${missing[*]} with your package manager" >&2
    exit 1
  fi
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

venv="$root/bench/.supervisor-venv"
if [ ! -x "$venv/bin/supervisord" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --no-cache-dir supervisor
fi

export LIBTORCH="${LIBTORCH:-$(cat "$root/.venv/lib/torch-path")}"
cd "$root"
cargo build --release -p lavenderd -p lavender-testkit -p lavender-worker -p lavender-loadgen -p lavender-bench-reference
