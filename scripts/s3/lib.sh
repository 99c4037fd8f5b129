# scripts/s3/lib.sh - what scripts/s3/start.sh and stop.sh share: where the server
# lives, its ports, and the pidfile check. Sourced; set S3_SCRIPT (the script's name)
# first.
#
#   S3_BASE_DIR   its data, config, log and pidfile (default /tmp/lavender-s3)
#   S3_PORT       the S3 endpoint's port (default 18333); the master, volume and filer
#                 servers take the next three, and SeaweedFS puts each one's gRPC port
#                 10000 above it, so two servers need S3_PORTs at least 4 apart
#   S3_BUCKET     the bucket made for the tests (default lavender-test)
#   S3_ACCESS_KEY, S3_SECRET_KEY   the one identity the server knows

BASE=${S3_BASE_DIR:-/tmp/lavender-s3}
PORT=${S3_PORT:-18333}
BUCKET=${S3_BUCKET:-lavender-test}
ACCESS_KEY=${S3_ACCESS_KEY:-lavendertestkey}
SECRET_KEY=${S3_SECRET_KEY:-lavendertestsecret}
PIDFILE=$BASE/weed.pid
ENDPOINT=http://127.0.0.1:$PORT

T0=$(date +%s%N)
log() {
  local ms=$(( ($(date +%s%N) - T0) / 1000000 ))
  printf '[%s +%d.%03ds] %s\n' "$S3_SCRIPT" $((ms / 1000)) $((ms % 1000)) "$*"
}
die() { echo "[$S3_SCRIPT] $*" >&2; exit 1; }

# alive: the pid in the pidfile runs and is weed (a reused pid is not ours; a killed
# one not yet reaped, a zombie, is dead: in a container nobody may ever reap it)
alive() {
  local pid
  [ -s "$PIDFILE" ] || return 1
  pid=$(cat "$PIDFILE")
  [ -n "$pid" ] && running "$pid" && [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = weed ]
}

# running PID: the process runs and is not a zombie, whatever its name
running() {
  kill -0 "$1" 2>/dev/null && [ "$(awk '{print $3}' /proc/"$1"/stat 2>/dev/null)" != Z ]
}

# s3 CURL-ARGS...: a request signed with the test identity (AWS SigV4)
s3() {
  curl -sS --aws-sigv4 "aws:amz:us-east-1:s3" --user "$ACCESS_KEY:$SECRET_KEY" "$@"
}
