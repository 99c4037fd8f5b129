#!/usr/bin/env bash
# `make test-run`: every test, on what `make test-build` compiled (run with the same
# environment, so nothing recompiles), in two rounds:
# 1. The Rust suite (cargo-nextest: a process per test, four at once across every
#    binary, .config/nextest.toml; the 15 slowest are printed at the end), and
#    beside it pytest (python/tests; its exit 5, no test
#    collected, fails like any other non-zero code) and the Slurm tests in a second
#    cargo: the single-node end-to-end test spends most of its minute waiting on the
#    scheduler's 30-second cycles, the two-node one (slurm_cluster: its own
#    slurmctld, ports and munged, so both run at once) on torchrun and a lost node
#    being noticed, and the rest of the suite runs in that time instead of after it.
#    The replication fault tests (replicate_faults: each its own SeaweedFS from
#    scripts/s3/start.sh) run in that second cargo too: they mostly wait on a
#    bandwidth cap and a killed server's restart. `--workspace --test it` (every
#    package's `it` binary, the filter picking the daemon's) builds with the same
#    features as the build phase, so nothing recompiles beside the suite.
# 2. Then, alone, the default pipeline's attribution test (worker/tests/
#    attribution_default.rs, `at_two_checkpoints_…`): a whole `start --scale tiny`
#    and bergson's passes, CPU-bound libtorch work that on two cores only shares them
#    with whatever runs beside it (beside the Slurm tests it took 185-246 s in CI,
#    alone about 100 s). `--workspace --test` selects it with the same packages, so
#    the same features, as the build: nothing recompiles.
# No fail-fast: one failing test or binary does not hide the others.
# Logs: target/pytest.log, target/test.log, target/test-slurm.log and
# target/test-attribution.log.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mkdir -p target

# How many tests the cargo run logged in $1 passed, over all its binaries. A run
# chosen by a name filter that matches nothing passes with "0 passed": a filtered run
# below fails unless it ran what it selects.
passed_in() {
  awk '/^test result:/ { for (i = 2; i <= NF; i++) if ($i == "passed;") n += $(i - 1) } END { print n + 0 }' "$1"
}

# pytest and Slurm's test run in the background, their output kept for the end.
.venv/bin/python -m pytest -q python/tests >target/pytest.log 2>&1 &
pytest=$!
cargo test --workspace --test it -- --nocapture slurm_e2e:: slurm_cluster:: replicate_faults:: \
  >target/test-slurm.log 2>&1 &
slurm=$!
# The attribution test, by name: its binary runs in round 2.
attribution=at_two_checkpoints_a_verbatim_training_window_ranks_its_document_first
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "cargo-nextest is not installed: \`cargo install cargo-nextest --locked\` (0.9.143 or newer)" >&2
  exit 2
fi
cargo nextest run --workspace \
  -E "not (test(/^(slurm_e2e|slurm_cluster|replicate_faults)::/) | test(=$attribution))" 2>&1 |
  tee target/test.log
rest=${PIPESTATUS[0]}
wait "$pytest"
py=$?
echo "---- pytest, run beside (target/pytest.log):"
cat target/pytest.log
if [ "$py" = 5 ]; then echo "pytest collected no test in python/tests" >&2; fi
wait "$slurm"
slurm_rc=$?
echo "---- the Slurm and replication fault tests, run beside (target/test-slurm.log):"
cat target/test-slurm.log
if [ "$slurm_rc" = 0 ] && [ "$(passed_in target/test-slurm.log)" = 0 ]; then
  echo "the Slurm tests did not run (0 passed): see target/test-slurm.log" >&2
  slurm_rc=1
fi

echo "---- the default pipeline's attribution test, alone (target/test-attribution.log):"
start=$SECONDS
cargo test --workspace --test attribution_default -- --nocapture --exact "$attribution" 2>&1 |
  tee target/test-attribution.log
attribution_rc=${PIPESTATUS[0]}
echo "---- the attribution test took $((SECONDS - start)) s (exit $attribution_rc)"
if [ "$attribution_rc" = 0 ] && [ "$(passed_in target/test-attribution.log)" != 1 ]; then
  echo "the attribution test $attribution did not run: see target/test-attribution.log" >&2
  attribution_rc=1
fi

echo "---- the 15 slowest tests of the Rust suite (target/test.log):"
sed -n 's/^ *\(PASS\|FAIL\|TIMEOUT\) \[ *\([0-9.]*\)s\] ([^)]*) \(.*\)$/\2 s  \3/p' target/test.log |
  sort -rn | head -15

failed=0
if [ "$py" != 0 ]; then echo "pytest failed (exit $py): see target/pytest.log" >&2; failed=1; fi
if [ "$rest" != 0 ]; then echo "the Rust tests failed (exit $rest): see target/test.log" >&2; failed=1; fi
if [ "$slurm_rc" != 0 ]; then echo "the Slurm tests failed (exit $slurm_rc): see target/test-slurm.log" >&2; failed=1; fi
if [ "$attribution_rc" != 0 ]; then echo "the attribution test failed (exit $attribution_rc): see target/test-attribution.log" >&2; failed=1; fi
exit "$failed"
