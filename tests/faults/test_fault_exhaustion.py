"""Exhaustion (issue 34, family 3): a row too big, memory that runs out, a library that cannot be mapped.

Classes: one 300 MB row (here: one byte over ``MAX_ROW_BYTES``, a sparse file) was parsed and tokenized until
``internal error: MemoryError``; now refused from the line index, unread, in one line naming file, line and
row. Memory that runs out on a row under the limit (a small ``ulimit -v``) is one line naming that row; memory
that runs out elsewhere, or a shared library the loader cannot map under the limit, one line saying so; over
MCP a ``ResourceError`` tool error. (Out of file descriptors on the HTTP server: ``test_fault_mcp_http.py``.)
Negative controls: a row at the limit's side that fits is packed; the same commands without a cap succeed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from faults_helpers import cli_fresh, digest, run_forked, temporaries

from seqpack.core.limits import MAX_ROW_BYTES


def _with_row(path: Path, size: int) -> Path:
    """A JSONL file: a small row, one row of ``size`` bytes (a sparse run of spaces inside a string would be real
    bytes; the row is ``{"prompt": "xxx...", "completion": "a"}`` padded to ``size``), a small row."""
    head = b'{"prompt": "'
    tail = b'", "completion": "a"}'
    with open(path, "wb") as fh:
        fh.write(json.dumps({"prompt": "q", "completion": "a"}).encode() + b"\n")
        fh.write(head)
        fh.write(b"x" * (size - len(head) - len(tail)))
        fh.write(tail + b"\n")
        fh.write(json.dumps({"prompt": "q2", "completion": "b"}).encode() + b"\n")
    return path


def _cli(args: list[Any], memory: int = 3 << 30) -> Any:
    def child() -> int:
        from seqpack.faces.cli import main

        return main([str(a) for a in args])

    return run_forked(child, timeout=120, memory=memory)


@pytest.mark.slow
@pytest.mark.parametrize("command", ["pack", "plan", "batches", "energon-prepare"])
def test_a_row_over_the_limit_is_refused_unread(tmp_path, command):
    data = _with_row(tmp_path / "big.jsonl", MAX_ROW_BYTES + 1)
    before = digest([data])
    args = {"pack": ["pack", data, "--out", tmp_path / "out", "--pack-size", 256, "--no-progress"],
            "plan": ["plan", "--jsonl", data], "batches": ["batches", data],
            "energon-prepare": ["energon-prepare", data, "--out", tmp_path / "out"]}[command]
    run = _cli(args, memory=1 << 30)  # refused before the row is read: no memory is needed for it
    run.refused(f"{data}:2, row 1", f"the row is {MAX_ROW_BYTES + 1} bytes, over the limit of {MAX_ROW_BYTES}")
    assert digest([data]) == before and not temporaries(tmp_path)


def test_a_row_over_the_limit_is_refused_by_the_reader(tmp_path):
    """The fast lane's copy: the reader refuses by the index; the row under the limit next to it is read
    (negative control)."""
    from seqpack.core.errors import InputError
    from seqpack.data.jsonl import JsonlFile

    data = _with_row(tmp_path / "big.jsonl", MAX_ROW_BYTES + 1)
    jf = JsonlFile(data)
    with pytest.raises(InputError, match="over the limit of") as info:
        jf.row(1)
    assert (info.value.line, info.value.row) == (2, 1)
    assert jf.row(2) == {"prompt": "q2", "completion": "b"}


@pytest.mark.slow
@pytest.mark.parametrize("command", ["pack", "plan"])
def test_running_out_of_memory_on_a_row_names_the_row(tmp_path, command):
    data = _with_row(tmp_path / "row.jsonl", 20 << 20)  # under the limit; tokenizing it takes hundreds of MB
    args = {"pack": ["pack", data, "--out", tmp_path / "out", "--pack-size", 256, "--no-progress"],
            "plan": ["plan", "--jsonl", data]}[command]
    run = _cli(args, memory=300 << 20)
    run.refused(f"{data}:2, row 1", "ran out of memory on this row")
    assert not temporaries(tmp_path)
    assert _cli(args).code == 0  # negative control: with memory to spare the same row packs


def test_running_out_of_memory_elsewhere_is_one_line(cli, data, tmp_path, monkeypatch):
    import seqpack.verbs.packing as verb

    def exhausted(options: Any) -> Any:
        raise MemoryError("Unable to allocate 8.00 GiB for an array")

    monkeypatch.setattr(verb, "pack", exhausted)  # the command imports the verb when it runs
    cli("pack", data, "--out", tmp_path / "out", "--pack-size", 256).refused_with(
        "seqpack pack: error: ran out of memory (Unable to allocate 8.00 GiB for an array). Fix: free memory or "
        "raise the limit (ulimit -v), or give the command less work")


def test_a_library_that_cannot_be_mapped_is_one_line(cli, data, tmp_path, monkeypatch):
    import seqpack.verbs.packing as verb

    def unmappable(options: Any) -> Any:
        raise ImportError("libtorch_cpu.so: failed to map segment from shared object")

    monkeypatch.setattr(verb, "pack", unmappable)
    cli("pack", data, "--out", tmp_path / "out", "--pack-size", 256).refused(
        "not enough memory to load a library (libtorch_cpu.so: failed to map segment", "ulimit -v")


@pytest.mark.slow
def test_a_small_address_space_is_one_line_for_the_torch_commands(tmp_path):
    data = _with_row(tmp_path / "row.jsonl", 1000)
    run = cli_fresh("batches", data, memory=150 << 20)  # a fresh process: torch is not loaded yet
    assert run.code == 2 and "internal error" not in run.err and "Traceback" not in run.err, run.err
    assert "ran out of memory" in run.err or "not enough memory to load a library" in run.err, run.err


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
async def test_running_out_of_memory_in_a_tool_is_a_resource_error(tmp_path, monkeypatch):
    from mcp import Client

    import seqpack.verbs.simulation as simulation
    from seqpack.faces.mcp.server import build_server

    def exhausted(options: Any) -> Any:
        raise MemoryError("Unable to allocate 8.00 GiB for an array")

    monkeypatch.setattr(simulation, "simulate_packing", exhausted)
    async with Client(build_server([tmp_path])) as client:
        result = await client.call_tool("simulate_packing", {"lengths": [3, 4], "pack_size": 8})
        fine = await client.call_tool("derive_alignment", {"cp": 2})
    text = result.content[0].text
    assert result.is_error and "ran out of memory (Unable to allocate 8.00 GiB" in text and "internal error" not in text
    assert result.meta["seqpack/error"]["error"] == "ResourceError"
    assert not fine.is_error  # negative control: the server answers on
    assert os.getpid()  # (the tool ran in this process: simulate_packing is not a job)
