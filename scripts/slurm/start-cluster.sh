#!/usr/bin/env bash
# scripts/slurm/start-cluster.sh - a Slurm cluster of N compute nodes on this one
# machine, for the multi-node tests (daemon/tests/it/slurm_cluster.rs): one slurmctld,
# and N slurmd, each in its own network namespace with its own address, joined by
# veth pairs to a bridge. The filesystem is shared by all, as a cluster's shared data
# root would be.
#
#   network   bridge lvslurm0 = $NET.1/24 (the controller's address), no default route
#             anywhere, forwarding off on the bridge: traffic stays between the host and
#             the namespaces it made. Node i: namespace lvslurm-n<i>, address $NET.(10+i),
#             host-side veth lvs-n<i>.
#   nodes     n1..nN (NodeName=n<i> NodeAddr=$NET.(10+i)); each slurmd runs in its
#             namespace's network (nsenter --net) plus a private UTS namespace (its
#             hostname) and mount namespace (a hosts file that names the nodes bound on
#             /etc/hosts). Not `ip netns exec`: it remounts /sys, which hides
#             /sys/fs/cgroup, and slurmd then fails to initialise its cgroup plugin.
#   slurm     $BASE/slurm.conf (clients need SLURM_CONF=$BASE/slurm.conf), controller
#             port $PORT, slurmd port $PORT+1 (in each namespace), its own munged on
#             $BASE/munge/munge.socket: nothing is shared with scripts/slurm/start.sh's
#             single-node cluster, so both run at once.
#   timing    SlurmdTimeout=10: a lost node is DOWN ~15-20 s after it dies;
#             ReturnToService=2: a slurmd started again is usable at once;
#             cred_expire=5: a requeued job may start again ~6 s later.
#
# Idempotent: what exists and runs with an unchanged config is left alone; a slurmd
# that died (a test's lost node) is started again. scripts/slurm/stop-cluster.sh
# removes everything this made. Needs root, iproute2 (ip), util-linux (nsenter,
# unshare) and the slurm/munge packages (scripts/ci-deps.sh installs them all).
#
# Environment: SLURM_CLUSTER_DIR (default /tmp/lavender-slurm-cluster),
# SLURM_CLUSTER_NODES (2), SLURM_CLUSTER_NET (10.234.34, a private /24 that must not be
# in use here), SLURM_CLUSTER_PORT (6827), SLURM_NODE_CPUS (4 per node),
# SLURM_START_TIMEOUT (60 s for the nodes to come up).
set -euo pipefail
SLURM_SCRIPT=slurm/start-cluster.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BASE=${SLURM_CLUSTER_DIR:-/tmp/lavender-slurm-cluster}
N=${SLURM_CLUSTER_NODES:-2}
NET=${SLURM_CLUSTER_NET:-10.234.34}
PORT=${SLURM_CLUSTER_PORT:-6827}
NCPU=${SLURM_NODE_CPUS:-4}
WAIT_S=${SLURM_START_TIMEOUT:-60}
BR=lvslurm0
STATE=$BASE/state RUN=$BASE/run LOG=$BASE/log
CONF=$BASE/slurm.conf
SOCK=$BASE/munge/munge.socket
HOST=$(hostname -s)
export SLURM_CONF=$CONF

