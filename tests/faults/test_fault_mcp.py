"""Faults seen from an MCP client: work the client gives up on, errors that must carry their reason.

Classes: a client that stops waiting (read timeout: the request is cancelled) while pack_dataset
runs, and a time limit passing while it runs: the work stops at its next row and leaves nothing
behind; an unexpected exception inside a tool (answered with its type and message, never a bare
"Error executing tool"); a smoke-test row error through MCP (names the user's file, not the test's
copy); an HTTP port in use.
"""

from __future__ import annotations

import json
import socket
import time

import anyio
import pytest
from mcp import Client, MCPError
from mcp.types import REQUEST_TIMEOUT

from faults_helpers import digest, temporaries

from seqpack.faces.mcp.server import build_server


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def slow_rows(monkeypatch):
    """Every JSONL row read takes 20 ms, and the reads are counted (rows read after the stop are not). Rows are
    read one by one (the stdlib parser; with orjson a batch of rows is parsed between two checks)."""
    from seqpack.data import jsontext
    from seqpack.data.jsonl import JsonlFile

    monkeypatch.setattr(jsontext, "_FAST", False)

    state = {"reads": 0, "last": 0.0}
    real = JsonlFile.row

    def row(self, i):
        state["reads"] += 1
        state["last"] = time.monotonic()
        time.sleep(0.02)
        return real(self, i)

    monkeypatch.setattr(JsonlFile, "row", row)
    return state


@pytest.mark.anyio
async def test_a_time_limit_stops_pack_dataset_and_leaves_nothing(data, slow_rows):
    root = data.parent
    before = digest([data])
    async with Client(build_server([root])) as client:
        t0 = time.monotonic()
        result = await client.call_tool("pack_dataset", {"input_path": "data.jsonl", "output_dir": "packs",
                                                         "pack_size": 256, "time_limit_s": 0.3})
        took = time.monotonic() - t0
    assert result.is_error and "stopped after the time limit of 0.3 s" in result.content[0].text
    assert took < 3 and slow_rows["reads"] < 60  # 60 rows would take 1.2 s: it stopped at a row, early
    assert digest([data]) == before and not temporaries(root)
    assert not (root / "packs").exists() or not any((root / "packs").iterdir())


@pytest.mark.anyio
async def test_a_client_that_gives_up_stops_the_work(data, slow_rows):
    root = data.parent
    async with Client(build_server([root])) as client:
        with pytest.raises(MCPError) as exc:
            await client.call_tool("prepare_energon_dataset", {"input_path": "data.jsonl", "output_dir": "ds"},
                                   read_timeout_seconds=0.3)
        assert exc.value.code == REQUEST_TIMEOUT
        await anyio.sleep(0.5)
        reads = slow_rows["reads"]
        await anyio.sleep(0.5)
        assert slow_rows["reads"] == reads < 60  # nothing reads rows any more: the work ended
        ok = await client.call_tool("derive_alignment", {"cp": 2})
        assert not ok.is_error  # and the server still answers
    assert not (root / "ds").exists() and not temporaries(root)


@pytest.mark.anyio
async def test_an_unexpected_exception_carries_its_reason(data, monkeypatch):
    import seqpack.verbs.simulation as simulation

    def broken(options):
        raise ZeroDivisionError("the simulated bug")

    monkeypatch.setattr(simulation, "simulate_packing", broken)  # the tool calls the verb its module holds now
    async with Client(build_server([data.parent])) as client:
        result = await client.call_tool("simulate_packing", {"lengths": [1, 2], "pack_size": 4})
    text = result.content[0].text
    assert result.is_error and "internal error: ZeroDivisionError: the simulated bug" in text
    assert "Traceback" not in text and text != "Error executing tool simulate_packing"
    assert result.meta["seqpack/error"]["error"] == "InternalToolError"


@pytest.mark.anyio
async def test_a_smoke_row_error_names_the_users_file(write):
    bad = write("rows.jsonl", "\n" + json.dumps({"prompt": "a", "completion": "b"}) + "\n"
                + '{"prompt": "a\\ud800", "completion": "b"}\n')
    async with Client(build_server([bad.parent])) as client:
        result = await client.call_tool("run_packing_smoke_test", {"path": "in_batch", "data_path": "rows.jsonl",
                                                                   "cp_check": False, "size": "tiny"})
    text = result.content[0].text
    assert result.is_error and f"{bad}:3, row 1" in text and "smoke_input" not in text
    assert "lone surrogate" in text


def test_an_http_port_in_use(cli):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        run = cli("mcp", "--transport", "http", "--port", port, "--lifetime", 5)
    run.refused(f"cannot listen on 127.0.0.1:{port}", "--port")
