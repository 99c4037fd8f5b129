#!/usr/bin/env bash
# `lavenderd attribute` on the default tiny pipeline (`start --scale tiny`, `export
# --all`: five checkpoints, 5,574 training windows of 65 tokens), three ways in one
# run, side by side:
#   cold      the first query: every pass (K-FAC covariances and eigenvalue correction
#             per checkpoint, the query, scoring per checkpoint), 4,096 tokens a
#             batch (63 windows), and the Hessian passes cached
#   warm      a second query: the query and scoring passes only, on the cache
#   unbatched the first query as lavender ran it before batching: one window a
#             batch (--batch-tokens 128, the model's context), --no-cache
# and the compute floor: the passes' multiply-adds over this machine's fp32 matmul
# rate (measured here with torch, on the same threads).
#
#   bash bench/attribution/run.sh           # needs `make build` and bergson in .venv
#   SKIP_UNBATCHED=1 bash bench/attribution/run.sh
#   LIMIT_SECONDS=600 bash bench/attribution/run.sh   # stop each call then; extrapolate
#   KEEP_PIPELINE=1 bash bench/attribution/run.sh     # reuse the last run's data root
#   LAVENDERD=target/debug/lavenderd WORKER=target/debug/lavender-worker bash …  # debug build
#
# Results in target/bench/attribution/: each call's JSON report and stderr, and
# summary.txt. Takes about 25 minutes on an idle two-core machine (the unbatched
# call most of it).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
bench_need lavenderd worker
out="$BENCH_ROOT/target/bench/attribution"
root="$out/data-root"
# KEEP_PIPELINE=1: the previous run's pipeline and export (its data root) again.
if [ -n "${KEEP_PIPELINE:-}" ] && ls -d "$root"/checkpoints/run-*/exported >/dev/null 2>&1; then
  find "$out" -maxdepth 1 -type f -delete
  rm -rf "$root"/checkpoints/run-*/attribution
else
  rm -rf "$out"
fi
mkdir -p "$out"
cd "$BENCH_ROOT" # attribute finds .venv's Python from here

{
  bench_machine "$out"
  echo "bergson $("$PY" -c 'from importlib.metadata import version; print(version("bergson"))'), torch $("$PY" -c 'from importlib.metadata import version; print(version("torch"))')"
} | tee "$out/summary.txt"

if [ ! -d "$root" ]; then
  t0=$(date +%s.%N)
  "$LAVENDERD" --data-root "$root" start --scale tiny --foreground >"$out/pipeline.log" 2>&1
  run=$(ls -d "$root"/checkpoints/run-*)
  "$LAVENDERD" --data-root "$root" export --run "$run" --all >"$out/export.log" 2>&1
  echo "pipeline and export: $(calc "round($(date +%s.%N) - $t0)") s" | tee -a "$out/summary.txt"
fi
run=$(ls -d "$root"/checkpoints/run-*)

