#!/usr/bin/env bash
# Builds (or reuses) the upstream lane: a second venv on Python 3.12 with megatron-bridge 0.6.2 and
# megatron-core 0.19.2 from PyPI (pins: lanes/upstream/seqpack_lane/pins.py), default .venv-upstream.
# Needs seqpack's own venv (scripts/setup.sh). A lane built from the same pins is reused in seconds;
# a first build takes about 4 minutes and 5.6 GB. Exits 2 with one line when it cannot be built.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/setup.sh
exec .venv/bin/python -m seqpack_lane setup "$@"
