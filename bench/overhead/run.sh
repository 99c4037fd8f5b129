#!/usr/bin/env bash
# Benchmark 2 — daemon overhead. RSS and CPU of `lavenderd serve` over DURATION
# seconds while it supervises a training worker, side by side (same window) with
# supervisord supervising the same worker. The worker is lavender-fake-worker: a
# heartbeat and a log_history line every STEP_MS, a checkpoint every 300 steps —
# more file events than the real worker's default of a heartbeat every 10 steps.
#
#   bash bench/overhead/run.sh          # DURATION=60 STEP_MS=100 WATCHER=native
#
# WATCHER=poll runs the daemon with `supervisor.watcher: poll` instead of inotify.
#
# Targets: under 15 MB RSS and under 0.5 % of one core. Not a test.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../lib.sh"
bench_need lavenderd fake-worker supervisord jq curl
bench_out overhead

DURATION="${DURATION:-60}"
STEP_MS="${STEP_MS:-100}"
WATCHER="${WATCHER:-native}"
bench_machine "$BENCH_TMP"
echo "window: ${DURATION}s; fake worker: a heartbeat every ${STEP_MS} ms, a checkpoint every 300 steps; watcher: $WATCHER"

fake_args="--total-steps 100000000 --step-ms $STEP_MS --checkpoint-every 300"
fake_yaml="[\"$FAKE_WORKER\", $(printf '"%s", ' $fake_args | sed 's/, $//')]"
dir="$BENCH_TMP/lavenderd"
daemon_write_config "$dir" "$fake_yaml" "" "  watcher: $WATCHER"
daemon_start "$dir"
lv_pid="$DAEMON_PID"
daemon_cli "$dir" start >/dev/null

sv_dir="$BENCH_TMP/supervisord"
mkdir -p "$sv_dir/data/run"
supervisord_start "$sv_dir" "$(free_port)" \
  "$FAKE_WORKER $fake_args train --data-root $sv_dir/data --run-dir $sv_dir/data/run"
sv_pid="$SUPERVISORD_PID"
wait_for 30 "training under lavenderd" training_running "$DAEMON_SOCK"
sleep 5

# Samples RSS every second; CPU is the difference of utime+stime over the window.
samples="$BENCH_OUT/samples.tsv"
printf 't\tlavenderd_rss_kib\tsupervisord_rss_kib\n' >"$samples"
lv_t0="$(cpu_ticks "$lv_pid")" sv_t0="$(cpu_ticks "$sv_pid")"
start="$(date +%s.%N)"
for i in $(seq "$DURATION"); do
  printf '%s\t%s\t%s\n' "$i" "$(rss_kib "$lv_pid")" "$(rss_kib "$sv_pid")" >>"$samples"
  sleep 1
done
lv_t1="$(cpu_ticks "$lv_pid")" sv_t1="$(cpu_ticks "$sv_pid")"
elapsed="$(calc "$(date +%s.%N) - $start")"
steps="$(status_get "$DAEMON_SOCK" | jq .training.step)"
checkpoints="$(status_get "$DAEMON_SOCK" | jq .training.checkpoints)"

"$PY" - "$samples" "$elapsed" "$CLK_TCK" "$lv_t0" "$lv_t1" "$sv_t0" "$sv_t1" <<'PY' | tee "$BENCH_OUT/report.txt"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
elapsed, tck = float(sys.argv[2]), float(sys.argv[3])
lv_t0, lv_t1, sv_t0, sv_t1 = map(float, sys.argv[4:8])
def mib(col):
    v = [int(r[col]) / 1024 for r in rows]
    return max(v), sum(v) / len(v)
lv_max, lv_mean = mib("lavenderd_rss_kib")
sv_max, sv_mean = mib("supervisord_rss_kib")
lv_cpu = (lv_t1 - lv_t0) / tck / elapsed * 100
sv_cpu = (sv_t1 - sv_t0) / tck / elapsed * 100
print(f"\n{'':12} {'RSS max MiB':>12} {'RSS mean MiB':>13} {'CPU % of one core':>18}")
print(f"{'lavenderd':12} {lv_max:12.1f} {lv_mean:13.1f} {lv_cpu:18.3f}")
print(f"{'supervisord':12} {sv_max:12.1f} {sv_mean:13.1f} {sv_cpu:18.3f}")
print(f"\nratio lavenderd / supervisord: RSS {lv_max / sv_max:.2f}x, CPU {lv_cpu / sv_cpu if sv_cpu else float('inf'):.2f}x")
print(f"CPU resolution: {100 / tck / elapsed:.3f} % (one clock tick over the window)")
print("\ntargets")
print(f"  RSS under 15 MB (15 MB = 14.3 MiB): {lv_max:.1f} MiB -> {'met' if lv_max * 1.048576 < 15 else 'MISSED'}")
print(f"  CPU under 0.5 % of one core: {lv_cpu:.3f} % -> {'met' if lv_cpu < 0.5 else 'MISSED'}")
PY
echo "the worker reached step $steps with $checkpoints checkpoint(s) kept"
daemon_stop "$dir" "$lv_pid"
