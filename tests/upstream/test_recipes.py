"""Megatron-Bridge's own recipes, converted to seqpack configs, against the validator.

Every committed recipe validates, except the ones listed in REJECTED; each of those has a test
below that reproduces the failure with the code path that fails upstream (Megatron-Core's
micro-batch arithmetic, Bridge's offline fill step loaded from the snapshot, Transformer Engine's
THD partition rule). The re-derivation from the snapshot runs when the snapshot is present.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import pytest
import yaml
from upstream_snapshots import load_bridge_packing_algorithms, mirror, skip_reason

from reference_impl.config import load_config, validate_config

HERE = Path(__file__).resolve().parent
RECIPES = HERE / "recipes"
INDEX = json.loads((RECIPES / "index.json").read_text(encoding="utf-8"))
FILES = sorted(p.name for p in RECIPES.glob("*.yaml"))
BRIDGE = "NVIDIA-NeMo/Megatron-Bridge"
COMMIT = INDEX["upstream"].split("@", 1)[1]

#: Recipes Megatron-Bridge ships that fail upstream as configured, with the errors seqpack reports.
REJECTED: dict[str, set[str]] = {
    # GBS 36 (or 32) with MBS 4 and DP 4 (or 16): Megatron-Core's micro-batch calculator asserts
    "qwen35_vl_122b_a10b_sft_48gpu_h100_bf16_config": {"BATCH-GBS-DIVISIBLE"},
    "qwen35_vl_397b_a17b_sft_128gpu_h100_bf16_config": {"BATCH-GBS-DIVISIBLE"},
    "qwen35_vl_122b_a10b_peft_8gpu_h100_bf16_config": {"BATCH-GBS-DIVISIBLE"},
    "qwen35_vl_397b_a17b_peft_32gpu_h100_bf16_config": {"BATCH-GBS-DIVISIBLE"},
    # inherits packed_sequence_size=2048 and pad_seq_to_mult=1 from the 2K recipe, then sets seq 32768 and CP2
    "nemotron_3_super_sft_16gpu_h100_bf16_32k_config": {"PACK-OFFLINE-SEQ-LE-PACK", "PACK-OFFLINE-PAD-MULT-TOPOLOGY"},
}


def _config(name: str) -> dict:
    return yaml.safe_load((RECIPES / name).read_text(encoding="utf-8"))


def test_index_lists_every_file_with_its_source():
    assert sorted(e["file"] for e in INDEX["recipes"]) == FILES
    assert INDEX["committed"] == len(FILES) and INDEX["converted"] <= INDEX["recipes_found"]
    assert re.fullmatch(r"[0-9a-f]{40}", COMMIT)
    for name in FILES:
        head = (RECIPES / name).read_text(encoding="utf-8").splitlines()[:2]
        assert head[0] == f"# Megatron-Bridge recipe {name[:-5]}"
        assert head[1].startswith(f"# source: {BRIDGE}@{COMMIT} src/megatron/bridge/recipes/"), name


def test_every_packing_recipe_is_committed_and_a_sample_of_the_rest():
    paths = [e["path"] for e in INDEX["recipes"]]
    assert sum(p != "none" for p in paths) >= 100  # all packed recipes (offline, in-batch, deferred in-batch)
    assert 20 <= paths.count("none") < len(paths)


@pytest.mark.parametrize("name", FILES)
def test_recipe_validates_or_its_rejection_is_reproduced(name):
    report = validate_config(_config(name))
    errors = {f.rule_id for f in report.violations}
    assert errors == REJECTED.get(name[:-5], set()), [f.one_line() for f in report.violations]


def test_rejected_recipes_exist():
    assert {f"{n}.yaml" for n in REJECTED} <= set(FILES)


def test_the_sp_only_recipe_validates_with_a_warning():
    # Nemotron-3 Super SFT: TP8 + SP, CP1, pad_seq_to_mult=1 (issue 17's first re-grade)
    report = validate_config(_config("nemotron_3_super_sft_16gpu_h100_bf16_config.yaml"))
    assert report.ok and "PACK-OFFLINE-PAD-MULT-RECOMMENDED" in report.rule_ids


# --- reproductions of each rejection ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(n for n, ids in REJECTED.items() if "BATCH-GBS-DIVISIBLE" in ids))
def test_gbs_rejection_is_megatron_cores_microbatch_assertion(name):
    calculator = pytest.importorskip("megatron.core.num_microbatches_calculator")
    cfg = load_config(_config(f"{name}.yaml"))
    m = cfg.model
    dp = cfg.dist.world_size // (m.tensor_model_parallel_size * m.pipeline_model_parallel_size * m.context_parallel_size)
    gbs, mbs = cfg.train.global_batch_size, cfg.train.micro_batch_size
    with pytest.raises(AssertionError, match="not divisible"):
        calculator.ConstantNumMicroBatchesCalculator(gbs, mbs, dp, False, 0)
    # negative control: the nearest valid GBS passes the same code
    calculator.ConstantNumMicroBatchesCalculator(math.ceil(gbs / (mbs * dp)) * mbs * dp, mbs, dp, False, 0)


def _bridge_algorithms():
    """Bridge's offline packing module, loaded from the snapshot (skips when it is not here)."""
    if mirror(BRIDGE) is None:
        pytest.skip(skip_reason(BRIDGE))
    return load_bridge_packing_algorithms()


