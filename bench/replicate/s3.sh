# Shared by bench/replicate's scripts (sourced, not run): a scratch folder `$work`
# with SeaweedFS started in it (scripts/s3/start.sh) on port $1, both gone at exit
# (with `$daemon`, if one is running), and the `replicate:` section for a prefix.

s3_bench_start() {
  work=$(mktemp -d)
  export S3_BASE_DIR="$work/s3" S3_PORT="${S3_PORT:-$1}" S3_BUCKET=bench
  daemon=""
  trap s3_bench_cleanup EXIT
  bash "$BENCH_ROOT/scripts/s3/start.sh" >/dev/null
  . "$S3_BASE_DIR/env"
}

s3_bench_cleanup() {
  [ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
  S3_STOP_GRACE=1 S3_STOP_WIPE=1 bash "$BENCH_ROOT/scripts/s3/stop.sh" >/dev/null
  rm -rf "$work"
}

# The `replicate:` section for objects under $1 (and `max_mbps: $2` if given).
s3_replicate_yaml() {
  echo "replicate:
  url: s3://$S3_BUCKET/$1
  endpoint: $S3_ENDPOINT
  path_style: true
  credentials_file: $S3_BASE_DIR/credentials${2:+
  max_mbps: $2}"
}
