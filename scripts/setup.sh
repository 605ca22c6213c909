#!/usr/bin/env bash
# Creates ./.venv (if missing) and installs seqpack with every extra that installs on CPU (all) plus
# the test extra into it (pip install -e ".[all,test]"), and the two development-only packages beside
# it: the eval harness (evals/, seqpack-evals: `seqpack eval`) and the upstream lane's client
# (lanes/upstream/, seqpack-lane). Neither is part of the seqpack wheel.
# On a CPU machine it installs torch==2.13.0 first when no torch is importable, so that pip takes
# the local CPU wheel and never resolves a multi-GB CUDA build for the `torch` requirement.
set -euo pipefail
cd "$(dirname "$0")/.."
# The eval harness runs each agent inside a bubblewrap sandbox (evals/seqpack_evals/sandbox.py); its tests
# need bwrap. Installed here when missing and we may (root with apt-get); otherwise the harness says how.
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get install -y -qq bubblewrap >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq bubblewrap >/dev/null 2>&1; }) \
      || echo "could not install bubblewrap; the eval harness's sandbox tests will fail (apt-get install -y bubblewrap)" >&2
  else
    echo "bubblewrap (bwrap) is missing: install it (apt-get install -y bubblewrap) for the eval harness's sandbox" >&2
  fi
fi
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
VPY=.venv/bin/python
"$VPY" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
if ! "$VPY" -c "import torch" >/dev/null 2>&1; then
  "$VPY" -m pip install --quiet "torch==2.13.0"
fi
"$VPY" -m pip install --quiet -e ".[all,test]" -e ./lanes/upstream -e ./evals
echo "seqpack installed in $(pwd)/.venv" >&2
