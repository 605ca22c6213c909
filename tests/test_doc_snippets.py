"""Every code snippet in README.md, docs/ and skills/ runs (docs contain only claims the code backs).

* ```python blocks are executed in-process (in a temporary working directory).
* ```bash blocks are executed by bash in a temporary directory with ``set -euo pipefail``;
  ``seqpack`` (and ``.venv/bin/seqpack``) run ``python -m seqpack`` with this interpreter.
  A line ``# => TEXT`` states that the block's output contains TEXT, and the test checks it.
  Blocks that call ``scripts/setup.sh`` or ``scripts/test.sh`` are what CI itself runs (.ci/run);
  a block whose first line starts with ``# not run`` says why it cannot run here (a client
  program, a long-running server) and is reported as skipped.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# docs/ copies generated from the skill's references are identical to their source: run them once.
FILES = [
    path
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md")), *sorted((ROOT / "skills").glob("**/*.md"))]
    if not path.read_text().startswith("<!-- generated from ")
]
PYTHON = re.compile(r"```python\n(.*?)```", re.S)
BASH = re.compile(r"```bash\n(.*?)```", re.S)


#: Commands that take seconds (torch and batches, the model, Energon, the adversarial eval, torchrun): ``slow`` blocks.
SLOW_COMMANDS = re.compile(r"seqpack (smoke|batches|energon-prepare|eval adversarial)\b|torch\.distributed\.run")


def _blocks(pattern):
    for path in FILES:
        for i, match in enumerate(pattern.finditer(path.read_text())):
            marks = [pytest.mark.slow] if pattern is BASH and SLOW_COMMANDS.search(match.group(1)) else []
            yield pytest.param(path, match.group(1), id=f"{path.relative_to(ROOT)}#{i}", marks=marks)


@pytest.mark.parametrize("path, code", list(_blocks(PYTHON)))
def test_python_snippet_runs(path, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"{path}:snippet", "exec"), {"__name__": "__snippet__"})


@pytest.mark.parametrize("path, code", list(_blocks(BASH)))
def test_bash_snippet_runs(path, code, tmp_path):
    first = code.strip().splitlines()[0]
    if "scripts/setup.sh" in code or "scripts/test.sh" in code:
        pytest.skip("CI runs this command itself (.ci/run)")
    if first.startswith("# not run"):
        pytest.skip(first.lstrip("# "))
    expected = [line.split("# =>", 1)[1].strip() for line in code.splitlines() if line.strip().startswith("# =>")]
    body = code.replace(".venv/bin/seqpack", "seqpack").replace(".venv/bin/python", '"$PY"')
    script = (
        "set -euo pipefail\n"
        'seqpack() { "$PY" -m seqpack "$@"; }\n'
        f"{body}"
    )
    env = {**os.environ, "PY": sys.executable, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{path} snippet failed ({proc.returncode}):\n{output[-3000:]}"
    for text in expected:
        assert text in output, f"{path}: expected {text!r} in the output:\n{output[-3000:]}"
