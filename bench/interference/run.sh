#!/usr/bin/env bash
# Benchmark 6 — interference. Part 1: lavender-worker trains under lavenderd (the
# default tiny GPT-2, THREADS threads, on the CPU); its steps/s is measured in
# windows without requests, with RATE status requests/s to the daemon over TCP
# (bench/loadgen, open loop), and with the same load sent to the bare axum server
# (bench/reference, serving the daemon's own status body) instead: on a machine of
# few cores the load generator's own CPU slows training too, and the bare server's
# window measures that share. PAIRS rounds of the three windows, the order reversed
# every round so drift cancels, plus one loaded window over the Unix socket. Steps/s
# of a window comes from the worker's own heartbeats (step and timestamp) at its ends.
#
# Part 2: the daemon's CPU per status request beside the bare axum server
# (bench/reference) at each rate of RATES, nothing training: each server gets a
# quiet window and a loaded one, SWEEP_PAIRS times; its CPU comes from
# /proc/<pid>/task/*/schedstat (nanoseconds) and the quiet windows' rate is
# subtracted. A window lasts WINDOW seconds, longer at low rates so it holds at
# least SWEEP_REQUESTS requests. The floor under any server (the reference's
# --blocking mode) is measured the same way at the highest rate.
#
#   bash bench/interference/run.sh      # RATE=1000 WINDOW=20 PAIRS=4 THREADS=2
#                                       # RATES="1 10 1000" SWEEP_PAIRS=2 SWEEP_REQUESTS=60
#
# Targets: training's slowdown under the daemon's load at most 1.2x its slowdown
# under the same load on the bare server; the daemon's CPU per request at most 1.3x
# the bare axum server's at every rate of RATES. Not a test.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../lib.sh"
bench_need lavenderd worker loadgen reference jq curl
bench_out interference

RATE="${RATE:-1000}"
WINDOW="${WINDOW:-20}"
PAIRS="${PAIRS:-4}"
THREADS="${THREADS:-2}"
RATES="${RATES:-1 10 1000}"
SWEEP_PAIRS="${SWEEP_PAIRS:-2}"
SWEEP_REQUESTS="${SWEEP_REQUESTS:-60}"
bench_machine "$BENCH_TMP"
echo "windows of ${WINDOW}s, $PAIRS pairs, $RATE requests/s over TCP when loaded; worker threads: $THREADS"
echo "CPU per request at rates: $RATES (${SWEEP_PAIRS} pairs of windows, at least $SWEEP_REQUESTS requests each)"

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
# The bare server answers with the training daemon's own status body.
status_get "$DAEMON_SOCK" >"$BENCH_TMP/training-body.json"
"$REFERENCE" --body "$BENCH_TMP/training-body.json" --tcp 127.0.0.1:0 >"$BENCH_TMP/ref-training.addr" &
BENCH_PIDS+=("$!")
bare_pid=$!
wait_for 10 "the reference server" test -s "$BENCH_TMP/ref-training.addr"
bare_addr="$(cat "$BENCH_TMP/ref-training.addr")"

# step and timestamp (epoch seconds) of the newest heartbeat
beat() { jq -r '"\(.step) \(.timestamp)"' "$run_dir/heartbeat.json"; }
beat_time() { "$PY" -c 'import sys; from datetime import datetime; print(datetime.fromisoformat(sys.argv[1].replace("Z", "+00:00")).timestamp())' "$1"; }

