"""The upstream lane itself: the pinned releases run, the worker survives failures, and the lane is found."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from seqpack_lane import build, pins
from seqpack_lane.client import UpstreamError


def test_lane_runs_the_pinned_releases_without_transformer_engine(upstream):
    versions = upstream.call("core.versions")
    assert versions["megatron-bridge"] == pins.BRIDGE_VERSION
    assert versions["megatron-core"] == pins.MCORE_VERSION
    assert versions["torch"] == pins.TORCH_VERSION
    assert versions["python"].startswith("3.12.")
    assert versions["transformer_engine_imported"] is False


def test_an_op_that_raises_is_an_answer_and_the_worker_keeps_serving(upstream):
    with pytest.raises(UpstreamError) as info:
        upstream.call("core.fail", message="expected failure")
    assert info.value.type == "ValueError" and info.value.message == "expected failure"
    assert upstream.call("core.echo", x=[1, 2]) == {"x": [1, 2]}
    with pytest.raises(UpstreamError) as unknown:
        upstream.call("core.no_such_op")
    assert unknown.value.type == "KeyError"


def test_environment_written_by_an_op_is_undone(upstream):
    assert upstream.call("core.setenv", name="SEQPACK_LANE_PROBE", value="1") == "1"
    assert upstream.call("core.getenv", name="SEQPACK_LANE_PROBE") is None


def _fake_python(folder: Path, series: str) -> Path:
    folder.mkdir(parents=True)
    exe = folder / "python3.12"
    exe.write_text(f"#!/bin/sh\necho {series}\n")
    exe.chmod(0o755)
    return exe


def test_find_python_takes_pyenv_3_12_and_checks_the_series(tmp_path, monkeypatch):
    monkeypatch.delenv(build.PYTHON_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))
    wrong = _fake_python(tmp_path / "pyenv" / "versions" / "3.12.9" / "bin", "3 11")  # lies about its version
    assert build.find_python() is None
    right = _fake_python(tmp_path / "pyenv" / "versions" / "3.12.1" / "bin", "3 12")
    assert build.find_python() == right
    monkeypatch.setenv(build.PYTHON_ENV, str(wrong))
    assert build.find_python() == right  # the override is checked too


def test_status_names_what_is_missing(tmp_path):
    missing = build.status(tmp_path / "nothing")
    assert not missing.ready and "scripts/setup_upstream.sh" in missing.reason
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    assert "unfinished build" in build.status(venv).reason
    (venv / build.STAMP).write_text('{"fingerprint": "other"}')
    assert "other pins" in build.status(venv).reason
    (venv / build.STAMP).write_text('{"fingerprint": "%s"}' % pins.fingerprint())
    assert build.status(venv).ready


def test_build_refuses_a_folder_that_is_not_a_venv(tmp_path, monkeypatch):
    target = tmp_path / "precious"
    target.mkdir()
    (target / "keep.txt").write_text("user data")
    monkeypatch.setattr(build, "find_python", lambda: Path(sys.executable))
    with pytest.raises(build.LaneError, match="not a virtual environment"):
        build.build(target, log=lambda _line: None)
    assert (target / "keep.txt").read_text() == "user data"


def test_fingerprint_covers_pins_constraints_and_shim(monkeypatch):
    before = pins.fingerprint()
    monkeypatch.setattr(pins, "STEPS", pins.STEPS + ((("six",), False),))
    assert pins.fingerprint() != before


def test_worker_never_imports_seqpack():
    here = Path(build.__file__).resolve().parent
    for path in [here / "worker.py", here / "te_shim.py", *sorted((here / "ops").glob("*.py"))]:
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"^\s*(from|import) seqpack(\.|\s|$)", text, re.M), path.name


@pytest.mark.skipif(os.environ.get("SEQPACK_REQUIRE_UPSTREAM") != "1", reason="only when the lane is required")
def test_required_lane_is_ready():
    assert build.status().ready, build.status().reason
