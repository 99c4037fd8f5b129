#!/usr/bin/env bash
# Benchmark 13 — where the test suite's time goes. `make test-run`'s Rust suite
# (cargo-nextest, four tests at once, .config/nextest.toml) with each test in its own
# cpuacct cgroup: a cargo target runner (this script, called with the test binary)
# moves itself into a fresh cgroup, runs the test and logs the cgroup's CPU time,
# which counts every process the test started, daemons that left its session
# included. Prints the suite's wall time, the sum of the tests' CPU seconds, the
# slowest tests by CPU, and the machine's busy and idle CPU seconds over the run.
# The Slurm, replication-fault and pytest rounds that `make test-run` runs beside the
# suite are left out (FILTER).
#
#   sudo bash bench/suite/run.sh      # FILTER='not test(/^(slurm_e2e|slurm_cluster|replicate_faults)::/)' TOP=25
#
# Run on what `make test-build` compiled, with its environment (the script sets
# LIBTORCH and the lint wrapper as the Makefile does, so nothing recompiles). Needs
# root (cgroup v1's cpuacct at /sys/fs/cgroup/cpuacct). Not a test.
set -uo pipefail

if [ "${1:-}" != "" ] && [ -x "${1:-}" ]; then
  # As the target runner: one test binary run, `--exact NAME` among its arguments.
  name="" prev=""
  for a in "$@"; do
    [ "$prev" = "--exact" ] && name=$a
    prev=$a
  done
  [ -z "$name" ] && exec "$@"
  cg="$SUITE_CGROUP/$$"
  mkdir "$cg" && echo $$ >"$cg/cgroup.procs"
  start=$(date +%s%N)
  "$@"
  rc=$?
  wall_ms=$((($(date +%s%N) - start) / 1000000))
  echo "$(($(cat "$cg/cpuacct.usage") / 1000000)) $wall_ms $name" >>"$SUITE_LOG"
  echo $$ >"$SUITE_CGROUP/../cgroup.procs"
  rmdir "$cg" 2>/dev/null
  exit "$rc"
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$repo"
FILTER="${FILTER:-not test(/^(slurm_e2e|slurm_cluster|replicate_faults)::/)}"
TOP="${TOP:-25}"
root=/sys/fs/cgroup/cpuacct
[ -w "$root" ] || { echo "needs root and cgroup v1's cpuacct at $root" >&2; exit 2; }
export SUITE_CGROUP="$root/lavender-suite-$$"
export SUITE_LOG="$repo/target/bench-suite-cpu.log"
mkdir -p "$SUITE_CGROUP" target
: >"$SUITE_LOG"
trap 'rmdir "$SUITE_CGROUP"/* "$SUITE_CGROUP" 2>/dev/null' EXIT

busy_idle() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9, $5 + $6 }' /proc/stat; }
read -r busy0 idle0 < <(busy_idle)
start=$SECONDS
CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER="$here/run.sh" \
  LIBTORCH="${LIBTORCH:-$(cat .venv/lib/torch-path)}" \
  RUSTC_WORKSPACE_WRAPPER=clippy-driver CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__ \
  cargo nextest run --workspace -E "$FILTER" >target/bench-suite.log 2>&1
rc=$?
wall=$((SECONDS - start))
read -r busy1 idle1 < <(busy_idle)
hz=$(getconf CLK_TCK)
echo "suite: exit $rc, $wall s wall; the machine busy $(((busy1 - busy0) / hz)) CPU-s, idle $(((idle1 - idle0) / hz)) CPU-s"
awk '{ cpu += $1; n++ } END { printf "tests: %d, %.0f CPU-s in all\n", n, cpu / 1000 }' "$SUITE_LOG"
echo "the $TOP tests that took the most CPU (CPU-s, wall s, test):"
sort -rn "$SUITE_LOG" | head -"$TOP" | awk '{ printf "%7.1f %7.1f  %s\n", $1 / 1000, $2 / 1000, $3 }'
exit "$rc"
