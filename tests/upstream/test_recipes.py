"""Megatron-Bridge 0.6.2's recipe functions, as Bridge's own config dumps, against ``seqpack validate``.

``recipes/`` holds the config dump (``ConfigContainer.to_yaml``) of every recipe function of the
megatron-bridge 0.6.2 wheel that turns packing on, written in the upstream lane by
``scripts/regen_recipes.py``; ``index.json`` lists every recipe found with Bridge's verdict
(``runtime_config_update`` raises or not). Agreement per packing recipe: Bridge raises <=> seqpack,
reading the dump as it is (plus the world size the lane used), reports an error. The exceptions are
listed below, each with its reason: seqpack errors that Bridge's update accepts name the later
upstream failure, and the tests at the end reproduce it with upstream code where it runs on CPU.
"""

from __future__ import annotations

import json
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pytest

from seqpack.config import load_config
from seqpack.verbs.validation import ValidateOptions, validate
from seqpack.core.versions import BRIDGE_PACKAGE, BRIDGE_RELEASE, MCORE_PACKAGE

HERE = Path(__file__).resolve().parent
RECIPES = HERE / "recipes"
INDEX = json.loads((RECIPES / "index.json").read_text(encoding="utf-8"))
ROWS = {r["recipe"]: r for r in INDEX["recipes"]}
FILES = sorted(p.stem for p in RECIPES.glob("*.yaml"))
FUNCTION = "recipes.runtime_config_update"

#: Packing recipes whose dump seqpack rejects although Bridge's runtime_config_update accepts it:
#: recipe -> (the errors seqpack reports, the documented difference, the later upstream failure).
SEQPACK_ONLY: dict[str, tuple[set[str], str]] = {
    # inherits packed_sequence_size=2048 and pad_seq_to_mult=1 from the 2K recipe, then sets seq 32768 and CP2
    "nemotron_3_super_sft_16gpu_h100_bf16_32k_config": (
        {"PACK-OFFLINE-SEQ-LE-PACK", "PACK-OFFLINE-PAD-MULT-TOPOLOGY"}, "recipes-later-upstream-failure"),
}
#: Packing recipes Bridge rejects for a setting outside packing, which seqpack does not check: recipe -> a
#: fragment of Bridge's message (a new such recipe fails the agreement test until it is reviewed and listed).
BRIDGE_ONLY: dict[str, str] = {
    # megatron-bridge 0.6.2's DeepSeek-V4 recipe recomputes 'mhc', a module megatron-core 0.19.2 does not know
    "deepseek_v4_flash_sft_openmath_thinking_packed_config": "Invalid choices for recompute_modules: {'mhc'}",
}


@lru_cache(maxsize=None)
def seqpack_errors(name: str) -> frozenset[str]:
    """The error rules ``seqpack validate`` reports on a committed dump, with the world size the lane used."""
    report = validate(ValidateOptions(path=str(RECIPES / f"{name}.yaml"),
                                      overrides=[f"dist.world_size={ROWS[name]['world_size']}"]))
    return frozenset(f.rule_id for f in report.violations)


def expected_difference(name: str) -> str | None:
    """The documented difference a committed recipe shows, or None when the two sides must agree."""
    if name in SEQPACK_ONLY:
        return SEQPACK_ONLY[name][1]
    if name in BRIDGE_ONLY:
        return "recipes-bridge-rejects-outside-packing"
    return None


def test_index_names_the_release_and_lists_every_committed_dump():
    assert INDEX["package"] == BRIDGE_PACKAGE and INDEX["megatron_core"] == MCORE_PACKAGE
    assert sorted(r["file"][:-5] for r in INDEX["recipes"] if r.get("file")) == FILES
    assert INDEX["committed"] == len(FILES) and INDEX["packing"] == sum(r["path"] != "none" for r in INDEX["recipes"])
    assert INDEX["recipes_found"] == len(INDEX["recipes"]) >= 290
    assert INDEX["standin_problems"] == {}
    for row in INDEX["recipes"]:
        assert row["function"].startswith("megatron.bridge.recipes.") and row["function"].endswith("." + row["recipe"])
        assert row["source"].startswith("megatron/bridge/recipes/"), row
        if row["path"] != "none":  # every packing recipe that built is committed
            assert row.get("file") == f"{row['recipe']}.yaml", row["recipe"]


