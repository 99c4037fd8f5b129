#!/usr/bin/env bash
# scripts/slurm/stop.sh - stops only the daemons scripts/slurm/start.sh started,
# known by the pidfiles under $BASE/run (the pid must be alive AND have the
# expected command name).
# Jobs still running in this private cluster are cancelled first unless
# SLURM_STOP_KEEP_JOBS=1, so no slurmstepd/job processes are left behind.
set -uo pipefail
BASE=${SLURM_BASE_DIR:-/tmp/lavender-slurm}
RUN=$BASE/run
export SLURM_CONF=${SLURM_CONF_PATH:-/etc/slurm/slurm.conf}

alive() {
  local pid
  [ -s "$1" ] || return 1
  pid=$(cat "$1")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = "$2" ]
}

if [ "${SLURM_STOP_KEEP_JOBS:-0}" != 1 ] && alive "$RUN/slurmctld.pid" slurmctld; then
  if [ -n "$(squeue -h -o %i 2>/dev/null)" ]; then
    echo "[slurm/stop.sh] cancelling jobs: $(squeue -h -o %i | tr '\n' ' ')"
    scancel --user=root 2>/dev/null
    for _ in $(seq 150); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.2; done
  fi
fi

for spec in slurmd:slurmd.pid slurmctld:slurmctld.pid munged:munge/munged.pid; do
  name=${spec%%:*} pf=$RUN/${spec#*:}
  if alive "$pf" "$name"; then
    pid=$(cat "$pf")
    echo "[slurm/stop.sh] stopping $name (pid $pid)"
    kill -TERM "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then echo "[slurm/stop.sh] $name did not exit, SIGKILL"; kill -KILL "$pid"; fi
  else
    echo "[slurm/stop.sh] $name: not running from $pf (nothing to do)"
  fi
  rm -f "$pf"
done
