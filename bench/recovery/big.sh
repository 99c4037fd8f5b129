#!/usr/bin/env bash
# Benchmark 7b — recovery of a large checkpoint, the relaunch reading it back again
# against taking its recorded verdict (supervisor.verdict_max_age_s: 0 against the
# default): lavenderd supervising lavender-worker on bench/checkpoint's model (489 MB
# checkpoints), frozen right after its first save, optionally padded with PAD_MB MiB
# the manifest lists and the loader skips, read back by the daemon, then killed;
# from the kill to the restarted worker's first heartbeat past the step it was
# killed at, and the limit (the worker started by hand from the same checkpoint).
# The page cache is dropped before the kill and before the limit (DROP=1, root).
#
#   bash bench/recovery/big.sh                # ROUNDS=2 PADS="0 5120" DROP=1
#
# Needs the release binaries (bash bench/setup.sh) and blake3 in .venv. Not a test.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../lib.sh"
bench_need lavenderd worker jq
bench_out recovery-big

ROUNDS="${ROUNDS:-2}"
PADS="${PADS:-0 5120}"
DROP="${DROP:-1}"
"$PY" -c 'import blake3' 2>/dev/null || "$PY" -m pip install --quiet blake3
bench_machine "$BENCH_TMP"
tokens="$BENCH_TMP/tokens"
"$PY" "$BENCH_ROOT/bench/trainer/torch_gpt2.py" --write-tokens "$tokens" --vocab 2048 >/dev/null

: >"$BENCH_OUT/rounds.jsonl"
for pad in $PADS; do
  for round in $(seq "$ROUNDS"); do
    for mode in reread reuse; do
      dir="$BENCH_TMP/$mode-$pad-$round"
      flags=()
      [ "$mode" = reread ] && flags+=(--reread)
      [ "$DROP" = 1 ] && flags+=(--drop)
      "$PY" "$here/big.py" --dir "$dir" --lavenderd "$LAVENDERD" --worker "$WORKER" \
        --tokens "$tokens" --pad-mb "$pad" "${flags[@]}" | tee -a "$BENCH_OUT/rounds.jsonl"
      rm -rf "$dir"
    done
  done
done

"$PY" - "$BENCH_OUT/rounds.jsonl" <<'PY' | tee "$BENCH_OUT/report.txt"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"{'checkpoint':>12} {'mode':>7} {'recovery s':>11} {'limit s':>8} {'ratio':>6}")
for size in sorted({r["checkpoint_bytes"] // 10**8 for r in rows}):
    for mode in ("reread", "reuse"):
        got = [r for r in rows if r["mode"] == mode and r["checkpoint_bytes"] // 10**8 == size]
        if not got:
            continue
        rec = statistics.median(r["seconds"] for r in got)
        lim = statistics.median(r["limit_seconds"] for r in got)
        mb = statistics.median(r["checkpoint_bytes"] for r in got) / 1e6
        print(f"{mb:9.0f} MB {mode:>7} {rec:11.2f} {lim:8.2f} {rec / lim:6.2f}")
print("target: recovery <= 1.2 x the limit")
PY
