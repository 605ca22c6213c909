"""The skill as users install it: build the wheel (``python -m build``), install it into a fresh venv, install the
skill into a new project, and check that every file SKILL.md names exists there and every command in it runs (with
the wheel's code; the test venv supplies torch and the other extras)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKILL_NAME = "megatron-sequence-packing"


def _run(argv, **kw):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, **kw)
    assert proc.returncode == 0, f"{argv} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def installed(built_dists, tmp_path_factory):
    """A fresh venv with only the built wheel installed; the test venv's site-packages supply the dependencies."""
    tmp = tmp_path_factory.mktemp("wheel")
    wheel = built_dists[1]
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    py = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index", str(wheel)])
    site = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    (site / "zz_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")  # torch & co., never reinstalled
    return {"venv": venv, "py": py, "bin": venv / "bin", "site": site, "tmp": tmp}


@pytest.mark.slow
def test_wheel_carries_the_skill_and_installs_it_into_a_new_project(installed):
    project = installed["tmp"] / "work" / "new-project"  # does not exist yet
    env = {**os.environ, "PATH": f"{installed['bin']}:{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    where = _run([str(installed["py"]), "-c", "import seqpack; print(seqpack.__file__)"],
                 cwd=installed["tmp"], env=env).stdout
    assert where.startswith(str(installed["site"])), where  # the wheel's copy, not the checkout
    out = _run([str(installed["bin"] / "seqpack"), "install-skill", "--client", "claude", "--project", str(project)],
               cwd=installed["tmp"], env=env).stdout
    assert "installed" in out and "mcp --root" in out
    dest = project / ".claude" / "skills" / SKILL_NAME
    skill_md = (dest / "SKILL.md").read_text()
    assert skill_md == (ROOT / "skills" / SKILL_NAME / "SKILL.md").read_text()
    assert (dest / "LICENSE.txt").is_file() and not list(dest.rglob("*.parquet"))

    prose = re.sub(r"```.*?```", "", skill_md, flags=re.S)
    named = set(re.findall(r"\]\(([^)#]+)\)", prose)) | set(re.findall(r"\b((?:references|scripts|agents|evals)/"
                                                                      r"[\w./-]+\.\w+)", skill_md))
    assert named and all((dest / rel).is_file() for rel in named), [r for r in named if not (dest / r).is_file()]

    blocks = re.findall(r"```bash\n(.*?)```", skill_md, flags=re.S)
    assert blocks
    for block in blocks:
        expected = [ln.split("# =>", 1)[1].strip() for ln in block.splitlines() if ln.strip().startswith("# =>")]
        run_dir = installed["tmp"] / f"run{blocks.index(block)}"
        run_dir.mkdir()
        proc = subprocess.run(["bash", "-c", "set -euo pipefail\n" + block], cwd=run_dir, env=env,
                              capture_output=True, text=True, timeout=900)
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"SKILL.md block failed:\n{block}\n{output[-3000:]}"
        for text in expected:
            assert text in output, (text, output[-2000:])
    wrapper = _run([str(installed["py"]), str(dest / "scripts" / "seqpack_json.py"), "align", "--tp", "4", "--cp",
                    "2", "--sp"], cwd=installed["tmp"], env=env).stdout
    assert '"pad_seq_to_mult": 8' in wrapper
