# scripts/slurm/lib.sh - what the test Slurm scripts share, sourced by start.sh (one
# node), start-cluster.sh (N nodes in network namespaces) and their stop scripts: the
# log lines, the pidfile checks, the munge key, and the slurm.conf both clusters have
# in common (the scheduler, the plugins, the timings the tests rely on).
#
# Set SLURM_SCRIPT (the script's name, e.g. slurm/start.sh) before sourcing.

T0=$(date +%s%N)
# log MESSAGE: a line with the seconds since the script began
log() {
  local ms=$(( ($(date +%s%N) - T0) / 1000000 ))
  printf '[%s +%d.%03ds] %s\n' "$SLURM_SCRIPT" $((ms / 1000)) $((ms % 1000)) "$*"
}
say() { echo "[$SLURM_SCRIPT] $*"; }
die() { echo "[$SLURM_SCRIPT] $*" >&2; exit 1; }

# alive PIDFILE NAME: the pid in PIDFILE runs and is called NAME (a pid reused by
# another program is not ours)
alive() {
  local pid
  [ -s "$1" ] || return 1
  pid=$(cat "$1")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = "$2" ]
}

# stop_pid PIDFILE NAME: SIGTERM, up to 10 s to exit, then SIGKILL; the pidfile goes
stop_pid() {
  if alive "$1" "$2"; then
    local pid
    pid=$(cat "$1")
    say "stopping $2 (pid $pid)"
    kill -TERM "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then say "$2 (pid $pid) did not exit, SIGKILL"; kill -KILL "$pid"; fi
  fi
  rm -f "$1"
}

# munge_key: the host's munge key, made once; every munged of both clusters uses it
munge_key() {
  [ -s /etc/munge/munge.key ] && return 0
  /usr/sbin/mungekey --create --force
  chown munge:munge /etc/munge/munge.key
  chmod 600 /etc/munge/munge.key
}

# slurm_conf: the slurm.conf lines both clusters share, on stdout, from the caller's
#   CLUSTER_NAME  CTLD_HOST  AUTH_INFO  PROCTRACK  STATE RUN LOG  PORT (slurmctld;
#   slurmd listens on PORT+1)  SLURMD_TAG ("" for one slurmd; "-%n": a spool, pid and
#   log file per node)  SLURMD_TIMEOUT (empty: Slurm's default)
# The caller appends its NodeName and PartitionName lines. cred_expire=5 (in
# AUTH_INFO) lets a requeued job start again after ~6 s instead of 120 s; the
# scheduler's passes every 2 s (instead of 30 and 60) start it then, not up to a
# minute later, and give a pending job its reason (a DOWN node) as soon.
slurm_conf() {
  cat <<EOF
# written by lavender's scripts/$SLURM_SCRIPT
ClusterName=$CLUSTER_NAME
SlurmctldHost=$CTLD_HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=$AUTH_INFO
CredType=cred/munge
MpiDefault=none
ProctrackType=$PROCTRACK
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$LOG/jobcomp.log
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d$SLURMD_TAG
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd$SLURMD_TAG.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd$SLURMD_TAG.log
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
EOF
  [ -z "${SLURMD_TIMEOUT:-}" ] || echo "SlurmdTimeout=$SLURMD_TIMEOUT"
  cat <<EOF
ReturnToService=2
SlurmdParameters=config_overrides
MinJobAge=300
KillWait=10
EOF
}

# install_conf NEWCONF CONF: CONF becomes NEWCONF's text; conf_changed=1 when it
# differed (the running daemons then need a restart)
install_conf() {
  conf_changed=0
  if ! cmp -s "$1" "$2"; then
    mv "$1" "$2"; chmod 644 "$2"; conf_changed=1; log "wrote $2"
  else
    rm -f "$1"; log "$2 unchanged"
  fi
}

# start_slurmctld CONF: starts it unless ours runs already, and waits until it answers
start_slurmctld() {
  if alive "$RUN/slurmctld.pid" slurmctld; then
    log "slurmctld already running (pid $(cat "$RUN/slurmctld.pid"))"
    return 0
  fi
  /usr/sbin/slurmctld -f "$1"
  for _ in $(seq 100); do alive "$RUN/slurmctld.pid" slurmctld && scontrol ping 2>/dev/null | grep -q 'is UP' && break; sleep 0.1; done
  alive "$RUN/slurmctld.pid" slurmctld || die "slurmctld did not start; see $LOG/slurmctld.log"
  log "slurmctld started (pid $(cat "$RUN/slurmctld.pid"))"
}
