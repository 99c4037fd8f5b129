# Shared by the benchmark scripts (sourced, not run): paths to the release binaries,
# starting and stopping a daemon on a scratch data root, reading /proc, and the
# machine description every report starts with.

BENCH_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RELEASE="${RELEASE:-$BENCH_ROOT/target/release}"
LAVENDERD="${LAVENDERD:-$RELEASE/lavenderd}"
FAKE_WORKER="${FAKE_WORKER:-$RELEASE/lavender-fake-worker}"
WORKER="${WORKER:-$RELEASE/lavender-worker}"
LOADGEN="${LOADGEN:-$RELEASE/loadgen}"
REFERENCE="${REFERENCE:-$RELEASE/status-reference}"
SUPERVISOR_VENV="${SUPERVISOR_VENV:-$BENCH_ROOT/bench/.supervisor-venv}"
# Python for the scripts' arithmetic and JSON (the project's .venv, else the system's).
PY="${PY:-$BENCH_ROOT/.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3)"

bench_need() {
  local missing=()
  for b in "$@"; do
    case "$b" in
      lavenderd) [ -x "$LAVENDERD" ] || missing+=("$LAVENDERD") ;;
      fake-worker) [ -x "$FAKE_WORKER" ] || missing+=("$FAKE_WORKER") ;;
      worker) [ -x "$WORKER" ] || missing+=("$WORKER") ;;
      loadgen) [ -x "$LOADGEN" ] || missing+=("$LOADGEN") ;;
      reference) [ -x "$REFERENCE" ] || missing+=("$REFERENCE") ;;
      supervisord) [ -x "$SUPERVISOR_VENV/bin/supervisord" ] || missing+=("$SUPERVISOR_VENV/bin/supervisord") ;;
      *) command -v "$b" >/dev/null || missing+=("$b") ;;
    esac
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "bench: missing ${missing[*]}; run \`bash bench/setup.sh\` first" >&2
    exit 1
  fi
}

# Evaluates a Python expression and prints it.
calc() { "$PY" -c "print($1)"; }

bench_machine() {
  local cpu mem disk
  cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
  mem="$(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
  disk="$(df -hT "${1:-/tmp}" | awk 'NR==2 {print $1" ("$2"), "$3" total, "$5" free"}')"
  echo "machine: $(nproc) cores ($cpu), $mem RAM, disk ${disk}; load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); commit $(git -C "$BENCH_ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
}

# VmRSS of a pid, in KiB.
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }

# utime + stime of a pid, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }

CLK_TCK="$(getconf CLK_TCK)"

# CPU time of a pid's live threads, in nanoseconds (/proc/<pid>/task/*/schedstat):
# precise enough for a handful of requests, where clock ticks are 10 ms.
cpu_ns() {
  cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%d\n", s}'
}

