"""Tests running in parallel (pytest-xdist workers, ``scripts/test.sh``) share nothing they write.

Every worker has its own HOME (and so its own seqpack and Hugging Face user caches), its own
pytest temporary directories, and the ports its launches use are reserved, so no other worker's
launch can be given them. ``test_workers_are_isolated`` runs the probe below on two workers
(``-n 2 --dist each``: each worker runs it) and compares what they saw; the probe itself only runs
inside that run.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from seqpack.data.jsonl import cache_paths
from seqpack.training.ranks import reserved_port

ROOT = Path(__file__).resolve().parents[1]
PROBE = os.environ.get("SEQPACK_ISOLATION_PROBE")  # the folder the probes write to


def _probe(tmp_path: Path) -> None:
    worker = os.environ["PYTEST_XDIST_WORKER"]
    (tmp_path / "mine").write_text(worker)
    with reserved_port() as port:
        seen = {"worker": worker, "pid": os.getpid(), "home": os.environ["HOME"], "tmp_path": str(tmp_path),
                "tempdir": tempfile.mkdtemp(), "user_cache": str(cache_paths("x.jsonl")[-1].parent),
                "real_home": os.environ["SEQPACK_REAL_HOME"], "port": port,
                "home_entries": sorted(os.listdir(os.environ["HOME"]))}
        Path(PROBE, f"{worker}.json").write_text(json.dumps(seen))
        # hold the port until both workers have reserved theirs, so equal ports would be a real clash
        for _ in range(600):
            if len(list(Path(PROBE).glob("gw*.json"))) >= 2:
                break
            __import__("time").sleep(0.1)


if PROBE:  # collected only inside test_workers_are_isolated's run
    test_probe = _probe


@pytest.mark.slow
def test_workers_are_isolated(tmp_path: Path) -> None:
    probe = tmp_path / "probe"
    probe.mkdir()
    env = {**os.environ, "SEQPACK_ISOLATION_PROBE": str(probe)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "each",
                           "tests/test_isolation.py::test_probe"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    seen = [json.loads(p.read_text()) for p in sorted(probe.glob("gw*.json"))]
    assert [s["worker"] for s in seen] == ["gw0", "gw1"]
    a, b = seen
    assert a["pid"] != b["pid"]
    for key in ("home", "tmp_path", "tempdir", "user_cache", "port"):
        assert a[key] != b[key], key
    for s in seen:
        assert s["home"] not in (os.environ["HOME"], os.environ["SEQPACK_REAL_HOME"])  # nor this process's HOME
        assert s["real_home"] == os.environ["SEQPACK_REAL_HOME"]
        assert s["home_entries"] == []  # fresh and empty: nothing another test wrote
        assert s["user_cache"].startswith(s["home"])  # the user caches live under the worker's HOME
    # each worker's HOME is removed when it ends
    assert not any(Path(s["home"]).exists() for s in seen)


def test_a_reserved_port_is_refused_to_probes_and_open_to_a_reusing_server() -> None:
    with reserved_port() as port:
        with socket.socket() as probe, pytest.raises(OSError) as err:
            probe.bind(("127.0.0.1", port))  # what another process's free-port probe does
        assert err.value.errno == errno.EADDRINUSE
        with socket.socket() as server:  # what torch's TCPStore and uvicorn do
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind(("127.0.0.1", port))
            server.listen(1)
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                pass
    with socket.socket() as probe:  # released after the block
        probe.bind(("127.0.0.1", port))


class _Item:
    def __init__(self, nodeid: str, fixturenames: tuple[str, ...]) -> None:
        self.nodeid, self.fixturenames = nodeid, fixturenames


def test_a_file_and_each_expensive_session_fixture_keep_to_one_worker() -> None:
    from tests.conftest import SHARED_SESSION_FIXTURES, _xdist_group

    assert _xdist_group(_Item("tests/test_a.py::test_x[1]", ("tmp_path",))) == "tests/test_a.py"
    assert _xdist_group(_Item("tests/test_a.py::TestK::test_y", ())) == "tests/test_a.py"
    lane = {_xdist_group(_Item(f"tests/{f}::t", ("tmp_path", n))) for f in ("x.py", "y.py") for n in ("upstream", "compat")}
    assert lane == {"upstream-lane"}
    assert _xdist_group(_Item("tests/z.py::t", ("built_dists",))) == _xdist_group(_Item("tests/w.py::t", ("light_install",)))
    assert set(SHARED_SESSION_FIXTURES) >= {"upstream", "compat", "built_dists", "light_install", "smoke_cp_reports"}


def test_the_shared_fixtures_are_the_session_fixtures_of_the_conftest() -> None:
    import re

    from tests.conftest import SHARED_SESSION_FIXTURES

    source = (ROOT / "tests" / "conftest.py").read_text()
    session = set(re.findall(r'@pytest\.fixture\(scope="session"\)\ndef (\w+)\(', source))
    assert set(SHARED_SESSION_FIXTURES) <= session, set(SHARED_SESSION_FIXTURES) - session


def test_npm_client_installs_take_turns(tmp_path: Path) -> None:
    # two test workers installing the same client into the checkout's cache at once must not interleave
    import threading
    import time

    from tests.release_env import npm_clients

    lock, events = tmp_path / ".client.lock", []

    def hold(name: str) -> None:
        with npm_clients().locked(lock):
            events.append((name, "in", time.monotonic()))
            time.sleep(0.3)
            events.append((name, "out", time.monotonic()))

    first = threading.Thread(target=hold, args=("a",))
    first.start()
    while not events:
        time.sleep(0.01)
    second = threading.Thread(target=hold, args=("b",))
    second.start()
    first.join()
    second.join()
    assert [(n, e) for n, e, _ in events] == [("a", "in"), ("a", "out"), ("b", "in"), ("b", "out")]
