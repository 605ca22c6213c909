"""Faults in arguments and small input files (issue 26, family 6).

Classes: blend weights whose sum overflows (1e308 each: two rows were drawn instead of 120), a
``.json`` blend whose exponent weights YAML would read as text, non-finite weights; ``eval score``
on a malformed, non-object or incomplete run.json, task ids as a string, as numbers, unknown or
with path parts, a garbage, deeply nested, huge-integer, lone-surrogate, wrongly typed or oversized
transcript, a NaN or infinite judge timeout (and ``eval run --timeout nan``); ``mcp --lifetime``
infinite, NaN or beyond a year; ``simulate`` with a zero or negative item length (CLI and MCP);
``mrope`` with an infinite or huge tokens-per-second or seconds per patch; arguments holding bytes
that are not UTF-8, and printing a path with such bytes (from the environment) to a strict stdout.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
from mcp import Client

from faults_helpers import ROWS, cli_forked

from seqpack.faces.mcp.server import build_server


# ------------------------------------------------------------------------------------------------ blends
@pytest.fixture
def sources(write):
    text = "".join(json.dumps(r) + "\n" for r in ROWS)
    return write("a.jsonl", text), write("b.jsonl", text)


@pytest.mark.parametrize("name, content", [
    ("blend.yaml", "- 1.0e+308\n- a.jsonl\n- 1.0e+308\n- b.jsonl\n"),  # the sum overflows to infinity
    ("blend.json", json.dumps([1e308, "a.jsonl", 1e308, "b.jsonl"])),  # JSON: read as JSON, 1e308 is a number
    ("tiny.yaml", "- 1.0e-320\n- a.jsonl\n- 1.0e-320\n- b.jsonl\n"),  # subnormal weights
])
def test_extreme_blend_weights_split_draws_by_their_ratio(cli, write, tmp_path, sources, name, content):
    blend = write(name, content)
    run = cli("pack", blend, "--out", tmp_path / "out", "--pack-size", 256, "--no-progress", "--json")
    assert run.code == 0, run.err
    training = json.loads(run.out)["splits"]["training"]
    assert training["accounting"]["rows_in"] == 120
    assert [s["drawn"] for s in training["sources"]] == [60, 60]


@pytest.mark.parametrize("content, why", [
    ("[Infinity, \"a.jsonl\", 1, \"b.jsonl\"]", "got inf (weights must be finite)"),
    ("[NaN, \"a.jsonl\", 1, \"b.jsonl\"]", "got nan"),
    ("[\"1e3\", \"a.jsonl\"]", "got '1e3' (a string; YAML reads 1e3 without a decimal point as text: write 1.0e3)"),
])
def test_non_finite_or_text_blend_weights_are_refused(cli, write, tmp_path, sources, content, why):
    blend = write("blend.json", content)
    cli("pack", blend, "--out", tmp_path / "out", "--pack-size", 256, "--no-progress").refused_with(
        f"seqpack pack: error: {blend} [training], field '[0]': blend entry 0: weight must be a positive number, {why}")


# ------------------------------------------------------------------------------------------------ eval
@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A real run directory: one task run by an agent that prints one word."""
    from seqpack.faces.cli import main
    from seqpack_evals.tasks import load_tasks

    task = load_tasks().tasks[0].id
    out = tmp_path_factory.mktemp("eval") / "run"
    assert main(["eval", "run", "--agent-cmd", "echo answer", "--baseline", "--out", str(out), "--tasks", task]) == 0
    return out, task


def _variant(base, tmp_path, *, run=None, run_bytes=None, transcript=None, transcript_bytes=None):
    task = base[1]
    d = tmp_path / "run"
    shutil.copytree(base[0], d, ignore=shutil.ignore_patterns("work", "scores.json"))
    doc = json.loads((d / "run.json").read_text())
    if run is not None:
        run(doc)
        (d / "run.json").write_text(json.dumps(doc))
    if run_bytes is not None:
        (d / "run.json").write_bytes(run_bytes)
    tp = d / "transcripts" / f"{task}.json"
    tdoc = json.loads(tp.read_text())
    if transcript is not None:
        transcript(tdoc)
        tp.write_text(json.dumps(tdoc))
    if transcript_bytes is not None:
        tp.write_bytes(transcript_bytes)
    return d, tp