# ---- 0. what is needed --------------------------------------------------------
missing=()
[ "$(id -u)" = 0 ] || missing+=("root (network namespaces, veth pairs and a bridge need CAP_NET_ADMIN and CAP_SYS_ADMIN; run as root)")
command -v ip >/dev/null || missing+=("ip (package iproute2)")
command -v nsenter >/dev/null && command -v unshare >/dev/null || missing+=("nsenter and unshare (package util-linux)")
for b in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/sbin/munged; do [ -x "$b" ] || missing+=("$b (packages slurmctld slurmd munge)"); done
command -v sbatch >/dev/null || missing+=("sbatch (package slurm-client)")
if [ ${#missing[@]} -gt 0 ]; then
  die "cannot make the ${N}-node test cluster; missing: $(printf '%s; ' "${missing[@]}")scripts/ci-deps.sh installs the packages"
fi
[[ "$N" =~ ^[1-9][0-9]?$ ]] && [ "$N" -le 50 ] || die "SLURM_CLUSTER_NODES=$N: give 1..50 nodes"
[[ "$NET" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "SLURM_CLUSTER_NET=$NET: give the first three numbers of a /24, e.g. 10.234.34"
if ip -4 -o addr show | grep -v " $BR " | grep -q " inet $NET\."; then
  die "the test range $NET.0/24 is already used on this machine: $(ip -4 -o addr show | grep " inet $NET\." | awk '{print $2, $4}' | tr '\n' ' ')- pick another with SLURM_CLUSTER_NET"
fi
mkdir -p "$STATE/ctld" "$RUN" "$LOG" "$BASE/munge"

# ---- 1. network ----------------------------------------------------------------
# /run/netns is made a mount point by the first `ip netns add`; stop-cluster.sh
# unmounts it only if it was not one before.
if [ ! -e "$RUN/netns-mount" ]; then
  if mountpoint -q /run/netns 2>/dev/null; then echo existed > "$RUN/netns-mount"
  else echo made > "$RUN/netns-mount"; fi
fi
if ! ip link show "$BR" >/dev/null 2>&1; then
  ip link add "$BR" type bridge
  echo "$BR" >> "$RUN/links"
  log "bridge $BR made"
fi
ip addr replace "$NET.1/24" dev "$BR"
ip link set "$BR" up
sysctl -qw "net.ipv4.conf.$BR.forwarding=0"
for i in $(seq 1 "$N"); do
  ns=lvslurm-n$i veth=lvs-n$i
  if [ ! -e "/run/netns/$ns" ]; then
    ip netns add "$ns"
    echo "$ns" >> "$RUN/netns"
  fi
  if ! ip link show "$veth" >/dev/null 2>&1; then
    ip -n "$ns" link del eth0 2>/dev/null || true
    ip link add "$veth" type veth peer name eth0 netns "$ns"
    ip link set "$veth" master "$BR"
  fi
  ip link set "$veth" up
  ip -n "$ns" addr replace "$NET.$((10 + i))/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
done
log "network: $BR $NET.1/24, nodes n1..n$N at $NET.11..$NET.$((10 + N)) (no default route, forwarding off)"

# ---- 2. hosts file and config --------------------------------------------------
{
  echo "127.0.0.1 localhost"
  echo "$NET.1 $HOST"
  for i in $(seq 1 "$N"); do echo "$NET.$((10 + i)) n$i"; done
} > "$BASE/hosts"
NEWCONF=$(mktemp)
{
  CLUSTER_NAME=lavender-cluster CTLD_HOST="$HOST($NET.1)" AUTH_INFO="socket=$SOCK,cred_expire=5" \
    PROCTRACK=proctrack/pgid SLURMD_TAG=-%n SLURMD_TIMEOUT=10 slurm_conf
  for i in $(seq 1 "$N"); do
    echo "NodeName=n$i NodeHostname=n$i NodeAddr=$NET.$((10 + i)) CPUs=$NCPU RealMemory=1000 State=UNKNOWN"
  done
  echo "PartitionName=cluster Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
} > "$NEWCONF"
install_conf "$NEWCONF" "$CONF"

# ---- 3. munged (its own socket) --------------------------------------------------
munge_key
chown munge:munge "$BASE/munge"
if ! alive "$BASE/munge/munged.pid" munged; then
  runuser -u munge -- /usr/sbin/munged --socket="$SOCK" --pid-file="$BASE/munge/munged.pid" \
    --seed-file="$BASE/munge/munged.seed" --log-file="$BASE/munge/munged.log"
  for _ in $(seq 50); do munge -S "$SOCK" -n 2>/dev/null | unmunge -S "$SOCK" >/dev/null 2>&1 && break; sleep 0.1; done
  munge -S "$SOCK" -n | unmunge -S "$SOCK" >/dev/null || die "munged on $SOCK does not answer; see $BASE/munge/munged.log"
  log "munged started (pid $(cat "$BASE/munge/munged.pid"))"
fi

# ---- 4. slurmctld, then a slurmd per node ------------------------------------------
if [ "$conf_changed" = 1 ]; then   # a changed config needs every daemon restarted
  for f in "$RUN"/slurmd-*.pid; do [ -e "$f" ] && stop_pid "$f" slurmd; done
  stop_pid "$RUN/slurmctld.pid" slurmctld
fi
start_slurmctld "$CONF"
for i in $(seq 1 "$N"); do
  node=n$i pf=$RUN/slurmd-n$i.pid
  alive "$pf" slurmd && continue
  rm -f "$pf"
  # slurmd forks into the background; its children (slurmstepd, the job's tasks) keep
  # the namespaces.
  nsenter --net=/run/netns/lvslurm-n$i -- unshare --uts --mount --propagation private -- \
    bash -c 'hostname "$1" && mount --bind "$2" /etc/hosts && exec /usr/sbin/slurmd -f "$3" -N "$1"' \
    slurmd-in-namespace "$node" "$BASE/hosts" "$CONF"
  for _ in $(seq 100); do alive "$pf" slurmd && break; sleep 0.1; done
  alive "$pf" slurmd || die "slurmd of $node did not start; see $LOG/slurmd-$node.log"
  log "slurmd $node started (pid $(cat "$pf"), address $NET.$((10 + i)))"
done

# ---- 5. wait for every node -----------------------------------------------------
deadline=$(( $(date +%s) + WAIT_S ))
while :; do
  states=$(sinfo -h -N -o '%N %T' 2>/dev/null || true)
  ready=0
  for i in $(seq 1 "$N"); do
    st=$(awk -v n="n$i" '$1 == n {print $2}' <<<"$states")
    case "$st" in
      idle|mixed|allocated|completing) ready=$((ready + 1)) ;;
      down*|drain*|drained*|fail*) scontrol update NodeName="n$i" State=RESUME 2>/dev/null || true ;;
    esac
  done
  [ "$ready" = "$N" ] && break
  if [ "$(date +%s)" -ge "$deadline" ]; then
    die "the nodes are not all up after ${WAIT_S}s: $(tr '\n' ' ' <<<"$states"); see $LOG"
  fi
  sleep 0.2
done
log "$N nodes up: $(tr '\n' ' ' <<<"$states")(SLURM_CONF=$CONF)"
