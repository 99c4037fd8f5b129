#!/usr/bin/env bash
# scripts/slurm/stop.sh - stops only the daemons scripts/slurm/start.sh started,
# known by the pidfiles under $BASE/run (the pid must be alive AND have the
# expected command name).
# Jobs still running in this private cluster are cancelled first unless
# SLURM_STOP_KEEP_JOBS=1, so no slurmstepd/job processes are left behind.
set -uo pipefail
SLURM_SCRIPT=slurm/stop.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BASE=${SLURM_BASE_DIR:-/tmp/lavender-slurm}
RUN=$BASE/run
export SLURM_CONF=${SLURM_CONF_PATH:-/etc/slurm/slurm.conf}

if [ "${SLURM_STOP_KEEP_JOBS:-0}" != 1 ] && alive "$RUN/slurmctld.pid" slurmctld; then
  if [ -n "$(squeue -h -o %i 2>/dev/null)" ]; then
    say "cancelling jobs: $(squeue -h -o %i | tr '\n' ' ')"
    scancel --user=root 2>/dev/null
    for _ in $(seq 150); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.2; done
  fi
fi

for spec in slurmd:slurmd.pid slurmctld:slurmctld.pid munged:munge/munged.pid; do
  name=${spec%%:*} pf=$RUN/${spec#*:}
  alive "$pf" "$name" || say "$name: not running from $pf (nothing to do)"
  stop_pid "$pf" "$name"
done
