"""Fixtures of the fault-injection suite (helpers in faults_helpers.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from faults_helpers import ROWS, Run

from seqpack.faces.cli import main


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., Run]:
    """``cli("pack", "in.jsonl", ..., cwd=None)``: run ``seqpack`` in this process."""

    def run(*args: Any, cwd: Path | None = None) -> Run:
        capsys.readouterr()
        if cwd is not None:
            monkeypatch.chdir(cwd)
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return Run(code, captured.out, captured.err)

    return run


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """A small prompt/completion JSONL file (60 rows) in its own directory."""
    path = tmp_path / "in" / "data.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return path


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str, str | bytes], Path]:
    """``write(name, text_or_bytes)``: a file in ``tmp_path/in``."""

    def _write(name: str, content: str | bytes) -> Path:
        path = tmp_path / "in" / name
        path.parent.mkdir(exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        return path

    return _write
