"""CP=2 for real: two gloo processes (started like torchrun starts them) must reproduce the CP=1 loss and gradients.

The worker (tests/distributed/cp_worker.py) builds a float64 batch aligned for CP=2 whose two CP
ranks hold different numbers of supervised tokens, runs the CP=1 reference in-process, then the
context-parallel step (Megatron-Core parallel_state groups, K/V all-gather) under every loss
reduction setting, and writes the differences to JSON. The assertions are here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from seqpack.training.ranks import launch_ranks

ROOT = Path(__file__).resolve().parents[1]
NPROC = 2
EXACT = 1e-10
PER_TOKEN = "per_token=True,avg_in_collective=False"


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = tmp_path_factory.mktemp("cp2")
    worker = str(ROOT / "tests" / "distributed" / "cp_worker.py")
    done = launch_ranks([worker, "--out", str(out)], NPROC, timeout=180, log_dir=out / "logs", cwd=ROOT)
    assert done.returncode == 0, f"the ranks failed ({done.returncode}):\n" + (
        done.log.read_text()[-6000:] if done.log else "")
    loaded = [json.loads((out / f"rank{r}.json").read_text()) for r in range(NPROC)]
    print(f"\nCP={NPROC} wall time {done.wall_s:.1f} s (worker init {max(r['init_s'] for r in loaded):.1f} s)")
    for r in loaded:
        r["wall_s"] = done.wall_s
    return loaded


pytestmark = pytest.mark.distributed


def test_every_rank_reported(reports: list[dict]) -> None:
    assert sorted(r["rank"] for r in reports) == list(range(NPROC))
    assert all(r["cp"] == NPROC for r in reports)


def test_ranks_hold_unequal_token_counts(reports: list[dict]) -> None:
    counts = reports[0]["settings"][PER_TOKEN]["rank_token_counts"]
    assert len(counts) == NPROC and len(set(counts)) == NPROC
    assert [r["settings"][PER_TOKEN]["local_token_count"] for r in sorted(reports, key=lambda r: r["rank"])] == counts


def test_cp2_per_token_matches_cp1(reports: list[dict]) -> None:
    for r in reports:
        s = r["settings"][PER_TOKEN]
        assert s["grad_vs_cp1"] < EXACT
        assert s["logits_vs_cp1"] < EXACT
        assert s["objective_vs_cp1_loss"] < EXACT
        assert s["sequence_sum_vs_cp1"] < EXACT and s["sequence_count_equal"]


def test_distributed_reduction_matches_pure_prediction(reports: list[dict]) -> None:
    for r in reports:
        for name, s in r["settings"].items():
            assert s["grad_vs_predicted"] < EXACT, name
            assert s["token_mean_vs_cp1_loss"] < EXACT, name  # the logged per-token mean is always right


@pytest.mark.parametrize(
    "setting",
    [
        "per_token=False,avg_in_collective=False",
        "per_token=False,avg_in_collective=True",
        "per_token=True,avg_in_collective=True",
    ],
)
def test_other_reductions_differ_from_cp1(reports: list[dict], setting: str) -> None:
    for r in reports:
        s = r["settings"][setting]
        assert s["grad_vs_cp1"] > 1e-3
        assert s["objective_vs_cp1_loss"] > 1e-3
        assert s["logits_vs_cp1"] < EXACT  # the forward is right; only the reduction is wrong


def test_without_kv_exchange_attention_is_wrong(reports: list[dict]) -> None:
    for r in reports:
        assert r["no_kv_exchange"]["logits_vs_cp1"] > 1e-3
        assert r["no_kv_exchange"]["grad_vs_cp1"] > 1e-3


def test_batch_aligned_for_cp1_is_rejected(reports: list[dict]) -> None:
    for r in reports:
        message = r["misaligned_error"]
        assert message is not None
        assert "sequence 0 has physical length 5" in message and "2*CP=4" in message
        assert "pad_seq_to_mult" in message
