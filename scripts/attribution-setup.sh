#!/usr/bin/env bash
# Installs bergson 2.5.1 (data attribution; its SOURCE lives in bergson.approx_unrolling)
# into the project's .venv for `lavenderd attribute` and its tests, keeping the
# project's torch 2.13.0 (a pip constraint). Idempotent: quick when it is present.
#
# bergson's wheel also lists torchvision, torchaudio and bitsandbytes, which it never
# imports (and whose releases pin other torch versions); they are left out, so bergson
# goes in with --no-deps followed by the dependencies it does import.
set -euo pipefail

BERGSON_VERSION="2.5.1"
TORCH_VERSION="2.13.0"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${LAVENDER_PYTHON:-$root/.venv/bin/python}"

if [ ! -x "$PY" ]; then
  echo "attribution-setup: $PY not found; run \`make setup\` first (it creates .venv with torch)" >&2
  exit 1
fi

# Installed versions, read from package metadata (importing bergson takes seconds).
installed() {
  "$PY" - "$BERGSON_VERSION" "$TORCH_VERSION" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
assert version("bergson") == sys.argv[1]
assert version("torch").split("+")[0] == sys.argv[2]
for dep in ("transformers", "datasets", "peft", "torchopt", "simple-parsing"):
    version(dep)
PY
}

if installed; then
  echo "attribution-setup: bergson $BERGSON_VERSION already in $(dirname "$(dirname "$PY")"); nothing to do"
  exit 0
fi

start=$(date +%s)
constraints="$(mktemp)"
trap 'rm -f "$constraints"' EXIT
echo "torch==$TORCH_VERSION" >"$constraints"
log="$(dirname "$(dirname "$PY")")/bergson-install.log"
echo "attribution-setup: installing bergson $BERGSON_VERSION into $(dirname "$(dirname "$PY")") (torch stays $TORCH_VERSION)"
pip_install() {
  "$PY" -m pip install --no-cache-dir --disable-pip-version-check -c "$constraints" "$@" >>"$log" 2>&1 || {
    echo "attribution-setup: pip install $* failed; see $log" >&2
    tail -5 "$log" >&2
    exit 1
  }
}
pip_install --no-deps "bergson==$BERGSON_VERSION"
# Versions bergson 2.5.1 was tested with here; numpy stays whatever torch brought.
pip_install "torch==$TORCH_VERSION" numpy accelerate==1.15.0 datasets==5.2.0 jinja2 \
  jaxtyping==0.3.11 ml_dtypes==0.6.0 natsort==8.4.0 scipy==1.17.1 peft==0.21.2 petname==2.9 \
  pyarrow==26.0.1 pyyaml==6.0.4 simple-parsing==0.1.9 torchopt==0.7.3 transformers==5.24.0 \
  huggingface-hub==2.4.0
if ! installed || ! "$PY" -c "import bergson.approx_unrolling.pipeline" >>"$log" 2>&1; then
  echo "attribution-setup: bergson $BERGSON_VERSION does not import after the install; see $log" >&2
  tail -5 "$log" >&2
  exit 1
fi
echo "attribution-setup: installed bergson $BERGSON_VERSION in $(( $(date +%s) - start ))s"
