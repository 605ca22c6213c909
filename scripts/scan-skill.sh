#!/usr/bin/env bash
# Scan the skill bundle the way users' tooling sees it, in a throwaway Python 3.12 venv:
#   * SkillSpector (NVIDIA/SkillSpector), static analysis (--no-llm): target SAFE with a complete analysis;
#   * SkillEvaluator (NVIDIA/SkillEvaluator) Tier 1: schema, version, security, pii, license, unicode,
#     quality, lint: target all passing;
#   * skills-ref (agentskills/agentskills): target valid.
# Each tool is installed from a fetched snapshot when one is present (a bare git dir under
# $SEQPACK_UPSTREAM_MIRRORS, default /work/.mirror, exported to a temporary tree; nothing of theirs
# is written into this repository), otherwise from PyPI. Their dependencies come from PyPI.
#
# Usage: scripts/scan-skill.sh [SKILL_DIR] [OUT_DIR]
#   SKILL_DIR  default skills/megatron-sequence-packing
#   OUT_DIR    where the reports go (default: a new temporary folder, printed at the end)
# Exit 0 when every target is met, 1 when one is missed, 2 when a tool could not be installed or run.
set -euo pipefail
cd "$(dirname "$0")/.."
SKILL=$(cd "${1:-skills/megatron-sequence-packing}" && pwd)
OUT=${2:-$(mktemp -d /tmp/seqpack-scan-reports.XXXXXX)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
MIRRORS=${SEQPACK_UPSTREAM_MIRRORS:-/work/.mirror}
WORK=$(mktemp -d /tmp/seqpack-scan.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

if PYENV_VERSION=3.12.1 python3.12 -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
  PY=(env PYENV_VERSION=3.12.1 python3.12)
elif python3.12 -c 'import sys' 2>/dev/null; then
  PY=(python3.12)
else
  echo "scan-skill: Python 3.12 not found (the scanners need it)" >&2
  exit 2
fi
# SEQPACK_SCAN_VENV=DIR keeps the venv there between runs (tools installed once); default: throwaway
VENV=${SEQPACK_SCAN_VENV:-$WORK/venv}
VPY="$VENV/bin/python"
if [ -x "$VENV/bin/skills-ref" ] && [ -x "$VENV/bin/skillspector" ] && [ -x "$VENV/bin/skillevaluator" ]; then
  REUSE=1
else
  REUSE=0
  "${PY[@]}" -m venv "$VENV"
  "$VPY" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
fi

# install_tool NAME OWNER+REPO SUBDIR PYPI_NAME
install_tool() {
  local name=$1 mirror=$MIRRORS/$2/repo subdir=$3 pypi=$4
  if [ -d "$mirror" ]; then
    mkdir -p "$WORK/src/$name"
    git --git-dir "$mirror" archive HEAD | tar -x -C "$WORK/src/$name"
    echo "scan-skill: $name from snapshot $(git --git-dir "$mirror" rev-parse --short HEAD)" >&2
    "$VPY" -m pip install --quiet "$WORK/src/$name/$subdir" >"$OUT/install-$name.log" 2>&1
  else
    echo "scan-skill: $name from PyPI ($pypi)" >&2
    "$VPY" -m pip install --quiet "$pypi" >"$OUT/install-$name.log" 2>&1
  fi
}
if [ "$REUSE" = 0 ]; then
  install_tool skillspector NVIDIA+SkillSpector . skillspector ||
    { echo "scan-skill: SkillSpector install failed, see $OUT/install-skillspector.log" >&2; exit 2; }
  install_tool skillevaluator NVIDIA+SkillEvaluator . skillevaluator ||
    { echo "scan-skill: SkillEvaluator install failed, see $OUT/install-skillevaluator.log" >&2; exit 2; }
  install_tool skills-ref agentskills+agentskills skills-ref skills-ref ||
    { echo "scan-skill: skills-ref install failed, see $OUT/install-skills-ref.log" >&2; exit 2; }
fi
BIN="$VENV/bin"

# scanners read the bundle as users install it: a plain copy, no caches
mkdir -p "$WORK/skills"
cp -r "$SKILL" "$WORK/skills/"
TARGET="$WORK/skills/$(basename "$SKILL")"
find "$TARGET" -name __pycache__ -prune -exec rm -rf {} +

status=0
( cd "$WORK" && "$BIN/skillspector" scan "$TARGET" --no-llm --format json --output "$OUT/skillspector.json" ) \
  >"$OUT/skillspector.log" 2>&1 || true
( cd "$OUT" && "$BIN/skillevaluator" validate "$TARGET" \
    --checks schema,version,security,pii,license,unicode,quality,lint --no-dedup ) \
  >"$OUT/skillevaluator.txt" 2>&1 && se_rc=0 || se_rc=$?
( cd "$WORK" && "$BIN/skills-ref" validate "$TARGET" ) >"$OUT/skills-ref.txt" 2>&1 && sr_rc=0 || sr_rc=$?

"$VPY" - "$OUT" "$se_rc" "$sr_rc" <<'PY' || status=$?
import json, sys
from pathlib import Path
out, se_rc, sr_rc = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
ok = True
try:
    spec = json.loads((out / "skillspector.json").read_text())
except (OSError, ValueError) as exc:
    print(f"SkillSpector: no report ({exc}); see {out / 'skillspector.log'}")
    sys.exit(2)
risk = spec.get("risk_assessment", {})
done = spec.get("analysis_completeness", {})
issues = spec.get("issues") or []
print(f"SkillSpector: score {risk.get('score')}, severity {risk.get('severity')}, recommendation "
      f"{risk.get('recommendation')}, analysis {done.get('status')} (complete={done.get('is_complete')}), "
      f"issues {len(issues)}")
for e in done.get("ledger_exceptions", []):
    print(f"  - {e.get('reason_code')}: {e.get('path')}:{e.get('start_line')} {e.get('message')}")
for f in issues[:20]:
    print(f"  - {f.get('severity')} {f.get('rule_id') or f.get('id')}: {f.get('title') or f.get('message')}")
if risk.get("recommendation") != "SAFE" or not done.get("is_complete"):
    ok = False
print(f"SkillEvaluator Tier 1: exit {se_rc}")
print("\n".join("  " + line for line in (out / "skillevaluator.txt").read_text().splitlines()[-25:]))
ok = ok and se_rc == 0
print(f"skills-ref validate: exit {sr_rc}: {(out / 'skills-ref.txt').read_text().strip()[:500]}")
ok = ok and sr_rc == 0
sys.exit(0 if ok else 1)
PY
echo "scan-skill: reports in $OUT" >&2
exit "$status"
