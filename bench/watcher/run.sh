#!/usr/bin/env bash
# Benchmark 2c — the run-directory watcher's wake-ups per heartbeat on Linux: the
# daemon's own inotify reader (status/inotify.rs, read on the runtime) against the
# `notify` crate's watcher (its inotify backend on a thread of its own, the same
# filter), both `watcher: native`. Two release builds of this tree, the second with
# the cargo feature `bench-notify-watcher` (off in every other build), each
# supervising a fake worker (a heartbeat every STEP_MS, no checkpoint in the window
# unless CHECKPOINT_EVERY says) in the same DURATION-second window, ROUNDS times
# with the order in which they start swapped each round.
#
# Wake-ups are context switches (voluntary + nonvoluntary) summed over the daemon's
# threads (/proc/<pid>/task/*/status, sampled every 0.2 s so a thread that ends
# keeps what it did), divided by the heartbeats the worker wrote in the window (the
# step in heartbeat.json, read from the file: no request to the daemon). CPU is
# utime + stime over the window, as in 2.
#
#   bash bench/watcher/run.sh          # DURATION=60 STEP_MS=100 ROUNDS=3 CHECKPOINT_EVERY=100000000
#
# INOTIFY_LAVENDERD / NOTIFY_LAVENDERD name prebuilt binaries instead of building.
# Not a test.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../lib.sh"
bench_need fake-worker jq curl
bench_out watcher

DURATION="${DURATION:-60}"
STEP_MS="${STEP_MS:-100}"
ROUNDS="${ROUNDS:-3}"
CHECKPOINT_EVERY="${CHECKPOINT_EVERY:-100000000}"

build() { # build OUT [FEATURES]: a release lavenderd copied to OUT
  (cd "$BENCH_ROOT" && cargo build --release -q -p lavenderd ${2:+--features "$2"})
  cp "$RELEASE/lavenderd" "$1"
}
if [ -z "${INOTIFY_LAVENDERD:-}" ] || [ -z "${NOTIFY_LAVENDERD:-}" ]; then
  echo "building the two variants (release)..."
  build "$BENCH_OUT/lavenderd-notify" bench-notify-watcher
  build "$BENCH_OUT/lavenderd-inotify"
fi
declare -A bin=(
  [inotify]="${INOTIFY_LAVENDERD:-$BENCH_OUT/lavenderd-inotify}"
  [notify]="${NOTIFY_LAVENDERD:-$BENCH_OUT/lavenderd-notify}"
)

bench_machine "$BENCH_TMP"
echo "window: ${DURATION}s x $ROUNDS round(s); fake worker: a heartbeat every ${STEP_MS} ms, a checkpoint every $CHECKPOINT_EVERY steps"
echo "inotify reader: ${bin[inotify]}"
echo "notify crate:   ${bin[notify]}"

fake_args="--total-steps 100000000 --step-ms $STEP_MS --checkpoint-every $CHECKPOINT_EVERY"
fake_yaml="[\"$FAKE_WORKER\", $(printf '"%s", ' $fake_args | sed 's/, $//')]"
this_bin="$LAVENDERD"
results="$BENCH_OUT/rounds.jsonl"
: >"$results"

# The step in the run's heartbeat.json (one step, one heartbeat).
step_of() { jq -r '.step' "$(find "$1/data" -name heartbeat.json -print -quit)"; }

for round in $(seq "$ROUNDS"); do
  declare -A pid sock
  ab_start "$round" "$fake_yaml" "  watcher: native" inotify="${bin[inotify]}" notify="${bin[notify]}"
  sleep 5
  s0_i="$(step_of "$BENCH_TMP/inotify-$round")" s0_n="$(step_of "$BENCH_TMP/notify-$round")"
  t0_i="$(cpu_ticks "${pid[inotify]}")" t0_n="$(cpu_ticks "${pid[notify]}")"
  switches="$("$PY" - "$DURATION" "${pid[inotify]}" "${pid[notify]}" <<'PY'
