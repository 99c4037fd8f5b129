#!/usr/bin/env bash
# Benchmark 1 — status. Latency (p50/p99) and throughput of lavenderd's GET /status
# over TCP and over the Unix socket, on an empty data root and on one holding
# 166,829 small files in its data folders; side by side with (a) a shell status
# script (ls | wc -l, jq on heartbeat.json, df) on the same roots and (b)
# supervisord's XML-RPC supervisor.getAllProcessInfo supervising one process, and
# (c) the limit of this machine: a bare axum server (bench/reference) answering
# with the same body from a static string, over TCP and a Unix socket. All are
# measured in one loop, alternating, so a busy machine slows them alike.
# Each daemon supervises a fake worker that trains (a heartbeat every 100 ms).
#
#   bash bench/status/run.sh            # FILES=166829 DURATION=10 CONNECTIONS=16 ROUNDS=2
#
# Targets: at 16 connections at least 0.85x the bare server and 10x supervisord;
# p50 at most 0.1 ms at 1 connection; no growth with the file count. The same over
# the Unix socket. Not a test: prints figures and ratios, asserts nothing on speed.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../lib.sh"
bench_need lavenderd fake-worker loadgen reference supervisord wrk hyperfine jq curl
bench_out status

FILES="${FILES:-166829}"
DURATION="${DURATION:-10}"
CONNECTIONS="${CONNECTIONS:-16}"
ROUNDS="${ROUNDS:-2}"
results="$BENCH_OUT/results.jsonl"
: >"$results"

bench_machine "$BENCH_TMP"
echo "files in the full data root: $FILES; ${DURATION}s per measurement, ${ROUNDS} rounds"

fake_args="--total-steps 100000000 --step-ms 100 --checkpoint-every 600"
fake_yaml="[\"$FAKE_WORKER\", $(printf '"%s", ' $fake_args | sed 's/, $//')]"
t0=$SECONDS
"$PY" "$here/make_data_root.py" "$BENCH_TMP/full/data" "$FILES"
echo "generated in $((SECONDS - t0)) s"

declare -A ADDR SOCK
for root in empty full; do
  daemon_write_config "$BENCH_TMP/$root" "$fake_yaml" ""
  daemon_start "$BENCH_TMP/$root"
  ADDR[$root]="$DAEMON_ADDR"
  SOCK[$root]="$DAEMON_SOCK"
  daemon_cli "$BENCH_TMP/$root" start >/dev/null
done
for root in empty full; do
  wait_for 30 "training under the $root root" training_running "${SOCK[$root]}"
done
status_get "${SOCK[full]}" | jq -c '{state: .pipeline.state, step: .training.step, data, disk}'

# The bare reference, serving the body lavenderd answered with just now.
status_get "${SOCK[full]}" >"$BENCH_TMP/reference-body.json"
echo "status body: $(wc -c <"$BENCH_TMP/reference-body.json") bytes"
"$REFERENCE" --body "$BENCH_TMP/reference-body.json" --tcp 127.0.0.1:0 >"$BENCH_TMP/reference-tcp.addr" &
BENCH_PIDS+=("$!")
"$REFERENCE" --body "$BENCH_TMP/reference-body.json" --unix "$BENCH_TMP/reference.sock" >/dev/null &
BENCH_PIDS+=("$!")
ref_up() { [ -s "$BENCH_TMP/reference-tcp.addr" ] && [ -S "$BENCH_TMP/reference.sock" ]; }
wait_for 10 "the reference server" ref_up
REF_ADDR="$(cat "$BENCH_TMP/reference-tcp.addr")"

# supervisord supervising the same fake worker.
sv_dir="$BENCH_TMP/supervisord"
sv_port="$(free_port)"
mkdir -p "$sv_dir/data/run"
supervisord_start "$sv_dir" "$sv_port" \
  "$FAKE_WORKER $fake_args train --data-root $sv_dir/data --run-dir $sv_dir/data/run"
sv_running() {
  curl -s -H 'Content-Type: text/xml' --data "$XMLRPC_ALL_PROCESS_INFO" "http://127.0.0.1:$sv_port/RPC2" |
    tr -d '\n' | grep -q '<name>statename</name><value><string>RUNNING'
}
wait_for 15 "supervisord's worker to be RUNNING" sv_running

# loadgen LABEL ROUND ARGS...: one measurement, appended to the results.
measure() {
  local label="$1" round="$2"
  shift 2
  "$LOADGEN" load --duration "$DURATION" --warmup 1 "$@" |
    jq -c --arg name "$label" --argjson round "$round" '. + {"label": $name, "round": $round, "tool": "loadgen"}' >>"$results"
}
xml=(--method POST --path /RPC2 --header 'Content-Type: text/xml' --body "$XMLRPC_ALL_PROCESS_INFO")
wrk_lua="$BENCH_TMP/xmlrpc.lua"
printf 'wrk.method = "POST"\nwrk.headers["Content-Type"] = "text/xml"\nwrk.body = %s\n' \
  "$(jq -Rn --arg b "$XMLRPC_ALL_PROCESS_INFO" '$b')" >"$wrk_lua"

