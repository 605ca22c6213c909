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

from tests.tokenizer_bundles import real_tokenizer_dir

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

# Hypothesis (6.131 and later) also draws literal constants it harvests from the project's own
# modules loaded at the time (reference_impl/seqpack/...), so the examples of a derandomized test would
# depend on which modules earlier tests happened to import, and the lane's case counts (the generated
# table in docs/compatibility.md) on which tests ran before. Keep that pool empty: examples then
# depend only on the test. (An internal hook; on a Hypothesis without it there is nothing to undo.)
try:
    from hypothesis.internal.conjecture import providers as _hypothesis_providers

    if hasattr(_hypothesis_providers, "_get_local_constants"):
        _hypothesis_providers._get_local_constants = lambda: _hypothesis_providers._local_constants
except ImportError:  # hypothesis is a test extra
    pass

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
    (_MARKED if marked else _TIMES)[_plain_nodeid(item)] = (cpu, wall, os.getloadavg()[0] / cpus)


def _plain_nodeid(item) -> str:
    """The test's id without the ``@group`` pytest-xdist's ``--dist loadgroup`` appends to it."""
    group = item.get_closest_marker("xdist_group")
    suffix = f"@{group.args[0]}" if group is not None and group.args else ""
    return item.nodeid[: -len(suffix)] if suffix and item.nodeid.endswith(suffix) else item.nodeid


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
    """pytest-xdist: the controller gathers what each worker measured and counted (it runs no tests itself):
    the test times and the upstream lane's differential-case counts."""
    global _COMPAT
    out = getattr(node, "workeroutput", {})
    times = out.get("seqpack_times")
    if times:
        _TIMES.update({n: tuple(t) for n, t in times["unmarked"].items()})
        _MARKED.update({n: tuple(t) for n, t in times["marked"].items()})
    lane = out.get("seqpack_lane") or {}  # (the lane's test outcomes reach the controller with the reports)
    if lane.get("compat"):
        from tests.upstream.compat import CompatRecorder

        _COMPAT = _COMPAT or CompatRecorder()
        for function, counts in lane["compat"].items():
            _COMPAT.counts[function].update(counts)


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if hasattr(config, "workeroutput"):  # a pytest-xdist worker: the controller reports, checks and writes
        config.workeroutput["seqpack_times"] = {"unmarked": dict(_TIMES), "marked": dict(_MARKED)}
        config.workeroutput["seqpack_lane"] = {"compat": _COMPAT.to_dict() if _COMPAT is not None else None}
        return
    _finish_compat(session)
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


def write_big_image_vlm_rows(folder: Path) -> Path:
    """Two VLM rows read in place: a 1080x1920 picture (by a path relative to the JSONL) with a long answer,
    and a text row; at seq_length 4096 one CP=2 rank holds no image token (the gloo size mismatch of the
    user walk, 2026-12)."""
    from PIL import Image

    (folder / "imgs").mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (1920, 1080), (30, 120, 200)).save(folder / "imgs" / "big.png")
    words = "the model packs short sequences into fixed length bins so attention never crosses".split()
    text = lambda n: " ".join(words[i % len(words)] for i in range(n))  # noqa: E731
    rows = [{"messages": [{"role": "user", "content": "<image>\nDescribe this picture."},
                          {"role": "assistant", "content": text(300)}], "images": ["imgs/big.png"]},
            {"messages": [{"role": "user", "content": text(300)}, {"role": "assistant", "content": text(400)}]}]
    path = folder / "vlm.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="session")
def smoke_cp_reports(tmp_path_factory):
    """The smoke test of every registered path (default config, tiny data) and of two CP negative controls,
    with their CP checks in one launch of two ranks: name -> report.

    ``offline-pad1``: offline packs aligned to 1 instead of 2*CP; ``in_batch-mean-loss``: in-batch with
    ``calculate_per_token_loss=false``; ``chat-qwen3-<path>``: the chat demo rendered with the real Qwen3
    tokenizer and template (when the bundle is fetched); ``vlm-big-<path>``: :func:`write_big_image_vlm_rows`
    with the real Qwen2.5 tokenizer on the paths that read VLM rows.
    """
    from seqpack.core.packing_paths import path_names, visual_paths
    from seqpack.smoke.report import default_config
    from seqpack.smoke.run import SmokeRequest, run_packing_smoke_tests

    pad1 = default_config("offline")
    pad1["dataset"]["offline_packing_specs"]["pad_seq_to_mult"] = 1
    requests = {name: SmokeRequest(name) for name in path_names()}
    requests["offline-pad1"] = SmokeRequest("offline", pad1)
    requests["in_batch-mean-loss"] = SmokeRequest("in_batch", overrides=("model.calculate_per_token_loss=false",))
    qwen3 = real_tokenizer_dir("qwen3")
    if qwen3 is not None:  # chat rows rendered with Qwen3's own template, on every path
        from seqpack.data import demo_path

        for name in path_names():
            requests[f"chat-qwen3-{name}"] = SmokeRequest(name, data=demo_path("chat"), tokenizer=str(qwen3))
    qwen2_5 = real_tokenizer_dir("qwen2_5")
    if qwen2_5 is not None:  # VLM rows with a relative image path, a real tokenizer, seq_length 4096
        vlm = write_big_image_vlm_rows(tmp_path_factory.mktemp("vlm-big"))
        for name in visual_paths():
            requests[f"vlm-big-{name}"] = SmokeRequest(name, data=vlm, tokenizer=str(qwen2_5),
                                                       overrides=("model.seq_length=4096", "dataset.seq_length=4096"))
    return dict(zip(requests, run_packing_smoke_tests(list(requests.values()), size="tiny")))


