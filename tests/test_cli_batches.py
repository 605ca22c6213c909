"""seqpack batches: layout and padding of the first micro-batches, exit codes, one-line errors."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from seqpack.core.alignment import round_up
from seqpack.faces.cli import main
from seqpack.data import demo_path
from seqpack.data.demo import DEMO_MIXES, DEMO_ROWS, DEMO_SEEDS, MAX_LEN, MIN_LEN
from seqpack.data.length_mixes import sample_lengths

ROOT = Path(__file__).resolve().parents[1]


def demo_row_lengths(schema, n):
    """Training-row lengths of the first ``n`` demo rows: drawn ids minus the shifted-out last one."""
    ids = sample_lengths(DEMO_MIXES[schema], DEMO_ROWS, seed=DEMO_SEEDS[schema], min_len=MIN_LEN, max_len=MAX_LEN)
    return [int(x) - 1 for x in ids[:n]]


def cumsum0(values):
    return [0] + np.cumsum(values).tolist()


def run_json(capsys, *args):
    assert main(["batches", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_layout_matches_the_demo_lengths_with_alignment(capsys):
    out = run_json(capsys, str(demo_path("prompt_completion")), "--mbs", "4", "--seq-length", "4096",
                   "--tp", "4", "--cp", "2", "--sp", "--num-batches", "2")
    lengths = demo_row_lengths("prompt_completion", 8)
    assert out["mode"] == "in-batch" and out["rows"] == DEMO_ROWS and out["schema"]["kind"] == "prompt_completion"
    assert out["alignment"]["pad_seq_to_mult"] == 8 and out["steps_per_pass"] == DEMO_ROWS // 4
    assert [b["rows"] for b in out["batches"]] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    for b, chunk in zip(out["batches"], (lengths[:4], lengths[4:])):
        aligned = [round_up(u, 8) for u in chunk]
        assert b["lengths"] == chunk
        assert b["cu_seqlens"] == cumsum0(chunk)
        assert b["cu_seqlens_padded"] == cumsum0(aligned)
        assert b["width"] == sum(aligned) and b["max_seqlen"] == max(aligned)
        assert b["alignment_padding"] == sum(aligned) - sum(chunk) and b["width_padding"] == 0
    t = out["totals"]
    assert t["real_tokens"] == sum(lengths)
    assert t["alignment_padding"] == sum(round_up(u, 8) - u for u in lengths)
    assert t["padding_share"] == pytest.approx(t["alignment_padding"] / (t["real_tokens"] + t["alignment_padding"]))


def test_json_without_alignment_has_no_padded_boundaries(capsys):
    out = run_json(capsys, str(demo_path("chat")), "--mbs", "2", "--num-batches", "1")
    chunk = demo_row_lengths("chat", 2)
    (b,) = out["batches"]
    assert b["lengths"] == chunk and b["cu_seqlens"] == cumsum0(chunk) and b["cu_seqlens_padded"] is None
    assert out["totals"]["padding_share"] == 0.0


def test_fixed_width_and_eval_cp(capsys):
    out = run_json(capsys, str(demo_path("chat")), "--mbs", "2", "--tp", "2", "--cp", "2", "--sp", "--eval-cp", "4",
                   "--pad-to-max-length", "--width", "8192", "--num-batches", "1")
    chunk = demo_row_lengths("chat", 2)
    aligned = [round_up(u, 8) for u in chunk]
    (b,) = out["batches"]
    assert out["alignment"]["pad_seq_to_mult"] == 8 and out["width"] == 8192
    assert b["width"] == 8192 and b["width_padding"] == 8192 - sum(aligned)
    assert b["cu_seqlens_padded"] == [0, aligned[0], 8192]  # slack merged into the last segment


def test_small_file_keeps_the_short_last_micro_batch(tmp_path, capsys):
    p = tmp_path / "five.jsonl"
    p.write_text("".join(json.dumps({"prompt": f"p{i}", "completion": "c" * (i + 1)}) + "\n" for i in range(5)))
    out = run_json(capsys, str(p), "--mbs", "2", "--seq-length", "64", "--num-batches", "10")
    assert [b["rows"] for b in out["batches"]] == [[0, 1], [2, 3], [4]]
    # row i: "p<i>" + " " + "c"*(i+1) + eos -> 4 + i + 1 + 1 ids, one shifted out
    assert [b["lengths"] for b in out["batches"]] == [[4, 5], [6, 7], [8]]


def test_cyclic_order_follows_the_seed(capsys):
    args = [str(demo_path("chat")), "--mbs", "4", "--dataloader", "cyclic", "--num-batches", "2"]
    a = run_json(capsys, *args, "--seed", "1")
    b = run_json(capsys, *args, "--seed", "1")
    c = run_json(capsys, *args, "--seed", "2")
    rows = lambda out: [r for x in out["batches"] for r in x["rows"]]  # noqa: E731
    assert rows(a) == rows(b) != rows(c)
    assert rows(a) != list(range(8))


def test_text_output(capsys):
    assert main(["batches", str(demo_path("prompt_completion")), "--mbs", "4", "--tp", "4", "--cp", "2", "--sp",
                 "--num-batches", "1"]) == 0
    out = capsys.readouterr().out
    lengths = demo_row_lengths("prompt_completion", 4)
    aligned = [round_up(u, 8) for u in lengths]
    assert "pad_seq_to_mult = lcm(4, 8) = 8" in out
    assert "[" + ",".join(str(x) for x in cumsum0(aligned)) + "]" in out
    assert "[" + ",".join(str(x) for x in lengths) + "]" in out
    assert f"{sum(lengths)} real tokens, {sum(aligned) - sum(lengths)} alignment padding, 0 width padding" in out


def run_cli(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "seqpack", "batches", *args],
                          capture_output=True, text=True, env=env)


@pytest.mark.parametrize(
    "args, rule_id",
    [
        (["--mbs", "1"], "PACK-IN-BATCH-MBS"),
        (["--dataloader", "batch"], "PACK-IN-BATCH-DATALOADER"),
        (["--cp", "2", "--seq-length", "4095"], "CP-SEQ-DIVISIBLE"),
        (["--tp", "4", "--cp", "2", "--sp", "--seq-length", "4092"], "ALIGN-SEQ-LENGTH"),
    ],
)
def test_rule_violations_exit_1_with_one_line(args, rule_id, capsys):
    assert main(["batches", str(demo_path("chat")), *args]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("seqpack batches: error: [" + rule_id + "]")


def test_input_and_usage_errors_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "a", "completion": "b"}) + "\n" + "{oops\n")
    cases = [
        ([str(tmp_path / "missing.jsonl")], "JSONL file not found"),
        ([str(bad), "--mbs", "2"], "bad.jsonl:2"),
        ([str(demo_path("chat")), "--width", "100"], "--width needs --pad-to-max-length"),
        ([str(demo_path("chat")), "--mbs", "2", "--pad-to-max-length"], "exceeds width 4096"),
        ([str(demo_path("chat")), "--num-batches", "0"], "num_batches"),
    ]
    for args, fragment in cases:
        assert main(["batches", *args]) == 2, args
        err = capsys.readouterr().err
        assert fragment in err and len(err.strip().splitlines()) == 1, (args, err)
    with pytest.raises(SystemExit) as info:
        main(["batches", str(demo_path("chat")), "--mode", "energon"])
    assert info.value.code == 2 and "invalid choice" in capsys.readouterr().err
    assert main(["batches", str(demo_path("chat")), "--mode", "offline"]) == 2  # packs, not JSONL
    assert "no training packs" in capsys.readouterr().err


@pytest.mark.slow
def test_real_command_line_errors_are_one_line():
    proc = run_cli(str(ROOT / "missing.jsonl"))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [f"seqpack batches: error: {ROOT / 'missing.jsonl'}: "
                                                "JSONL file not found"]


def test_listed_in_the_top_level_help():
    proc = subprocess.run([sys.executable, "-m", "seqpack", "--help"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0 and "batches" in proc.stdout