def test_32k_recipe_long_samples_crash_bridges_fill_step():
    cfg = load_config(_config("nemotron_3_super_sft_16gpu_h100_bf16_32k_config.yaml"))
    pack, budget = cfg.dataset.offline_packing_specs.packed_sequence_size, cfg.seq_length
    assert (pack, budget) == (2048, 32768)
    algorithms = _bridge_algorithms()
    # two samples within the pack, one long-context sample within the 32K tokenizer budget
    dataset = [{"input_ids": list(range(n + 1)), "loss_mask": [True] * (n + 1)} for n in (900, 1000, 5000)]
    sequences, histogram = algorithms.create_hist(dataset, budget)
    assignments, _ = algorithms.create_packing_strategy(histogram, pack, "first_fit_decreasing")
    with pytest.raises(KeyError):
        algorithms.fill_packing_strategy(assignments, sequences, pack, 0)
    # negative control: with the tokenizer budget capped at the pack size the long sample is dropped and fill works
    sequences, histogram = algorithms.create_hist(dataset, pack)
    assignments, _ = algorithms.create_packing_strategy(histogram, pack, "first_fit_decreasing")
    assert len(algorithms.fill_packing_strategy(assignments, sequences, pack, 0)) == 1


def test_32k_recipe_without_cp_alignment_fails_the_te_partition_rule():
    from reference_impl.errors import AlignmentError
    from reference_impl.packing.thd_compat import collate_stored_rows
    from reference_impl.training.context_parallel import thd_partition_indices

    cfg = load_config(_config("nemotron_3_super_sft_16gpu_h100_bf16_32k_config.yaml"))
    specs, cp = cfg.dataset.offline_packing_specs, cfg.model.context_parallel_size
    # a stored packed row as Bridge writes it with pad_seq_to_mult=1: segments of 7 and 10 runtime tokens
    row = {"input_ids": list(range(8)) + list(range(11)), "loss_mask": [1] * 19, "seq_start_id": [0, 8]}
    batch = collate_stored_rows([row], pack_size=specs.packed_sequence_size, pad_seq_to_mult=specs.pad_seq_to_mult,
                                pad_to_max_length=True, eos_id=0)
    physical = batch.get("cu_seqlens_q_padded", batch["cu_seqlens_q"])
    with pytest.raises(AlignmentError, match="not a multiple of 2\\*CP"):
        thd_partition_indices(physical, cp, 0)
    # negative control: the same samples pre-padded to 2*CP=4 partition fine
    aligned = {"input_ids": list(range(8)) + [0] + list(range(11)) + [0] * 2, "loss_mask": [1] * 22,
               "seq_start_id": [0, 9]}
    batch = collate_stored_rows([aligned], pack_size=specs.packed_sequence_size, pad_seq_to_mult=2 * cp,
                                pad_to_max_length=True, eos_id=0)
    assert thd_partition_indices(batch["cu_seqlens_q_padded"], cp, 0).numel() == specs.packed_sequence_size // cp


# --- re-derivation from the snapshot ----------------------------------------------------------------


@pytest.mark.slow
def test_committed_recipes_equal_a_fresh_conversion_of_the_snapshot():
    sys.path.insert(0, str(HERE))
    import convert_recipes

    bridge, mcore = convert_recipes.snapshot_dirs()
    if bridge is None:
        pytest.skip(skip_reason(BRIDGE) + f" at {COMMIT[:12]}")
    stale = convert_recipes.write(convert_recipes.build(bridge, mcore), check=True)
    assert stale == [], f"run: python tests/upstream/convert_recipes.py ({stale[:5]})"


def test_compatibility_page_reports_this_table():
    from collections import Counter

    text = (HERE.parents[1] / "docs" / "compatibility.md").read_text(encoding="utf-8")
    paths = Counter(e["path"] for e in INDEX["recipes"])
    valid = sum(validate_config(_config(n)).ok for n in FILES)
    rows = {
        "found in the snapshot": INDEX["recipes_found"],
        "converted": INDEX["converted"],
        "committed (`tests/upstream/recipes/`)": INDEX["committed"],
        "committed with offline packing": paths["offline"],
        "committed with collate-time in-batch packing": paths["in_batch"],
        "committed with in-batch packing deferred to the step": paths["in_batch_deferred"],
        "committed without packing (sample)": paths["none"],
        "validate (possibly with warnings)": valid,
        "rejected, with the upstream failure reproduced by a test": len(REJECTED),
    }
    for label, count in rows.items():
        assert f"| {label} | {count} |" in text, label
    assert f"| {INDEX['recipes_found'] - INDEX['converted']} |" in text  # the not-convertible row
    for name in REJECTED:
        assert f"`{name}`" in text, name
