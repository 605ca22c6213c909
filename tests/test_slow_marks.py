"""The report of slow tests without a mark (tests/conftest.py): robust to load, strict on request."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import unmarked_slow

ROOT = Path(__file__).resolve().parents[1]


def test_cpu_time_counts_whatever_the_load_and_wall_time_is_scaled_by_it():
    times = {
        "cpu_bound": (3.0, 9.0, 4.0),  # 3 s of CPU: slow, however busy the machine was
        "busy_machine": (0.5, 6.0, 4.0),  # 6 s wall at 4x load per CPU: 1.5 s quiet, fine
        "waits": (0.1, 5.0, 0.5),  # sleeps 5 s on a quiet machine: slow
        "fast": (0.2, 0.3, 1.0),
    }
    assert [n for n, _, _ in unmarked_slow(times, 2.0)] == ["cpu_bound", "waits"]


SAMPLE = '''
import time
import pytest


def _spin(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_spins_unmarked():
    _spin(0.4)


@pytest.mark.slow
def test_spins_marked():
    _spin(0.4)


def test_quick():
    pass
'''


@pytest.mark.slow  # two pytest processes (three with xdist workers)
@pytest.mark.parametrize("strict, workers", [(False, 0), (True, 0), (True, 2)])
def test_a_slow_unmarked_test_is_reported_and_fails_only_when_strict(tmp_path, strict, workers):
    (tmp_path / "conftest.py").write_text("from tests.conftest import *  # noqa: F401,F403\n")
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: slow\n    distributed: ranks\n")
    times = tmp_path / "times.json"
    # with workers, the workers measure and the controller reports (pytest-xdist, as scripts/test.sh runs it)
    xdist = ["-p", "xdist", "-n", str(workers)] if workers else []
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *xdist, "--slow-threshold", "0.2",
           str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SEQPACK_STRICT_SLOW_MARKS": "1" if strict else "0",
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "SEQPACK_TEST_TIMES": str(times)}  # no autoloaded plugins: quick
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    out = done.stdout
    assert "3 passed" in out and "unmarked slow tests" in out, out
    assert "test_spins_unmarked" in out and "test_spins_marked" not in out and "test_quick" not in out
    assert done.returncode == (1 if strict else 0), out
    recorded = json.loads(times.read_text())
    assert sorted(n.split("::")[1] for n in recorded) == ["test_quick", "test_spins_marked", "test_spins_unmarked"]
    assert [n for n, t in recorded.items() if t["marked"]] == [n for n in recorded if n.endswith("test_spins_marked")]
