"""Files that change under a running job (issue 34, family 1).

Classes: a JSONL input that shrinks in place (log rotation, ``: > file``), is rewritten with other
rows of the same size, or grows, while pack (one process or ``--workers 2``), plan, batches (both
modes) or energon-prepare read it: before, the mapped file killed the process with SIGBUS and no
message; now one line naming the file and row ("changed while it was being read"), exit 2, nothing
written. The same file through MCP ``pack_dataset``: a tool error, and the server answers the next
call (before, SIGBUS took the server with every session down). A pack worker process that dies
(``SIGKILL``, what the out-of-memory killer sends): one line naming the signal (before, the pool
waited for ever). Negative controls: the same runs on a file nobody touches succeed, and a file
replaced by rename while it is read (what log rotation by rename does) is read consistently.

Every run is a forked child (:func:`faults_helpers.run_forked`), so a SIGBUS or a hang fails the
test instead of killing pytest.
"""

from __future__ import annotations

import json
import os
import time
import signal
from pathlib import Path
from typing import Any

import pytest

from faults_helpers import digest, run_forked, temporaries

CHANGED = "changed while it was being read"
TIMEOUT = 90


def _rows(n: int, tag: str = "") -> str:
    return "".join(json.dumps({"prompt": f"question {i} {tag}" + "x" * (i % 17),
                               "completion": f"answer {i} {tag}" + "y" * (i % 23)}) + "\n" for i in range(n))


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """A JSONL file of many pages (a mapped read past a shrunken end is a SIGBUS only a page beyond it)."""
    path = tmp_path / "in" / "data.jsonl"
    path.parent.mkdir()
    path.write_text(_rows(ROWS_IN))
    return path


ROWS_IN = 3000
#: The read that changes the file: row ~200 lies pages beyond a file cut to 100 bytes (``batches`` shows the
#: first micro-batches only: it changes at its third read).
TRIGGER = 200


def _change(path: Path, how: str) -> None:
    """Change ``path`` in place (same inode) the way ``how`` says."""
    size = path.stat().st_size
    if how == "shrink":
        os.truncate(path, 100)
    elif how == "empty":
        os.truncate(path, 0)
    elif how == "rewrite":  # other rows, the same size: a mapped read would see them under the old index
        text = _rows(ROWS_IN, "z").encode()[:size]
        with open(path, "r+b") as fh:
            fh.write(text.ljust(size, b" "))
    elif how == "grow":
        with open(path, "ab") as fh:
            fh.write(_rows(5, "late").encode())
    else:  # pragma: no cover
        raise ValueError(how)


def _changing_after(path: Path, reads: int, how: str) -> None:
    """In this (forked) process: the ``reads``-th JSONL row read of ``path`` changes the file first."""
    from seqpack.data.jsonl import JsonlFile

    real, real_rows = JsonlFile.row, JsonlFile.rows
    state = {"n": 0}

    def count(self: Any, n: int) -> None:
        if Path(self.path).resolve() == path.resolve():
            before = state["n"]
            state["n"] += n
            if before < reads <= state["n"]:
                _change(path, how)

    def row(self: Any, i: int) -> Any:
        count(self, 1)
        return real(self, i)

    def rows(self: Any, indices: Any) -> Any:  # the batch read (orjson): the file opened, then changed, then read
        self._file()
        count(self, len(indices))
        return real_rows(self, indices)

    JsonlFile.row = row  # type: ignore[method-assign]
    JsonlFile.rows = rows  # type: ignore[method-assign]


def _at_read(n: int, action: Any) -> None:
    """In this (forked) process: rows are read one by one (the stdlib parser, row()), and the ``n``-th row read
    runs ``action()`` first."""
    from seqpack.data import jsontext
    from seqpack.data.jsonl import JsonlFile

    jsontext._FAST = False
    real, state = JsonlFile.row, {"n": 0}

    def row(self: Any, i: int) -> Any:
        state["n"] += 1
        if state["n"] == n:
            action()
        return real(self, i)

    JsonlFile.row = row  # type: ignore[method-assign]


def _cli(args: list[Any], change: tuple[Path, int, str] | None = None) -> Any:
    def child() -> int:
        from seqpack.faces.cli import main

        if change is not None:
            _changing_after(*change)
        return main([str(a) for a in args])

    return run_forked(child, timeout=TIMEOUT)


