#!/usr/bin/env bash
# scripts/slurm/stop-cluster.sh - undoes scripts/slurm/start-cluster.sh: cancels the
# cluster's jobs, stops its slurmd, slurmctld and munged (by the pids in their
# pidfiles, checked against their command names), kills what still runs in the node
# namespaces (`ip netns pids`: only this cluster's processes live there), deletes the
# namespaces (their veth pairs go with them) and the bridge, and unmounts /run/netns if
# start-cluster.sh made it a mount point. Idempotent; SLURM_CLUSTER_DIR as for
# start-cluster.sh. Jobs are kept with SLURM_STOP_KEEP_JOBS=1.
set -uo pipefail
SLURM_SCRIPT=slurm/stop-cluster.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BASE=${SLURM_CLUSTER_DIR:-/tmp/lavender-slurm-cluster}
RUN=$BASE/run
export SLURM_CONF=$BASE/slurm.conf

if [ "${SLURM_STOP_KEEP_JOBS:-0}" != 1 ] && alive "$RUN/slurmctld.pid" slurmctld; then
  jobs=$(squeue -h -o %i 2>/dev/null | tr '\n' ' ')
  if [ -n "${jobs// /}" ]; then
    say "cancelling jobs: $jobs"
    scancel --user=root 2>/dev/null
    for _ in $(seq 100); do [ -z "$(squeue -h -t R,CG,PD -o %i 2>/dev/null)" ] && break; sleep 0.2; done
  fi
fi

# The slurmd at once (each takes a moment to exit), then the controller, then munged.
for f in "$RUN"/slurmd-*.pid; do [ -e "$f" ] && stop_pid "$f" slurmd & done
wait
stop_pid "$RUN/slurmctld.pid" slurmctld
stop_pid "$BASE/munge/munged.pid" munged

if [ -s "$RUN/netns" ]; then
  for ns in $(sort -u "$RUN/netns"); do
    [ -e "/run/netns/$ns" ] || continue
    pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
    if [ -n "${pids// /}" ]; then
      say "killing what still runs in $ns: $pids"
      kill -KILL $pids 2>/dev/null
      for _ in $(seq 50); do [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break; sleep 0.1; done
    fi
    ip netns del "$ns" && say "namespace $ns removed"
  done
  rm -f "$RUN/netns"
fi
if [ -s "$RUN/links" ]; then
  for link in $(sort -u "$RUN/links"); do
    ip link show "$link" >/dev/null 2>&1 && ip link del "$link" && say "link $link removed"
  done
  rm -f "$RUN/links"
fi
if [ "$(cat "$RUN/netns-mount" 2>/dev/null)" = made ] && mountpoint -q /run/netns \
   && [ -z "$(ls -A /run/netns 2>/dev/null)" ]; then
  umount /run/netns && rmdir /run/netns && say "/run/netns unmounted and removed"
fi
rm -f "$RUN/netns-mount"
exit 0
