#!/usr/bin/env bash
# torchrun inside a Slurm job that lavenderd submitted: one task per node, each task
# one torchrun agent, the agents meeting in a c10d rendezvous on the job's first node.
# The first argument is the torchrun to run; the rest are torchrun's (the daemon
# appends the worker arguments after them). With launch.slurm.ntasks = nodes = N:
#
#   worker.command: [examples/torchrun/slurm-torchrun.sh, .venv/bin/torchrun,
#                    --nproc_per_node=<GPUs per node>, examples/torchrun/train.py, …]
#
# The rendezvous port is LAVENDER_RDZV_PORT (default 29500; set it in worker.env when
# two jobs share a first node). exec: the SIGTERM that srun delivers to the task
# reaches torchrun itself, which passes it to every rank.
set -euo pipefail
if [ $# -lt 1 ] || [ -z "${SLURM_JOB_ID:-}" ]; then
  echo "usage: slurm-torchrun.sh TORCHRUN [torchrun args…] — inside a Slurm job (launch.backend: slurm)" >&2
  exit 2
fi
torchrun=$1
shift
first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
exec "$torchrun" \
  --nnodes="${SLURM_NNODES:-1}" \
  --rdzv-backend=c10d --rdzv-endpoint="$first:${LAVENDER_RDZV_PORT:-29500}" \
  --rdzv-id="$SLURM_JOB_ID" --max_restarts=0 "$@"
