#!/usr/bin/env bash
# The tiny pipeline's figures, as the worker trainer's "done when" asks for them: the
# five data steps on the embedded corpus, then `train --scale tiny` on 2 threads, and
# from the run's log_history.json the pretrain validation loss (first → last, and the
# ratio), the DPO held-out reward accuracy (before → after) and the wall times.
# Not a test.
#
#   bash bench/trainer/tiny_quality.sh                       # the default config
#   bash bench/trainer/tiny_quality.sh --set model.dropout=0  # extra args for every step
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
WORKER="${WORKER:-$root/target/release/lavender-worker}"
PYTHON="${PYTHON:-python3}"
THREADS="${THREADS:-2}"
if [ ! -x "$WORKER" ]; then
  echo "tiny_quality: no worker binary at $WORKER; run \`make build\` or set WORKER=" >&2
  exit 1
fi

data="$(mktemp -d)"
trap 'rm -rf "$data"' EXIT
t0="$(date +%s.%N)"
for step in downloads dedup filter build_shards precompute; do
  "$WORKER" "$step" --data-root "$data" --scale tiny "$@" 2>/dev/null
done
t1="$(date +%s.%N)"
"$WORKER" train --data-root "$data" --scale tiny --device cpu --set "threads=$THREADS" "$@" \
  --run-dir "$data/run" >/dev/null 2>"$data/train.err" || { cat "$data/train.err" >&2; exit 1; }
t2="$(date +%s.%N)"

"$PYTHON" - "$data" "$t0" "$t1" "$t2" <<'PY'
import json, sys
data, t0, t1, t2 = sys.argv[1], *map(float, sys.argv[2:])
hist = json.load(open(f"{data}/run/log_history.json"))
def evals(stage, key):
    return [h[key] for h in hist if h.get("stage") == stage and key in h]
val = evals("pretrain", "eval_loss")
acc = evals("dpo", "eval_reward_accuracy")
shards = json.load(open(f"{data}/tokens/manifest.json"))["counts"]
steps = sum(1 for h in hist if "loss" in h)
print(json.dumps({
    "shards_used": shards.get("shards_used"), "shards_available": shards.get("shards_available"),
    "train_tokens": shards.get("tokens"), "steps": steps,
    "pretrain_val_loss_first": round(val[0], 4), "pretrain_val_loss_last": round(val[-1], 4),
    "pretrain_val_ratio": round(val[-1] / val[0], 4),
    "dpo_reward_accuracy_before": round(acc[0], 4), "dpo_reward_accuracy_after": round(acc[-1], 4),
    "sft_eval_loss": [round(x, 4) for x in (evals("sft", "eval_loss")[:1] + evals("sft", "eval_loss")[-1:])],
    "data_steps_s": round(t1 - t0, 1), "train_s": round(t2 - t1, 1),
}, indent=1))
PY
