"""Local ranks forked from a warmed server (training.rank_server): what each rank sees, failures, time limits.

Each rank of these launches is a tiny script that reports, as JSON, its rank variables, argv, working
directory, whether torch was already imported when the script started, and the pid of its parent;
a collective (gloo all-reduce) proves the ranks found each other. The negative control launches the
same script as fresh interpreters (no preload), where torch is not imported yet.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from seqpack.training.rank_server import RankServer, fork_available
from seqpack.training.ranks import launch_ranks, rank_environment

pytestmark = [pytest.mark.distributed,
              pytest.mark.skipif(not fork_available(), reason="ranks are forked from a server on Linux only")]

WORKER = """
import json, os, sys
warm = "torch" in sys.modules
mode = sys.argv[2] if len(sys.argv) > 2 else ""
if mode == "plain":  # no torch: report and end
    with open(os.path.join(sys.argv[1], f"r{os.environ['RANK']}.json"), "w") as fh:
        json.dump({"warm": warm, "ppid": os.getppid()}, fh)
    raise SystemExit(0)
import torch, torch.distributed as dist
dist.init_process_group("gloo")
total = torch.tensor([float(os.environ["RANK"]) + 1])
dist.all_reduce(total)
report = {"rank": int(os.environ["RANK"]), "world": int(os.environ["WORLD_SIZE"]), "argv": sys.argv,
          "cwd": os.getcwd(), "warm": warm, "ppid": os.getppid(), "sum": float(total), "path0": sys.path[0],
          "marker": os.environ.get("SEQPACK_RANK_TEST")}
with open(os.path.join(sys.argv[1], f"r{report['rank']}.json"), "w") as fh:
    json.dump(report, fh)
print("rank", report["rank"], "done")
if mode == "fail" and report["rank"] == 1:
    raise SystemExit(3)
if mode == "raise" and report["rank"] == 0:
    raise ValueError("boom in rank 0")
if mode == "hang" and report["rank"] == 0:
    import time
    time.sleep(600)
dist.destroy_process_group()
"""


@pytest.fixture
def worker(tmp_path: Path) -> Path:
    path = tmp_path / "scripts" / "rank_worker.py"
    path.parent.mkdir()
    path.write_text(WORKER)
    return path


ENV = {"SEQPACK_RANK_TEST": "a"}  # the environment the module's server serves


@pytest.fixture(scope="module")
def server():
    """One warmed server for the tests below (each launch forks fresh ranks from it), for environment ENV."""
    with RankServer(rank_environment(ENV)) as started:
        assert started.ready(time.perf_counter() + 300)
        yield started


def _reports(out: Path, n: int) -> list[dict]:
    return [json.loads((out / f"r{r}.json").read_text()) for r in range(n)]


def test_ranks_forked_from_a_server_see_what_fresh_ranks_see(worker: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    run_dir = tmp_path / "cwd"
    run_dir.mkdir()
    done = launch_ranks([str(worker), str(out)], 3, timeout=120, log_dir=tmp_path / "logs", cwd=run_dir)
    assert done.returncode == 0, done.tail
    reports = _reports(out, 3)
    assert [r["rank"] for r in reports] == [0, 1, 2] and {r["world"] for r in reports} == {3}
    assert {r["sum"] for r in reports} == {6.0}  # 1 + 2 + 3: the collective spanned every rank
    assert all(r["argv"] == [str(worker), str(out)] for r in reports)
    assert all(Path(r["cwd"]) == run_dir and Path(r["path0"]) == worker.parent for r in reports)
    assert all(r["warm"] for r in reports)  # torch came with the fork
    assert len({r["ppid"] for r in reports}) == 1 and reports[0]["ppid"] != os.getpid()
    assert "rank 2 done" in (tmp_path / "logs" / "rank2.log").read_text()


def test_without_preload_the_ranks_are_fresh_interpreters(worker: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    done = launch_ranks([str(worker), str(out), "plain"], 2, timeout=120, log_dir=tmp_path / "logs", preload=())
    assert done.returncode == 0, done.tail
    reports = _reports(out, 2)
    assert not any(r["warm"] for r in reports)
    assert {r["ppid"] for r in reports} == {os.getpid()}


def test_one_server_serves_several_launches_and_refuses_another_environment(worker: Path, tmp_path: Path,
                                                                          server: RankServer) -> None:
    outs = []
    for n in (2, 3):
        out = tmp_path / f"out{len(outs)}"
        out.mkdir()
        done = launch_ranks([str(worker), str(out)], n, timeout=120, log_dir=out / "logs", env=ENV, server=server)
        assert done.returncode == 0, done.tail
        outs.append(_reports(out, n))
    assert {r["ppid"] for rs in outs for r in rs} == {server._proc.pid}
    assert {r["marker"] for rs in outs for r in rs} == {"a"}
    assert not server.serves(rank_environment({"SEQPACK_RANK_TEST": "b"}))
    assert server.serves(rank_environment(ENV))
    other = tmp_path / "other"  # another environment: a server of its own, not this one
    other.mkdir()
    done = launch_ranks([str(worker), str(other), "plain"], 2, timeout=120, log_dir=other / "logs",
                        env={"SEQPACK_RANK_TEST": "b"}, server=server)
    assert done.returncode == 0, done.tail
    assert server._proc.pid not in {r["ppid"] for r in _reports(other, 2)}


@pytest.mark.parametrize("mode, rank, code, text", [("fail", 1, 3, "rank 1 done"),
                                                     ("raise", 0, 1, "ValueError: boom in rank 0")])
def test_a_failing_rank_is_reported_with_its_code_and_log(worker: Path, tmp_path: Path, server: RankServer,
                                                          mode: str, rank: int, code: int, text: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    done = launch_ranks([str(worker), str(out), mode], 2, timeout=120, log_dir=tmp_path / "logs", env=ENV,
                        server=server)
    assert done.returncode == code and not done.timed_out
    assert done.log == tmp_path / "logs" / f"rank{rank}.log"
    assert any(text in line for line in done.tail), done.tail
    again = tmp_path / "again"  # the server outlives a failed launch
    again.mkdir()
    assert launch_ranks([str(worker), str(again)], 2, timeout=120, log_dir=again / "logs", env=ENV,
                        server=server).returncode == 0


def test_a_rank_past_the_time_limit_is_killed(worker: Path, tmp_path: Path, server: RankServer) -> None:
    out = tmp_path / "out"
    out.mkdir()
    done = launch_ranks([str(worker), str(out), "hang"], 2, timeout=8, log_dir=tmp_path / "logs", env=ENV,
                        server=server)
    assert done.timed_out and done.returncode == -9
    assert done.wall_s < 30


def test_a_server_whose_imports_fail_is_reported(worker: Path, tmp_path: Path) -> None:
    fake = tmp_path / "fake" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('a torch that cannot be imported')\n")
    out = tmp_path / "out"
    out.mkdir()
    done = launch_ranks([str(worker), str(out)], 2, timeout=120, log_dir=tmp_path / "logs",
                        env={"PYTHONPATH": str(fake.parent)})
    assert done.returncode == 1 and not done.timed_out
    assert done.log == tmp_path / "logs" / "server.log"
    assert any("a torch that cannot be imported" in line for line in done.tail), done.tail
    assert not list(out.iterdir())  # no rank ran


def test_unknown_preloads_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown preload 'numpy'"):
        RankServer(rank_environment(), ("numpy",))
