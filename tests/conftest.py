"""Shared fixtures, one thread per process for torch, and the report of slow tests without a mark.

The fast lane (``scripts/test.sh --fast``) runs ``-m "not slow and not distributed"``. A test
over :data:`SLOW_SECONDS` belongs in ``slow`` (or ``distributed`` when it starts ranks): after
every run, tests without either mark that took longer are listed under "unmarked slow tests",
measured by CPU time (this process and the child processes it waited for), which a busy machine
hardly changes (capped at the wall time), or by wall time scaled down by the load average (for
tests that wait). The list
is a report; ``--strict-slow-marks`` (or ``SEQPACK_STRICT_SLOW_MARKS=1``) turns it into a failed
run. ``SEQPACK_TEST_TIMES=FILE`` writes the times of every test as JSON. Under pytest-xdist
(``scripts/test.sh`` runs two workers) each worker measures its tests and the controller reports
them all.
"""

import atexit
import json
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

import pytest

# The tests' tensors are tiny: threads cost more than they give, and on a busy machine spinning
# OpenMP threads slow torch down several-fold. Set before torch is imported (children inherit it).
os.environ.setdefault("OMP_NUM_THREADS", "1")

# No test may write into the real home directory (``install-skill --user``, the fuzzers, a client
# config): every test process (each pytest-xdist worker too: it inherits the controller's
# environment, so the HOME is made here, per process, not inherited) and its children see a fresh,
# empty HOME, removed when the process ends. The real one is kept in SEQPACK_REAL_HOME for a test
# that needs to say where it was. The user caches seqpack and Hugging Face keep under HOME follow it.
os.environ.setdefault("SEQPACK_REAL_HOME", os.environ.get("HOME", ""))
os.environ["HOME"] = tempfile.mkdtemp(prefix="seqpack-test-home-")
atexit.register(shutil.rmtree, os.environ["HOME"], True)

#: A test taking longer than this on a quiet machine is marked ``slow`` (or ``distributed``).
SLOW_SECONDS = 2.0
_MARKS = ("slow", "distributed")


def pytest_addoption(parser):
    group = parser.getgroup("seqpack")
    group.addoption("--slow-threshold", type=float, default=SLOW_SECONDS,
                    help="seconds over which a test without a slow/distributed mark is reported (default %(default)s)")
    group.addoption("--strict-slow-marks", action="store_true",
                    default=os.environ.get("SEQPACK_STRICT_SLOW_MARKS") == "1",
                    help="fail the run when a test without a slow/distributed mark is over the threshold")


def _cpu_seconds() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


_TIMES: dict[str, tuple[float, float, float]] = {}  # unmarked tests: nodeid -> (cpu s, wall s, load per CPU)
_MARKED: dict[str, tuple[float, float, float]] = {}  # the others


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    cpu, wall = _cpu_seconds(), time.perf_counter()
    yield
    cpus = os.cpu_count() or 1
    wall = time.perf_counter() - wall
    # at most the wall time: what a quiet machine would take (a child reaped now, say a data loader's
    # worker, may have run during earlier tests; workers on several CPUs finish in parallel)
    cpu = min(_cpu_seconds() - cpu, wall)
    marked = any(item.get_closest_marker(m) for m in _MARKS)
    (_MARKED if marked else _TIMES)[item.nodeid] = (cpu, wall, os.getloadavg()[0] / cpus)


def unmarked_slow(times: dict[str, tuple[float, float, float]], threshold: float) -> list[tuple[str, float, float]]:
    """``(nodeid, cpu s, wall s)`` of the tests over ``threshold``: by CPU time, or by wall time divided
    by the load per CPU (at least 1), so a busy machine does not make a fast test look slow."""
    return sorted(((n, c, w) for n, (c, w, load) in times.items() if c > threshold or w / max(1.0, load) > threshold),
                  key=lambda t: -max(t[1], t[2]))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    slow = unmarked_slow(_TIMES, config.getoption("--slow-threshold"))
    if not slow:
        return
    strict = config.getoption("--strict-slow-marks")
    terminalreporter.section(f"unmarked slow tests (over {config.getoption('--slow-threshold'):g} s: "
                             "mark them slow or distributed)", sep="!" if strict else "=", red=strict, yellow=not strict)
    for nodeid, cpu, wall in slow:
        terminalreporter.write_line(f"{cpu:7.2f} s CPU {wall:7.2f} s wall  {nodeid}")


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist: the controller collects the times each worker measured (its own run no tests)."""
    times = getattr(node, "workeroutput", {}).get("seqpack_times")
    if times:
        _TIMES.update({n: tuple(t) for n, t in times["unmarked"].items()})
        _MARKED.update({n: tuple(t) for n, t in times["marked"].items()})


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if hasattr(config, "workeroutput"):  # a pytest-xdist worker: the controller reports and writes the times
        config.workeroutput["seqpack_times"] = {"unmarked": dict(_TIMES), "marked": dict(_MARKED)}
        return
    dump = os.environ.get("SEQPACK_TEST_TIMES")  # a JSON file with the times of every test
    if dump:
        Path(dump).write_text(json.dumps({
            n: {"cpu_s": round(c, 3), "wall_s": round(w, 3), "load_per_cpu": round(x, 2), "marked": n in _MARKED}
            for n, (c, w, x) in {**_TIMES, **_MARKED}.items()}, indent=1))
    if (config.getoption("--strict-slow-marks") and exitstatus == pytest.ExitCode.OK
            and unmarked_slow(_TIMES, config.getoption("--slow-threshold"))):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def write_jsonl(tmp_path):
    """Write rows (dicts or raw strings) as a JSONL file in tmp_path and return its path."""

    def _write(rows, name="data.jsonl"):
        path = Path(tmp_path) / name
        with open(path, "w", encoding="utf-8") as fh:
            for row in rows:
                fh.write((row if isinstance(row, str) else json.dumps(row)) + "\n")
        return path

    return _write


@pytest.fixture(scope="session")
def smoke_cp_reports():
    """The smoke test of every registered path (default config, tiny data) and of two CP negative controls,
    with their CP checks in one launch of two ranks: name -> report.

    ``offline-pad1``: offline packs aligned to 1 instead of 2*CP; ``in_batch-mean-loss``: in-batch with
    ``calculate_per_token_loss=false``.
    """
    from reference_impl.packing_paths import path_names
    from reference_impl.smoke import SmokeRequest, default_config, run_packing_smoke_tests

    pad1 = default_config("offline")
    pad1["dataset"]["offline_packing_specs"]["pad_seq_to_mult"] = 1
    requests = {name: SmokeRequest(name) for name in path_names()}
    requests["offline-pad1"] = SmokeRequest("offline", pad1)
    requests["in_batch-mean-loss"] = SmokeRequest("in_batch", overrides=("model.calculate_per_token_loss=false",))
    return dict(zip(requests, run_packing_smoke_tests(list(requests.values()), size="tiny")))