results="$BENCH_OUT/windows.tsv"
printf 'pair\tmode\tsteps\tseconds\tsteps_per_s\tdaemon_cpu_pct\tload\n' >"$results"
window() {
  local pair="$1" mode="$2" target=(--tcp "$DAEMON_ADDR") s0 s1 t0 t1 c0 c1 w0 w1 load="-"
  [ "${3:-tcp}" = unix ] && target=(--unix "$DAEMON_SOCK")
  [ "$mode" = bare ] && target=(--tcp "$bare_addr")
  read -r s0 t0 < <(beat)
  c0="$(cpu_ticks "$daemon_pid")" w0="$(date +%s.%N)"
  if [ "$mode" != quiet ]; then
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
    window "$pair" bare
  else
    window "$pair" bare
    window "$pair" loaded
    window "$pair" quiet
  fi
done
kill "$bare_pid" 2>/dev/null || true
# The daemon over its Unix socket, one more loaded window (worker still training).
window unix loaded unix
daemon_stop "$dir" "$daemon_pid"

# Part 2: CPU per request, nothing training. An idle daemon (its pipeline never
# started: its only work of its own is the 2 s safety refresh) and the bare
# reference serving the same body, measured alternately at each rate.
idle="$BENCH_TMP/idle"
daemon_write_config "$idle" "[\"$WORKER\"]" ""
daemon_start "$idle"
idle_pid="$DAEMON_PID"
idle_addr="$DAEMON_ADDR"
status_get "$DAEMON_SOCK" >"$BENCH_TMP/idle-body.json"
echo "status body of the idle daemon: $(wc -c <"$BENCH_TMP/idle-body.json") bytes, served by the references too"
start_reference() {
  local out="$BENCH_TMP/ref-$1.addr"
  "$REFERENCE" --body "$BENCH_TMP/idle-body.json" --tcp 127.0.0.1:0 "${@:2}" >"$out" &
  BENCH_PIDS+=("$!")
  REF_PID=$!
  wait_for 10 "the reference server" test -s "$out"
  REF_ADDR="$(cat "$out")"
}
start_reference axum
axum_pid="$REF_PID" axum_addr="$REF_ADDR"
start_reference blocking --blocking
floor_pid="$REF_PID" floor_addr="$REF_ADDR"
top_rate="$(echo "$RATES" | tr ' ' '\n' | sort -n | tail -1)"

sweep="$BENCH_OUT/per-request.tsv"
printf 'server\trate\tpair\tmode\tseconds\tcpu_ns\trequests\terrors\n' >"$sweep"
# sweep_window SERVER PID ADDR RATE PAIR MODE SECONDS
sweep_window() {
  local server="$1" pid="$2" addr="$3" rate="$4" pair="$5" mode="$6" secs="$7" c0 c1 load requests=0 errors=0
  local conns=$((rate < 4 ? 1 : 4))
  c0="$(cpu_ns "$pid")"
  if [ "$mode" = loaded ]; then
    load="$("$LOADGEN" load --tcp "$addr" --rate "$rate" --connections "$conns" --duration "$secs" --warmup 0)"
    requests="$(echo "$load" | jq .requests)" errors="$(echo "$load" | jq .errors)"
  else
    sleep "$secs"
  fi
  c1="$(cpu_ns "$pid")"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$server" "$rate" "$pair" "$mode" "$secs" "$((c1 - c0))" "$requests" "$errors" >>"$sweep"
}
for rate in $RATES; do
  secs="$(calc "max($WINDOW, -(-$SWEEP_REQUESTS // $rate))")"
  echo "CPU per request at $rate req/s: windows of ${secs}s"
  for pair in $(seq "$SWEEP_PAIRS"); do
    sweep_window lavenderd "$idle_pid" "$idle_addr" "$rate" "$pair" quiet "$secs"
    sweep_window lavenderd "$idle_pid" "$idle_addr" "$rate" "$pair" loaded "$secs"
    sweep_window axum "$axum_pid" "$axum_addr" "$rate" "$pair" quiet "$secs"
    sweep_window axum "$axum_pid" "$axum_addr" "$rate" "$pair" loaded "$secs"
    if [ "$rate" = "$top_rate" ]; then
      sweep_window blocking "$floor_pid" "$floor_addr" "$rate" "$pair" quiet "$secs"
      sweep_window blocking "$floor_pid" "$floor_addr" "$rate" "$pair" loaded "$secs"
    fi
  done
done
daemon_stop "$idle" "$idle_pid"

"$PY" - "$results" "$RATE" "$sweep" <<'PY' | tee "$BENCH_OUT/report.txt"
import csv, json, statistics, sys
everything = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
rows = [r for r in everything if r["pair"] != "unix"]
unix_rows = [r for r in everything if r["pair"] == "unix"]
pairs = {}
for r in rows:
    pairs.setdefault(r["pair"], {})[r["mode"]] = r
ratios = [float(p["loaded"]["steps_per_s"]) / float(p["quiet"]["steps_per_s"]) for p in pairs.values()]
bare_ratios = [float(p["bare"]["steps_per_s"]) / float(p["quiet"]["steps_per_s"]) for p in pairs.values()]
quiet = [float(r["steps_per_s"]) for r in rows if r["mode"] == "quiet"]
loaded = [float(r["steps_per_s"]) for r in rows if r["mode"] == "loaded"]
bare = [float(r["steps_per_s"]) for r in rows if r["mode"] == "bare"]
cpu_q = statistics.median(float(r["daemon_cpu_pct"]) for r in rows if r["mode"] == "quiet")
cpu_l = statistics.median(float(r["daemon_cpu_pct"]) for r in rows if r["mode"] == "loaded")
print(f"\nsteps/s without requests: {', '.join(f'{x:.2f}' for x in quiet)} (median {statistics.median(quiet):.2f})")
print(f"steps/s with {sys.argv[2]} req/s:    {', '.join(f'{x:.2f}' for x in loaded)} (median {statistics.median(loaded):.2f})")
print(f"per-pair ratio loaded/quiet: {', '.join(f'{x:.3f}' for x in ratios)}")
m = statistics.median(ratios)
print(f"steps/s with {sys.argv[2]} req/s to the bare axum server: {', '.join(f'{x:.2f}' for x in bare)} (median {statistics.median(bare):.2f})")
print(f"per-round ratio bare/quiet:   {', '.join(f'{x:.3f}' for x in bare_ratios)}")
mb = statistics.median(bare_ratios)
print(f"median slowdown, requests to the daemon:   {(1 - m) * 100:.1f} % (spread {(1 - max(ratios)) * 100:.1f} .. {(1 - min(ratios)) * 100:.1f} %)")
print(f"median slowdown, requests to the bare server: {(1 - mb) * 100:.1f} % (spread {(1 - max(bare_ratios)) * 100:.1f} .. {(1 - min(bare_ratios)) * 100:.1f} %)")
# Both slowdowns floored at 0.1 %: below that a window's noise decides the ratio.
ratio = max(1 - m, 0.001) / max(1 - mb, 0.001)
print(f"daemon's slowdown / bare server's: {ratio:.2f}x; target at most 1.2x: {'met' if ratio <= 1.2 else 'MISSED'}")
print(f"daemon CPU while training: {cpu_q:.2f} % of one core without requests, {cpu_l:.2f} % with")
# CPU the requests cost the daemon during training: a loaded window's CPU above the
# quiet median, over the requests that window served (loadgen's achieved rate).
def per_request(r):
    served = json.loads(r["load"])["requests_per_s"]
    return (float(r["daemon_cpu_pct"]) - cpu_q) / 100 * 1e6 / served
tcp = [per_request(r) for r in rows if r["mode"] == "loaded"]
unix = [per_request(r) for r in unix_rows]
print(f"daemon CPU per request while training, TCP: median {statistics.median(tcp):.1f} µs ({', '.join(f'{x:.1f}' for x in tcp)}); Unix socket: {unix[0]:.1f} µs")

# Part 2: per server and rate, each pair's loaded CPU above its quiet rate, per request.
sweep = list(csv.DictReader(open(sys.argv[3]), delimiter="\t"))
cost = {}
for (server, rate, pair) in sorted({(r["server"], int(r["rate"]), r["pair"]) for r in sweep}):
    w = {r["mode"]: r for r in sweep if (r["server"], int(r["rate"]), r["pair"]) == (server, rate, pair)}
    q, l = w["quiet"], w["loaded"]
    if int(l["errors"]) or not int(l["requests"]):
        print(f"  {server} at {rate} req/s, pair {pair}: {l['errors']} errors, {l['requests']} requests")
    above = int(l["cpu_ns"]) - int(q["cpu_ns"]) / float(q["seconds"]) * float(l["seconds"])
    cost.setdefault((server, rate), []).append(above / max(int(l["requests"]), 1) / 1000)
print("\nCPU per status request, nothing training (TCP; quiet windows' CPU subtracted; median of pairs)")
print(f"  {'req/s':>6} {'lavenderd µs':>13} {'bare axum µs':>13} {'ratio':>6}  target ≤ 1.3x")
worst = 0.0
for rate in sorted({r for (_, r) in cost}):
    d, a = statistics.median(cost[("lavenderd", rate)]), statistics.median(cost[("axum", rate)])
    ratio = d / a if a > 0 else float("inf")
    worst = max(worst, ratio)
    pairs_text = ", ".join(f"{x:.1f}" for x in cost[("lavenderd", rate)]) + " / " + ", ".join(f"{x:.1f}" for x in cost[("axum", rate)])
    print(f"  {rate:>6} {d:13.1f} {a:13.1f} {ratio:6.2f}  {'met' if ratio <= 1.3 else 'MISSED'}   (pairs {pairs_text})")
for (server, rate), xs in cost.items():
    if server == "blocking":
        print(f"  floor (a blocking thread per connection) at {rate} req/s: {statistics.median(xs):.1f} µs")
print(f"daemon CPU per request ≤ 1.3x the bare axum server at every rate: worst {worst:.2f}x -> {'met' if worst <= 1.3 else 'MISSED'}")
PY