@pytest.mark.parametrize("name", FILES)
def test_each_file_is_headed_with_its_recipe_and_the_package_version(name):
    head = (RECIPES / f"{name}.yaml").read_text(encoding="utf-8").splitlines()[:2]
    assert head[0] == f"# Megatron-Bridge recipe {name} (megatron-bridge=={BRIDGE_RELEASE})"
    assert head[1] == f"# function: {ROWS[name]['function']} ({ROWS[name]['source']})"


@pytest.mark.slow
def test_the_packing_recipes_cover_every_path_the_release_packs():
    paths = Counter(r["path"] for r in INDEX["recipes"])
    assert paths["offline"] >= 100 and paths["in_batch"] >= 8 and paths["in_batch_deferred"] >= 4
    assert paths["energon"] == 0  # no recipe of megatron-bridge 0.6.2 turns Energon native packing on
    for name in FILES:  # the committed dump turns on the path Bridge's built object had
        cfg = load_config(RECIPES / f"{name}.yaml")
        path = ROWS[name]["path"]
        assert cfg.active_paths() == [path.removesuffix("_deferred")], name
        assert cfg.dataset.defer_in_batch_packing_to_step == (path == "in_batch_deferred"), name


@pytest.mark.parametrize("name", FILES)
def test_bridge_raises_exactly_when_seqpack_reports_an_error(name):
    bridge = ROWS[name]["bridge"]
    errors = seqpack_errors(name)
    if name in SEQPACK_ONLY:
        assert not bridge["raises"] and errors == SEQPACK_ONLY[name][0]
    elif name in BRIDGE_ONLY:
        assert bridge["raises"] and BRIDGE_ONLY[name] in bridge["message"] and not errors
    else:
        assert bridge["raises"] == bool(errors), (bridge, sorted(errors))


def test_the_listed_exceptions_are_committed_packing_recipes():
    assert set(SEQPACK_ONLY) | set(BRIDGE_ONLY) <= set(FILES)


def test_a_recipe_rejected_by_both_sides_is_rejected_for_the_same_setting():
    # Ministral3's SFT/PEFT recipes turn in-batch packing on at MBS 1 in megatron-bridge 0.6.2
    both = [n for n in FILES if ROWS[n]["bridge"]["raises"] and n not in BRIDGE_ONLY]
    assert both and all(n.startswith("ministral3_") for n in both)
    for name in both:
        assert "micro_batch_size should be greater than 1" in ROWS[name]["bridge"]["message"]
        assert seqpack_errors(name) == {"PACK-IN-BATCH-MBS"}


def test_negative_control_a_broken_dump_is_reported_by_the_rule_of_the_broken_setting():
    name = next(n for n in FILES if ROWS[n]["path"] == "offline" and not ROWS[n]["bridge"]["raises"])
    report = validate(ValidateOptions(path=str(RECIPES / f"{name}.yaml"),
                                      overrides=[f"dist.world_size={ROWS[name]['world_size']}",
                                                 "train.micro_batch_size=2"]))
    assert "PACK-OFFLINE-MBS1" in {f.rule_id for f in report.violations}


# --- the lane: the committed files are what the release writes now ------------------------------------


@pytest.fixture(scope="module")
def lane_files(upstream):
    from tests.upstream.recipe_dumps import render, run

    return render(run(upstream))


