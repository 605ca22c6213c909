"""MoE/MTP packing rules and the dispatch width rules behind them."""

from __future__ import annotations

import pytest

from seqpack.config import validate_config
from seqpack.config.dispatch import HYBRIDEP_TOKEN_ALIGNMENT, dispatch_width, dispatcher_name

OFFLINE = ["dataset.enable_offline_packing=true", "dataset.offline_packing_specs.packed_sequence_size=4096",
           "model.seq_length=4096"]
IN_BATCH = ["dataset.enable_in_batch_packing=true", "dataset.dataloader_type=single", "train.micro_batch_size=4"]
MOE = ["model.num_moe_experts=8"]
HYBRIDEP = ["model.moe_token_dispatcher_type=flex", "model.moe_flex_dispatcher_backend=hybridep"]
FIXED = ["dataset.dataset_kwargs.pad_to_max_length=true"]


def ids(report) -> set[str]:
    return {f.rule_id for f in report.violations + report.warnings}


def test_dispatcher_names() -> None:
    assert dispatcher_name("flex", None) == "deepep"
    assert dispatcher_name("flex", "hybridep") == "hybridep"
    assert dispatcher_name("alltoall", "hybridep") == "alltoall"


def test_hybridep_width_multiple_follows_topology() -> None:
    # TP4 + SP + CP2: a rank holds W / 8 tokens, so W must be a multiple of 8 * 64 for whole chunks
    w = dispatch_width(dispatcher="hybridep", tp=4, cp=2, sp=True, pad_seq_to_mult=8, fixed_width=4096)
    assert (w.width_rule, w.tokens_divisor, w.per_rank_tokens, w.chunk_padding) == ("fixed", 8, 512, 0)
    assert w.width_multiple == 8 * HYBRIDEP_TOKEN_ALIGNMENT
    off = dispatch_width(dispatcher="hybridep", fixed_width=2000)
    assert (off.per_rank_tokens, off.chunk_padding) == (2000, 48)
    assert "128" in off.notes[0]  # the guide's chunk is named too


@pytest.mark.parametrize(
    ("kwargs", "rule"),
    [
        ({"dispatcher": "alltoall", "ep": 8}, "variable"),
        ({"dispatcher": "deepep", "ep": 8}, "variable"),
        ({"dispatcher": "allgather", "ep": 1}, "variable"),
        ({"dispatcher": "allgather", "ep": 2}, "fixed_required"),
        ({"dispatcher": "allgather", "ep": 2, "fixed_width": 4096}, "fixed"),
        ({"dispatcher": "hybridep", "ep": 2}, "uneven_padded"),
        ({"dispatcher": "hybridep", "ep": 2, "hybridep_padding": False}, "equal_required"),
        ({"dispatcher": "hybridep", "ep": 2, "cuda_graphs": True}, "fixed_required"),
        ({"dispatcher": "hybridep", "ep": 2, "cuda_graphs": True, "fixed_width": 4096}, "fixed"),
    ],
)
def test_width_rules(kwargs: dict, rule: str) -> None:
    assert dispatch_width(**kwargs).width_rule == rule


def test_unknown_dispatcher_is_refused() -> None:
    with pytest.raises(ValueError):
        dispatch_width(dispatcher="ring")


def test_validate_reports_the_dispatch_rule_of_a_packed_moe_config() -> None:
    report = validate_config(None, OFFLINE + MOE + HYBRIDEP + FIXED + ["model.context_parallel_size=2",
                             "model.calculate_per_token_loss=true", "dist.world_size=2",
                             "dataset.offline_packing_specs.pad_seq_to_mult=4"])
    moe = report.resolved["moe_dispatch"]
    assert moe["dispatcher"] == "hybridep" and moe["width_rule"] == "fixed"
    assert moe["per_rank_tokens"] == 2048 and moe["chunk_padding"] == 0
    assert "moe_dispatch" not in validate_config(None, OFFLINE).resolved
    assert "moe_dispatch" not in validate_config(None, MOE).resolved  # unpacked: no pack widths


