"""Global-batch packing for real: DP=2 (2 gloo processes) and DP=2 x CP=2 (4 processes), started like torchrun starts them.

The worker (tests/distributed/global_batch_worker.py) trains a float64 tiny GPT for two steps with
each scheduler over Megatron-Core's parallel-state groups, runs the inputs Megatron-Core asserts
on, and writes what every rank saw to JSON. The assertions are here: no sample lost or duplicated
across a step, equal micro-batch counts on every rank, tokens per rank after the CP split equal to
pack / CP, packed loss and gradients equal to the same samples run unpacked on one process.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from seqpack.packing.global_batch.schedule import schedule_global_batch
from seqpack.training.ranks import launch_ranks
from tests.distributed.global_batch_data import write_rows

ROOT = Path(__file__).resolve().parents[1]
EXACT = 1e-10
GBS, STEPS, CAPACITY = 16, 2, 192
TOPOLOGIES = {"dp2": (2, 1), "dp2xcp2": (2, 2)}  # name -> (DP, CP)

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module", params=sorted(TOPOLOGIES))
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict:
    dp, cp = TOPOLOGIES[request.param]
    out = tmp_path_factory.mktemp(request.param)
    data = write_rows(out / "rows.jsonl", 48, seed=5)
    worker = str(ROOT / "tests" / "distributed" / "global_batch_worker.py")
    done = launch_ranks([worker, "--data", str(data), "--cp", str(cp), "--out", str(out)], dp * cp, timeout=240,
                        log_dir=out / "logs", cwd=ROOT)
    assert done.returncode == 0, f"the ranks failed ({done.returncode}):\n" + (
        done.log.read_text()[-6000:] if done.log else "")
    reports = [json.loads((out / f"rank{r}.json").read_text()) for r in range(dp * cp)]
    print(f"\n{request.param}: wall time {done.wall_s:.1f} s (worker init {max(r['init_s'] for r in reports):.1f} s)")
    return {"dp": dp, "cp": cp, "reports": reports}


def _steps(run: dict) -> list[tuple[dict, list[dict]]]:
    """(step entry of rank 0, the same step on every rank) for each recorded step."""
    count = len(run["reports"][0]["steps"])
    return [(run["reports"][0]["steps"][i], [r["steps"][i] for r in run["reports"]]) for i in range(count)]


def _by_dp(run: dict, entries: list[dict]) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for report, entry in zip(run["reports"], entries):
        out.setdefault(report["layout"]["dp_rank"], []).append(entry)
    return out


def test_ranks_map_like_megatron(run: dict) -> None:
    dp, cp = run["dp"], run["cp"]
    layouts = [r["layout"] for r in run["reports"]]
    assert sorted((lay["dp_rank"], lay["cp_rank"]) for lay in layouts) == [(d, c) for d in range(dp) for c in range(cp)]
    for r in run["reports"]:
        lay = r["layout"]
        assert (lay["dp_size"], lay["cp_size"]) == (dp, cp)
        assert r["dcp_group_rank"] == lay["dp_rank"] * cp + lay["cp_rank"] == lay["dcp_rank"]


def test_both_schedulers_ran_every_step(run: dict) -> None:
    seen = [(e["scheduler"], e["step"]) for e in run["reports"][0]["steps"]]
    assert seen == [(s, i) for s in ("dp_balanced", "balanced") for i in range(STEPS)]


def test_schedule_is_identical_on_every_rank(run: dict) -> None:
    for first, entries in _steps(run):
        for e in entries:
            assert e["schedule"] == first["schedule"]
        sched = first["schedule"]
        assert sched["scheduler"] == first["scheduler"] and sched["dp_size"] == run["dp"]
        assert sched["capacity"] == CAPACITY and sched["num_samples"] == GBS


def test_equal_micro_batch_counts_and_no_pack_over_capacity(run: dict) -> None:
    for first, entries in _steps(run):
        n = first["schedule"]["num_micro_batches"]
        assert n >= 1
        for e in entries:
            assert e["num_micro_batches"] == n == len(e["widths"]) == len(e["local_tokens"]) == len(e["sample_ids"])
            assert all(w <= CAPACITY for w in e["widths"])


def test_no_sample_lost_or_duplicated(run: dict) -> None:
    for first, entries in _steps(run):
        by_dp = _by_dp(run, entries)
        ids, packed, loaded, rows = [], Counter(), Counter(), []
        for d, lane in sorted(by_dp.items()):
            # all CP ranks of one DP replica load the same samples and run the same packs
            for e in lane[1:]:
                assert e["packed_keys"] == lane[0]["packed_keys"] and e["sample_ids"] == lane[0]["sample_ids"]
                assert e["loaded_keys"] == lane[0]["loaded_keys"]
            ids += [g for pack in lane[0]["sample_ids"] for g in pack]
            packed.update(k for pack in lane[0]["packed_keys"] for k in pack)
            loaded.update(lane[0]["loaded_keys"])
            rows += [r for pack in lane[0]["row_indices"] for r in pack]
            assert len(lane[0]["loaded_keys"]) == GBS // run["dp"]
        step = first["step"]
        assert sorted(ids) == list(range(GBS))
        assert sorted(rows) == list(range(step * GBS, (step + 1) * GBS))
        assert packed == loaded and sum(packed.values()) == GBS


def test_tokens_per_rank_after_cp_split_are_pack_over_cp(run: dict) -> None:
    cp = run["cp"]
    for _, entries in _steps(run):
        for e in entries:
            assert all(w % cp == 0 for w in e["widths"])
            assert e["local_tokens"] == [w // cp for w in e["widths"]]


def test_packed_loss_and_gradients_equal_unpacked(run: dict) -> None:
    for _, entries in _steps(run):
        for e in entries:
            assert e["loss_diff"] < EXACT and e["grad_diff"] < EXACT
            assert e["token_count"] == e["ref_token_count"] > 0


def test_flops_statistics_are_exact_ints(run: dict) -> None:
    for first, entries in _steps(run):
        lengths = first["schedule"]["lengths"]
        for e in entries:
            assert e["seqlen_sum_type"] == "int"
            assert e["seqlen_sum"] == sum(lengths)
            assert e["seqlen_squared_sum"] == sum(x * x for x in lengths)


def test_dp_balanced_matches_the_pure_scheduler(run: dict) -> None:
    for first, _ in _steps(run):
        sched = first["schedule"]
        offs, lengths = sched["rank_offsets"], sched["lengths"]
        per_rank = [lengths[offs[d] : offs[d + 1]] for d in range(run["dp"])]
        pure = schedule_global_batch(per_rank, max_seqlen_per_dp_cp_rank=CAPACITY // run["cp"], cp_size=run["cp"],
                                     scheduler=first["scheduler"])
        assert [list(p) for p in pure.packs] == sched["packs"]


def test_replicas_stay_identical(run: dict) -> None:
    sums = {r["param_checksum"] for r in run["reports"]}
    assert len(sums) == 1


def test_pack0_split_case_is_handled(run: dict) -> None:
    for r in run["reports"]:
        case = r["cases"]["pack0_split"]
        assert "error" not in case, case
        assert case["schedule"]["packs"] == [[0], [1]] and case["num_micro_batches"] == 1
        assert any("pack 0 gave up 1 sample" in note for note in case["adjustments"])
        assert case["loss_diff"] < EXACT and case["grad_diff"] < EXACT


def test_too_few_samples_case_gets_a_filler_pack(run: dict) -> None:
    for r in run["reports"]:
        case = r["cases"]["too_few_samples"]
        assert "error" not in case, case
        # rank 0 loaded ids 0 and 1, rank 1 id 2; three single-sample packs and one filler
        assert case["schedule"]["packs"] == [[0], [1], [2], []]
        assert case["num_micro_batches"] == 2
        assert any("filler" in note for note in case["adjustments"])
        expected = [[0], [2]] if r["layout"]["dp_rank"] == 0 else [[1], []]
        assert case["sample_ids"] == expected
        assert case["loss_diff"] < EXACT and case["grad_diff"] < EXACT


def test_oversize_sample_stops_every_rank_with_the_capacity_rule(run: dict) -> None:
    last = run["dp"] - 1
    for r in run["reports"]:
        case = r["cases"]["oversize"]
        assert case.get("rule_id") == "PACK-GLOBAL-CAPACITY", case
        assert f"sample {last} (DP rank {last}, local index 0, dataset row 9999)" in case["error"]
        cp = run["cp"]
        assert f"above the pack capacity max_seqlen_per_dp_cp_rank*CP = {CAPACITY // cp}*{cp}" in case["error"]


def test_malformed_sample_stops_every_rank(run: dict) -> None:
    for r in run["reports"]:
        case = r["cases"]["malformed"]
        if r["layout"]["dp_rank"] == 0:
            assert case["error_type"] == "InputError"
            assert "'loss_mask' must be torch.float32, got torch.float64" in case["error"]
        else:
            assert case["error_type"] == "PackingError"
            assert "DP rank(s) [0] could not produce their samples" in case["error"]
        after = r["cases"]["after_errors"]
        assert "error" not in after and after["loss_diff"] < EXACT
