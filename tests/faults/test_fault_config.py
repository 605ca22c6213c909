"""Faults in config input: YAML that explodes, repeats, nests or says nothing; values left unknown.

Classes: an alias bomb (CLI and MCP, bounded in time), a recursive alias, nesting deeper than the
limit, a duplicated key, an empty file and /dev/null, an endless input (/dev/zero), integers beyond
Python's digit limit in YAML, JSON and --set, ``--set key=``, ``seq_length: null``, an unset world
size with CP=2 (unknown stays unknown), a blend manifest bomb.
"""

from __future__ import annotations

import json
import os
import time

import pytest
from mcp import Client

from seqpack.faces.cli import main
from seqpack.faces.mcp.server import build_server


def _bomb(levels: int = 9, width: int = 9) -> str:
    lines = ["dataset:", "  dataset_kwargs:", '    a: &a ["x","x","x","x","x","x","x","x","x"]']
    prev = "a"
    for k in range(levels):
        name = f"l{k}"
        lines.append(f"    {name}: &{name} [" + ",".join([f"*{prev}"] * width) + "]")
        prev = name
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_at_once(cli, write):
    path = write("bomb.yaml", _bomb())
    assert len(path.read_bytes()) < 600  # a few hundred bytes that expand to 9**10 values
    t0 = time.monotonic()
    cli("validate", path).refused("bomb.yaml:", "expands to more than")
    assert time.monotonic() - t0 < 5


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_an_alias_bomb_through_mcp_is_bounded(tmp_path, anyio_backend):
    t0 = time.monotonic()
    async with Client(build_server([tmp_path])) as client:
        result = await client.call_tool("validate_config", {"config_text": _bomb()})
    assert result.is_error and "expands to more than" in result.content[0].text
    assert time.monotonic() - t0 < 10


@pytest.mark.parametrize(
    "text, needles",
    [
        ("a: &a [*a]\n", ["bomb.yaml:1", "refers to a node that contains it"]),
        ("model:\n  x: " + "[" * 100 + "]" * 100 + "\n", ["nested deeper than"]),
        ("train:\n  micro_batch_size: 1\n  micro_batch_size: 8\n", ["bomb.yaml:3", "duplicate key 'micro_batch_size'"]),
        ("train:\n  micro_batch_size: " + "9" * 5000 + "\n", ["bomb.yaml:2", "longer than the"]),
        ("", ["the config is empty"]),
        ("# only a comment\n", ["the config is empty"]),
    ],
    ids=["recursive-alias", "deep", "duplicate-key", "huge-int", "empty", "comment-only"],
)
def test_config_text_faults(cli, write, text, needles):
    path = write("bomb.yaml", text)
    cli("validate", path).refused(*needles)


def test_a_huge_integer_in_json_config(cli, write):
    path = write("c.json", '{"train": {"micro_batch_size": ' + "9" * 5000 + "}}")
    cli("validate", path).refused("c.json:1", "longer than the")


def test_dev_null_and_dev_zero(cli):
    cli("validate", os.devnull).refused("the config is empty")
    # with overrides the empty file is a config they describe (the eval tasks' reference commands use this)
    assert main(["validate", os.devnull, "--set", "train.micro_batch_size=2"]) == 0
    if os.path.exists("/dev/zero"):
        t0 = time.monotonic()
        cli("validate", "/dev/zero").refused("/dev/zero", "is a character device")  # refused unread
        assert time.monotonic() - t0 < 10


def test_set_faults(cli, write):
    path = write("c.yaml", "train:\n  micro_batch_size: 1\n")
    cli("validate", path, "--set", "dataset.seq_length=").refused("field 'dataset.seq_length'", "has no value")
    cli("validate", path, "--set", "train.micro_batch_size=" + "9" * 5000).refused("at most 1000 characters")


def test_unknown_world_size_stays_unknown(cli, write):
    path = write("c.yaml", "model:\n  context_parallel_size: 2\n  calculate_per_token_loss: true\n"
                           "  seq_length: 4096\n")
    run = cli("validate", path, "--json")
    report = json.loads(run.out)
    assert run.code == 0 and report["ok"], report["violations"]  # CP=2 without a world size is no error
    assert "TOPO-WORLD-DIVISIBLE" in {u["rule_id"] for u in report["resolved"]["unchecked_rules"]}
    assert report["resolved"]["data_parallel_size"] is None and report["config"]["dist"]["world_size"] is None
    text = cli("validate", path)
    assert "dist.world_size not set" in text.out and "DP=None" in text.out
    # negative control: a given world size that does not divide is still an error
    bad = cli("validate", path, "--set", "dist.world_size=3", "--json")
    assert bad.code == 1 and "TOPO-WORLD-DIVISIBLE" in {v["rule_id"] for v in json.loads(bad.out)["violations"]}


def test_seq_length_null_is_unknown_not_a_default(cli, write):
    path = write("c.yaml", "model:\n  context_parallel_size: 3\n  calculate_per_token_loss: true\n  seq_length: null\n"
                           "dist:\n  world_size: 3\n")
    report = json.loads(cli("validate", path, "--json").out)
    assert report["resolved"]["seq_length"] is None and "seq_length" in report["resolved"]["unknown"]
    assert "CP-SEQ-DIVISIBLE" in {u["rule_id"] for u in report["resolved"]["unchecked_rules"]}
    # negative control: a real seq_length that CP=3 does not divide is an error again
    fixed = json.loads(cli("validate", path, "--set", "model.seq_length=4096", "--json").out)
    assert "CP-SEQ-DIVISIBLE" in {v["rule_id"] for v in fixed["violations"]}


def test_a_blend_manifest_bomb(cli, write, tmp_path):
    write("data.jsonl", '{"prompt": "p", "completion": "c"}\n')
    path = write("blend.yaml", "a: &a [1.0, data.jsonl]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
                               "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
                               "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\ntraining: [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n")
    cli("pack", path, "--out", tmp_path / "p", "--pack-size", 64).refused("blend.yaml:", "expands to more than")
