#!/usr/bin/env bash
# Benchmark 6 — interference. lavender-worker trains under lavenderd (the default
# tiny GPT-2, THREADS threads, on the CPU); its steps/s is measured in alternating
# windows without and with RATE status requests/s over TCP (bench/loadgen, open
# loop), PAIRS pairs, the order flipped every pair so drift cancels. Steps/s of a
# window comes from the worker's own heartbeats (step and timestamp) at its ends.
#
#   bash bench/interference/run.sh      # RATE=1000 WINDOW=20 PAIRS=4 THREADS=2
#
# Targets: under 2 % slower with the requests; the daemon at most 12 µs of CPU per
# request, over TCP and (one more loaded window) over its Unix socket, printed beside
# the bare reference server (bench/reference) and the floor under any server here
# (its --blocking mode), each measured the same way at the same rate. Not a test.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../lib.sh"
bench_need lavenderd worker loadgen reference jq curl
bench_out interference

RATE="${RATE:-1000}"
WINDOW="${WINDOW:-20}"
PAIRS="${PAIRS:-4}"
THREADS="${THREADS:-2}"
bench_machine "$BENCH_TMP"
echo "windows of ${WINDOW}s, $PAIRS pairs, $RATE requests/s over TCP when loaded; worker threads: $THREADS"

dir="$BENCH_TMP/daemon"
mkdir -p "$dir/data"
"$PY" "$BENCH_ROOT/bench/trainer/torch_gpt2.py" --write-tokens "$dir/data/tokens" --vocab 2048
daemon_write_config "$dir" "[\"$WORKER\"]" "
device: cpu
threads: $THREADS
training:
  log_every: 10
  eval_every: 100000000
  eval_batches: 1
  keep_checkpoints: 2
  stages:
    - {name: pretrain, steps: 100000000, lr: 3.0e-3, checkpoint_every: 100000000}"
daemon_start "$dir"
daemon_pid="$DAEMON_PID"
daemon_cli "$dir" start >/dev/null
wait_for 120 "training" training_running "$DAEMON_SOCK"
run_dir="$(pipeline_run_dir "$dir/data")"
sleep 5

# step and timestamp (epoch seconds) of the newest heartbeat
beat() { jq -r '"\(.step) \(.timestamp)"' "$run_dir/heartbeat.json"; }
beat_time() { "$PY" -c 'import sys; from datetime import datetime; print(datetime.fromisoformat(sys.argv[1].replace("Z", "+00:00")).timestamp())' "$1"; }

results="$BENCH_OUT/windows.tsv"
printf 'pair\tmode\tsteps\tseconds\tsteps_per_s\tdaemon_cpu_pct\tload\n' >"$results"
window() {
  local pair="$1" mode="$2" target=(--tcp "$DAEMON_ADDR") s0 s1 t0 t1 c0 c1 w0 w1 load="-"
  [ "${3:-tcp}" = unix ] && target=(--unix "$DAEMON_SOCK")
  read -r s0 t0 < <(beat)
  c0="$(cpu_ticks "$daemon_pid")" w0="$(date +%s.%N)"
  if [ "$mode" = loaded ]; then
    load="$("$LOADGEN" load "${target[@]}" --rate "$RATE" --connections 4 --duration "$WINDOW" --warmup 0)"
  else
    sleep "$WINDOW"
  fi
  read -r s1 t1 < <(beat)
  c1="$(cpu_ticks "$daemon_pid")" w1="$(date +%s.%N)"
  t0="$(beat_time "$t0")" t1="$(beat_time "$t1")"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$pair" "$mode" "$((s1 - s0))" "$(calc "round($t1 - $t0, 3)")" \
    "$(calc "round(($s1 - $s0) / ($t1 - $t0), 3)")" "$(calc "round(($c1 - $c0) / $CLK_TCK / ($w1 - $w0) * 100, 2)")" \
    "$(echo "$load" | jq -c 'if type == "object" then {requests_per_s, errors, p50_ms, p99_ms, client_cpu_s} else . end' 2>/dev/null || echo -)" >>"$results"
  tail -1 "$results"
}
for pair in $(seq "$PAIRS"); do
  if [ $((pair % 2)) -eq 1 ]; then
    window "$pair" quiet
    window "$pair" loaded
  else
    window "$pair" loaded
    window "$pair" quiet
  fi
done
# The daemon over its Unix socket, one more loaded window (worker still training).
window unix loaded unix
status_get "$DAEMON_SOCK" >"$BENCH_TMP/reference-body.json"
daemon_stop "$dir" "$daemon_pid"