# A scratch directory removed (with every daemon started through daemon_start) on exit.
BENCH_TMP="$(mktemp -d "${TMPDIR:-/tmp}/lavender-bench.XXXXXX")"
BENCH_PIDS=()
bench_cleanup() {
  local p
  for p in "${BENCH_PIDS[@]}"; do
    kill "$p" 2>/dev/null || true
  done
  for p in "${BENCH_PIDS[@]}"; do
    wait "$p" 2>/dev/null || true
  done
  # Workers live in their own process groups: stop any a daemon left behind.
  for f in "$BENCH_TMP"/*/data/state/pipeline.json; do
    [ -f "$f" ] || continue
    p="$(jq -r '.worker.pid // empty' "$f" 2>/dev/null)"
    [ -n "$p" ] && kill -9 -- "-$p" 2>/dev/null || true
  done
  rm -rf "$BENCH_TMP"
}
trap bench_cleanup EXIT

# daemon_write_config DIR WORKER_COMMAND_YAML EXTRA_YAML [SUPERVISOR_YAML]: a config
# for one daemon. EXTRA_YAML is appended after the notify section (indent it to add
# notify keys); SUPERVISOR_YAML lines (indented) go into the supervisor section.
daemon_write_config() {
  local dir="$1" command="$2" extra="$3" supervisor="${4:-}"
  mkdir -p "$dir"
  cat >"$dir/lavender.yaml" <<EOF
steps: [train]
worker:
  command: $command
supervisor:
  listen: 127.0.0.1:0
  stop_timeout_s: 30
  max_restarts: 1000
$supervisor
notify:
  desktop: false
  milestones: false
$extra
EOF
}

# daemon_start DIR: `lavenderd serve` on DIR/lavender.yaml with data root DIR/data;
# sets DAEMON_PID, DAEMON_ADDR (host:port) and DAEMON_SOCK.
daemon_start() {
  local dir="$1" data="$1/data"
  mkdir -p "$data"
  "$LAVENDERD" --config "$dir/lavender.yaml" --data-root "$data" serve >"$dir/daemon.log" 2>&1 &
  DAEMON_PID=$!
  BENCH_PIDS+=("$DAEMON_PID")
  DAEMON_SOCK="$data/state/lavenderd.sock"
  local i
  for i in $(seq 200); do
    if [ -S "$DAEMON_SOCK" ] && [ -s "$data/state/lavenderd.addr" ]; then
      DAEMON_ADDR="$(cat "$data/state/lavenderd.addr")"
      return 0
    fi
    sleep 0.05
  done
  echo "bench: the daemon did not start; its log:" >&2
  cat "$dir/daemon.log" >&2
  exit 1
}

# daemon_cli DIR ARGS...: the CLI against the daemon of DIR.
daemon_cli() {
  local dir="$1"
  shift
  "$LAVENDERD" --config "$dir/lavender.yaml" --data-root "$dir/data" "$@"
}

# status_get SOCKET: GET /status over a daemon's Unix socket.
status_get() { curl -s --unix-socket "$1" http://localhost/status; }

# training_running SOCKET: the daemon's worker is in the train step and has heartbeats.
training_running() {
  status_get "$1" | jq -e '.pipeline.state == "running" and .active_step == "train" and (.training.step // 0) > 0' >/dev/null
}

# daemon_stop DIR PID: stop the pipeline (the worker saves), then the daemon.
daemon_stop() {
  daemon_cli "$1" stop >/dev/null 2>&1 || true
  kill "$2" 2>/dev/null || true
  wait "$2" 2>/dev/null || true
}

# ab_start ROUND WORKER_COMMAND SUPERVISOR_EXTRA NAME=BINARY NAME=BINARY: two daemons,
# each its own lavenderd build on $BENCH_TMP/NAME-ROUND, started in an order swapped
# every round (a busy machine slows both alike), both training. Fills the caller's
# associative arrays `pid` and `sock` by NAME, and AB_ORDER (the order started);
# `ab_stop ROUND` stops both.
ab_start() {
  local round="$1" command="$2" supervisor="$3" which
  AB_NAMES=("${4%%=*}" "${5%%=*}")
  declare -gA AB_BIN=(["${4%%=*}"]="${4#*=}" ["${5%%=*}"]="${5#*=}")
  local order=("${AB_NAMES[@]}")
  [ $((round % 2)) -eq 0 ] && order=("${AB_NAMES[1]}" "${AB_NAMES[0]}")
  AB_ORDER="${order[*]}"
  for which in "${order[@]}"; do
    LAVENDERD="${AB_BIN[$which]}"
    daemon_write_config "$BENCH_TMP/$which-$round" "$command" "" "$supervisor"
    daemon_start "$BENCH_TMP/$which-$round"
    pid[$which]="$DAEMON_PID" sock[$which]="$DAEMON_SOCK"
    daemon_cli "$BENCH_TMP/$which-$round" start >/dev/null
  done
  for which in "${AB_NAMES[@]}"; do
    wait_for 30 "training under the $which build" training_running "${sock[$which]}"
  done
}

ab_stop() {
  local which
  for which in "${AB_NAMES[@]}"; do
    LAVENDERD="${AB_BIN[$which]}"
    daemon_stop "$BENCH_TMP/$which-$1" "${pid[$which]}"
  done
}

free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# supervisord_start DIR PORT COMMAND: supervisord (XML-RPC on 127.0.0.1:PORT and on
# DIR/supervisor.sock) supervising COMMAND as program `worker`; sets SUPERVISORD_PID.
supervisord_start() {
  local dir="$1" port="$2" command="$3"
  mkdir -p "$dir"
  cat >"$dir/supervisord.conf" <<CONF
[unix_http_server]
file=$dir/supervisor.sock
[inet_http_server]
port=127.0.0.1:$port
[supervisord]
logfile=$dir/supervisord.log
pidfile=$dir/supervisord.pid
childlogdir=$dir
nodaemon=true
[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface
[supervisorctl]
serverurl=unix://$dir/supervisor.sock
[program:worker]
command=$command
autorestart=true
stopasgroup=true
redirect_stderr=true
stdout_logfile=$dir/worker.log
CONF
  "$SUPERVISOR_VENV/bin/supervisord" -c "$dir/supervisord.conf" >"$dir/supervisord.out" 2>&1 &
  SUPERVISORD_PID=$!
  BENCH_PIDS+=("$SUPERVISORD_PID")
  local i
  for i in $(seq 200); do
    if [ -S "$dir/supervisor.sock" ] && curl -s -o /dev/null "http://127.0.0.1:$port/"; then
      return 0
    fi
    sleep 0.05
  done
  echo "bench: supervisord did not start; its log:" >&2
  cat "$dir/supervisord.log" "$dir/supervisord.out" >&2
  exit 1
}

XMLRPC_ALL_PROCESS_INFO='<?xml version="1.0"?><methodCall><methodName>supervisor.getAllProcessInfo</methodName><params></params></methodCall>'

# bench_out NAME: results also go to BENCH_OUT (default target/bench/NAME).
bench_out() {
  BENCH_OUT="${BENCH_OUT:-$BENCH_ROOT/target/bench/$1}"
  mkdir -p "$BENCH_OUT"
}
# wait_for SECONDS DESCRIPTION COMMAND...: until COMMAND succeeds.
wait_for() {
  local secs="$1" what="$2"
  shift 2
  local end=$((SECONDS + secs))
  until "$@"; do
    if [ "$SECONDS" -ge "$end" ]; then
      echo "bench: timed out waiting for $what" >&2
      exit 1
    fi
    sleep 0.1
  done
}


# The active run's directory, from the pipeline record (recorded relative to the data
# root; older records hold it absolute).
pipeline_run_dir() {
  local root="$1" dir
  dir="$(jq -r .run_dir "$root/state/pipeline.json")"
  case "$dir" in
    /*) echo "$dir" ;;
    *) echo "$root/$dir" ;;
  esac
}
