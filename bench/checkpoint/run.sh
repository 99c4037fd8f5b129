#!/usr/bin/env bash
# Benchmark 4 — checkpoint I/O.
#   - Saving: lavender-worker trains a GPT-2 whose checkpoint (weights + AdamW
#     moments) is about 500 MB and saves it SAVES times, every EVERY steps (so a
#     save has steps to be written behind; at EVERY=1 each save also waits for the
#     previous one). Each `checkpoint_saved` event carries the worker's own timing
#     (save_times.py): how long training stood still for the save (the copy to host
#     memory, and any wait for the previous save) and when the files were durable
#     (written, fsynced, committed in the background). Side by side: `dd conv=fsync`
#     writing the same bytes (the checkpoint's own files) to the same filesystem.
#     Ratio = dd time / durable save time; stall = stall time / dd time, over the
#     saves training continues after (not the final one, which waits until durable
#     by design).
#   - Verify: `lavenderd verify` reading the run's kept checkpoints back against their
#     manifests (every byte hashed) against `b3sum` of the same files, both from the
#     page cache on every core (hyperfine, VERIFY_RUNS runs each). Ratio = b3sum's
#     time / verify's time (throughput ratio). VERIFY=0 skips it (a lavenderd
#     without the command).
#   - Retention: one pass of lavender's retention over a run holding 1,000
#     checkpoints (keep 3), against `ls -1dt */ | tail | xargs rm -rf` on an
#     identical run (bench/loadgen `retention`).
#
#   bash bench/checkpoint/run.sh        # SAVES=4 EVERY=3 N_EMBD=640 N_LAYER=8 CHECKPOINTS=1000 VERIFY_RUNS=5
#
# Targets: durable save at least 0.9x dd's speed; stall at most 0.5x dd's time;
# verify at least 0.8x b3sum's throughput. Not a test.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../lib.sh"
VERIFY="${VERIFY:-1}"
if [ "$VERIFY" = 1 ]; then bench_need worker loadgen jq lavenderd hyperfine b3sum; else bench_need worker loadgen jq; fi
bench_out checkpoint

SAVES="${SAVES:-4}"
EVERY="${EVERY:-3}"
N_EMBD="${N_EMBD:-640}"
N_HEAD="${N_HEAD:-10}"
N_LAYER="${N_LAYER:-8}"
VOCAB="${VOCAB:-2048}"
CHECKPOINTS="${CHECKPOINTS:-1000}"
bench_machine "$BENCH_TMP"

data="$BENCH_TMP/data"
mkdir -p "$data"
"$PY" "$BENCH_ROOT/bench/trainer/torch_gpt2.py" --write-tokens "$data/tokens" --vocab "$VOCAB"
"$WORKER" train --data-root "$data" --device cpu --set threads=2 \
  --set "model.n_layer=$N_LAYER" --set "model.n_head=$N_HEAD" --set "model.n_embd=$N_EMBD" \
  --set model.n_positions=128 --set model.dropout=0.0 \
  --set training.batch_size=2 --set training.seq_len=32 --set training.log_every=1 \
  --set training.eval_every=1000000 --set training.eval_batches=1 --set training.keep_checkpoints=2 \
  --set training.save_optimizer_state=all \
  --set "training.stages=[{name: pretrain, steps: $((SAVES * EVERY)), lr: 1.0e-4, checkpoint_every: $EVERY}]" \
  >"$BENCH_TMP/worker.log" 2>&1 &
worker_pid=$!
BENCH_PIDS+=("$worker_pid")
"$PY" "$here/save_times.py" "$data" "$worker_pid" >"$BENCH_OUT/saves.json"
wait "$worker_pid" || { echo "bench: the worker failed:" >&2; tail -20 "$BENCH_TMP/worker.log" >&2; exit 1; }

ckpt="$(jq -r .checkpoint "$BENCH_OUT/saves.json")"
bytes="$(jq -r .bytes "$BENCH_OUT/saves.json")"
echo "checkpoint: $(jq -c .files "$BENCH_OUT/saves.json") = $(calc "round($bytes / 1e6)") MB"

