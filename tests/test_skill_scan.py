"""scripts/scan-skill.sh: SkillSpector SAFE with a complete analysis, SkillEvaluator Tier 1 passing, skills-ref valid.

Runs only where Python 3.12 and fetched snapshots of the three scanners are present (it installs them
into a throwaway venv, with their dependencies from PyPI); otherwise it is skipped and says which is
missing. The scan takes a few minutes, hence ``slow``.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MIRRORS = Path(os.environ.get("SEQPACK_UPSTREAM_MIRRORS", "/work/.mirror"))
SNAPSHOTS = ("NVIDIA+SkillSpector", "NVIDIA+SkillEvaluator", "agentskills+agentskills")


def _python312() -> bool:
    env = {**os.environ, "PYENV_VERSION": "3.12.1"}
    try:
        return subprocess.run(["python3.12", "-c", "import sys; assert sys.version_info[:2] == (3, 12)"], env=env,
                              capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.slow
def test_scanners_accept_the_bundle(tmp_path):
    missing = [name for name in SNAPSHOTS if not (MIRRORS / name / "repo").is_dir()]
    if missing:
        pytest.skip(f"scanner snapshots not fetched: {', '.join(missing)} (fetch them into {MIRRORS})")
    if not _python312():
        pytest.skip("Python 3.12 is not available (the scanners need it)")
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "scan-skill.sh"), str(ROOT / "skills" /
                           "megatron-sequence-packing"), str(tmp_path)], capture_output=True, text=True,
                          timeout=1800)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    spector = json.loads((tmp_path / "skillspector.json").read_text())
    assert spector["risk_assessment"]["recommendation"] == "SAFE"
    assert spector["analysis_completeness"]["is_complete"] is True
    assert "8/8 passed" in (tmp_path / "skillevaluator.txt").read_text()
    assert (tmp_path / "skills-ref.txt").read_text().startswith("Valid skill")
