#!/usr/bin/env bash
# Training speed of lavender-worker against PyTorch eager (the .venv's torch) on the
# same GPT-2 model, batch, sequence length, thread count and precision. Not a test:
# prints steps/sec of both and their ratio (worker / PyTorch), in ROUNDS alternating
# rounds; the target is the median ratio ≥ 1.05 against PyTorch as it comes in fp32,
# ≥ 1.0 in bf16 (the worker's `training.precision: bf16` against torch.autocast on
# the CPU with bfloat16).
#
#   bash bench/trainer/run.sh     # two default models, 2 threads, fp32 and bf16:
#                                 # tiny (2 layers, 2 heads, n_embd 64, seq 64) and
#                                 # small (4 layers, 4 heads, n_embd 128, seq 128), batch 16
#   THREADS=4 N_EMBD=256 N_LAYER=4 bash bench/trainer/run.sh   # one model of your choice
#   PRECISIONS=bf16 bash bench/trainer/run.sh                  # one precision
#
# The worker's speed is (N2 − N1) / (t(N2) − t(N1)) over two runs, so start-up, the
# first evaluation and the final save cancel out. It needs a release build
# (`make build`, or WORKER=path/to/lavender-worker).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
WORKER="${WORKER:-$root/target/release/lavender-worker}"
PYTHON="${PYTHON:-$root/.venv/bin/python}"
THREADS="${THREADS:-2}"
VOCAB="${VOCAB:-2048}"
N_POSITIONS="${N_POSITIONS:-128}"
BATCH="${BATCH:-16}"
N1="${N1:-20}"
N2="${N2:-120}"
ROUNDS="${ROUNDS:-3}"
PRECISIONS="${PRECISIONS:-fp32 bf16}"
# "layers heads n_embd seq_len" per model; any of N_LAYER/N_HEAD/N_EMBD/SEQ_LEN set
# makes it one model (the tiny default filling in the rest).
if [ -n "${N_LAYER:-}${N_HEAD:-}${N_EMBD:-}${SEQ_LEN:-}" ]; then
  MODELS=("${N_LAYER:-2} ${N_HEAD:-2} ${N_EMBD:-64} ${SEQ_LEN:-64}")
else
  MODELS=("2 2 64 64" "4 4 128 128")
fi

if [ ! -x "$WORKER" ]; then
  echo "bench: no worker binary at $WORKER; run \`make build\` or set WORKER=" >&2
  exit 1
fi
if [ ! -x "$PYTHON" ]; then
  echo "bench: no Python at $PYTHON; run \`make setup\` or set PYTHON=" >&2
  exit 1
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$PYTHON" "$root/bench/trainer/torch_gpt2.py" --write-tokens "$tmp/tokens" --vocab "$VOCAB"

calc() { "$PYTHON" -c "print($1)"; }

worker_seconds() {
  local steps="$1" data
  data="$(mktemp -d "$tmp/data.XXXXXX")"
  ln -s "$tmp/tokens" "$data/tokens"
  local t0 t1
  t0="$(date +%s.%N)"
  # fp32 is what `auto` trains in on the CPU: left unset, a worker from before
  # training.precision existed runs too (WORKER=… for a before/after comparison).
  local precision=()
  [ "$PRECISION" = fp32 ] || precision=(--set "training.precision=$PRECISION")
  "$WORKER" train --data-root "$data" --device cpu \
    --set "threads=$THREADS" "${precision[@]}" \
    --set "model.n_layer=$N_LAYER" --set "model.n_head=$N_HEAD" --set "model.n_embd=$N_EMBD" \
    --set "model.n_positions=$N_POSITIONS" --set "model.dropout=0.0" \
    --set "training.batch_size=$BATCH" --set "training.seq_len=$SEQ_LEN" \
    --set "training.eval_every=1000000" --set "training.eval_batches=1" \
    --set "training.stages=[{name: pretrain, steps: $steps, lr: 3.0e-3, checkpoint_every: 1000000}]" \
    >/dev/null
  t1="$(date +%s.%N)"
  rm -rf "$data"
  calc "$t1 - $t0"
}