# dd writes the checkpoint's own files (in the page cache, as the worker's tensors
# are in memory) to the same filesystem, with fsync, as many times as there were saves.
: >"$BENCH_OUT/dd.txt"
for i in $(seq "$SAVES"); do
  out="$data/dd-$i"
  mkdir -p "$out"
  t0="$(date +%s.%N)"
  for f in "$ckpt"/*.safetensors "$ckpt"/trainer_state.json; do
    dd if="$f" of="$out/$(basename "$f")" bs=4M conv=fsync status=none
  done
  t1="$(date +%s.%N)"
  calc "round($t1 - $t0, 3)" >>"$BENCH_OUT/dd.txt"
  rm -rf "$out"
done

"$PY" - "$BENCH_OUT/saves.json" "$BENCH_OUT/dd.txt" <<'PY' | tee "$BENCH_OUT/report.txt"
import json, statistics, sys
s = json.load(open(sys.argv[1]))
dd = [float(x) for x in open(sys.argv[2]) if x.strip()]
saves = [x["seconds"] for x in s["saves"]]
# Training goes on after every save but the final one.
during = [x for x in s["saves"] if x["stage"] != "final"] or s["saves"]
stalls = [x["stall_seconds"] for x in during]
mb = s["bytes"] / 1e6
print(f"\ncheckpoint size: {mb:.0f} MB ({len(s['files'])} files)")
print(f"lavender-worker save (durable): {', '.join(f'{x:.2f}' for x in saves)} s; median {statistics.median(saves):.2f} s = {mb / statistics.median(saves):.0f} MB/s")
print(f"dd conv=fsync:                  {', '.join(f'{x:.2f}' for x in dd)} s; median {statistics.median(dd):.2f} s = {mb / statistics.median(dd):.0f} MB/s")
ratio = statistics.median(dd) / statistics.median(saves)
print(f"ratio (save speed / dd speed): {ratio:.2f}x -> target >= 0.9: {'met' if ratio >= 0.9 else 'MISSED'}")
phases = ", ".join(f"{x['copy_seconds']:.2f} + {x['write_seconds']:.2f} + {x['seconds'] - x['copy_seconds'] - x['write_seconds']:.2f}" for x in s["saves"])
print(f"  (durable = copy + write + fsync/commit: {phases} s)")
stall = statistics.median(stalls) / statistics.median(dd)
print(f"training stall per save: median {statistics.median(stalls):.3f} s = {stall:.2f}x dd -> target <= 0.5: {'met' if stall <= 0.5 else 'MISSED'}")
def secs(key):
    return ", ".join(f"{x[key]:.3f}" for x in during)
print(f"  ({len(stalls)} saves training went on after: stall {secs('stall_seconds')} s; "
      f"of which copy to host memory {secs('copy_seconds')} s, waiting for the previous save {secs('wait_seconds')} s)")
PY

if [ "$VERIFY" = 1 ]; then
  run="$(jq -r .run "$BENCH_OUT/saves.json")"
  files=("$run"/*/*.safetensors)
  vbytes="$(cat "${files[@]}" | wc -c)"
  echo
  echo "verify: $(calc "round($vbytes / 1e6)") MB in ${#files[@]} files of $(basename "$run")"
  hyperfine -N --style basic --warmup 1 --runs "${VERIFY_RUNS:-5}" --export-json "$BENCH_OUT/verify.json" \
    -n "lavenderd verify" "$LAVENDERD --data-root $data verify --run $(basename "$run")" \
    -n "b3sum" "b3sum ${files[*]}" >"$BENCH_OUT/verify.txt"
  "$PY" - "$BENCH_OUT/verify.json" "$vbytes" <<'PY' | tee -a "$BENCH_OUT/report.txt"
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
mb = int(sys.argv[2]) / 1e6
v, b = r["lavenderd verify"]["median"], r["b3sum"]["median"]
print(f"lavenderd verify: median {v:.3f} s = {mb / v:.0f} MB/s; b3sum: median {b:.3f} s = {mb / b:.0f} MB/s")
print(f"ratio (verify throughput / b3sum's): {b / v:.2f}x -> target >= 0.8: {'met' if b / v >= 0.8 else 'MISSED'}")
PY
fi

echo
echo "retention over $CHECKPOINTS checkpoints (keep 3)"
"$LOADGEN" retention --checkpoints "$CHECKPOINTS" --keep 3 --repeat "${RETENTION_REPEAT:-3}" --dir "$BENCH_TMP" \
  >"$BENCH_OUT/retention.json"
jq -r '"list the checkpoints:       median \(.list_checkpoints.median_ms) ms (max \(.list_checkpoints.max_ms))",
       "lavender retention pass:    median \(.lavender_retention_pass.median_ms) ms (max \(.lavender_retention_pass.max_ms)), deletes \(.checkpoints - .keep)",
       "shell ls -dt | xargs rm -rf: median \(.shell_ls_xargs_rm.median_ms) ms (max \(.shell_ls_xargs_rm.max_ms))",
       "ratio shell / lavender: \(.shell_ls_xargs_rm.median_ms / .lavender_retention_pass.median_ms * 100 | round / 100)x"' \
  "$BENCH_OUT/retention.json" | tee -a "$BENCH_OUT/report.txt"
