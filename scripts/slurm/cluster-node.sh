#!/usr/bin/env bash
# scripts/slurm/cluster-node.sh fail|restore NODE - a node of scripts/slurm/
# start-cluster.sh's cluster loses power, or comes back.
#   fail     every process in the node's network namespace (its slurmd, slurmstepd
#            and the job's tasks: `ip netns pids`, only this node's) is killed with
#            SIGKILL, and its link to the bridge goes down, as when a host dies: the
#            controller hears nothing more from it and marks it DOWN after
#            SlurmdTimeout; the other nodes' connections to it hang, not reset.
#   restore  the link comes up again and start-cluster.sh starts the node's slurmd;
#            with ReturnToService=2 the node is usable at once.
set -euo pipefail
BASE=${SLURM_CLUSTER_DIR:-/tmp/lavender-slurm-cluster}
action=${1:-} node=${2:-}
[[ "$node" =~ ^n[0-9]+$ ]] || { echo "usage: cluster-node.sh fail|restore n<i>" >&2; exit 2; }
ns=lvslurm-$node veth=lvs-$node
[ -e "/run/netns/$ns" ] || { echo "[slurm/cluster-node.sh] no namespace $ns: is the cluster up (scripts/slurm/start-cluster.sh)?" >&2; exit 1; }
case "$action" in
  fail)
    ip link set "$veth" down
    pids=$(ip netns pids "$ns" | tr '\n' ' ')
    [ -n "${pids// /}" ] && kill -KILL $pids
    for _ in $(seq 50); do [ -z "$(ip netns pids "$ns")" ] && break; sleep 0.1; done
    rm -f "$BASE/run/slurmd-$node.pid"
    echo "[slurm/cluster-node.sh] $node lost: killed $pids; link $veth down"
    ;;
  restore)
    ip link set "$veth" up
    bash "$(dirname "${BASH_SOURCE[0]}")/start-cluster.sh"
    ;;
  *) echo "usage: cluster-node.sh fail|restore n<i>" >&2; exit 2 ;;
esac
