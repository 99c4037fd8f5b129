#!/usr/bin/env bash
# Benchmark 7 — recovery after a worker dies: SIGKILL the worker once it reaches step
# KILL_AT and time from the kill to the restarted worker's first step past the step it
# was killed at (the steps since the last checkpoint trained again), for
#   - lavenderd supervising lavender-worker: the daemon restarts it at once from the
#     run's latest complete checkpoint;
#   - torchrun --max-restarts 1 on the equivalent PyTorch script: examples/torchrun/
#     train.py (one process; one block, width 64, 2 heads, 64-token windows, batch 8,
#     as lavender-worker's model here; the same checkpoint interval), through
#     bench/recovery/resume_latest.py so that a restarted worker loads its run's
#     latest checkpoint, as elastic scripts do;
#   - the limit: lavender-worker started by hand resuming from the checkpoint the
#     daemon's restart loaded, to the same step: its own cold start, checkpoint load
#     and replay, no supervisor.
# ROUNDS rounds of the three, one after the other; the report gives the medians and
# the targets: lavenderd ≤ torchrun, and ≤ 1.2 × the limit.
#
#   bash bench/recovery/run.sh                # ROUNDS=5 KILL_AT=60 SAVE_EVERY=50 THREADS=1
#   ROUNDS=1 bash bench/recovery/run.sh       # the short setting (about a minute)
#
# Needs the release binaries (bash bench/setup.sh) and the .venv's torchrun. Not a test.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../lib.sh"
bench_need lavenderd worker jq curl
bench_out recovery

ROUNDS="${ROUNDS:-5}"
KILL_AT="${KILL_AT:-60}"
SAVE_EVERY="${SAVE_EVERY:-50}"
THREADS="${THREADS:-1}"
TORCHRUN="${TORCHRUN:-$BENCH_ROOT/.venv/bin/torchrun}"
# Never reached: each run is stopped once its recovery is measured.
MAX_STEPS=$((KILL_AT + 100 * SAVE_EVERY))
if [ ! -x "$TORCHRUN" ]; then
  echo "bench: no torchrun at $TORCHRUN; run \`make setup\` or set TORCHRUN=" >&2
  exit 1
fi

# torchrun's process groups, killed on the way out whatever happens.
TORCHRUN_GROUPS=()
trap 'for g in "${TORCHRUN_GROUPS[@]}"; do kill -9 -- "-$g" 2>/dev/null || true; done; bench_cleanup' EXIT

bench_machine "$BENCH_TMP"
echo "kill at step $KILL_AT, a checkpoint every $SAVE_EVERY steps, $THREADS thread(s), $ROUNDS round(s)"
tokens="$BENCH_TMP/tokens"
"$PY" "$BENCH_ROOT/bench/trainer/torch_gpt2.py" --write-tokens "$tokens" --vocab 256 >/dev/null

# lavenderd, then the limit from the checkpoint its restart loaded.
lavender_round() {
  local round="$1" dir="$BENCH_TMP/lavender-$1"
  daemon_write_config "$dir" "[\"$WORKER\"]" "device: cpu
threads: $THREADS
model: {n_layer: 1, n_head: 2, n_embd: 64, n_positions: 64, dropout: 0.0}
optimizer: {warmup_steps: 10}
training:
  batch_size: 8
  seq_len: 64
  log_every: 1
  eval_every: 1000000
  eval_batches: 1
  keep_checkpoints: 1000
  stages:
    - {name: pretrain, steps: $MAX_STEPS, lr: 3.0e-3, checkpoint_every: $SAVE_EVERY}"
  mkdir -p "$dir/data"
  ln -s "$tokens" "$dir/data/tokens"
  daemon_start "$dir"
  local daemon="$DAEMON_PID"
  daemon_cli "$dir" start >/dev/null
  wait_for 120 "training" training_running "$DAEMON_SOCK"
  local run
  run="$(pipeline_run_dir "$dir/data")"
  "$PY" "$here/measure.py" kill --run-dir "$run" --at "$KILL_AT" >"$BENCH_OUT/lavenderd-$round.json"
  local ckpt kill_step
  ckpt="$(jq -r 'select(.kind == "checkpoint_loaded") | .path' "$run/events.jsonl" | tail -n 1)"
  kill_step="$(jq .kill_step "$BENCH_OUT/lavenderd-$round.json")"
  daemon_stop "$dir" "$daemon"
  "$PY" "$here/measure.py" cold --run-dir "$dir/limit" --past "$kill_step" -- \
    "$WORKER" train --config "$dir/data/state/pipeline-config.yaml" --data-root "$dir/data" \
    --run-dir "$dir/limit" --scale tiny --chunk 1 --resume "$ckpt" >"$BENCH_OUT/limit-$round.json"
  rm -rf "$dir"
}

torchrun_round() {
  local round="$1" dir="$BENCH_TMP/torchrun-$1"
  local run="$dir/data/checkpoints/run-torchrun"
  mkdir -p "$dir/data/checkpoints"
  (
    cd "$BENCH_ROOT"
    OMP_NUM_THREADS="$THREADS" PYTHONPATH="$BENCH_ROOT/python/src" exec setsid "$TORCHRUN" \
      --standalone --nproc_per_node=1 --max-restarts=1 "$here/resume_latest.py" \
      --max-steps "$MAX_STEPS" --save-every "$SAVE_EVERY" --batch-size 8 --seq-len 64 \
      train --config "$dir/none.yaml" --data-root "$dir/data" --run-dir "$run"
  ) >"$dir/torchrun.log" 2>&1 &
  local group=$!
  TORCHRUN_GROUPS+=("$group")
  "$PY" "$here/measure.py" kill --run-dir "$run" --at "$KILL_AT" >"$BENCH_OUT/torchrun-$round.json"
  kill -9 -- "-$group" 2>/dev/null || true
  wait "$group" 2>/dev/null || true
  rm -rf "$dir"
}

for round in $(seq "$ROUNDS"); do
  lavender_round "$round"
  torchrun_round "$round"
  echo "round $round: lavenderd $(jq .seconds "$BENCH_OUT/lavenderd-$round.json") s," \
    "torchrun $(jq .seconds "$BENCH_OUT/torchrun-$round.json") s," \
    "limit $(jq .seconds "$BENCH_OUT/limit-$round.json") s"
done

"$PY" - "$BENCH_OUT" "$ROUNDS" <<'PY' | tee "$BENCH_OUT/report.txt"
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def median(name):
    return statistics.median(json.load(open(f"{out}/{name}-{r}.json"))["seconds"] for r in range(1, rounds + 1))
lav, tr, limit = median("lavenderd"), median("torchrun"), median("limit")
print(f"{'':34}{'median s':>10}")
print(f"{'lavenderd (kill -> step past it)':34}{lav:10.3f}")
print(f"{'torchrun --max-restarts 1':34}{tr:10.3f}")
print(f"{'limit (cold start + load + replay)':34}{limit:10.3f}")
ok = lambda c: "met" if c else "MISSED"
print(f"lavenderd / torchrun = {lav / tr:.2f} (target <= 1: {ok(lav <= tr)}); "
      f"lavenderd / limit = {lav / limit:.2f} (target <= 1.2: {ok(lav <= 1.2 * limit)})")
PY
