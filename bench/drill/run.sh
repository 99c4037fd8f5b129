#!/usr/bin/env bash
# Benchmark 11 — restore drills beside training. Part 1: lavender-worker trains the
# default GPT-2 of SCALE (tiny) under lavenderd (THREADS threads, CPU, a checkpoint
# every EVERY steps); its step time is measured in WINDOW-second windows without a drill and in
# windows in which `lavenderd drill` runs back to back on the run's newest verified
# checkpoint it trained past (what `supervisor.drill` runs: the run's worker at nice
# 19 and the idle I/O class, one thread, a step). PAIRS pairs, the order reversed
# every pair; a window's step time comes from the worker's heartbeats at its ends.
# Target: step time while drills run ≤ 1.1× without.
#
# Part 2: what one drill costs, in CPU seconds (user + system of `lavenderd drill` and
# the worker it waits for, from /usr/bin/time), and in wall seconds, for the tiny and
# the small model (scales.small.model: 6 × 384), DRILLS drills of one checkpoint each.
#
#   bash bench/drill/run.sh      # WINDOW=20 PAIRS=3 THREADS=2 DRILLS=3 SCALE=tiny EVERY=200
#
# Needs the release binaries (bash bench/setup.sh). Not a test.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../lib.sh"
bench_need lavenderd worker jq curl /usr/bin/time
bench_out drill

WINDOW="${WINDOW:-20}"
PAIRS="${PAIRS:-3}"
THREADS="${THREADS:-2}"
DRILLS="${DRILLS:-3}"
SCALE="${SCALE:-tiny}"
EVERY="${EVERY:-200}"
bench_machine "$BENCH_TMP"
echo "windows of ${WINDOW}s, $PAIRS pairs; $SCALE model, worker threads: $THREADS, a checkpoint every $EVERY steps; $DRILLS drills per model for the cost"

# train_config DIR SCALE: a training pipeline on synthetic tokens, a checkpoint every 200 steps.
train_config() {
  local dir="$1" scale="$2"
  mkdir -p "$dir/data"
  "$PY" "$BENCH_ROOT/bench/trainer/torch_gpt2.py" --write-tokens "$dir/data/tokens" --vocab 2048
  daemon_write_config "$dir" "[\"$WORKER\"]" "
scale: $scale
device: cpu
threads: $THREADS
training:
  log_every: 10
  eval_every: 100000000
  eval_batches: 1
  keep_checkpoints: 3
  stages:
    - {name: pretrain, steps: 100000000, lr: 3.0e-3, checkpoint_every: ${3:-200}}"
}
verified() { status_get "$1" | jq -e '(.training.verified_checkpoints // 0) >= 1 and (.training.step // 0) > 0' >/dev/null; }
# drill DIR LOG: one `lavenderd drill` (--json), its wall, user and system seconds appended to LOG.
drill() {
  /usr/bin/time -f "%e %U %S" -o "$BENCH_TMP/time" \
    "$LAVENDERD" --config "$1/lavender.yaml" --data-root "$1/data" drill --json >"$BENCH_TMP/drill.json" 2>"$BENCH_TMP/drill.err" || {
    echo "bench: the drill failed:" >&2
    cat "$BENCH_TMP/drill.err" "$BENCH_TMP/drill.json" >&2
    exit 1
  }
  jq -e '.verdict.passed' "$BENCH_TMP/drill.json" >/dev/null
  echo "$(cat "$BENCH_TMP/time") $(jq -c '{checkpoint, steps, tolerance: .verdict.tolerance}' "$BENCH_TMP/drill.json")" >>"$2"
}

# Part 1.
dir="$BENCH_TMP/beside"
train_config "$dir" "$SCALE" "$EVERY"
daemon_start "$dir"
daemon_pid="$DAEMON_PID"
daemon_cli "$dir" start >/dev/null
wait_for 120 "training" training_running "$DAEMON_SOCK"
wait_for 300 "a verified checkpoint" verified "$DAEMON_SOCK"
run_dir="$(pipeline_run_dir "$dir/data")"
beat() { jq -r '"\(.step) \(.timestamp)"' "$run_dir/heartbeat.json"; }
beat_time() { "$PY" -c 'import sys; from datetime import datetime; print(datetime.fromisoformat(sys.argv[1].replace("Z", "+00:00")).timestamp())' "$1"; }