# The limit, measured the same way at the same rate with the same body, no worker
# training: the bare reference server (bench/reference, axum), and the floor under
# any HTTP server here (its --blocking mode: a thread per connection, one read and
# one write per request), each over TCP and over a Unix socket.
references="$BENCH_OUT/references.tsv"
: >"$references"
reference_cpu() {
  local name="$1" transport="$2" flags=("${@:3}") addr pid c0 c1 load
  rm -f "$BENCH_TMP/ref.addr"
  if [ "$transport" = tcp ]; then
    "$REFERENCE" --body "$BENCH_TMP/reference-body.json" --tcp 127.0.0.1:0 "${flags[@]}" >"$BENCH_TMP/ref.addr" &
  else
    "$REFERENCE" --body "$BENCH_TMP/reference-body.json" --unix "$BENCH_TMP/ref.sock" "${flags[@]}" >"$BENCH_TMP/ref.addr" &
  fi
  pid=$!
  BENCH_PIDS+=("$pid")
  wait_for 10 "the reference server" test -s "$BENCH_TMP/ref.addr"
  addr="$(cat "$BENCH_TMP/ref.addr")"
  c0="$(cpu_ticks "$pid")"
  load="$("$LOADGEN" load "--$transport" "$addr" --rate "$RATE" --connections 4 --duration "$WINDOW" --warmup 0)"
  c1="$(cpu_ticks "$pid")"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  printf '%s\t%s\t%s\n' "$name" "$transport" \
    "$(calc "round(($c1 - $c0) / $CLK_TCK * 1e6 / $(echo "$load" | jq .requests), 1)")" >>"$references"
}
reference_cpu axum tcp
reference_cpu axum unix
reference_cpu blocking tcp --blocking
reference_cpu blocking unix --blocking

"$PY" - "$results" "$RATE" "$references" <<'PY' | tee "$BENCH_OUT/report.txt"
import csv, json, statistics, sys
everything = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
rows = [r for r in everything if r["pair"] != "unix"]
unix_rows = [r for r in everything if r["pair"] == "unix"]
pairs = {}
for r in rows:
    pairs.setdefault(r["pair"], {})[r["mode"]] = r
ratios = [float(p["loaded"]["steps_per_s"]) / float(p["quiet"]["steps_per_s"]) for p in pairs.values()]
quiet = [float(r["steps_per_s"]) for r in rows if r["mode"] == "quiet"]
loaded = [float(r["steps_per_s"]) for r in rows if r["mode"] == "loaded"]
cpu_q = statistics.median(float(r["daemon_cpu_pct"]) for r in rows if r["mode"] == "quiet")
cpu_l = statistics.median(float(r["daemon_cpu_pct"]) for r in rows if r["mode"] == "loaded")
print(f"\nsteps/s without requests: {', '.join(f'{x:.2f}' for x in quiet)} (median {statistics.median(quiet):.2f})")
print(f"steps/s with {sys.argv[2]} req/s:    {', '.join(f'{x:.2f}' for x in loaded)} (median {statistics.median(loaded):.2f})")
print(f"per-pair ratio loaded/quiet: {', '.join(f'{x:.3f}' for x in ratios)}")
m = statistics.median(ratios)
print(f"median slowdown: {(1 - m) * 100:.1f} % (spread of pairs {(1 - max(ratios)) * 100:.1f} .. {(1 - min(ratios)) * 100:.1f} %)")
print(f"daemon CPU: {cpu_q:.2f} % of one core without requests, {cpu_l:.2f} % with")
# CPU the requests cost the daemon: a loaded window's CPU above the quiet median,
# over the requests that window served (loadgen's achieved rate, not the asked one).
def per_request(r):
    served = json.loads(r["load"])["requests_per_s"]
    return (float(r["daemon_cpu_pct"]) - cpu_q) / 100 * 1e6 / served
tcp = [per_request(r) for r in rows if r["mode"] == "loaded"]
unix = [per_request(r) for r in unix_rows]
refs = {(n, t): float(us) for n, t, us in csv.reader(open(sys.argv[3]), delimiter="\t")}
us = statistics.median(tcp)
print(f"daemon CPU per request, TCP: median {us:.1f} µs ({', '.join(f'{x:.1f}' for x in tcp)}); target ≤ 12 µs: {'met' if us <= 12 else 'MISSED'}")
print(f"daemon CPU per request, Unix socket: {unix[0]:.1f} µs; target ≤ 12 µs: {'met' if unix[0] <= 12 else 'MISSED'}")
for transport, daemon in (("tcp", us), ("unix", unix[0])):
    axum, floor = refs[("axum", transport)], refs[("blocking", transport)]
    print(f"  {transport:4}: bare axum reference {axum:.1f} µs (daemon = {daemon / axum:.2f}x), "
          f"blocking floor {floor:.1f} µs (daemon = {daemon / floor:.2f}x)")
print(f"target under 2 % slower: {'met' if (1 - m) < 0.02 else 'MISSED'}")
PY