import glob, json, sys, time
duration, pids = float(sys.argv[1]), sys.argv[2:]
names = {}
def sample(pid):
    out = {}
    for path in glob.glob(f"/proc/{pid}/task/*/status"):
        try:
            text = open(path).read()
        except OSError:
            continue
        n = sum(int(l.split()[1]) for l in text.splitlines() if "ctxt_switches:" in l)
        tid = path.split("/")[4]
        names.setdefault((pid, tid), text.split("\n", 1)[0].split("\t", 1)[-1])
        out[tid] = n
    return out
first = {p: sample(p) for p in pids}
last = {p: dict(first[p]) for p in pids}
end = time.monotonic() + duration
while time.monotonic() < end:
    time.sleep(0.2)
    for p in pids:
        last[p].update(sample(p))
total = {p: sum(n - first[p].get(tid, 0) for tid, n in last[p].items()) for p in pids}
threads = {p: len(last[p]) for p in pids}
# Per thread name (tokio's workers share one): where the wake-ups happen.
by_name = {p: {} for p in pids}
for p in pids:
    for tid, n in last[p].items():
        name = names[(p, tid)]
        by_name[p][name] = by_name[p].get(name, 0) + n - first[p].get(tid, 0)
print(json.dumps({"switches": total, "threads": threads, "by_thread": by_name}))
PY
)"
  t1_i="$(cpu_ticks "${pid[inotify]}")" t1_n="$(cpu_ticks "${pid[notify]}")"
  s1_i="$(step_of "$BENCH_TMP/inotify-$round")" s1_n="$(step_of "$BENCH_TMP/notify-$round")"
  jq -cn --argjson s "$switches" --arg r "$round" --arg order "$AB_ORDER" \
    --arg pi "${pid[inotify]}" --arg pn "${pid[notify]}" \
    --argjson bi "$((s1_i - s0_i))" --argjson bn "$((s1_n - s0_n))" \
    --argjson ci "$((t1_i - t0_i))" --argjson cn "$((t1_n - t0_n))" \
    '{round: ($r|tonumber), order: $order,
      inotify: {switches: $s.switches[$pi], threads: $s.threads[$pi], by_thread: $s.by_thread[$pi], beats: $bi, cpu_ticks: $ci},
      notify: {switches: $s.switches[$pn], threads: $s.threads[$pn], by_thread: $s.by_thread[$pn], beats: $bn, cpu_ticks: $cn}}' \
    | tee -a "$results"
  ab_stop "$round"
  LAVENDERD="$this_bin"
done

"$PY" - "$results" "$CLK_TCK" "$DURATION" <<'PY' | tee "$BENCH_OUT/report.txt"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
tck, duration = float(sys.argv[2]), float(sys.argv[3])
def per_beat(r): return r["switches"] / r["beats"]
def cpu(r): return r["cpu_ticks"] / tck / duration * 100
print()
for side, name in [("inotify", "inotify reader (status/inotify.rs)"), ("notify", "notify crate (RecommendedWatcher)")]:
    w = [per_beat(r[side]) for r in rows]
    c = [cpu(r[side]) for r in rows]
    print(f"{name}: {statistics.median(w):.2f} wake-ups per heartbeat (rounds {', '.join(f'{x:.2f}' for x in w)}); "
          f"{statistics.median(c):.3f} % of a core (rounds {', '.join(f'{x:.3f}' for x in c)}); "
          f"threads {', '.join(str(r[side]['threads']) for r in rows)}")
    names = sorted({n for r in rows for n in r[side]["by_thread"]})
    per = {n: statistics.median(r[side]["by_thread"].get(n, 0) / r[side]["beats"] for r in rows) for n in names}
    print("    per heartbeat by thread: " + ", ".join(f"{n} {v:.2f}" for n, v in per.items()))
ratio = statistics.median(per_beat(r["notify"]) for r in rows) / statistics.median(per_beat(r["inotify"]) for r in rows)
print(f"wake-ups per heartbeat, notify / inotify: {ratio:.2f}x (the bar for one watcher: within 1.10x)")
print(f"CPU resolution: {100 / tck / duration:.3f} % (one clock tick over a window)")
PY
