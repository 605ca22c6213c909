"""Nothing in the tree reads or names a path of one machine, or a tool of the environment it was written in.

Tests install what they need from the package registries; a snapshot directory, a scratch folder or
a development-environment tool named in the product, tests or docs would make a fresh clone skip or
fail. ``git grep`` over every tracked file (this file spells its patterns in pieces).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PATTERNS = {
    "a machine's work folder": "/" + "work/",
    "a snapshot mirror": r"\." + r"mirror\b",
    "a fixed scratch path": "/" + "tmp/[A-Za-z]",
    "a development-environment tool": r"\bfarm" + r"-bench\b|\bfetch" + r"` tool|\bthe fetch" + r" tool",
}
#: Lines that build a temporary path properly are fine.
ALLOWED = re.compile(r"mktemp|TMPDIR|tmp_path|tempfile")


def _hits(pattern: str, cwd: Path) -> list[str]:
    proc = subprocess.run(["git", "grep", "-n", "-I", "-E", pattern, "--", ".", ":!*.lock"], cwd=cwd,
                          capture_output=True, text=True, check=False)
    assert proc.returncode in (0, 1), proc.stderr
    return [line for line in proc.stdout.splitlines() if not ALLOWED.search(line)]


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout")
@pytest.mark.parametrize("what", sorted(PATTERNS))
def test_tree_names_no_machine_path_or_environment_tool(what):
    hits = _hits(PATTERNS[what], ROOT)
    assert not hits, f"{what} in the tree:\n" + "\n".join(hits[:20])


def test_the_check_finds_a_planted_path(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "a.py").write_text("SNAP = '" + "/" + "work/." + "mirror/repo'\nOK = tempfile.mkdtemp()\n")
    subprocess.run(["git", "add", "a.py"], cwd=tmp_path, check=True)
    assert len(_hits(PATTERNS["a machine's work folder"], tmp_path)) == 1
    assert len(_hits(PATTERNS["a snapshot mirror"], tmp_path)) == 1
