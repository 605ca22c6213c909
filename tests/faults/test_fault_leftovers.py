"""Round-3 leftovers and smaller classes (issue 34, families 5 and 6).

Classes, each with what it did before:
* ``energon-prepare`` when every row is skipped (``internal error: IndexError`` inside energon), or when no row
  is left for training: one line with the reasons and their first lines;
* ``WORLD_SIZE=2`` (with ``RANK``, ``MASTER_ADDR``, ``MASTER_PORT``) left in a shell, no launcher: the command
  waited for ever for ranks that never come; now refused in one line;
* an unknown split in a blend manifest (JSON or YAML): refused by every command that reads blends;
* a pack without a seqpack manifest (written by Megatron-Bridge or by hand) whose ``*_metadata.jsonl``
  understates ``max_samples_per_bin`` or ``dataset_max_seqlen``: was "usable", now an integrity issue;
* prompt arguments that are unknown, missing or not strings: tracebacks in the server log; now ``-32602``
  naming the argument (the closest valid name for a misspelled one), no traceback;
* Parquet files with duplicate column names: ``internal error: KeyError`` in ``inspect``; now one line;
* a Parquet decompression bomb: refused but called "damaged"; now called what it is, before it is read
  (and "ran out of memory" rather than "damaged" when memory runs out on a row group);
* Ctrl-C on a stdio MCP server while a tool runs: it kept running; now it stops at once.
Each has a negative control (the same command on good input works).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from faults_helpers import ROWS, cli_fresh, digest, run_forked, temporaries

REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------------------------ energon-prepare
def test_energon_prepare_with_every_row_skipped_is_one_line(cli, write, tmp_path):
    data = write("skip.jsonl", "".join(json.dumps({"prompt": f"q{i}", "completion": ""}) + "\n" for i in range(5)))
    cli("energon-prepare", data, "--out", tmp_path / "ds").refused_with(
        f"seqpack energon-prepare: error: {data}: no usable row: 5 of 5 rows skipped (empty_completion: 5 (first at "
        "line 1)). Fix: fix or replace the skipped rows (an empty completion, no assistant turn, ...)")
    assert not (tmp_path / "ds").exists() and not temporaries(tmp_path)
    data.write_text(data.read_text() + json.dumps({"prompt": "q", "completion": "a"}) + "\n")  # one usable row
    run = cli("energon-prepare", data, "--out", tmp_path / "ds", "--json")
    assert run.code == 0, run.err
    assert json.loads(run.out)["samples"] == {"train": 1}


def test_energon_prepare_with_no_row_left_for_training_is_one_line(cli, write, tmp_path):
    data = write("half.jsonl", json.dumps({"prompt": "q", "completion": ""}) + "\n"
                 + json.dumps({"prompt": "q2", "completion": "a"}) + "\n")
    cli("energon-prepare", data, "--out", tmp_path / "ds", "--val-fraction", "0.5").refused(
        "no row left for the training split", "1 held out for validation")
    assert not (tmp_path / "ds").exists()


# ------------------------------------------------------------------------------------------------ WORLD_SIZE
def _pack_with_env(data: Path, out: Path, env: dict[str, str]) -> Any:
    def child() -> int:
        os.environ.update(env)
        from seqpack.faces.cli import main

        return main(["pack", str(data), "--out", str(out), "--pack-size", "256", "--no-progress"])

    return run_forked(child, timeout=60)


def test_world_size_without_a_launcher_is_refused_in_one_line(data, tmp_path):
    env = {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29591"}
    run = _pack_with_env(data, tmp_path / "out", env)
    assert run.code != 124, "waited for ranks that never come"
    run.refused("WORLD_SIZE=2 is set but no launcher started this process", "its 1 other rank(s) would never join")
    assert not any((tmp_path / "out").rglob("*.parquet"))
    alone = _pack_with_env(data, tmp_path / "out", {"WORLD_SIZE": "1"})  # negative control: a world of one
    assert alone.code == 0, alone.err


# ------------------------------------------------------------------------------------------------ blend splits
@pytest.mark.parametrize("suffix", [".json", ".yaml"])
@pytest.mark.parametrize("split", ["valdation", "Training", "train", "eval"])
def test_an_unknown_split_in_a_blend_manifest_is_an_error(cli, data, tmp_path, suffix, split):
    other = data.with_name("other.jsonl")
    other.write_text("".join(json.dumps(r) + "\n" for r in ROWS[:10]))
    spec = {"training": [1.0, data.name], split: [1.0, other.name]}
    blend = data.with_name("blend" + suffix)
    blend.write_text(json.dumps(spec) if suffix == ".json" else
                     "".join(f"{k}: [1.0, {v[1]}]\n" for k, v in spec.items()))
    for args in (["pack", blend, "--out", tmp_path / "out", "--pack-size", 256], ["plan", "--jsonl", blend]):
        cli(*args).refused(f"unknown split '{split}'", "training, validation, test")
    good = {"training": [1.0, data.name], "validation": [1.0, other.name]}  # negative control
    blend.write_text(json.dumps(good) if suffix == ".json" else
                     "".join(f"{k}: [1.0, {v[1]}]\n" for k, v in good.items()))
    assert cli("pack", blend, "--out", tmp_path / "out", "--pack-size", 256).code == 0


# ------------------------------------------------------------------------------------------------ foreign metadata
@pytest.fixture
def foreign_pack(cli, data, tmp_path) -> Path:
    """A pack whose seqpack manifest is gone (what Megatron-Bridge writes: Parquet plus its metadata file)."""
    assert cli("pack", data, "--out", tmp_path / "packs", "--pack-size", 256, "--no-progress").code == 0
    manifest = next((tmp_path / "packs").rglob("seqpack_manifest.json"))
    manifest.unlink()
    return manifest.parent


@pytest.mark.parametrize("key", ["max_samples_per_bin", "dataset_max_seqlen"])
def test_metadata_that_understates_a_foreign_pack_is_an_issue(cli, foreign_pack, key):
    meta = next(foreign_pack.glob("*_metadata.jsonl"))
    assert cli("inspect", foreign_pack).code == 0  # negative control: Bridge's metadata as written
    entries = json.loads(meta.read_text())
    entries[0][key] = 1
    meta.write_text(json.dumps(entries))
    for target in (foreign_pack, next(foreign_pack.glob("*.parquet"))):
        run = cli("inspect", target)
        assert run.code == 1 and f"understates {key}: 1, the packs hold" in run.out, run.out


# ------------------------------------------------------------------------------------------------ Parquet
def _parquet(path: Path, names: list[str], columns: list[Any]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_arrays(columns, names=names), path)
    return path


@pytest.mark.parametrize("twice", ["input_ids", "loss_mask", "seq_start_id"])
def test_duplicate_column_names_are_one_line(cli, tmp_path, twice):
    import pyarrow as pa

    names = ["input_ids", "loss_mask", "seq_start_id", twice]
    columns = [pa.array([[1, 2, 3]]), pa.array([[0, 1, 0]]), pa.array([[0]]), pa.array([[0, 0, 0]])]
    path = _parquet(tmp_path / "dup.parquet", names, columns)
    cli("inspect", path).refused_with(f"seqpack inspect: error: {path}, field '{twice}': column '{twice}' appears 2 "
                                      "times; a packed Parquet file has each column once")
    plain = _parquet(tmp_path / "plain.parquet", names[:3], columns[:3])  # negative control
    assert cli("inspect", plain).code == 0


def _bomb(path: Path, rows: int, values: int) -> Path:
    """A packed Parquet file of ``rows`` rows of ``values`` zeros each: a few hundred bytes on disk."""
    import numpy as np
    import pyarrow as pa

    offsets = pa.array(np.arange(rows + 1, dtype=np.int32) * values)
    return _parquet(path, ["input_ids", "loss_mask", "seq_start_id"], [
        pa.ListArray.from_arrays(offsets, pa.array(np.zeros(rows * values, dtype=np.int64))),
        pa.ListArray.from_arrays(offsets, pa.array(np.zeros(rows * values, dtype=np.int8))),
        pa.array([[0]] * rows)])


def test_a_decompression_bomb_is_called_what_it_is(cli, tmp_path, monkeypatch):
    import seqpack.core.limits as limits

    monkeypatch.setattr(limits, "MAX_INFLATED_ROW_GROUP_BYTES", 1 << 20)  # a small bomb over a small bound
    bomb = _bomb(tmp_path / "bomb.parquet", 1, 2_000_000)
    run = cli("inspect", bomb)
    run.refused("row group 0 is a decompression bomb", "refused unread")
    assert "damaged" not in run.err
    small = _bomb(tmp_path / "small.parquet", 1, 1000)  # negative control: within the bound, it is read
    assert cli("inspect", small).code in (0, 1)


@pytest.mark.slow
def test_a_bomb_that_runs_out_of_memory_is_not_called_damaged(tmp_path):
    bomb = _bomb(tmp_path / "bomb.parquet", 6, 3_000_000)  # 162 MB once decoded: under the bound, over the memory

    # a fresh process, pyarrow loaded before the cap: a test worker's allocator may hold pages that fit the bomb
    run = cli_fresh("inspect", bomb, memory=60 << 20, preload=("pyarrow.parquet", "seqpack.packing.parquet"))
    run.refused("row group 0 is a decompression bomb", "ran out of memory decoding it")
    assert "damaged" not in run.err


def test_a_row_longer_than_any_pack_is_refused_before_it_is_copied(cli, tmp_path):
    long = _bomb(tmp_path / "long.parquet", 1, (1 << 22) + 1)
    cli("inspect", long).refused("row 0", "input_ids holds 4194305 values, more than the longest pack (4194304)")


# ------------------------------------------------------------------------------------------------ MCP prompts, stdio
class StdioServer:
    """``seqpack mcp`` on stdio as a subprocess, spoken to line by line."""

    def __init__(self, root: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "seqpack", "mcp", "--root", str(root)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     cwd=root, env={**os.environ, "PYTHONPATH": str(REPO)})
        self.request({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        self.send(message)
        assert self.proc.stdout is not None
        return json.loads(self.proc.stdout.readline())

    def close(self) -> str:
        """Close stdin, wait, and return what the server logged."""
        assert self.proc.stdin is not None and self.proc.stderr is not None
        self.proc.stdin.close()
        err = self.proc.stderr.read()
        self.proc.wait(timeout=30)
        return err


@pytest.mark.slow
def test_bad_prompt_arguments_are_invalid_params_without_a_traceback(tmp_path):
    server = StdioServer(tmp_path)
    answers = {}
    try:
        for k, arguments in enumerate([{"error_log": 5}, {}, {"error_log": "x", "errorlog": "y"}, {"error_log": ["x"]},
                                       {"error_log": "cu_seqlens mismatch"}]):
            answers[k] = server.request({"jsonrpc": "2.0", "id": 10 + k, "method": "prompts/get", "params": {
                "name": "diagnose_packing_error", "arguments": arguments}})
    finally:
        log = server.close()
    assert "Traceback" not in log, log
    for k in range(4):
        assert answers[k]["error"]["code"] == -32602, answers[k]
    assert "missing required argument 'error_log'" in answers[1]["error"]["message"]
    assert "did you mean 'error_log'" in answers[2]["error"]["message"]
    assert "result" in answers[4] and answers[4]["result"]["messages"], answers[4]  # negative control


@pytest.mark.slow
def test_ctrl_c_stops_a_stdio_server_while_a_tool_runs(tmp_path):
    big = tmp_path / "big.jsonl"
    big.write_text("".join(json.dumps({"prompt": f"q {i} " + "x" * 300, "completion": "a" * 200}) + "\n"
                           for i in range(200_000)))
    before = digest([big])
    server = StdioServer(tmp_path)
    server.send({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
        "name": "pack_dataset", "arguments": {"input_path": "big.jsonl", "output_dir": "packs", "pack_size": 4096}}})
    time.sleep(3)  # the job is running
    server.proc.send_signal(signal.SIGINT)
    try:
        code = server.proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()
        pytest.fail("a stdio server went on running after Ctrl-C")
    assert code == 130
    assert digest([big]) == before and not temporaries(tmp_path)


@pytest.mark.slow
def test_negative_control_a_stdio_server_answers_until_its_client_leaves(tmp_path):
    server = StdioServer(tmp_path)
    answer = server.request({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "derive_alignment", "arguments": {"cp": 2}}})
    log = server.close()
    assert answer["result"]["isError"] is False and server.proc.returncode == 0, log


# ------------------------------------------------------------------------------------------------ MCP tool arguments
@pytest.mark.parametrize("tool, arguments, wrong, closest", [
    ("simulate_packing", {"lengths": [5, 3], "pack_size": 8, "seeed": 1}, "seeed", "seed"),
    ("derive_alignment", {"cp": 2, "tp": 1, "token_slot": 64}, "token_slot", "token_slots"),
    ("list_rules", {"severty": "error"}, "severty", "severity"),
    ("count_image_tokens", {"height": 224, "widht": 224, "width": 224}, "widht", "width"),
])
def test_a_misspelled_mcp_tool_argument_is_an_error_naming_the_closest(tmp_path, tool, arguments, wrong, closest):
    """A misspelled argument was ignored and the answer was for the default; now a tool error naming the
    closest valid name (the strict schemas of the generated tools). Negative control: the same call spelled
    right answers."""
    import anyio
    from mcp import Client

    from seqpack.faces.mcp.server import build_server

    async def call(args: dict[str, Any]) -> Any:
        async with Client(build_server([tmp_path], skill_dir=None)) as client:
            return await client.call_tool(tool, args)

    result = anyio.run(call, arguments)
    text = result.content[0].text
    assert result.is_error and f"unknown argument '{wrong}'; did you mean '{closest}'?" in text, text
    assert "Traceback" not in text
    fixed = {k: v for k, v in arguments.items() if k != wrong}
    fixed.setdefault(closest, arguments[wrong])
    assert not anyio.run(call, fixed).is_error