# wrk LABEL ROUND URL [wrk args]: throughput and latency from wrk, as JSON.
wrk_measure() {
  local label="$1" round="$2" url="$3"
  shift 3
  wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" --latency "$@" "$url" | "$PY" -c '
import json, re, sys
out = sys.stdin.read()
def ms(s):
    v = float(re.match(r"[\d.]+", s).group())
    return v / 1000 if s.endswith("us") else v * 1000 if s.endswith("s") and not s.endswith("ms") else v
pct = dict(re.findall(r"^\s+(\d+)%\s+(\S+)", out, re.M))
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
errs = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
print(json.dumps({"label": sys.argv[1], "round": int(sys.argv[2]), "tool": "wrk", "transport": "tcp",
                  "connections": int(sys.argv[3]), "requests_per_s": round(rps), "errors": int(errs.group(1)) if errs else 0,
                  "p50_ms": ms(pct["50"]), "p90_ms": ms(pct["90"]), "p99_ms": ms(pct["99"])}))
' "$label" "$round" "$CONNECTIONS" >>"$results"
}

for round in $(seq "$ROUNDS"); do
  echo "round $round/$ROUNDS: loadgen, 1 connection (latency) and $CONNECTIONS (throughput)"
  for root in empty full; do
    measure "lavenderd tcp $root" "$round" --tcp "${ADDR[$root]}" --connections 1
    measure "reference tcp" "$round" --tcp "$REF_ADDR" --connections 1
    measure "lavenderd unix $root" "$round" --unix "${SOCK[$root]}" --connections 1
    measure "reference unix" "$round" --unix "$BENCH_TMP/reference.sock" --connections 1
  done
  measure "supervisord tcp" "$round" --tcp "127.0.0.1:$sv_port" --connections 1 "${xml[@]}"
  measure "supervisord unix" "$round" --unix "$sv_dir/supervisor.sock" --connections 1 "${xml[@]}"
  for root in empty full; do
    measure "lavenderd tcp $root" "$round" --tcp "${ADDR[$root]}" --connections "$CONNECTIONS"
    measure "reference tcp" "$round" --tcp "$REF_ADDR" --connections "$CONNECTIONS"
    measure "lavenderd unix $root" "$round" --unix "${SOCK[$root]}" --connections "$CONNECTIONS"
    measure "reference unix" "$round" --unix "$BENCH_TMP/reference.sock" --connections "$CONNECTIONS"
  done
  measure "supervisord tcp" "$round" --tcp "127.0.0.1:$sv_port" --connections "$CONNECTIONS" "${xml[@]}"
  measure "supervisord unix" "$round" --unix "$sv_dir/supervisor.sock" --connections "$CONNECTIONS" "${xml[@]}"
  echo "round $round/$ROUNDS: wrk, $CONNECTIONS connections over TCP"
  for root in empty full; do
    wrk_measure "lavenderd tcp $root" "$round" "http://${ADDR[$root]}/status"
    wrk_measure "reference tcp" "$round" "http://$REF_ADDR/status"
  done
  wrk_measure "supervisord tcp" "$round" "http://127.0.0.1:$sv_port/RPC2" -s "$wrk_lua"
done

echo "the shell status script, one run at a time (hyperfine)"
for root in empty full; do
  bash "$here/pipeline_status.sh" "$BENCH_TMP/$root/data" | jq -e .data >/dev/null
  hyperfine -N --warmup 3 --runs "${SHELL_RUNS:-40}" --export-json "$BENCH_TMP/shell-$root.json" \
    "bash $here/pipeline_status.sh $BENCH_TMP/$root/data" >/dev/null
  "$PY" - "$BENCH_TMP/shell-$root.json" "shell script $root" >>"$results" <<'PY'
import json, math, sys
r = json.load(open(sys.argv[1]))["results"][0]
t = sorted(r["times"])
q = lambda p: t[min(len(t), math.ceil(p * len(t))) - 1] * 1000
print(json.dumps({"label": sys.argv[2], "round": 1, "tool": "hyperfine", "transport": "process",
                  "connections": 1, "requests_per_s": round(1 / r["mean"], 1), "errors": 0,
                  "p50_ms": round(q(0.5), 2), "p90_ms": round(q(0.9), 2), "p99_ms": round(q(0.99), 2)}))
PY
done

echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
"$PY" "$here/report.py" "$results" "$FILES" | tee "$BENCH_OUT/report.txt"
