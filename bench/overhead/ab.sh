#!/usr/bin/env bash
# Benchmark 2b — the daemon's CPU against another build of it, side by side. Two
# `lavenderd serve`, this tree's release build ($LAVENDERD) and BASE_LAVENDERD (say,
# a release build of main), each supervising the same fake worker (a heartbeat every
# STEP_MS: 10 Hz by default) in the same DURATION-second window, ROUNDS times with
# the order of the two swapped each round. Prints each one's CPU as a percentage of
# one core and the ratio. Written for the goodput ledger (it counts at every
# heartbeat); any change can be compared this way.
#
#   BASE_LAVENDERD=/path/to/main/lavenderd bash bench/overhead/ab.sh   # DURATION=60 STEP_MS=100 ROUNDS=2
#
# Not a test.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../lib.sh"
bench_need lavenderd fake-worker jq curl
: "${BASE_LAVENDERD:?name the build to compare with: BASE_LAVENDERD=/path/to/lavenderd}"
[ -x "$BASE_LAVENDERD" ] || { echo "bench: $BASE_LAVENDERD is not an executable" >&2; exit 1; }
bench_out overhead-ab

DURATION="${DURATION:-60}"
STEP_MS="${STEP_MS:-100}"
ROUNDS="${ROUNDS:-2}"
bench_machine "$BENCH_TMP"
echo "window: ${DURATION}s x $ROUNDS round(s); fake worker: a heartbeat every ${STEP_MS} ms, a checkpoint every 300 steps"
echo "this build: $LAVENDERD"
echo "base build: $BASE_LAVENDERD"

fake_args="--total-steps 100000000 --step-ms $STEP_MS --checkpoint-every 300"
fake_yaml="[\"$FAKE_WORKER\", $(printf '"%s", ' $fake_args | sed 's/, $//')]"
this_bin="$LAVENDERD"
results="$BENCH_OUT/rounds.tsv"
printf 'round\tthis_cpu_pct\tbase_cpu_pct\n' >"$results"

for round in $(seq "$ROUNDS"); do
  declare -A pid sock
  ab_start "$round" "$fake_yaml" "" this="$this_bin" base="$BASE_LAVENDERD"
  sleep 5
  t0_this="$(cpu_ticks "${pid[this]}")" t0_base="$(cpu_ticks "${pid[base]}")"
  start="$(date +%s.%N)"
  sleep "$DURATION"
  t1_this="$(cpu_ticks "${pid[this]}")" t1_base="$(cpu_ticks "${pid[base]}")"
  elapsed="$(calc "$(date +%s.%N) - $start")"
  this_pct="$(calc "($t1_this - $t0_this) / $CLK_TCK / $elapsed * 100")"
  base_pct="$(calc "($t1_base - $t0_base) / $CLK_TCK / $elapsed * 100")"
  printf '%s\t%s\t%s\n' "$round" "$this_pct" "$base_pct" >>"$results"
  steps="$(status_get "${sock[this]}" | jq .training.step)"
  goodput="$(status_get "${sock[this]}" | jq -c '.goodput.goodput // null')"
  echo "round $round: this build $(printf '%.3f' "$this_pct") % of a core, base $(printf '%.3f' "$base_pct") % (worker at step $steps; goodput $goodput)"
  ab_stop "$round"
  LAVENDERD="$this_bin"
done

"$PY" - "$results" "$CLK_TCK" "$DURATION" <<'PY' | tee "$BENCH_OUT/report.txt"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
this = [float(r["this_cpu_pct"]) for r in rows]
base = [float(r["base_cpu_pct"]) for r in rows]
print(f"\nthis build: {statistics.mean(this):.3f} % of a core (rounds {', '.join(f'{x:.3f}' for x in this)})")
print(f"base build: {statistics.mean(base):.3f} % of a core (rounds {', '.join(f'{x:.3f}' for x in base)})")
print(f"ratio this / base: {statistics.mean(this) / statistics.mean(base):.2f}x")
print(f"CPU resolution: {100 / float(sys.argv[2]) / float(sys.argv[3]):.3f} % (one clock tick over a window)")
PY