# --- the upstream lane ------------------------------------------------------------------------------
# Tests that take the ``upstream`` fixture run Megatron-Bridge 0.6.2 / Megatron-Core 0.19.2 in the lane
# (lanes/upstream/seqpack_lane; built by scripts/setup_upstream.sh). They carry the ``upstream`` mark.
# Without a lane they skip, saying why, unless SEQPACK_REQUIRE_UPSTREAM=1 (scripts/test.sh sets it for
# the full run, so CI fails instead of skipping).
REQUIRE_UPSTREAM = "SEQPACK_REQUIRE_UPSTREAM"
_COMPAT = None
_LANE_OUTCOMES: dict[str, str] = {}


#: Session fixtures that cost seconds to minutes: their tests share one pytest-xdist worker (group), so the
#: fixture runs once, not once per worker.
SHARED_SESSION_FIXTURES = {"upstream": "upstream-lane", "compat": "upstream-lane", "built_dists": "built-dists",
                           "eval_env": "eval-env",
                           "light_install": "built-dists", "smoke_cp_reports": "smoke-cp"}


def _xdist_group(item) -> str:
    """The worker group of a test (``--dist loadgroup``): that of its expensive session fixture, else its file."""
    names = getattr(item, "fixturenames", ())
    return next((SHARED_SESSION_FIXTURES[n] for n in names if n in SHARED_SESSION_FIXTURES),
                item.nodeid.split("::")[0])


def pytest_collection_modifyitems(config, items):
    xdist = config.pluginmanager.hasplugin("xdist")
    for item in items:
        if "upstream" in getattr(item, "fixturenames", ()) or "compat" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.upstream)
        if xdist and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(_xdist_group(item)))


def pytest_runtest_logreport(report):
    if "upstream" in report.keywords and (report.when == "call" or report.outcome != "passed"):
        if _LANE_OUTCOMES.get(report.nodeid) in (None, "passed"):
            _LANE_OUTCOMES[report.nodeid] = report.outcome


@pytest.fixture(scope="session")
def upstream():
    """The session's upstream worker (:class:`seqpack_lane.UpstreamLane`)."""
    from seqpack_lane.build import LaneError
    from seqpack_lane.client import UpstreamLane

    try:
        lane = UpstreamLane()
        lane.call("core.versions", timeout=600)
    except LaneError as exc:
        if os.environ.get(REQUIRE_UPSTREAM) == "1":
            pytest.fail(f"upstream lane required ({REQUIRE_UPSTREAM}=1) but not usable: {exc}", pytrace=False)
        pytest.skip(f"upstream lane not available: {exc}")
    yield lane
    lane.close()


@pytest.fixture(scope="session")
def compat():
    """The session's differential-case counter (tests/upstream/compat.py)."""
    global _COMPAT
    from tests.upstream.compat import CompatRecorder

    if _COMPAT is None:
        _COMPAT = CompatRecorder()
    return _COMPAT


def _finish_compat(session) -> None:
    """Dump the case counts; with SEQPACK_CHECK_COMPAT=1, compare them with docs/compatibility.md."""
    if _COMPAT is None:
        return
    from tests.upstream import compat as compat_doc

    out = os.environ.get("SEQPACK_COMPAT_RESULTS")
    if out:
        compat_doc.dump(_COMPAT, Path(out))
    table = compat_doc.render_table(_COMPAT.to_dict())
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    not_passed = sorted(n for n, o in _LANE_OUTCOMES.items() if o != "passed")
    if os.environ.get("SEQPACK_WRITE_COMPAT") == "1":
        if not_passed:
            reporter.write_line(f"compatibility table not written: {len(not_passed)} lane tests did not pass")
        else:
            compat_doc.write_doc_table(table)
            reporter.write_line(f"compatibility table written to {compat_doc.DOC.name}")
        return
    if os.environ.get("SEQPACK_CHECK_COMPAT") != "1":
        return
    if not_passed:
        reporter.write_line(f"compatibility table not checked: {len(not_passed)} lane tests did not pass")
        return
    if compat_doc.doc_table() != table:
        reporter.write_sep("!", "docs/compatibility.md's lane agreement table is stale (SEQPACK_WRITE_COMPAT=1 "
                           "rewrites it)", red=True)
        reporter.write_line(table)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def eval_env(tmp_path_factory):
    """The product environment of the eval harness's sandboxed agents (the seqpack wheel built from this checkout,
    installed into a new venv; :mod:`seqpack_evals.sandbox`): its folder, for ``RunOptions(product_env=...)``."""
    from seqpack_evals.sandbox import build_product_env

    path = tmp_path_factory.mktemp("eval-env") / "env"
    build_product_env(path)
    return path


@pytest.fixture(scope="session")
def built_dists(tmp_path_factory):
    """The sdist and wheel ``python -m build`` makes of (a copy of) this checkout: ``(sdist, wheel)``."""
    from tests.release_env import build_dists

    return build_dists(tmp_path_factory.mktemp("dists"))


@pytest.fixture(scope="session")
def light_install(built_dists, tmp_path_factory):
    """A clean venv holding only the wheel and the light dependencies it declares (no torch): its bin directory."""
    from tests.release_env import light_venv

    return light_venv(built_dists[1], tmp_path_factory.mktemp("light") / "venv")
