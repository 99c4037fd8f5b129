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

BASE=${SLURM_BASE_DIR:-/tmp/lavender-slurm}
STATE=$BASE/state RUN=$BASE/run LOG=$BASE/log
CONF=${SLURM_CONF_PATH:-/etc/slurm/slurm.conf}   # clients read /etc/slurm/slurm.conf by default
HOST=$(hostname -s)
NCPU=${SLURM_NODE_CPUS:-8}
PROCTRACK=${SLURM_PROCTRACK:-proctrack/pgid}   # pgid also reaps orphaned background children; linuxproc leaks them
WAIT_S=${SLURM_START_TIMEOUT:-60}
export SLURM_CONF=$CONF
T0=$(date +%s%N)
log() { local ms=$(( ($(date +%s%N) - T0) / 1000000 )); printf '[slurm/start.sh +%d.%03ds] %s\n' $((ms/1000)) $((ms%1000)) "$*"; }

# alive PIDFILE NAME -> true if the pid in PIDFILE is running and its comm is NAME
alive() {
  local pid
  [ -s "$1" ] || return 1
  pid=$(cat "$1")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = "$2" ]
}

# ---- 1. install if missing ------------------------------------------------
if ! [ -x /usr/sbin/munged ] || ! [ -x /usr/sbin/slurmctld ] || ! [ -x /usr/sbin/slurmd ] \
   || ! command -v sbatch >/dev/null; then
  echo "[slurm/start.sh] installing munge + slurm packages"
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
cat > "$NEWCONF" <<EOF
# written by lavender's scripts/slurm/start.sh
ClusterName=lavender
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=cred_expire=5
CredType=cred/munge
MpiDefault=none
ProctrackType=$PROCTRACK
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$LOG/jobcomp.log
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
SlurmctldPort=6817
SlurmdPort=6818
ReturnToService=2
SlurmdParameters=config_overrides
MinJobAge=300
KillWait=10
NodeName=$HOST CPUs=$NCPU RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
conf_changed=0
if ! cmp -s "$NEWCONF" "$CONF"; then
  mv "$NEWCONF" "$CONF"; chmod 644 "$CONF"; conf_changed=1; log "wrote $CONF"
else
  rm -f "$NEWCONF"; log "$CONF unchanged"
fi

# ---- 3. munged -------------------------------------------------------------
[ -s /etc/munge/munge.key ] || { /usr/sbin/mungekey --create --force; chown munge:munge /etc/munge/munge.key; chmod 600 /etc/munge/munge.key; }
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
  for d in slurmd slurmctld; do
    if alive "$RUN/$d.pid" "$d"; then
      pid=$(cat "$RUN/$d.pid"); log "config changed: restarting $d (pid $pid)"; kill -TERM "$pid"
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
  done
fi
if alive "$RUN/slurmctld.pid" slurmctld; then
  log "slurmctld already running (pid $(cat "$RUN/slurmctld.pid"))"
else
  /usr/sbin/slurmctld -f "$CONF"
  for _ in $(seq 100); do alive "$RUN/slurmctld.pid" slurmctld && scontrol ping 2>/dev/null | grep -q 'is UP' && break; sleep 0.1; done
  log "slurmctld started (pid $(cat "$RUN/slurmctld.pid"))"
fi
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
    echo "[slurm/start.sh] node $HOST not ready after ${WAIT_S}s (state='$st'); see $LOG" >&2; exit 1
  fi
  sleep 0.2
done
log "node $HOST is $st - ready"
sinfo