torch_sps() {
  local json
  json="$(env "$@" "$PYTHON" "$root/bench/trainer/torch_gpt2.py" --vocab "$VOCAB" --n-layer "$N_LAYER" \
    --n-head "$N_HEAD" --n-embd "$N_EMBD" --n-positions "$N_POSITIONS" --batch "$BATCH" \
    --seq-len "$SEQ_LEN" --threads "$THREADS" --precision "$PRECISION" --steps "$((N2 - N1))")"
  "$PYTHON" -c 'import json,sys; print(json.loads(sys.argv[1])["steps_per_sec"])' "$json"
}

# One round: the worker, PyTorch as it comes, PyTorch with passive OpenMP waiting,
# one after the other. Rounds repeat so that drift of the machine's speed shows as
# spread between rounds instead of passing for a difference; the verdict is the
# median of the rounds' ratios.
bench_model() {
  printf 'model: %s layers, %s heads, n_embd %s, vocab %s; batch %s x %s tokens; %s threads; %s; %s rounds\n' \
    "$N_LAYER" "$N_HEAD" "$N_EMBD" "$VOCAB" "$BATCH" "$SEQ_LEN" "$THREADS" "$PRECISION" "$ROUNDS"
  local ratios=() passive_ratios=() round s1 s2 worker_sps torch_default torch_passive
  for round in $(seq "$ROUNDS"); do
    s1="$(worker_seconds "$N1")"
    s2="$(worker_seconds "$N2")"
    worker_sps="$(calc "($N2 - $N1) / ($s2 - $s1)")"
    if [ -n "${OMP_WAIT_POLICY:-}" ]; then
      torch_default="$(torch_sps OMP_WAIT_POLICY="$OMP_WAIT_POLICY")"
    else
      torch_default="$(torch_sps -u OMP_WAIT_POLICY)"
    fi
    torch_passive="$(torch_sps OMP_WAIT_POLICY=PASSIVE)"
    ratios+=("$(calc "$worker_sps / $torch_default")")
    passive_ratios+=("$(calc "$worker_sps / $torch_passive")")
    printf 'round %s: lavender-worker %.2f steps/s, pytorch eager %.2f (default OpenMP waiting), %.2f (OMP_WAIT_POLICY=PASSIVE): %.2fx, %.2fx\n' \
      "$round" "$worker_sps" "$torch_default" "$torch_passive" "${ratios[-1]}" "${passive_ratios[-1]}"
  done
  local target=1.05
  [ "$PRECISION" = fp32 ] || target=1.0
  "$PYTHON" - "${ratios[*]}" "${passive_ratios[*]}" "$target" "$N_LAYER x $N_EMBD" "$PRECISION" "$summary" <<'PY'
import statistics, sys
default, passive = ([float(x) for x in a.split()] for a in sys.argv[1:3])
target, model, precision, summary = float(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
m = statistics.median(default)
verdict = 'met' if m >= target else 'MISSED'
print(f"ratio vs default pytorch: median {m:.2f}x (rounds {min(default):.2f}..{max(default):.2f}) -> target >= {target}: {verdict}")
print(f"ratio vs passive pytorch: median {statistics.median(passive):.2f}x (rounds {min(passive):.2f}..{max(passive):.2f})")
with open(summary, "a") as f:
    f.write(f"| {model} | {precision} | {m:.2f}x ({min(default):.2f}-{max(default):.2f}) | {statistics.median(passive):.2f}x | {target} | {verdict} |\n")
PY
}

uptime_load() { cut -d' ' -f1-3 /proc/loadavg; }
summary="$tmp/summary.md"
for model in "${MODELS[@]}"; do
  read -r N_LAYER N_HEAD N_EMBD SEQ_LEN <<<"$model"
  for PRECISION in $PRECISIONS; do
    echo "load average before: $(uptime_load)"
    bench_model
    echo "load average after: $(uptime_load)"
    echo
  done
done
echo "| model (layers x width) | precision | worker / PyTorch as it comes (median, rounds) | / PyTorch passive | target | verdict |"
echo "|---|---|---:|---:|---:|---|"
cat "$summary"