COMMANDS = {
    "pack": lambda d, out: ["pack", d, "--out", out, "--pack-size", 256, "--no-progress"],
    "pack --workers 2": lambda d, out: ["pack", d, "--out", out, "--pack-size", 256, "--no-progress", "--workers", 2],
    "plan": lambda d, out: ["plan", "--jsonl", d],
    "batches": lambda d, out: ["batches", d],
    "batches global": lambda d, out: ["batches", d, "--mode", "global-batch", "--gbs", 4],
    "energon-prepare": lambda d, out: ["energon-prepare", d, "--out", out],
}


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("how", ["shrink", "empty", "rewrite", "grow"])
def test_a_file_changed_in_place_while_it_is_read_is_one_line(data, tmp_path, command, how):
    out = tmp_path / "out"
    run = _cli(COMMANDS[command](data, out), (data, 3 if command.startswith("batches") else TRIGGER, how))
    assert run.code != -signal.SIGBUS, "killed by SIGBUS"
    # with two workers the other one may meet the change while it indexes the file: the same one-line refusal
    run.refused("changed while it was being", str(data))
    assert CHANGED in run.err or "changed while it was being indexed" in run.err, run.err
    assert not out.exists() or not any(out.rglob("*.parquet")) and not any(out.rglob("*.tar"))
    assert not temporaries(tmp_path)


@pytest.mark.parametrize("how", ["shrink", "rewrite"])
def test_pack_refuses_a_file_that_changes_under_it(data, tmp_path, how):
    """The fast lane's copy of the class above (pack, one process)."""
    out = tmp_path / "out"
    run = _cli(COMMANDS["pack"](data, out), (data, TRIGGER, how))
    assert run.code != -signal.SIGBUS, "killed by SIGBUS"
    run.refused(CHANGED, f"{data}:")
    assert not temporaries(tmp_path)


@pytest.mark.parametrize("command", ["pack", pytest.param("pack --workers 2", marks=pytest.mark.slow),
                                     pytest.param("energon-prepare", marks=pytest.mark.slow)])
def test_negative_control_an_untouched_or_renamed_file_is_read_whole(data, tmp_path, command):
    out = tmp_path / "out"
    run = _cli(COMMANDS[command](data, out))
    assert run.code == 0, run.err
    # replaced by rename while it is read (a new inode): never a crash; the rows read so far come from the
    # old file, and a reader that opens the name again finds it changed and says so
    renamed = tmp_path / "renamed-out"

    def child() -> int:
        from seqpack.faces.cli import main

        def rename() -> None:
            fresh = data.with_name(f"fresh-{os.getpid()}.jsonl")  # each pack worker runs this hook
            fresh.write_text(_rows(3, "new"))
            os.replace(fresh, data)

        _at_read(TRIGGER, rename)
        return main([str(a) for a in COMMANDS[command](data, renamed)])

    again = run_forked(child, timeout=TIMEOUT)
    # (with two workers, a worker may still be indexing the name when it is replaced: "being indexed")
    assert again.code == 0 or any(why in again.err for why in (
        "changed after it was indexed", "changed while it was being indexed", CHANGED)), again.err
    if again.code:
        again.refused(str(data))


# ------------------------------------------------------------------------------------------------ workers
_REAL_TOKENIZE_JOB: Any = None


def _die_at_job_two(job: Any) -> Any:
    """A tokenization job that kills its worker process at job 2 (module level: the pool pickles it by name)."""
    if job.index == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return _REAL_TOKENIZE_JOB(job)


def _dying_worker() -> None:
    global _REAL_TOKENIZE_JOB
    import seqpack.packing.offline.jobs as jobs

    _REAL_TOKENIZE_JOB = jobs.run_tokenize_job
    jobs.run_tokenize_job = _die_at_job_two  # type: ignore[assignment]