@pytest.mark.slow
def test_committed_recipes_equal_what_the_lane_writes_now(lane_files):
    from tests.upstream.recipe_dumps import write

    stale = write(lane_files, check=True)
    assert stale == [], f"run: .venv/bin/python scripts/regen_recipes.py ({stale[:5]})"


@pytest.mark.slow
def test_every_packing_recipe_agrees_or_differs_as_documented(lane_files, compat):
    index = json.loads(lane_files["index.json"])
    for row in index["recipes"]:
        if row["path"] == "none" or "file" not in row:
            continue
        name = row["recipe"]
        agree = row["bridge"]["raises"] == bool(seqpack_errors(name))
        compat.check(FUNCTION, agree, difference=expected_difference(name),
                     detail=f"{name}: Bridge {row['bridge']}, seqpack {sorted(seqpack_errors(name))}")


# --- the later upstream failures behind the seqpack-only errors ------------------------------------------


@pytest.mark.slow
def test_32k_recipe_long_samples_crash_bridges_offline_fill_step(upstream):
    cfg = load_config(RECIPES / "nemotron_3_super_sft_16gpu_h100_bf16_32k_config.yaml")
    pack, budget = cfg.dataset.offline_packing_specs.packed_sequence_size, cfg.seq_length
    assert (pack, budget) == (2048, 32768)
    assert cfg.dataset.offline_packing_specs.max_single_sequence_length is None  # so Bridge tokenizes up to 32768
    samples = [901, 1001, 5001]  # two samples within the pack, one long-context sample within the 32K budget
    crash = upstream.call("recipes.fill_step", lengths=samples, max_seq_length=budget, packed_sequence_size=pack)
    assert crash["raises"] and crash["where"] == "fill_packing_strategy", crash
    # negative control: with the per-sample cap at the pack size (max_single_sequence_length) the long sample is
    # left out of the histogram and the same steps pack
    fine = upstream.call("recipes.fill_step", lengths=samples, max_seq_length=pack, packed_sequence_size=pack)
    assert fine == {"raises": False, "packs": 1}


@pytest.mark.slow
def test_32k_recipe_without_cp_alignment_fails_the_te_partition_rule():
    # Transformer Engine's thd_get_partitioned_indices is a CUDA kernel (not runnable in the CPU lane); seqpack's
    # reference partition applies its divisibility rule
    from seqpack.core.errors import AlignmentError
    from seqpack.packing.thd_collate import collate_stored_rows
    from seqpack.training.context_parallel import thd_partition_indices

    cfg = load_config(RECIPES / "nemotron_3_super_sft_16gpu_h100_bf16_32k_config.yaml")
    specs, cp = cfg.dataset.offline_packing_specs, cfg.model.context_parallel_size
    assert (specs.pad_seq_to_mult, cp) == (1, 2)
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


@pytest.mark.slow
def test_compatibility_page_reports_this_table():
    text = (HERE.parents[1] / "docs" / "compatibility.md").read_text(encoding="utf-8")
    paths = Counter(r["path"] for r in INDEX["recipes"])
    rows = {
        f"recipe functions in {BRIDGE_PACKAGE}": INDEX["recipes_found"],
        "built offline": INDEX["built"],
        "turn packing on (committed as Bridge's dump)": INDEX["packing"],
        "with offline packing": paths["offline"],
        "with collate-time in-batch packing": paths["in_batch"],
        "with in-batch packing deferred to the step": paths["in_batch_deferred"],
        "with Energon native packing": paths["energon"],
        "agree (Bridge raises exactly when seqpack errors)":
            INDEX["packing"] - len(SEQPACK_ONLY) - len(BRIDGE_ONLY),
        "seqpack errors, a later upstream failure reproduced": len(SEQPACK_ONLY),
        "Bridge raises for a setting outside packing": len(BRIDGE_ONLY),
    }
    for label, count in rows.items():
        assert f"| {label} | {count} |" in text, label
    for name in (*SEQPACK_ONLY, *BRIDGE_ONLY):
        assert f"`{name}`" in text, name