_MINIMAL = b'{"task_id": "x", "command": [], "stdout": "", "answer": %s, "events": []}'
RUN_FAULTS = {
    "malformed": (dict(run_bytes=b'{"mode": '), "run.json:1: run.json is not JSON: Expecting value"),
    "not_an_object": (dict(run_bytes=b"[1, 2]"), "run.json: run.json must hold a JSON object, got list"),
    "not_utf8": (dict(run_bytes=b'{"mode": "\xff"}'), "run.json: run.json is not UTF-8 (byte 10)"),
    "too_deep": (dict(run_bytes=b'{"task_ids": ' + b"[" * 10000 + b"]" * 10000 + b"}"),
                 "run.json: run.json: JSON nested deeper than 100 levels (Python's parser gave up)"),
    "no_task_ids": (dict(run=lambda r: r.pop("task_ids")),
                    "run.json, field 'task_ids': task_ids must be a list of task ids, got NoneType"),
    "task_ids_string": (dict(run=lambda r: r.update(task_ids="abc")),
                        "run.json, field 'task_ids': task_ids must be a list of task ids, got str"),
    "task_ids_numbers": (dict(run=lambda r: r.update(task_ids=[1])),
                         "run.json, field 'task_ids[0]': not a task id: 1 (letters, digits, '.', '_' and '-')"),
    "task_id_path": (dict(run=lambda r: r.update(task_ids=["../../etc/passwd"])),
                     "run.json, field 'task_ids[0]': not a task id: '../../etc/passwd' (letters, digits, '.', '_' and "
                     "'-')"),
    "unknown_task": (dict(run=lambda r: r.update(task_ids=["no-such-task"])),
                     "run.json, field 'task_ids[0]': task 'no-such-task' is not in the run's answer key. Fix: score "
                     "the run directory seqpack eval run wrote, unedited"),
}
TRANSCRIPT_FAULTS = {
    "garbage": (dict(transcript_bytes=bytes(range(256))), ": transcript is not UTF-8 (byte 128)"),
    "too_deep": (dict(transcript_bytes=_MINIMAL % (b"[" * 10000 + b"]" * 10000)),
                 ": transcript: JSON nested deeper than 100 levels (Python's parser gave up)"),
    "huge_integer": (dict(transcript_bytes=_MINIMAL % (b"9" * 5000)),
                     ": transcript: a number is too long to read: Exceeds the limit (4300 digits) for integer string "
                     "conversion: value has 5000 digits"),
    "lone_surrogate": (dict(transcript_bytes=_MINIMAL % b'"\\ud800"'),
                       ", field 'answer': transcript: text holds a lone surrogate \\ud800 at character 0 (not valid "
                       "Unicode; a surrogate escape must come in a high/low pair)"),
    "a_list": (dict(transcript_bytes=b"[1]"), ": transcript must hold a JSON object, got list"),
    "wrong_type": (dict(transcript=lambda t: t.update(stdout=None)),
                   ", field 'stdout': transcript field stdout has the wrong type (NoneType)"),
    "bad_event": (dict(transcript=lambda t: t.update(events=[1])),
                  ", field 'events[0]': transcript event 0 is not an object"),
    "event_field_type": (dict(transcript=lambda t: t.update(events=[{"tool": 5}])),
                         ", field 'events[0].tool': transcript field events[0].tool has the wrong type (int)"),
    "missing_field": (dict(transcript=lambda t: t.pop("workdir")), ", field 'workdir': transcript lacks workdir"),
}


@pytest.mark.parametrize("fault", sorted(RUN_FAULTS))
def test_eval_score_refuses_a_bad_run_json(cli, run_dir, tmp_path, fault):
    change, why = RUN_FAULTS[fault]
    d, _ = _variant(run_dir, tmp_path, **change)
    run = cli("eval", "score", d)
    line = f"seqpack eval: error: {d / 'run.json'}" + why[len("run.json"):]
    run.refused_with(line)
    assert not (d / "scores.json").exists()


@pytest.mark.parametrize("fault", sorted(TRANSCRIPT_FAULTS))
def test_eval_score_refuses_a_bad_transcript(cli, run_dir, tmp_path, fault):
    change, why = TRANSCRIPT_FAULTS[fault]
    d, tp = _variant(run_dir, tmp_path, **change)
    cli("eval", "score", d).refused_with(f"seqpack eval: error: {tp}{why}")
    assert not (d / "scores.json").exists()


def test_eval_score_refuses_an_oversized_transcript_unread(cli, run_dir, tmp_path):
    d, tp = _variant(run_dir, tmp_path)
    with open(tp, "ab") as fh:
        fh.truncate(1 << 30)
    cli("eval", "score", d).refused_with(
        f"seqpack eval: error: {tp}: transcript is larger than 33,554,432 bytes (1,073,741,824)")


def test_eval_score_of_the_unchanged_run_works(cli, run_dir, tmp_path):
    """Negative control: the same copy, unedited, scores."""
    d, _ = _variant(run_dir, tmp_path)
    run = cli("eval", "score", d)
    assert run.code == 0, run.err
    assert (d / "scores.json").is_file()


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_eval_timeouts_must_be_finite_and_positive(cli, run_dir, tmp_path, value):
    d, _ = _variant(run_dir, tmp_path)
    shown = {"nan": "nan", "inf": "inf", "-1": "-1.0", "0": "0.0"}[value]
    cli("eval", "score", d, "--judge-cmd", "cat", "--judge-timeout", value).refused_with(
        f"seqpack eval: error: field 'judge_timeout': --judge-timeout must be a finite number above 0, got {shown}")
    cli("eval", "run", "--agent-cmd", "echo", "--baseline", "--out", tmp_path / "new", "--timeout", value,
        "--tasks", run_dir[1]).refused_with(
        f"seqpack eval: error: field 'timeout': --timeout must be a finite number above 0, got {shown}")
    assert not (tmp_path / "new").exists()


