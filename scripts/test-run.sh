#!/usr/bin/env bash
# `make test-run`: every test, on what `make test-build` compiled (run with the same
# environment, so nothing recompiles): the Rust suite, and beside it pytest
# (python/tests; its exit 5, no test collected, fails like any other non-zero code)
# and the Slurm tests in a second cargo: the single-node end-to-end test spends most of
# its minute waiting on the scheduler's 30-second cycles, the two-node one
# (slurm_cluster: its own slurmctld, ports and munged, so both run at once) on torchrun
# and a lost node being noticed, and the rest of the suite runs in that time instead of
# after it. The default pipeline's attribution test stays in the main run: it and the
# worker's tests are both CPU-bound libtorch work, so on two cores running them side by
# side only shares the cores (a clean-clone CI with it beside: the worker's tests took
# 689 s, the attribution test 1,049 s). --no-fail-fast: one failing binary does not
# hide the others.
# Logs: target/pytest.log, target/test.log and target/test-slurm.log.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mkdir -p target

# pytest and Slurm's test run in the background, their output kept for the end.
.venv/bin/python -m pytest -q python/tests >target/pytest.log 2>&1 &
pytest=$!
cargo test -p lavenderd --test it -- --nocapture slurm_e2e:: slurm_cluster:: >target/test-slurm.log 2>&1 &
slurm=$!
cargo test --workspace --no-fail-fast -- --skip slurm_e2e:: --skip slurm_cluster:: 2>&1 | tee target/test.log
rest=${PIPESTATUS[0]}
wait "$pytest"
py=$?
echo "---- pytest, run beside (target/pytest.log):"
cat target/pytest.log
if [ "$py" = 5 ]; then echo "pytest collected no test in python/tests" >&2; fi
wait "$slurm"
slurm_rc=$?
echo "---- the Slurm tests (one node and two), run beside (target/test-slurm.log):"
cat target/test-slurm.log

failed=0
if [ "$py" != 0 ]; then echo "pytest failed (exit $py): see target/pytest.log" >&2; failed=1; fi
if [ "$rest" != 0 ]; then echo "the Rust tests failed (exit $rest): see target/test.log" >&2; failed=1; fi
if [ "$slurm_rc" != 0 ]; then echo "the Slurm tests failed (exit $slurm_rc): see target/test-slurm.log" >&2; failed=1; fi
exit "$failed"
