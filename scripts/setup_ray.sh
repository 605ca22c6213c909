#!/usr/bin/env bash
# Builds (or reuses) the Ray lane: its own venv (default .venv-ray, SEQPACK_RAY_VENV to move it) with
# seqpack installed editable with the `ray` and `hf` extras, a local S3-compatible server (moto's server
# mode) and pytest, all from PyPI. The default venv (.venv) never gets ray: the Ray lane's tests run here
# only (scripts/test.sh runs them after the main suite). A first build takes a few minutes and about 1 GB;
# a lane whose pins are already installed is reused in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${SEQPACK_RAY_VENV:-.venv-ray}"
PY="${PYTHON:-python3}"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
want="ray==2.60.0 moto[server]==5.2.5 boto3 pytest>=8"
if ! "$VENV/bin/python" -c "import ray, moto, seqpack, pytest" >/dev/null 2>&1 \
   || [ "$("$VENV/bin/python" -c 'import ray; print(ray.__version__)')" != "2.60.0" ]; then
  "$VENV/bin/python" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
  # shellcheck disable=SC2086
  "$VENV/bin/python" -m pip install --quiet -e ".[ray,hf]" $want
fi
"$VENV/bin/python" -m pip install --quiet --no-deps -e . >/dev/null
echo "ray lane ready in $VENV ($("$VENV/bin/python" -c 'import ray; print("ray", ray.__version__)'))" >&2
