"""Faults seen by the MCP server (issue 26, families 1 and 7).

Classes: a tokenizer that makes the tokenizers library panic in Rust (a ``BaseException``) inside
a tool, and a ``tokenizer.json`` that panics on load through ``pack_dataset``: a tool error, and
the server keeps answering; a chat template that loops inside one row while ``pack_dataset`` runs
under a time limit: the job stops at the limit, mid-row; concurrent ``pack_dataset`` calls
(they shared the tokenization workers' state: "write to closed file", "tokenization worker used
without a context"): each packs what a lone CLI run packs, byte for byte; concurrent jobs are
bounded (at most ``MAX_CONCURRENT_JOBS`` at once, so memory is bounded by what one job may take);
on stdio a lone surrogate in an argument, ``params`` that are not an object, broken JSON and bad
ids are answered with JSON-RPC errors; numeric strings are refused where integers are declared.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client

from faults_helpers import ROWS, TEMPLATE, chat_rows, make_tokenizer, run_forked, temporaries

from seqpack.core.limits import MAX_CONCURRENT_JOBS
from seqpack.faces.mcp.server import build_server


@pytest.fixture
def anyio_backend():
    return "asyncio"


def _panic() -> BaseException:
    """A real pyo3 PanicException from the tokenizers library (a truncation stride longer than max_length)."""
    import tokenizers

    base = tokenizers.Tokenizer(tokenizers.models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    base.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    doc = json.loads(base.to_str())  # set in the file: enable_truncation() would check the stride itself
    doc["truncation"] = {"direction": "Right", "max_length": 1, "strategy": "LongestFirst", "stride": 5}
    tok = tokenizers.Tokenizer.from_str(json.dumps(doc))
    try:
        tok.encode("a a a")
    except BaseException as exc:  # noqa: BLE001 - what we want to hold
        return exc
    raise AssertionError("the tokenizers library no longer panics on this input")


@pytest.mark.anyio
async def test_a_rust_panic_inside_a_tool_is_a_tool_error_and_the_server_lives(tmp_path, monkeypatch):
    import seqpack.verbs.simulation as simulation

    panic = _panic()
    assert not isinstance(panic, Exception)  # the point: every `except Exception` lets it through

    def panicking(options):
        raise panic

    monkeypatch.setattr(simulation, "simulate_packing", panicking)
    async with Client(build_server([tmp_path])) as client:
        result = await client.call_tool("simulate_packing", {"lengths": [1, 2], "pack_size": 4})
        alive = await client.call_tool("derive_alignment", {"cp": 2})
    text = result.content[0].text
    assert result.is_error and "internal error: PanicException: `stride` must be strictly less than" in text, text
    assert not alive.is_error


@pytest.mark.anyio
async def test_a_tokenizer_that_panics_through_pack_dataset(tmp_path):
    tok = make_tokenizer(tmp_path / "tok", edit=lambda d: d.update(model={
        "type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"], "unk_token": None}))
    (tmp_path / "chat.jsonl").write_text(chat_rows(3))
    async with Client(build_server([tmp_path])) as client:
        result = await client.call_tool("pack_dataset", {"input_path": "chat.jsonl", "output_dir": "packs",
                                                         "pack_size": 64, "tokenizer_path": "tok/tokenizer.json"})
        alive = await client.call_tool("derive_alignment", {"cp": 2})
    assert result.is_error, result.content[0].text
    assert (f"{tok / 'tokenizer.json'}: cannot load the tokenizer: the tokenizers library panicked: range end index 2 "
            "out of range for slice of length 1") in result.content[0].text
    assert not alive.is_error and not temporaries(tmp_path)


def test_a_time_limit_stops_a_template_that_loops_inside_one_row(tmp_path):
    """Each step of this template takes about a millisecond, within every template bound for seconds:
    only the job's time limit can stop it, and it must, inside the row."""
    slow = "{% for a in range(100000) %}{{ range(20000)|sum }}{% endfor %}" + TEMPLATE
    make_tokenizer(tmp_path / "tok", template=slow)
    (tmp_path / "chat.jsonl").write_text(chat_rows(2))

    def client() -> int:
        async def go() -> int:
            async with Client(build_server([tmp_path])) as c:
                t0 = time.monotonic()
                r = await c.call_tool("pack_dataset", {"input_path": "chat.jsonl", "output_dir": "packs",
                                                       "pack_size": 64, "tokenizer_path": "tok/tokenizer.json",
                                                       "time_limit_s": 0.5})
                print(json.dumps({"took": time.monotonic() - t0, "error": r.is_error, "text": r.content[0].text}))
            return 0

        return anyio.run(go)

    run = run_forked(client, timeout=30)
    assert run.code == 0, (run.code, run.err[-2000:])
    got = json.loads(run.out.strip().splitlines()[-1])
    assert got["error"] and "stopped after the time limit of 0.5 s" in got["text"], got
    assert got["took"] < 4.5, got  # the template alone would stop only at its own 5 s bound
    assert not temporaries(tmp_path) and not list(tmp_path.rglob("*.parquet"))


