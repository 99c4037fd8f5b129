#!/usr/bin/env bash
# System packages the test suite needs beyond Rust, on Debian/Ubuntu. Idempotent:
# installs only what is missing. Call it from .ci/run before `make test`.
#   systemd  — systemd-analyze, which verifies the service units (daemon/tests/service_units.rs)
#   python3  — plistlib, which reads back the launchd plist
#   curl, jq — the status commands of docs/OPERATIONS.md (daemon/tests/operations_doc.rs)
set -euo pipefail

missing=()
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v jq >/dev/null 2>&1 || missing+=(jq)

if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "ci-deps: missing ${missing[*]}, and apt-get is not available to install them" >&2
    exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
fi
echo "ci-deps: installing ${missing[*]}"
$sudo apt-get update
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