def test_allgather_with_ep_needs_fixed_width() -> None:
    base = OFFLINE + MOE + ["model.moe_token_dispatcher_type=allgather"]
    assert "MOE-ALLGATHER-EQUAL-WIDTH" not in ids(validate_config(None, base))
    ep = base + ["model.expert_model_parallel_size=2", "dist.world_size=2"]
    report = validate_config(None, ep)
    assert "MOE-ALLGATHER-EQUAL-WIDTH" in {f.rule_id for f in report.violations}
    assert "MOE-ALLGATHER-EQUAL-WIDTH" not in ids(validate_config(None, ep + FIXED))


def test_hybridep_rules_follow_graphs_and_padding() -> None:
    eager = IN_BATCH + MOE + HYBRIDEP
    assert "MOE-HYBRIDEP-GRAPHS-FIXED-WIDTH" not in ids(validate_config(None, eager))
    # an explicit false on a packed eager config: Bridge turns the padding on anyway (0.6.2 with #5931; the lane
    # checks it), so nothing to warn about and the dispatch is padded
    off = validate_config(None, eager + ["model.moe_hybridep_pad_uneven_dispatch_inputs=false"])
    assert not off.warnings or all("HYBRIDEP" not in f.rule_id for f in off.warnings)
    assert off.resolved["moe_dispatch"]["width_rule"] == "uneven_padded"
    assert off.resolved["moe_dispatch"]["hybridep_padding"] is True
    graphs = eager + ["model.cuda_graph_impl=transformer_engine", "model.cuda_graph_scope=mlp"]
    assert "MOE-HYBRIDEP-GRAPHS-FIXED-WIDTH" in {f.rule_id for f in validate_config(None, graphs).violations}
    fixed = validate_config(None, graphs + FIXED)
    assert "MOE-HYBRIDEP-GRAPHS-FIXED-WIDTH" not in ids(fixed)
    padded = validate_config(None, graphs + FIXED + ["model.moe_hybridep_pad_uneven_dispatch_inputs=true"])
    assert "MOE-HYBRIDEP-GRAPHS-PADDING" in {f.rule_id for f in padded.warnings}


def test_mtp_roll_warning_needs_alignment_padding() -> None:
    mtp = OFFLINE + ["model.mtp_num_layers=1"]
    assert "MTP-PACKED-ALIGNMENT-ROLL" not in ids(validate_config(None, mtp))
    sp = mtp + ["model.tensor_model_parallel_size=2", "model.sequence_parallel=true", "dist.world_size=2",
                "dataset.offline_packing_specs.pad_seq_to_mult=2"]
    assert "MTP-PACKED-ALIGNMENT-ROLL" in ids(validate_config(None, sp))
    assert "MTP-PACKED-ALIGNMENT-ROLL" not in ids(validate_config(None, ["model.mtp_num_layers=1"]))


def test_pipeline_shapes_rule_applies_to_offline_packs_from_a_per_micro_batch_loader() -> None:
    pp = ["model.pipeline_model_parallel_size=2", "dist.world_size=2"]
    single = OFFLINE + pp + ["dataset.dataloader_type=single"]
    assert "PACK-PP-VARIABLE-SHAPES" in {f.rule_id for f in validate_config(None, single).violations}
    assert "PACK-PP-VARIABLE-SHAPES" not in ids(validate_config(None, single + ["model.variable_seq_lengths=true"]))
    assert "PACK-PP-VARIABLE-SHAPES" not in ids(validate_config(None, single + FIXED))
    # the GPT-SFT default, the batch loader, collates a step to one width and passes it to the schedule
    assert "PACK-PP-VARIABLE-SHAPES" not in ids(validate_config(None, OFFLINE + pp))
    assert "PACK-PP-VARIABLE-SHAPES" not in ids(validate_config(None, IN_BATCH + pp))


def test_capacity_warning_only_when_packed() -> None:
    cap = MOE + ["model.moe_expert_capacity_factor=1.25"]
    assert "MOE-CAPACITY-PACKING" not in ids(validate_config(None, cap))
    report = validate_config(None, OFFLINE + cap)
    finding = next(f for f in report.warnings if f.rule_id == "MOE-CAPACITY-PACKING")
    assert "1.25" in finding.message