@pytest.mark.slow
def test_a_pack_worker_that_dies_stops_the_run_in_one_line(tmp_path):
    data = tmp_path / "many.jsonl"
    data.write_text(_rows(6000))
    before = digest([data])
    out = tmp_path / "out"

    def child(die: bool) -> Any:
        def run() -> int:
            from seqpack.faces.cli import main

            if die:
                _dying_worker()
            return main(["pack", str(data), "--out", str(out), "--pack-size", "256", "--workers", "2",
                         "--no-progress"])
        return run

    died = run_forked(child(True), timeout=TIMEOUT)
    assert died.code != 124, "the run waited for ever for the dead worker"
    died.refused("a worker process was killed by SIGKILL")
    assert not any(out.rglob("*.parquet")) and not temporaries(tmp_path) and digest([data]) == before
    alive = run_forked(child(False), timeout=TIMEOUT)  # negative control: the same run, no worker killed
    assert alive.code == 0, alive.err


# ------------------------------------------------------------------------------------------------ MCP
@pytest.mark.slow
def test_pack_dataset_on_a_file_that_shrinks_is_a_tool_error_and_the_server_lives(data, tmp_path):
    root = data.parent
    result = tmp_path / "result.json"

    def child() -> int:
        import anyio
        from mcp import Client

        from seqpack.faces.mcp.server import build_server

        _changing_after(data, TRIGGER, "shrink")

        async def calls() -> None:
            async with Client(build_server([root])) as client:
                packed = await client.call_tool("pack_dataset", {"input_path": data.name, "output_dir": "packs",
                                                                 "pack_size": 256})
                after = await client.call_tool("derive_alignment", {"cp": 2})
            result.write_text(json.dumps({"error": packed.is_error, "text": packed.content[0].text,
                                          "next": not after.is_error}))

        anyio.run(calls)
        return 0

    run = run_forked(child, timeout=TIMEOUT)
    assert run.code == 0, (run.code, run.err[-2000:])  # -7 is SIGBUS: the server died with the job
    answer = json.loads(result.read_text())
    assert answer["error"] and CHANGED in answer["text"] and data.name in answer["text"], answer
    assert answer["next"]  # the server still answers
    assert not temporaries(root)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGBUS, signal.SIGSEGV, signal.SIGKILL])
def test_a_job_whose_process_dies_is_a_tool_error_and_the_server_lives(data, tmp_path, sig):
    """Whatever kills a job (a mapped file cut short, a crash in native code, the out-of-memory killer) kills the
    job's process, not the server: the other sessions and the next call are answered."""
    root = data.parent
    result = tmp_path / "result.json"

    def child() -> int:
        import anyio
        from mcp import Client

        from seqpack.faces.mcp.server import build_server

        _at_read(50, lambda: os.kill(os.getpid(), sig))

        async def calls() -> None:
            async with Client(build_server([root])) as client, Client(build_server([root])) as other:
                packed = await client.call_tool("pack_dataset", {"input_path": data.name, "output_dir": "packs",
                                                                 "pack_size": 256})
                after = await client.call_tool("derive_alignment", {"cp": 2})
                elsewhere = await other.call_tool("derive_alignment", {"cp": 4})
            result.write_text(json.dumps({"error": packed.is_error, "text": packed.content[0].text,
                                          "next": not after.is_error and not elsewhere.is_error}))

        anyio.run(calls)
        return 0

    run = run_forked(child, timeout=TIMEOUT)
    assert run.code == 0, (run.code, run.err[-2000:])  # -sig: the server died with the job
    answer = json.loads(result.read_text())
    assert answer["error"] and f"was killed by {sig.name}" in answer["text"], answer
    assert answer["next"]  # the server answers on


@pytest.mark.parametrize("stop, want", [(None, "time limit"), ("cancelled", "cancelled")])
def test_a_job_past_its_deadline_stops_for_the_time_limit_even_before_the_watchdog_says_so(stop, want):
    """Under load the server's watchdog can run late: the job's deadline has passed but nobody has said why yet.
    The job's process was then told "cancelled" and the client read "the request was cancelled" instead of the
    time limit. Negative control: a job stopped by its client is still "cancelled"."""
    from seqpack.faces.mcp import job_process
    from seqpack.faces.mcp.jobs import JobControl, JobStopped

    job = JobControl(None, time.monotonic() - 1)  # the deadline passed; no watchdog has run
    if stop:
        job.stop(stop)

    def work(child_job: Any) -> int:
        time.sleep(0.5)  # the server has written its stop by now
        child_job.check()
        return 1

    with pytest.raises(JobStopped) as stopped:
        job_process.run_in_child(work, job, lambda *a: None, JobStopped)
    assert stopped.value.reason == want