# ------------------------------------------------------------------------------------------------ numbers
@pytest.mark.parametrize("value, line", [
    ("inf", "--lifetime must be a finite number above 0, got inf"),
    ("nan", "--lifetime must be a finite number above 0, got nan"),
    ("1e300", "--lifetime=1e+300 is over the limit of 3.1536e+07. Fix: use at most 3.1536e+07 (limits live in "
              "reference_impl/seqpack/core/limits.py)"),
])
def test_mcp_lifetime_must_be_finite(value, line):
    run = cli_forked("mcp", "--transport", "http", "--port", 18999, "--lifetime", value, timeout=30)
    run.refused_with(f"seqpack mcp: error: field 'lifetime': {line}")


@pytest.mark.parametrize("lengths, line", [
    ("0,5,3", "lengths[0] is 0; every item holds at least one token"),
    ("5,-3", "lengths[1] is -3; every item holds at least one token"),
])
def test_simulate_refuses_an_empty_item(cli, lengths, line):
    cli("simulate", "--lengths", lengths, "--pack-size", 8).refused_with(f"seqpack simulate: error: field 'lengths': {line}")


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
async def test_simulate_packing_over_mcp_refuses_an_empty_item(tmp_path):
    async with Client(build_server([tmp_path])) as client:
        bad = await client.call_tool("simulate_packing", {"lengths": [0, 5], "pack_size": 8})
        good = await client.call_tool("simulate_packing", {"lengths": [3, 5], "pack_size": 8})
    assert bad.is_error and "greater than or equal to 1" in bad.content[0].text
    assert not good.is_error


@pytest.mark.parametrize("args, line", [
    (["--tokens-per-second", "inf"], "field 'tokens_per_second': tokens_per_second must be a finite number above 0, "
                                     "got inf"),
    (["--tokens-per-second", "nan"], "field 'tokens_per_second': tokens_per_second must be a finite number above 0, "
                                     "got nan"),
    (["--tokens-per-second", "1e300"], "field 'tokens_per_second': tokens_per_second=1e+300 is over the limit of "
                                       "10000. Fix: use at most 10000 (limits live in reference_impl/seqpack/core/limits.py)"),
])
def test_mrope_refuses_infinite_tokens_per_second(cli, args, line):
    cli("mrope", "text:3,video:2x4x4@1,text:2", "--model", "qwen2_5_vl", *args).refused_with(
        f"seqpack mrope: error: {line}")


def test_mrope_refuses_infinite_seconds_per_patch(cli):
    cli("mrope", "text:3,video:2x4x4@inf,text:2", "--model", "qwen2_5_vl").refused_with(
        "seqpack mrope: error: field 'layout': seconds per temporal patch must be a finite number above 0, got inf")


# ------------------------------------------------------------------------------------------------ undecodable bytes
def _undecodable(name: str) -> str:
    return os.fsdecode(name.encode() + b"\xff")


@pytest.mark.parametrize("where", ["input", "--out"])
def test_an_argument_that_is_not_utf8_is_refused_in_one_line(cli, data, tmp_path, where):
    odd = tmp_path / _undecodable("odd")
    args = {"input": ["pack", odd, "--out", tmp_path / "out"], "--out": ["pack", data, "--out", odd]}[where]
    run = cli(*args, "--pack-size", 256, "--no-progress")
    shown = str(odd).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    run.refused_with(f"seqpack pack: error: {where} '{shown}' holds bytes that are not UTF-8 (character "
                     f"{len(str(tmp_path)) + 4}); seqpack records paths in JSON manifests and prints them, so they "
                     "must be valid UTF-8. Fix: rename the file or directory, or pass a path without such bytes")
    assert not (tmp_path / "out").exists()


def test_a_path_with_undecodable_bytes_from_the_environment_prints(cli, tmp_path, monkeypatch):
    """HOME with a byte that is not UTF-8: install-skill --user prints where it installed, escaped, on a
    stdout that would raise on such text (capsys's is strict)."""
    home = tmp_path / _undecodable("home")
    home.mkdir()
    monkeypatch.setenv("HOME", os.fsdecode(os.fsencode(home)))
    run = cli("install-skill", "--client", "claude", "--user")
    assert run.code == 0, run.err
    assert "home\\udcff" in run.out or "home\\xff" in run.out, run.out
    assert (home / ".claude" / "skills").is_dir()


def test_blend_sources_keep_their_row_order_with_extreme_weights(sources):
    """The split itself (no CLI): the largest-remainder split of overflowing weights equals that of 1:1."""
    import numpy as np

    from seqpack.packing.offline.sources import _largest_remainder

    huge = _largest_remainder(np.asarray([1e308, 1e308, 5e307]), 120)
    plain = _largest_remainder(np.asarray([2.0, 2.0, 1.0]), 120)
    assert huge.tolist() == plain.tolist() == [48, 48, 24]
