#!/usr/bin/env bash
# The baseline: a status script in the style the operator guide's
# `pipeline_status.sh --json` evidently was — file counts with `ls | wc -l`, the
# heartbeat read with `jq`, the disk from `df` — over the same data root lavenderd
# serves. Usage: pipeline_status.sh DATA_ROOT
set -euo pipefail
root="$1"
count() { if [ -d "$1" ]; then ls "$1" | wc -l; else echo 0; fi; }

run="$(ls -1d "$root"/checkpoints/run-* 2>/dev/null | tail -1 || true)"
hb="$run/heartbeat.json"
if [ -n "$run" ] && [ -f "$hb" ]; then
  pid="$(jq -r .pid "$hb")"
  running=false
  kill -0 "$pid" 2>/dev/null && running=true
  age=$(( $(date +%s) - $(date -d "$(jq -r .timestamp "$hb")" +%s) ))
  training="$(jq -c --argjson age "$age" --argjson running "$running" \
    '{step, total_steps, pct: (if .total_steps > 0 then (.step * 10000 / .total_steps | floor) / 100 else null end),
      loss, loss_smooth, lr, steps_per_sec, eta_seconds, heartbeat_age_s: $age,
      heartbeat_stale: ($age > 300), running: $running, latest_checkpoint}' "$hb")"
  checkpoints="$({ ls -d "$run"/*-[0-9][0-9]-[0-9][0-9]-[0-9][0-9]-[0-9][0-9][0-9][0-9] 2>/dev/null || true; } | wc -l)"
else
  pid=null running=false training=null checkpoints=0
fi
read -r device used avail < <(df -k "$root" | awk 'NR==2 {print $1, $3, $4}')
jq -n --arg ts "$(date -u +%Y-%m-%dT%H:%M:%SZ)" --argjson running "$running" --arg pid "$pid" \
  --argjson training "$training" --argjson checkpoints "$checkpoints" \
  --argjson corpus "$(count "$root/corpus/documents")" --argjson shards "$(count "$root/shards/parts")" \
  --argjson tokens "$(count "$root/tokens/cache")" \
  --arg device "$device" --argjson used "$used" --argjson avail "$avail" \
  '{timestamp: $ts, pipeline: {running: $running, pid: ($pid | tonumber? // null)},
    training: $training,
    data: {corpus_count: $corpus, shard_count: $shards, token_count: $tokens, checkpoints: $checkpoints},
    disk: {device: $device, used_gib: ($used / 1048576 * 10 | floor / 10), avail_gib: ($avail / 1048576 * 10 | floor / 10)}}'
