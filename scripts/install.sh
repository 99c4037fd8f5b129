#!/usr/bin/env bash
# Installs or uninstalls lavender's two programs (what `make install` / `make uninstall` run).
#   scripts/install.sh install   PREFIX BIN_DIR   copy BIN_DIR/{lavenderd,lavender-worker} into PREFIX/bin
#   scripts/install.sh uninstall PREFIX           remove exactly what install wrote
# install records every file it wrote and every folder it created in
# PREFIX/share/lavender/install-manifest.txt; uninstall removes those and nothing else.
# lavender-worker finds libtorch through the rpath the build gave it (the checkout's
# .venv torch/lib, or your LIBTORCH); install checks that it still resolves.
set -euo pipefail

usage() {
  echo "usage: $0 install PREFIX BIN_DIR | uninstall PREFIX" >&2
  exit 2
}

PROGRAMS=(lavenderd lavender-worker)

install_all() {
  local prefix=$1 bin_dir=$2
  local manifest_dir="$prefix/share/lavender"
  local manifest="$manifest_dir/install-manifest.txt"
  for p in "${PROGRAMS[@]}"; do
    if [ ! -x "$bin_dir/$p" ]; then
      echo "install: $bin_dir/$p is not built; run \`make install\` (it builds first) or \`cargo build --release -p lavenderd -p lavender-worker\`" >&2
      exit 1
    fi
  done
  if [ -f "$manifest" ]; then
    # A second install over the first: keep what the first recorded as ours.
    uninstall_all "$prefix" quiet
  fi
  local written=()
  # Folders we create, outermost first, so uninstall can remove them innermost first.
  for dir in "$prefix" "$prefix/bin" "$prefix/share" "$manifest_dir"; do
    if [ ! -d "$dir" ]; then
      mkdir -p "$dir"
      written+=("dir $dir")
    fi
  done
  for p in "${PROGRAMS[@]}"; do
    install -m 0755 "$bin_dir/$p" "$prefix/bin/$p.tmp"
    mv -f "$prefix/bin/$p.tmp" "$prefix/bin/$p"
    written+=("file $prefix/bin/$p")
  done
  written+=("file $manifest")
  printf '%s\n' "${written[@]}" >"$manifest"

  # The worker loads libtorch through its rpath: check that it resolves from here.
  if command -v ldd >/dev/null 2>&1; then
    local missing
    missing=$(ldd "$prefix/bin/lavender-worker" 2>&1 | grep 'not found' || true)
    if [ -n "$missing" ]; then
      echo "install: $prefix/bin/lavender-worker cannot find these libraries:" >&2
      echo "$missing" >&2
      echo "install: it was linked against the libtorch of this checkout's .venv (or your LIBTORCH); keep that folder, or rebuild with \`make install\`" >&2
      exit 1
    fi
  fi
  echo "installed lavenderd and lavender-worker into $prefix/bin"
  # The installed lavenderd finds the data root as `make run` does (docs/OPERATIONS.md,
  # "Which data root"), so it sees the run `make run` trained, from any folder.
  echo "data root: what \`make run\` used, found by itself (the per-user data folder, e.g. ~/.local/share/lavender, unless --data-root, LAVENDER_DATA_ROOT or the config say otherwise); every command says on its first line which it read"
  case ":$PATH:" in
    *":$prefix/bin:"*) ;;
    *) echo "note: $prefix/bin is not on PATH; add it (e.g. export PATH=\"$prefix/bin:\$PATH\") or run $prefix/bin/lavenderd" ;;
  esac
}

uninstall_all() {
  local prefix=$1 quiet=${2:-}
  local manifest="$prefix/share/lavender/install-manifest.txt"
  if [ ! -f "$manifest" ]; then
    echo "uninstall: nothing installed under $prefix ($manifest not found)" >&2
    exit 1
  fi
  local dirs=()
  while read -r kind path; do
    case "$kind" in
      file) [ "$path" = "$manifest" ] || rm -f "$path" ;;
      dir) dirs+=("$path") ;;
    esac
  done <"$manifest"
  rm -f "$manifest"
  # Innermost first; a folder that now holds something else of the user's stays.
  for ((i = ${#dirs[@]} - 1; i >= 0; i--)); do
    rmdir "${dirs[$i]}" 2>/dev/null || true
  done
  [ -n "$quiet" ] || echo "removed lavenderd and lavender-worker from $prefix/bin"
}

case "${1:-}" in
  install) [ $# -eq 3 ] || usage; install_all "$2" "$3" ;;
  uninstall) [ $# -eq 2 ] || usage; uninstall_all "$2" ;;
  *) usage ;;
esac
