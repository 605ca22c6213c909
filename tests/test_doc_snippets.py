"""Every ```python snippet in README.md, docs/ and skills/ runs (docs contain only claims the code backs)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md")), *sorted((ROOT / "skills").glob("**/*.md"))]
SNIPPET = re.compile(r"```python\n(.*?)```", re.S)


def _snippets():
    for path in FILES:
        for i, match in enumerate(SNIPPET.finditer(path.read_text())):
            yield pytest.param(path, match.group(1), id=f"{path.relative_to(ROOT)}#{i}")


@pytest.mark.parametrize("path, code", list(_snippets()))
def test_snippet_runs(path, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"{path}:snippet", "exec"), {"__name__": "__snippet__"})
