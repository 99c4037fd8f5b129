#!/usr/bin/env bash
# scripts/slurm/start.sh - a single-node Slurm (+ munge) for the Slurm tests, on
# Debian without systemd. Installs the packages if missing, writes slurm.conf,
# starts munged/slurmctld/slurmd in the background with pidfiles under $BASE/run
# and waits until the node is up. Idempotent: daemons already running with an
# unchanged config are left alone. scripts/slurm/stop.sh stops what this started.
#
# The node claims SLURM_NODE_CPUS CPUs (default 8, whatever the machine has:
# config_overrides), so several small test jobs run at once on a 2-core machine.
# cred_expire=5 makes a requeued job eligible again after ~5 s instead of 120 s.
set -euo pipefail
SLURM_SCRIPT=slurm/start.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BASE=${SLURM_BASE_DIR:-/tmp/lavender-slurm}
STATE=$BASE/state RUN=$BASE/run LOG=$BASE/log
CONF=${SLURM_CONF_PATH:-/etc/slurm/slurm.conf}   # clients read /etc/slurm/slurm.conf by default
HOST=$(hostname -s)
NCPU=${SLURM_NODE_CPUS:-8}
PROCTRACK=${SLURM_PROCTRACK:-proctrack/pgid}   # pgid also reaps orphaned background children; linuxproc leaks them
WAIT_S=${SLURM_START_TIMEOUT:-60}
export SLURM_CONF=$CONF

# ---- 1. install if missing ------------------------------------------------
if ! [ -x /usr/sbin/munged ] || ! [ -x /usr/sbin/slurmctld ] || ! [ -x /usr/sbin/slurmd ] \
   || ! command -v sbatch >/dev/null; then
  say "installing munge + slurm packages"
  export DEBIAN_FRONTEND=noninteractive
  made_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then   # keep postinst from trying to start services
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; made_policy=1
  fi
  trap '[ "$made_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d' EXIT
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends munge slurmctld slurmd slurm-client >/dev/null
  [ "$made_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
  trap - EXIT
  log "packages installed"
fi
log "slurm $(/usr/sbin/slurmctld -V | awk '{print $2}'), munge $(/usr/sbin/munged -V | awk '{print $1}' | sed 's/^munge-//')"

mkdir -p "$STATE/ctld" "$STATE/d" "$RUN/munge" "$LOG" "$(dirname "$CONF")"

# ---- 2. config --------------------------------------------------------------
NEWCONF=$(mktemp)
{
  CLUSTER_NAME=lavender CTLD_HOST=$HOST AUTH_INFO=cred_expire=5 PORT=6817 SLURMD_TAG= SLURMD_TIMEOUT= slurm_conf
  echo "NodeName=$HOST CPUs=$NCPU RealMemory=1000 State=UNKNOWN"
  echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
} > "$NEWCONF"
install_conf "$NEWCONF" "$CONF"

# ---- 3. munged -------------------------------------------------------------
munge_key
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge "$RUN/munge"
chmod 755 /run/munge
if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  if alive "$RUN/munge/munged.pid" munged; then log "munged already running (ours, pid $(cat "$RUN/munge/munged.pid"))"
  else log "munged already answering (not started by this script; scripts/slurm/stop.sh leaves it alone)"; fi
else
  runuser -u munge -- /usr/sbin/munged --pid-file="$RUN/munge/munged.pid"   # forks into background
  for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
  munge -n | unmunge >/dev/null
  log "munged started (pid $(cat "$RUN/munge/munged.pid"))"
fi

# ---- 4. slurmctld + slurmd -------------------------------------------------
if [ "$conf_changed" = 1 ]; then   # a changed config (e.g. plugin types) needs a restart
  stop_pid "$RUN/slurmd.pid" slurmd
  stop_pid "$RUN/slurmctld.pid" slurmctld
fi
start_slurmctld "$CONF"
if alive "$RUN/slurmd.pid" slurmd; then
  log "slurmd already running (pid $(cat "$RUN/slurmd.pid"))"
else
  /usr/sbin/slurmd -f "$CONF"
  for _ in $(seq 100); do alive "$RUN/slurmd.pid" slurmd && break; sleep 0.1; done
  log "slurmd started (pid $(cat "$RUN/slurmd.pid"))"
fi

# ---- 5. wait for the node ----------------------------------------------------
deadline=$(( $(date +%s) + WAIT_S ))
while :; do
  st=$(sinfo -h -n "$HOST" -o '%T' 2>/dev/null || true)
  case "$st" in
    idle|mixed|allocated|completing) break ;;
    down*|drain*|drained*) scontrol update NodeName="$HOST" State=RESUME 2>/dev/null || true ;;
  esac
  if [ "$(date +%s)" -ge "$deadline" ]; then
    die "node $HOST not ready after ${WAIT_S}s (state='$st'); see $LOG"
  fi
  sleep 0.2
done
log "node $HOST is $st - ready"
sinfo
