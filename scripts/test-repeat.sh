#!/usr/bin/env bash
# `make test-repeat N=25 [ALONE=1]`: the fast unit tests (every package's `--lib`
# test binary, the paused-clock pipeline actor tests included) run N times in a row,
# to catch a test that passes once and fails the next time. ALONE=1 runs each unit
# test alone instead (one process per test, `--exact`, N times each), the way a
# test's own filter runs it, to catch a test that only passes beside the others.
# The binaries are built once (`cargo test --workspace --lib --no-run`, nothing
# rebuilds after `make test-build` in the same environment), then run directly, each
# from its package's directory as `cargo test` runs it. Prints each failing test by
# name with how often it failed, the first failure's output kept under
# target/test-repeat/; exits 1 if any run failed. JOBS processes run at once
# (default 4: a unit test mostly waits, on files and paused-clock tasks).
#
#   scripts/test-repeat.sh [--alone] [N]     (N defaults to 25; 1 with --alone)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

alone=0
if [ "${1:-}" = "--alone" ]; then
  alone=1
  shift
fi
runs=${1:-}
if [ -z "$runs" ]; then runs=$([ "$alone" = 1 ] && echo 1 || echo 25); fi
if ! [[ "$runs" =~ ^[1-9][0-9]*$ ]]; then
  echo "test-repeat: N must be a whole number of runs, 1 or more (got '$runs')" >&2
  exit 2
fi

logs=$PWD/target/test-repeat
rm -rf "$logs"
mkdir -p "$logs"

# The lib test binaries and their packages' directories, from cargo's JSON messages
# (manifest_path comes before executable in a compiler-artifact line).
started=$SECONDS
if ! cargo test --workspace --lib --no-run --message-format=json-render-diagnostics \
  >"$logs/build.json"; then
  echo "test-repeat: the unit tests did not build (cargo test --workspace --lib --no-run)" >&2
  exit 2
fi
mapfile -t binaries < <(sed -n \
  's/.*"manifest_path":"\([^"]*\)\/Cargo.toml".*"executable":"\([^"]*\)".*/\1\t\2/p' \
  "$logs/build.json" | sort -u)
if [ "${#binaries[@]}" -eq 0 ]; then
  echo "test-repeat: cargo named no unit-test binary ($logs/build.json)" >&2
  exit 2
fi
build_s=$((SECONDS - started))

# The worker's tests load libtorch's shared libraries, as `cargo test` finds them.
if [ -n "${LIBTORCH:-}" ]; then
  export LD_LIBRARY_PATH="$LIBTORCH/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

# Every run to make: "dir<TAB>binary<TAB>package<TAB>test" (an empty test: the
# whole binary).
runs_list=()
tests=0
for entry in "${binaries[@]}"; do
  dir=${entry%%$'\t'*}
  bin=${entry#*$'\t'}
  package=$(sed -n 's/^name = "\(.*\)"$/\1/p' "$dir/Cargo.toml" | head -1)
  mapfile -t names < <( (cd "$dir" && "$bin" --list --format terse) | sed -n 's/: test$//p')
  tests=$((tests + ${#names[@]}))
  [ "${#names[@]}" -gt 0 ] || continue
  for ((i = 1; i <= runs; i++)); do
    if [ "$alone" = 1 ]; then
      for name in "${names[@]}"; do runs_list+=("$dir"$'\t'"$bin"$'\t'"$package"$'\t'"$name"); done
    else
      runs_list+=("$dir"$'\t'"$bin"$'\t'"$package"$'\t')
    fi
  done
done

# JOBS processes at a time, each binary from its package's directory as `cargo
# test` runs it; its output and exit status go to run-K.log / run-K.rc.
jobs=${JOBS:-4}
started=$SECONDS
k=0
for spec in "${runs_list[@]}"; do
  IFS=$'\t' read -r dir bin package name <<<"$spec"
  while [ "$(jobs -pr | wc -l)" -ge "$jobs" ]; do wait -n; done
  (
    cd "$dir" || exit
    if [ -n "$name" ]; then "$bin" --exact "$name"; else "$bin"; fi >"$logs/run-$k.log" 2>&1
    echo $? >"$logs/run-$k.rc"
  ) &
  k=$((k + 1))
done
wait

# What failed, by name: a binary that failed outside any test (killed, aborted)
# counts under its own name. The first failure's output of each is kept.
declare -A failed=()
for ((i = 0; i < k; i++)); do
  rc=$(cat "$logs/run-$i.rc" 2>/dev/null || echo "?")
  if [ "$rc" = 0 ]; then
    rm -f "$logs/run-$i.log" "$logs/run-$i.rc"
    continue
  fi
  IFS=$'\t' read -r _ _ package _ <<<"${runs_list[$i]}"
  names=$(sed -n 's/^test \(.*\) \.\.\. FAILED$/\1/p' "$logs/run-$i.log")
  [ -n "$names" ] || names="(the binary exited with status $rc)"
  while IFS= read -r name; do
    key="$package $name"
    failed[$key]=$((${failed[$key]:-0} + 1))
    keep="$logs/$package--${name//[^A-Za-z0-9_:.-]/_}.log"
    [ -e "$keep" ] || cp "$logs/run-$i.log" "$keep"
  done <<<"$names"
  rm -f "$logs/run-$i.log" "$logs/run-$i.rc"
done
processes=$k
took=$((SECONDS - started))

mode=$([ "$alone" = 1 ] && echo "each test alone (--exact), $runs time(s)" || echo "$runs runs of each binary")
echo "test-repeat: $tests unit tests in ${#binaries[@]} binaries, $mode: $processes processes in ${took} s (build ${build_s} s)"
if [ "${#failed[@]}" -eq 0 ]; then
  echo "test-repeat: 0 failures"
  exit 0
fi
echo "test-repeat: FAILED: ${#failed[@]} test(s) failed (failed/runs, package, test; first failure's output in $logs/):"
for key in "${!failed[@]}"; do
  printf '  %3d/%-3d %s\n' "${failed[$key]}" "$runs" "$key"
done | sort -k1,1nr
exit 1
