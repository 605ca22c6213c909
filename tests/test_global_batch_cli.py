"""seqpack batches --mode global-batch: simulated DP ranks, per-step packs, per-rank load, FLOPs sums."""

from __future__ import annotations

import json

import pytest

from seqpack.core.alignment import round_up
from seqpack.faces.cli import EXIT_ERROR, main
from seqpack.data import demo_path
from seqpack.data.demo import DEMO_MIXES, DEMO_ROWS, DEMO_SEEDS, MAX_LEN, MIN_LEN
from seqpack.data.length_mixes import sample_lengths
from seqpack.packing.global_batch import schedule_global_batch


def demo_row_lengths(n, seq_length):
    """Training-row lengths of the first ``n`` prompt/completion demo rows (ids minus the shifted-out one)."""
    ids = sample_lengths(DEMO_MIXES["prompt_completion"], DEMO_ROWS, seed=DEMO_SEEDS["prompt_completion"],
                         min_len=MIN_LEN, max_len=MAX_LEN)
    return [min(int(x), seq_length) - 1 for x in ids[:n]]


def run_json(capsys, *args):
    assert main(["batches", str(demo_path("prompt_completion")), "--mode", "global-batch", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("scheduler", ["dp_balanced", "balanced"])
def test_json_steps_follow_the_scheduler_on_the_demo_lengths(capsys, scheduler):
    out = run_json(capsys, "--dp", "2", "--cp", "2", "--seq-length", "1024", "--gbs", "8", "--num-steps", "2",
                   "--scheduler", scheduler)
    assert out["mode"] == "global-batch" and out["rows"] == DEMO_ROWS
    st = out["settings"]
    assert (st["dp_size"], st["cp_size"], st["capacity"], st["pad_seq_to_mult"]) == (2, 2, 1024, 4)
    assert st["scheduler"] == scheduler and st["micro_batches_per_rank"] == 4
    padded = [round_up(n, 4) for n in demo_row_lengths(16, 1024)]
    assert len(out["steps"]) == 2
    for s, step in enumerate(out["steps"]):
        rows = [[8 * s + 2 * k + d for k in range(4)] for d in range(2)]  # single sampler: rank d, position d
        expected = schedule_global_batch([[padded[r] for r in rr] for rr in rows], max_seqlen_per_dp_cp_rank=512,
                                         cp_size=2, scheduler=scheduler)
        gid_row = [r for rr in rows for r in rr]
        assert step["num_micro_batches"] == expected.num_micro_batches
        assert step["seqlen_sum"] == sum(padded[8 * s : 8 * s + 8])
        assert step["seqlen_squared_sum"] == sum(x * x for x in padded[8 * s : 8 * s + 8])
        assert [step["rank_tokens"], step["rank_attention"]] == list(map(list, expected.rank_loads()))
        for k, mb in enumerate(step["packs"]):
            for d, pack in enumerate(mb):
                assert pack["sample_ids"] == list(expected.pack(k, d))
                assert pack["rows"] == [gid_row[g] for g in expected.pack(k, d)]
                assert pack["lengths"] == [padded[r] for r in pack["rows"]]
                assert pack["tokens"] == sum(pack["lengths"]) <= 1024


def test_text_output_has_packs_loads_and_flops(capsys):
    assert main(["batches", str(demo_path("prompt_completion")), "--mode", "global-batch", "--dp", "4",
                 "--gbs", "16", "--seq-length", "2048", "--num-steps", "1", "--scheduler", "balanced"]) == 0
    text = capsys.readouterr().out
    assert "scheduler balanced (DP ranks simulated)" in text
    assert "DP 4, CP 1, GBS 16 (4 samples per rank), pack capacity 2048*1 = 2048 tokens" in text
    assert "step 0: 16 samples ->" in text and "sum L = " in text and "rank load max/mean: tokens" in text
    assert "micro_batch  dp_rank" in text and "dp_rank  tokens  sum_L^2" in text


@pytest.mark.parametrize(
    "args, rule",
    [
        (["--max-seqlen-per-rank", "256", "--seq-length", "1024"], "PACK-GLOBAL-CAPACITY"),
        (["--mbs", "2"], "PACK-GLOBAL-MBS1"),
        (["--dataloader", "batch"], "PACK-GLOBAL-DATALOADER"),
        (["--dp", "3", "--gbs", "16"], "BATCH-GBS-DIVISIBLE"),
    ],
)
def test_rule_violations_exit_1_with_the_rule(capsys, args, rule):
    code = main(["batches", str(demo_path("prompt_completion")), "--mode", "global-batch", *args])
    assert code == 1
    assert rule in capsys.readouterr().err


def test_fixed_width_flags_are_refused(capsys):
    code = main(["batches", str(demo_path("prompt_completion")), "--mode", "global-batch", "--pad-to-max-length"])
    assert code == EXIT_ERROR
    assert "--pad-to-max-length/--width do not apply to --mode global-batch" in capsys.readouterr().err


def test_in_batch_mode_keeps_its_default_mbs(capsys):
    assert main(["batches", str(demo_path("chat")), "--num-batches", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["micro_batch_size"] == 4
