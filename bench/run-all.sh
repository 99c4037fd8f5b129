#!/usr/bin/env bash
# Every benchmark in one go (`make bench`): setup, then status, overhead, detection,
# checkpoint I/O, trainer, interference, recovery and drills, each printing its figures and ratios.
# The combined output goes to target/bench/all.txt; each benchmark also leaves its
# raw results under target/bench/<name>/. Takes about 20 minutes.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$root/target/bench"
bash "$root/bench/setup.sh"
{
  for b in status overhead detect checkpoint trainer interference recovery drill; do
    echo
    echo "=== $b: bash bench/$b/run.sh"
    bash "$root/bench/$b/run.sh"
  done
} 2>&1 | tee "$root/target/bench/all.txt"
