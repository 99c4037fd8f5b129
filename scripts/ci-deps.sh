#!/usr/bin/env bash
# What the web tests need besides Rust, installed when missing (idempotent, quick
# when everything is there):
#   - Debian's chromium, for the dashboard's browser test (daemon/tests/web_browser.rs);
#   - prometheus_client in .venv, whose parser validates GET /metrics (daemon/tests/web_metrics.rs).
# Runs as root in CI; elsewhere it uses sudo for apt-get when it is not root.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

if command -v chromium >/dev/null 2>&1; then
  echo "ci-deps: chromium present ($(command -v chromium))"
else
  echo "ci-deps: installing chromium (Debian package) for the dashboard browser test"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    chromium fonts-dejavu-core >/dev/null
  command -v chromium >/dev/null 2>&1 || {
    echo "ci-deps: chromium still missing after apt-get install" >&2
    exit 1
  }
fi

if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" || {
    echo "ci-deps: could not create $venv; on Debian/Ubuntu install python3-venv" >&2
    exit 1
  }
fi
if "$venv/bin/python" -c 'import prometheus_client' 2>/dev/null; then
  echo "ci-deps: prometheus_client present in .venv"
else
  echo "ci-deps: installing prometheus_client into .venv (the /metrics test's parser)"
  "$venv/bin/python" -m pip install --quiet prometheus_client
fi