results="$BENCH_OUT/windows.tsv"
drills="$BENCH_OUT/drills-beside.txt"
: >"$drills"
printf 'pair\tmode\tsteps\tseconds\tms_per_step\tdrills\n' >"$results"
window() {
  local pair="$1" mode="$2" s0 s1 t0 t1 n=0 end
  read -r s0 t0 < <(beat)
  end=$((SECONDS + WINDOW))
  if [ "$mode" = drilling ]; then
    while [ "$SECONDS" -lt "$end" ]; do
      drill "$dir" "$drills"
      n=$((n + 1))
    done
  else
    sleep "$WINDOW"
  fi
  read -r s1 t1 < <(beat)
  t0="$(beat_time "$t0")" t1="$(beat_time "$t1")"
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$pair" "$mode" "$((s1 - s0))" "$(calc "round($t1 - $t0, 3)")" \
    "$(calc "round(($t1 - $t0) * 1000 / ($s1 - $s0), 3)")" "$n" >>"$results"
  tail -1 "$results"
}
for pair in $(seq "$PAIRS"); do
  if [ $((pair % 2)) -eq 1 ]; then
    window "$pair" quiet
    window "$pair" drilling
  else
    window "$pair" drilling
    window "$pair" quiet
  fi
done
daemon_stop "$dir" "$daemon_pid"

# Part 2: one checkpoint of each model, drilled DRILLS times with nothing else running.
cost="$BENCH_OUT/cost.txt"
: >"$cost"
for scale in tiny small; do
  d="$BENCH_TMP/cost-$scale"
  train_config "$d" "$scale" 20
  daemon_start "$d"
  pid="$DAEMON_PID"
  daemon_cli "$d" start >/dev/null
  wait_for 600 "training ($scale)" training_running "$DAEMON_SOCK"
  wait_for 600 "a verified checkpoint ($scale)" verified "$DAEMON_SOCK"
  daemon_stop "$d" "$pid"
  for i in $(seq "$DRILLS"); do
    : >"$BENCH_TMP/one"
    drill "$d" "$BENCH_TMP/one"
    echo "$scale $(cat "$BENCH_TMP/one")" | tee -a "$cost"
  done
done

"$PY" - "$results" "$drills" "$cost" <<'PY' | tee "$BENCH_OUT/report.txt"
import csv, json, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
pairs = {}
for r in rows:
    pairs.setdefault(r["pair"], {})[r["mode"]] = r
ratios = [float(p["drilling"]["ms_per_step"]) / float(p["quiet"]["ms_per_step"]) for p in pairs.values()]
quiet = [float(r["ms_per_step"]) for r in rows if r["mode"] == "quiet"]
drilling = [float(r["ms_per_step"]) for r in rows if r["mode"] == "drilling"]
n = sum(int(r["drills"]) for r in rows if r["mode"] == "drilling")
print(f"\nms per step without a drill: {', '.join(f'{x:.2f}' for x in quiet)} (median {statistics.median(quiet):.2f})")
print(f"ms per step with drills back to back: {', '.join(f'{x:.2f}' for x in drilling)} (median {statistics.median(drilling):.2f}; {n} drills)")
m = statistics.median(ratios)
print(f"per-pair ratio with/without: {', '.join(f'{x:.3f}' for x in ratios)}; median {m:.3f}x; target at most 1.1x: {'met' if m <= 1.1 else 'MISSED'}")
beside = [line.split() for line in open(sys.argv[2]) if line.strip()]
if beside:
    cpu = [float(b[1]) + float(b[2]) for b in beside]
    print(f"a drill beside training: wall {statistics.median(float(b[0]) for b in beside):.2f} s, CPU {statistics.median(cpu):.2f} s (median of {len(beside)})")
costs = {}
for line in open(sys.argv[3]):
    parts = line.split(maxsplit=4)
    costs.setdefault(parts[0], []).append((float(parts[1]), float(parts[2]) + float(parts[3]), parts[4].strip()))
for scale, xs in costs.items():
    print(f"{scale}: a drill (one step, one thread) costs {statistics.median(c for _, c, _ in xs):.2f} CPU-s ({', '.join(f'{c:.2f}' for _, c, _ in xs)}), wall {statistics.median(w for w, _, _ in xs):.2f} s; {xs[0][2]}")
PY