# Two queries: the starts of two documents of the run's shard, 200 characters each
# (under the model's 128-token context).
"$PY" - "$root/shards/shard-00000.jsonl" "$out" <<'PY'
import json, sys
docs = [json.loads(l)["text"] for l in open(sys.argv[1]) if l.strip()]
long = [d for d in docs if len(d) >= 200]
for name, doc in (("q1", long[len(long) // 3]), ("q2", long[2 * len(long) // 3])):
    with open(f"{sys.argv[2]}/{name}.jsonl", "w") as f:
        f.write(json.dumps({"text": doc[:200]}) + "\n")
PY

# One call, at most LIMIT_SECONDS when set: then it is stopped and its whole time
# extrapolated from its own progress (the time so far plus its ETA, which assumes
# its rate so far), and the summary says so. Its seconds go to $out/<name>.seconds,
# and `stopped` to $out/<name>.stopped when it was stopped.
attribute() {
  local name=$1 queries=$2
  shift 2
  local s e pid
  s=$(date +%s.%N)
  setsid "$LAVENDERD" --data-root "$root" attribute --run "$run" --queries "$queries" --top 5 \
    --json "$@" >"$out/$name.json" 2>"$out/$name.stderr" &
  pid=$!
  if [ -n "${LIMIT_SECONDS:-}" ]; then
    local deadline=$(($(date +%s) + LIMIT_SECONDS))
    while kill -0 "$pid" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ]; do sleep 5; done
    if kill -0 "$pid" 2>/dev/null; then
      e=$(date +%s.%N)
      kill -- "-$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
      echo stopped >"$out/$name.stopped"
      "$PY" - "$name" "$(grep '^{' "$out/$name.stderr" | tail -1)" "$s" "$e" "$out" <<'PY' | tee -a "$out/summary.txt"
import json, sys
name, p, s, e, out = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
total = e - s + p["eta_s"]
open(f"{out}/{name}.seconds", "w").write(f"{total:.1f}\n")
print(f"{name}: stopped after {e - s:.0f} s at pass {p['pass']}/{p['passes']} ({p['done']}/{p['total']} {p['unit']}, {p['rows_per_s']} rows/s over the call so far); extrapolated {total:.0f} s (load average {open('/proc/loadavg').read().split()[0]})")
PY
      return
    fi
  fi
  wait "$pid"
  e=$(date +%s.%N)
  calc "round($e - $s, 1)" >"$out/$name.seconds"
  echo "$name: $(cat "$out/$name.seconds") s (load average $(cut -d' ' -f1-3 /proc/loadavg))" | tee -a "$out/summary.txt"
}

attribute cold "$out/q1.jsonl"
# The warm call needs the cold call's cache.
[ -e "$out/cold.stopped" ] || attribute warm "$out/q2.jsonl"
if [ -z "${SKIP_UNBATCHED:-}" ]; then
  attribute unbatched "$out/q1.jsonl" --batch-tokens 128 --no-cache
fi

# The compute floor: multiply-adds of a forward and backward per token (2 × the
# weights' matmuls forward, twice that backward: 6 × params FLOPs a token, the
# attention's T² terms added) over every pass, against torch's fp32 matmul rate on
# this machine's threads now.
"$PY" - "$out" "$run" <<'PY' | tee -a "$out/summary.txt"
import json, os, sys, time, torch
out, run = sys.argv[1], sys.argv[2]
import glob
exported = sorted(glob.glob(f"{run}/exported/checkpoint-*"), key=lambda p: int(p.rsplit("-", 1)[1]))
cfg = json.load(open(os.path.join(exported[-1], "config.json")))
train = sorted(glob.glob(f"{run}/attribution/*/train.jsonl"))[0]
rows = sum(1 for _ in open(train))
d, L, V, C = cfg["n_embd"], cfg["n_layer"], cfg["vocab_size"], len(exported)
T = len(json.loads(open(train).readline())["input_ids"])
# Per token: 12·d² per layer (qkv, proj, MLP) + the LM head d·V, 2 FLOPs per
# multiply-add, × 3 forward and backward; attention 2·T·d per layer, × 2, × 3.
per_token = 3 * 2 * (L * 12 * d * d + d * V) + 3 * 2 * 2 * L * T * d
passes = {"cold": 3 * C, "warm": C, "unbatched": 3 * C}
n = 1024
a, b = torch.randn(n, n), torch.randn(n, n)
for _ in range(3):
    a @ b
k = 20
t = time.perf_counter()
for _ in range(k):
    a @ b
rate = 2 * n**3 * k / (time.perf_counter() - t)
print(f"fp32 matmul ({torch.get_num_threads()} threads, {n}²): {rate / 1e9:.1f} GFLOPS")
for name, p in passes.items():
    f = p * rows * T * per_token
    path = f"{out}/{name}.seconds"
    took = float(open(path).read()) if os.path.exists(path) else None
    achieved = f"; achieved {f / took / 1e9:.1f} GFLOPS over the whole call" if took else ""
    print(f"{name}: {p} passes × {rows} windows × {T} tokens = {f / 1e12:.2f} TFLOP, floor {f / rate:.0f} s{achieved}")
if os.path.exists(f"{out}/unbatched.seconds"):
    u, c = float(open(f"{out}/unbatched.seconds").read()), float(open(f"{out}/cold.seconds").read())
    print(f"unbatched / cold: {u / c:.1f}x")
if os.path.exists(f"{out}/warm.seconds"):
    print(f"warm / cold: {float(open(f'{out}/warm.seconds').read()) / float(open(f'{out}/cold.seconds').read()):.2f}")
PY
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/summary.txt"
