#!/usr/bin/env bash
# Peak RSS of each data step (downloads → dedup → filter → build_shards → precompute) on
# a generated JSONL source (`format: jsonl`), one run per size in MB (default: 100 and
# 2048), to show that memory does not grow with the file. Each step runs under
# /usr/bin/time -v; a step's input is deleted once the next step has read it, so the
# scratch root (under $TMPDIR, removed at the end) holds about twice the source at most.
#   bash bench/data_rss/run.sh [SIZE_MB ...]      (WORKER=… picks another worker binary;
#                                                 STEPS="downloads dedup" runs only those)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
bench_need worker /usr/bin/time
sizes=("$@")
[ "${#sizes[@]}" -gt 0 ] || sizes=(100 2048)
scratch="$(mktemp -d "${TMPDIR:-/tmp}/lavender-data-rss.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
bench_machine

# Distinct documents of about 2 KB: five 60-word paragraphs out of 4,000, numbered.
generate() {
  "$PY" - "$1" "$2" <<'PY'
import json, random, sys
path, size = sys.argv[1], int(sys.argv[2]) << 20
rng = random.Random(0)
words = [f"w{i}" for i in range(3000)] + "the of and to in a is that for it as was with be by on".split()
paras = [" ".join(rng.choices(words, k=60)) for _ in range(4000)]
n = written = 0
with open(path, "w") as f:
    while written < size:
        text = f"Document {n}.\n" + "\n\n".join(paras[(n * 7 + i * 613) % 4000] for i in range(5))
        line = json.dumps({"id": n, "text": text}) + "\n"
        f.write(line)
        written += len(line)
        n += 1
print(n)
PY
}

printf '%-8s %-13s %12s %10s\n' size_mb step max_rss_mb seconds
for mb in "${sizes[@]}"; do
  dir="$scratch/$mb"
  mkdir -p "$dir"
  docs=$(generate "$dir/source.jsonl" "$mb")
  cat >"$dir/config.yaml" <<YAML
data:
  sources:
    - {path: source.jsonl, format: jsonl}
YAML
  for step in ${STEPS:-downloads dedup filter build_shards precompute}; do
    start=$(date +%s.%N)
    /usr/bin/time -v -o "$dir/$step.time" "$WORKER" "$step" --config "$dir/config.yaml" \
      --data-root "$dir/root" >"$dir/$step.log" 2>&1 || {
      echo "bench: $step failed on $mb MB; its log:" >&2
      tail -20 "$dir/$step.log" >&2
      exit 1
    }
    secs=$(calc "round($(date +%s.%N) - $start, 1)")
    kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$dir/$step.time")
    printf '%-8s %-13s %12s %10s\n' "$mb" "$step" "$(calc "round($kb / 1024, 1)")" "$secs"
    # What no later step reads goes now (precompute derives SFT/DPO from filter's output).
    case $step in
      downloads) rm -f "$dir/source.jsonl" ;;
      dedup) rm -rf "$dir/root/corpus/raw" ;;
      build_shards) rm -rf "$dir/root/corpus/dedup" ;;
    esac
  done
  echo "($mb MB: $docs documents)"
  rm -rf "$dir"
done