# --- plan: dispatch padding overhead --------------------------------------------------------------


def test_dispatch_overhead_by_hand() -> None:
    import numpy as np

    from seqpack.verbs.planning import dispatch_overhead

    real, aligned = np.array([100, 60, 30]), np.array([104, 64, 32])
    a2a = dispatch_overhead(real, aligned, 128, dispatch_width(dispatcher="alltoall", ep=3))
    assert a2a["mean_dispatched_per_rank"] == pytest.approx(200 / 3)
    assert a2a["dispatch_padding_share"] == pytest.approx(1 - 190 / 200)
    assert a2a["dispatcher_padding_share"] == 0.0
    fixed = dispatch_overhead(real, aligned, 128, dispatch_width(dispatcher="alltoall", ep=3, fixed_width=128))
    assert fixed["dispatch_padding_share"] == pytest.approx(1 - 190 / 384)
    # eager HybridEP: 104 -> 128, 64 -> 64, 32 -> 64 tokens, then every rank of the one EP group sends the max
    group = dispatch_overhead(real, aligned, 128, dispatch_width(dispatcher="hybridep", ep=3))
    assert group["max_dispatched_per_rank"] == 128 and group["mean_dispatched_per_rank"] == 128
    assert group["dispatcher_padding_share"] == pytest.approx((384 - 200) / 384)
    alone = dispatch_overhead(real, aligned, 128, dispatch_width(dispatcher="hybridep", ep=1))
    assert alone["mean_dispatched_per_rank"] == pytest.approx(256 / 3)
    # CP=2 halves what each rank sends: 52, 32, 16 tokens -> 64 each under the chunk
    cp2 = dispatch_overhead(real, aligned, 128, dispatch_width(dispatcher="hybridep", ep=1, cp=2))
    assert cp2["mean_dispatched_per_rank"] == 64 and cp2["tokens_divisor"] == 2


def test_plan_rows_carry_the_dispatch_overhead() -> None:
    from seqpack.verbs import PlanOptions, plan

    lengths = [900, 300, 1500, 700, 2000, 120, 3000, 800]
    dense = plan(PlanOptions(lengths=lengths, candidates=(2048, 4096), token_slots=8192))
    assert all(r.dispatch is None for r in dense.rows) and dense.moe is None
    moe = plan(PlanOptions(lengths=lengths, candidates=(2048, 4096), token_slots=8192, moe_dispatcher="hybridep",
                           ep=2, tp=2, sp=True, cp=2))
    row = moe.row(4096)
    assert row.dispatch["width_rule"] == "uneven_padded" and row.dispatch["tokens_divisor"] == 4
    assert 0 < row.dispatch["dispatcher_padding_share"] <= row.dispatch["dispatch_padding_share"] < 1
    fixed = plan(PlanOptions(lengths=lengths, candidates=(4096,), token_slots=8192, moe_dispatcher="alltoall",
                             ep=2, pad_to_max_length=True))
    d = fixed.rows[0].dispatch
    assert d["width_rule"] == "fixed" and d["max_dispatched_per_rank"] == 4096
    assert d["dispatch_padding_share"] == pytest.approx(fixed.rows[0].padding_waste_share)
    with pytest.raises(Exception, match="moe_dispatcher"):
        plan(PlanOptions(lengths=lengths, moe_dispatcher="ring"))


def test_a_shipped_bridge_recipe_trains_mtp_on_alignment_padded_packs() -> None:
    from pathlib import Path

    from seqpack.config import load_config

    # Bridge's own dump of the megatron-bridge 0.6.2 recipe; a dump carries no world size: the recipe's 192 GPUs
    recipe = Path(__file__).parent / "upstream" / "recipes" / "glm52_peft_192gpu_gb200_bf16_config.yaml"
    report = validate_config(load_config(recipe, overrides=["dist.world_size=192"]))
    assert report.ok  # Bridge accepts it ...
    assert "MTP-PACKED-ALIGNMENT-ROLL" in {f.rule_id for f in report.warnings}  # ... and its MTP roll is misplaced
