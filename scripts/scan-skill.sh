#!/usr/bin/env bash
# Validate the skill bundle the way the Agent Skills reference validator sees it: skills-ref
# (PyPI skills-ref==0.1.1, the reference library of the Agent Skills format), installed into a
# cached venv (.seqpack-cache/scan-venv) from PyPI. The scanners this script used to run as well
# (NVIDIA SkillSpector, SkillEvaluator) are on no package registry, so they are no longer run.
#
# Usage: scripts/scan-skill.sh [SKILL_DIR] [OUT_DIR]
#   SKILL_DIR  default skills/megatron-sequence-packing
#   OUT_DIR    where the report goes (default: a new temporary folder, printed at the end)
# Exit 0 when the bundle is valid, 1 when it is not, 2 when the validator could not be installed.
set -euo pipefail
cd "$(dirname "$0")/.."
SKILL=$(cd "${1:-skills/megatron-sequence-packing}" && pwd)
OUT=${2:-$(mktemp -d)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PIN="skills-ref==0.1.1"
VENV=${SEQPACK_SCAN_VENV:-.seqpack-cache/scan-venv}
mkdir -p "$(dirname "$VENV")"
VENV=$(cd "$(dirname "$VENV")" && pwd)/$(basename "$VENV")
PY=${PYTHON:-python3}
if ! "$VENV/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("skills-ref") != "0.1.1")' 2>/dev/null; then
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$PIN" >"$OUT/install-skills-ref.log" 2>&1 ||
    { echo "scan-skill: could not install $PIN from PyPI (see $OUT/install-skills-ref.log)" >&2; exit 2; }
fi
# the validator (console script agentskills) reads the bundle as users install it: a plain copy, no caches
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cp -r "$SKILL" "$WORK/"
TARGET="$WORK/$(basename "$SKILL")"
find "$TARGET" -name __pycache__ -prune -exec rm -rf {} +
( cd "$WORK" && "$VENV/bin/agentskills" validate "$TARGET" ) >"$OUT/skills-ref.txt" 2>&1 && rc=0 || rc=$?
sed "s|$WORK/||g" "$OUT/skills-ref.txt"
echo "scan-skill: report in $OUT" >&2
[ "$rc" = 0 ] || exit 1
