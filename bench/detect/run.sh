#!/usr/bin/env bash
# Benchmark 3 — detection latency, measured by bench/loadgen from the moment of the
# fault:
#   - worker SIGKILL -> GET /status says pipeline.state "crashed";
#   - worker SIGKILL -> the "crashed" alert reaches a JSON webhook on loopback;
#   - heartbeat.json replaced (temp file + rename, as a worker writes it) -> the
#     new step is in GET /status.
# The daemon supervises lavender-fake-worker and restarts it 1 s after each crash,
# so the crash is measured REPEAT times in one run.
#
#   bash bench/detect/run.sh            # REPEAT=15
#
# Targets: under 100 ms, under 1 s, under 100 ms. Not a test.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../lib.sh"
bench_need lavenderd fake-worker loadgen jq curl
bench_out detect

REPEAT="${REPEAT:-15}"
bench_machine "$BENCH_TMP"
hook_port="$(free_port)"

# Crashes: a worker that trains (a heartbeat every 50 ms) until killed; alerts go
# to a webhook only (no milestones, no rate limit or coalescing in the way).
dir="$BENCH_TMP/crash"
daemon_write_config "$dir" "[\"$FAKE_WORKER\", \"--total-steps\", \"100000000\", \"--step-ms\", \"50\", \"--checkpoint-every\", \"100\"]" \
  "  coalesce_s: 0
  max_per_minute: 1000
  attempts: 1
  timeout_s: 2
  webhooks:
    - name: bench
      url: http://127.0.0.1:$hook_port/hook"
export LAVENDER__SUPERVISOR__RESTART_BACKOFF_S="[1]"
daemon_start "$dir"
unset LAVENDER__SUPERVISOR__RESTART_BACKOFF_S
crash_pid="$DAEMON_PID"
daemon_cli "$dir" start >/dev/null
wait_for 30 "training" training_running "$DAEMON_SOCK"
echo "SIGKILL -> status and -> webhook alert, $REPEAT times"
"$LOADGEN" detect-crash --unix "$DAEMON_SOCK" --repeat "$REPEAT" --hook "127.0.0.1:$hook_port" \
  >"$BENCH_OUT/crash.json"
daemon_stop "$dir" "$crash_pid"

# Heartbeats: a worker that stops writing them after 3 steps (alive, so the run
# stays active), and the benchmark writes new ones.
dir="$BENCH_TMP/heartbeat"
daemon_write_config "$dir" "[\"$FAKE_WORKER\", \"--total-steps\", \"100000000\", \"--step-ms\", \"20\", \"--hang-after\", \"3\"]" ""
daemon_start "$dir"
hb_pid="$DAEMON_PID"
daemon_cli "$dir" start >/dev/null
wait_for 30 "training" training_running "$DAEMON_SOCK"
run_dir="$(pipeline_run_dir "$dir/data")"
sleep 0.5
echo "heartbeat write -> status, $((REPEAT * 2)) times"
"$LOADGEN" detect-heartbeat --unix "$DAEMON_SOCK" --run-dir "$run_dir" --repeat "$((REPEAT * 2))" \
  >"$BENCH_OUT/heartbeat.json"
daemon_stop "$dir" "$hb_pid"

jq -s 'flatten | .[]' "$BENCH_OUT/crash.json" "$BENCH_OUT/heartbeat.json" | jq -rs '
  (["", "samples", "p50 ms", "p90 ms", "max ms", "target", "result"] | @tsv),
  (.[] | . as $r
   | {sigkill_to_status_crashed: 100, sigkill_to_webhook_alert: 1000, heartbeat_write_to_status: 100}[$r.what] as $t
   | [$r.what, $r.samples, $r.p50_ms, $r.p90_ms, $r.max_ms,
      (if $t then "< \($t) ms" else "-" end),
      (if $t == null then "(the kernel ending the process)" elif $r.max_ms < $t then "met (max)"
       elif $r.p50_ms < $t then "met at p50, max over" else "MISSED" end)] | @tsv)
' | column -t -s $'\t' | tee "$BENCH_OUT/report.txt"
