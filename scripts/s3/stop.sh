#!/usr/bin/env bash
# scripts/s3/stop.sh - stops the SeaweedFS that scripts/s3/start.sh started from
# $S3_BASE_DIR (its pidfile; the pid must be alive and be weed). weed takes ~20 s to
# exit on SIGTERM, so it gets S3_STOP_GRACE seconds (default 3) and then SIGKILL: its
# data is the tests', nothing to flush. S3_STOP_WIPE=1 also removes $S3_BASE_DIR.
set -uo pipefail
S3_SCRIPT=s3/stop.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
GRACE=${S3_STOP_GRACE:-3}
if alive; then
  pid=$(cat "$PIDFILE")
  log "stopping weed (pid $pid)"
  kill -TERM "$pid"
  for _ in $(seq $((GRACE * 10))); do alive || break; sleep 0.1; done
  if alive; then log "weed (pid $pid) still running after ${GRACE}s, SIGKILL"; kill -KILL "$pid"; fi
  for _ in $(seq 50); do alive || break; sleep 0.1; done
else
  log "weed: not running from $PIDFILE (nothing to do)"
fi
rm -f "$PIDFILE"
if [ "${S3_STOP_WIPE:-0}" = 1 ]; then rm -rf "$BASE"; fi