def _tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.suffix == ".parquet"}


@pytest.mark.slow
@pytest.mark.anyio
async def test_concurrent_pack_dataset_calls_share_nothing(tmp_path, cli):
    for k in range(4):
        rows = [{"prompt": r["prompt"] + f" source {k}", "completion": r["completion"]} for r in ROWS * 20]
        (tmp_path / f"d{k}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    results: dict[int, object] = {}
    async with Client(build_server([tmp_path])) as client:
        async def one(k: int) -> None:
            results[k] = await client.call_tool("pack_dataset", {"input_path": f"d{k}.jsonl",
                                                                 "output_dir": f"mcp{k}", "pack_size": 256})

        with anyio.fail_after(300):
            async with anyio.create_task_group() as tg:
                for k in range(4):
                    tg.start_soon(one, k)
    for k in range(4):
        r = results[k]
        assert not r.is_error, r.content[0].text  # type: ignore[attr-defined]
        assert cli("pack", tmp_path / f"d{k}.jsonl", "--out", tmp_path / f"cli{k}", "--pack-size", 256,
                   "--no-progress").code == 0
        mcp, alone = _tree_digest(tmp_path / f"mcp{k}"), _tree_digest(tmp_path / f"cli{k}")
        assert mcp and mcp == alone  # the same packs, byte for byte, as a lone run
    assert not temporaries(tmp_path)


@pytest.mark.anyio
async def test_concurrent_jobs_are_bounded(tmp_path, monkeypatch):
    import seqpack.verbs.planning as planning

    state = {"now": 0, "most": 0}
    lock = threading.Lock()
    real = planning.plan

    def counted(options):
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        try:
            time.sleep(0.3)
            return real(options)
        finally:
            with lock:
                state["now"] -= 1

    monkeypatch.setattr(planning, "plan", counted)
    async with Client(build_server([tmp_path])) as client:
        answers = []

        async def one() -> None:
            answers.append(await client.call_tool("plan_pack_length", {"lengths": [100, 200, 300], "candidates": [512]}))

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for _ in range(6):
                    tg.start_soon(one)
    assert len(answers) == 6 and not any(a.is_error for a in answers)
    assert state["most"] == MAX_CONCURRENT_JOBS  # jobs do run side by side, but never more than the bound


@pytest.mark.anyio
@pytest.mark.parametrize("tool, arguments, why", [
    ("derive_alignment", {"cp": "2"}, "cp: expected an integer, got a string ('2')"),
    ("plan_pack_length", {"lengths": ["5", 7]}, "lengths: expected an integer, got a string ('5')"),
    ("plan_pack_length", {"histogram": {"512": "3"}}, "histogram: expected an integer, got a string ('3')"),
    ("simulate_packing", {"lengths": [3], "pack_size": "8"}, "pack_size: expected an integer, got a string ('8')"),
])
async def test_numeric_strings_are_refused_where_integers_are_declared(tmp_path, tool, arguments, why):
    async with Client(build_server([tmp_path])) as client:
        result = await client.call_tool(tool, arguments)
        fine = await client.call_tool("plan_pack_length", {"histogram": {"512": 3}, "candidates": [1024]})
    assert result.is_error and why in result.content[0].text, result.content[0].text
    assert not fine.is_error  # negative control: JSON object keys are strings, and stay accepted


# ------------------------------------------------------------------------------------------------ JSON-RPC on stdio
WIRE = {
    # name: (the line a client sends, the JSON-RPC answer it must get)
    "lone_surrogate_argument": (
        r'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "derive_alignment", '
        r'"arguments": {"cp": 2, "x": "\ud800"}}}',
        {"id": 1, "error": {"code": -32602, "message": "Invalid params: text holds a lone surrogate \\ud800 at "
                            "character 0 (not valid Unicode; a surrogate escape must come in a high/low pair) in "
                            "params.arguments.x"}}),
    "params_a_list": ('{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": [1, 2]}',
                      {"id": 2, "error": {"code": -32602, "message": "Invalid params: params must be a JSON object"}}),
    "params_a_string": ('{"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": "x"}',
                        {"id": 3, "error": {"code": -32602, "message": "Invalid params: params must be a JSON object"}}),
    "broken_json": ('{"jsonrpc": "2.0", "id": 4, "method"',
                    {"id": None, "error": {"code": -32700, "message": "Parse error: Expecting ':' delimiter (column 37)"}}),
    "no_method": ('{"jsonrpc": "2.0", "id": 5}',
                  {"id": 5, "error": {"code": -32600, "message": "Invalid request: no method"}}),
    "id_an_object": ('{"jsonrpc": "2.0", "id": {"a": 1}, "method": "tools/list"}',
                     {"id": None, "error": {"code": -32600, "message": "Invalid request: id must be a string or an "
                                                                     "integer"}}),
    "a_batch": ('[{"jsonrpc": "2.0", "id": 6, "method": "tools/list"}]',
                {"id": None, "error": {"code": -32600, "message": "Invalid request: a message must be a JSON object, "
                                                                "got a batch (array)"}}),
}


@pytest.mark.parametrize("name", sorted(WIRE))
def test_checked_line_classifies_a_malformed_message(name):
    from seqpack.faces.mcp.wire import MALFORMED, checked_line

    line, answer = WIRE[name]
    stand_in = json.loads(checked_line(line))
    assert stand_in["method"] == MALFORMED
    assert stand_in["params"] == {"id": answer["id"], **answer["error"]}


def test_checked_line_passes_good_messages_unchanged():
    from seqpack.faces.mcp.wire import checked_line

    for line in ('{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}',
                 '{"jsonrpc": "2.0", "method": "notifications/initialized"}',
                 '{"jsonrpc": "2.0", "id": "x", "result": {}}',
                 '{"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "n", "arguments": {"s": '
                 '"\\ud83d\\ude00"}}}'):
        assert checked_line(line) == line


@pytest.mark.slow
def test_the_stdio_server_answers_every_malformed_message(tmp_path):
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    lines = [json.dumps(init), json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})]
    lines += [WIRE[name][0] for name in sorted(WIRE)]
    lines.append('{"jsonrpc": "2.0", "id": 99, "method": "tools/call", "params": {"name": "derive_alignment", '
                 '"arguments": {"cp": 2}}}')
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-m", "seqpack", "mcp", "--root", str(tmp_path)], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    timer = threading.Timer(120, proc.kill)  # a server that never answers id 99 fails the test, not the run
    timer.start()
    answers: dict[str, list] = {}
    try:
        proc.stdin.write("\n".join(lines) + "\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        for out in proc.stdout:  # type: ignore[union-attr]
            msg = json.loads(out)
            answers.setdefault(json.dumps(msg.get("id")), []).append(msg)
            if msg.get("id") == 99:
                break
        proc.stdin.close()  # type: ignore[union-attr]
        stderr = proc.stderr.read()  # type: ignore[union-attr]
        proc.wait(30)
    finally:
        timer.cancel()
        proc.kill()
    for name in sorted(WIRE):
        want = WIRE[name][1]
        got = [m for m in answers.get(json.dumps(want["id"]), []) if m.get("error") == want["error"]]
        assert got, (name, answers)
    assert not answers['99'][0].get("error"), answers['99']  # and the server still serves after all of them
    assert "Traceback" not in stderr
