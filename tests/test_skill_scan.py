"""scripts/scan-skill.sh: the Agent Skills reference validator (PyPI skills-ref==0.1.1) accepts the bundle.

The script installs the validator from PyPI into a cached venv (first run about 10 s), so this runs
wherever the package registry is reachable; a broken bundle (negative control) is rejected.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "scan-skill.sh"
SKILL = ROOT / "skills" / "megatron-sequence-packing"
pytestmark = pytest.mark.slow


def _scan(skill: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), str(skill), str(out)], capture_output=True, text=True, timeout=600,
                          cwd=ROOT)


def test_reference_validator_accepts_the_bundle(tmp_path):
    proc = _scan(SKILL, tmp_path / "out")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.startswith("Valid skill: megatron-sequence-packing"), proc.stdout


def test_reference_validator_rejects_a_broken_bundle(tmp_path):
    broken = tmp_path / "megatron-sequence-packing"
    shutil.copytree(SKILL, broken)
    text = (broken / "SKILL.md").read_text(encoding="utf-8")
    (broken / "SKILL.md").write_text(text.replace("name: megatron-sequence-packing", "name: another-name", 1),
                                     encoding="utf-8")
    proc = _scan(broken, tmp_path / "out")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "must match skill name" in proc.stdout
