#!/usr/bin/env bash
# Benchmark 8 — the fingerprint of a source folder.
#   `lavenderd start` fingerprints the files each `data.sources` path names, so that a
#   file added, removed or changed reruns `downloads` (src/steps/files.rs).
#   This writes FILES files of SIZE bytes (under 1 MiB: each is read and hashed, the
#   costly case) into ten sub-folders of a scratch folder and times PASSES full
#   fingerprints of it, with the function the daemon uses (daemon/examples/fingerprint.rs).
#
#   bash bench/fingerprint/run.sh        # FILES=10000 SIZE=2048 PASSES=5 PROFILE=release
#
# Target: well under a second for 10,000 files. Not a test.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../lib.sh"
bench_out fingerprint

FILES="${FILES:-10000}"
SIZE="${SIZE:-2048}"
PASSES="${PASSES:-5}"
PROFILE="${PROFILE:-release}"
bench_machine "$BENCH_TMP"

flag=()
[ "$PROFILE" = release ] && flag=(--release)
cargo build "${flag[@]}" -q -p lavenderd --example fingerprint
bin="$BENCH_ROOT/target/$([ "$PROFILE" = release ] && echo release || echo debug)/examples/fingerprint"
result="$("$bin" "$FILES" "$SIZE" "$PASSES" "$BENCH_TMP")"
echo "$result" | tee "$BENCH_OUT/fingerprint.json"
echo "profile $PROFILE: $FILES files of $SIZE bytes, median $(echo "$result" | jq -r .median_s) s per fingerprint (CPU $(echo "$result" | jq -r .median_cpu_s) s)"
