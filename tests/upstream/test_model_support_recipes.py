"""The model-support table against Megatron-Bridge's own recipes (converted in ``recipes/``).

Derives, per model family, which packing paths the converted recipes turn on and with what
pad_seq_to_mult and CP, then checks the static table in ``reference_impl.config.model_support``:

* every (family, path) a recipe turns on is recorded ``supported`` or ``caveat`` (never ``unknown``,
  never ``opt_out`` except the conflicts acknowledged below, each with its reason);
* every recipe a ``supported`` note names exists, belongs to that family, turns the path on and pins
  the pad_seq_to_mult and CP the note states; the "in N recipes" count matches; the evidence names
  the recipe's module.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from convert_recipes import packing_path

from reference_impl.config.model_support import FAMILIES, check_model_support, find_family

RECIPES = Path(__file__).resolve().parent / "recipes"
INDEX = json.loads((RECIPES / "index.json").read_text(encoding="utf-8"))

#: Recipe-name prefix -> model-support family id (ids absent from the table are families whose recipes
#: pack nothing). The longest matching prefix wins; every committed recipe must match one.
FAMILY_BY_PREFIX: dict[str, str] = {
    "deepseek_v2_": "deepseek_v2", "deepseek_v4_": "deepseek_v4", "vanilla_gpt_": "vanilla_gpt",
    "kimi_k2_": "kimi_k2", "kimi_k25_vl_": "kimi_k25_vl", "qwen2_audio_": "qwen2_audio",
    "exaone4_": "exaone4", "exaone45_": "exaone45", "exaone_moe_": "exaone_moe",
    "gemma2_": "gemma3", "gemma3_": "gemma3", "gemma3_vl_": "gemma3_vl", "gemma4_vl_": "gemma4_vl",
    "glm45_": "glm45", "glm52_": "glm5", "glm_45v_": "glm45v", "gpt_oss_": "gpt_oss",
    "llama3_": "llama3", "llama31_": "llama3", "llama32_": "llama3",
    "minimax_m3_": "minimax_m3", "ministral3_": "ministral3", "moonlight_16b_": "moonlight", "olmoe_": "olmoe",
    "nemotron_omni_": "nemotron_omni", "nemotron_nano_v2_vl_": "nemotron_nano_v2_vl",
    "nemotron_nano_9b_v2_": "nemotron_nano_v2", "nemotron_nano_12b_v2_": "nemotron_nano_v2",
    "nemotron_3_nano_": "nemotron3_nano", "nemotron_3_5_lightning_": "nemotron35_lightning",
    "nemotron_3_super_": "nemotron3_super", "nemotron_3_ultra_": "nemotron3_ultra", "nemotronh_": "nemotronh",
    "qwen2_": "qwen2", "qwen25_": "qwen25", "qwen25_vl_": "qwen_vl", "qwen3_": "qwen3",
    "qwen3_30b_a3b_": "qwen3_moe", "qwen3_235b_a22b_": "qwen3_moe", "qwen3_next_": "qwen3_next",
    "qwen3_omni_": "qwen3_omni", "qwen3_vl_": "qwen3_vl", "qwen35_vl_": "qwen35_vl",
}

#: Converter path label -> model-support packing path.
PATH_OF = {"offline": "offline", "in_batch": "in_batch", "in_batch_deferred": "in_batch", "energon": "energon",
           "global_batch": "global_batch"}

#: (family, path) pairs a recipe turns on although the table records opt_out, and why that entry stays.
ACKNOWLEDGED_CONFLICTS: dict[tuple[str, str], str] = {}

#: Supported entries recorded before this check existed; their notes name no recipe.
LEGACY_NOTES = {("llama3", "offline"), ("gemma3", "offline"), ("gpt_oss", "offline"), ("qwen_vl", "in_batch"),
                ("qwen_vl", "energon"), ("qwen3_vl", "energon")}

CLAIM = re.compile(r"(\w+_config) pins pad_seq_to_mult=(\d+) \(CP(\d+)\)")
MTP = re.compile(r"\bwith MTP=(\d+)")
COUNT = re.compile(r"\bin (\d+) recipes?\b")


@dataclass(frozen=True)
class RecipeUse:
    """One converted recipe: its family, the packing path it turns on, and the alignment it pins."""

    name: str
    source: str
    family: str
    path: str | None
    cp: int
    pad_seq_to_mult: int | None
    mtp: int


def family_of(recipe: str) -> str:
    """The model-support family of a recipe name (longest prefix in FAMILY_BY_PREFIX); KeyError if none."""
    hits = [p for p in FAMILY_BY_PREFIX if recipe.startswith(p)]
    if not hits:
        raise KeyError(f"recipe {recipe} matches no family prefix")
    return FAMILY_BY_PREFIX[max(hits, key=len)]


def recipe_use(name: str, config: dict[str, Any], source: str = "") -> RecipeUse:
    """The packing use of one converted recipe config (``path`` None when it packs nothing)."""
    model, data = config.get("model", {}), config.get("dataset", {})
    path = PATH_OF.get(packing_path(config))
    mult = (data.get("offline_packing_specs") or {}).get("pad_seq_to_mult") if path == "offline" else None
    cp, mtp = int(model.get("context_parallel_size") or 1), int(model.get("mtp_num_layers") or 0)
    return RecipeUse(name, source, family_of(name), path, cp, mult, mtp)


def committed_uses() -> list[RecipeUse]:
    """Every committed recipe's packing use."""
    out = []
    for entry in INDEX["recipes"]:
        config = yaml.safe_load((RECIPES / entry["file"]).read_text(encoding="utf-8"))
        out.append(recipe_use(entry["file"][: -len(".yaml")], config, entry["source"]))
    return out


def uses_by_family(uses: list[RecipeUse]) -> dict[tuple[str, str], list[RecipeUse]]:
    """(family, path) -> the recipes that turn the path on."""
    out: dict[tuple[str, str], list[RecipeUse]] = defaultdict(list)
    for use in uses:
        if use.path:
            out[(use.family, use.path)].append(use)
    return dict(out)


def unrecorded(uses: list[RecipeUse]) -> list[str]:
    """One line per (family, path) that recipes turn on but the table does not record as supported or caveat."""
    problems = []
    for (family, path), group in sorted(uses_by_family(uses).items()):
        (status,) = check_model_support(family, path)
        if status.status in ("supported", "caveat"):
            continue
        if status.status == "opt_out" and (family, path) in ACKNOWLEDGED_CONFLICTS:
            continue
        problems.append(f"{family}/{path} is {status.status} but {group[0].name} turns it on")
    return problems


USES = committed_uses()


def test_every_recipe_maps_to_a_family_consistent_with_the_converter():
    for entry in INDEX["recipes"]:
        recorded = yaml.safe_load((RECIPES / entry["file"]).read_text(encoding="utf-8"))["model"].get("family")
        if recorded is not None:  # the converter's module mapping, where it has one
            assert family_of(entry["file"][:-5]) == recorded, entry["file"]


def test_the_derivation_sees_the_packing_recipes():
    paths = {e["file"][:-5]: PATH_OF.get(e["path"]) for e in INDEX["recipes"]}
    assert {u.name: u.path for u in USES} == paths
    found = uses_by_family(USES)
    assert ("qwen3", "offline") in found and ("qwen_vl", "in_batch") in found and ("llama3", "offline") in found
    assert len(found[("qwen3", "offline")]) == 14


def test_every_path_a_recipe_turns_on_is_recorded():
    assert unrecorded(USES) == []


def test_acknowledged_conflicts_are_still_conflicts():
    found = uses_by_family(USES)
    for family, path in ACKNOWLEDGED_CONFLICTS:
        assert (family, path) in found
        assert check_model_support(family, path)[0].status == "opt_out"


def test_negative_control_a_packing_recipe_of_an_unrecorded_family_is_reported():
    synthetic = {"model": {"context_parallel_size": 1}, "dataset": {"enable_in_batch_packing": True}}
    use = recipe_use("deepseek_v2_lite_sft_8gpu_h100_bf16_config", synthetic)  # a family with no table entry
    assert (use.family, use.path) == ("deepseek_v2", "in_batch")
    assert check_model_support("deepseek_v2", "in_batch")[0].status == "unknown"
    assert unrecorded([*USES, use]) == [f"deepseek_v2/in_batch is unknown but {use.name} turns it on"]
    # a recorded family, path unknown for it (Qwen3 records offline only) and an opt-out without an acknowledgement
    energon = recipe_use("qwen3_8b_sft_energon_config", {"dataset": {"kind": "energon", "packing_buffer_size": 8}})
    glm = recipe_use("glm45_355b_sft_config", {"dataset": {"enable_offline_packing": True}})
    gbp = recipe_use("olmoe_7b_sft_gbp_config", {"dataset": {"enable_global_batch_packing": True}})
    assert unrecorded([energon, glm, gbp]) == [
        "glm45/offline is opt_out but glm45_355b_sft_config turns it on",
        "olmoe/global_batch is unknown but olmoe_7b_sft_gbp_config turns it on",
        "qwen3/energon is unknown but qwen3_8b_sft_energon_config turns it on",
    ]


def _supported_notes() -> list[tuple[str, str, str, str]]:
    return [(e.family, p, e.notes[p], e.evidence) for e in FAMILIES for p, s in e.paths.items() if s == "supported"]


@pytest.mark.parametrize("family,path,note,evidence", _supported_notes(), ids=lambda v: str(v)[:24])
def test_supported_notes_name_recipes_that_turn_the_path_on(family, path, note, evidence):
    claims = CLAIM.findall(note)
    if (family, path) in LEGACY_NOTES:
        assert not claims
        return
    assert claims, f"{family}/{path}: the note names no recipe"
    by_name = {u.name: u for u in USES}
    for recipe, mult, cp in claims:
        use = by_name.get(recipe)
        assert use is not None, f"{recipe} is not a committed recipe"
        assert (use.family, use.path) == (family, path), recipe
        assert (use.pad_seq_to_mult, use.cp) == (int(mult), int(cp)), recipe
        module = use.source.split(":")[0].removeprefix("src/megatron/bridge/")
        assert module in evidence, (recipe, module)
    group = uses_by_family(USES)[(family, path)]
    (count,) = COUNT.findall(note)
    assert int(count) == len(group)
    assert {str(u.mtp) for u in group if u.mtp} == set(MTP.findall(note)), "MTP stated iff the recipes use it"
    assert all(u.mtp for u in group) or not MTP.findall(note)


def test_family_ids_and_aliases_do_not_collide():
    owner: dict[str, set[str]] = defaultdict(set)
    for e in FAMILIES:
        for key in (e.family, *e.aliases):
            owner[key.lower().replace("-", "_").replace(".", "")].add(e.family)
    assert {k: v for k, v in owner.items() if len(v) > 1} == {}
    for alias, family in [("Qwen3", "qwen3"), ("qwen-3", "qwen3"), ("Qwen2.5", "qwen25"), ("llama3.1", "llama3"),
                          ("Nemotron-H", "nemotronh"), ("qwen3-next", "qwen3_next"), ("GLM-5.2", "glm5")]:
        assert find_family(alias).family == family, alias


@pytest.mark.parametrize("use", [u for u in USES if u.path], ids=lambda u: u.name)
def test_naming_the_family_in_a_packing_recipe_warns_only_for_opt_out_or_caveat(use):
    from reference_impl.config import validate_config

    config = yaml.safe_load((RECIPES / f"{use.name}.yaml").read_text(encoding="utf-8"))
    named = dict(config, model={**config["model"], "family": use.family})  # the converter names only some
    before, after = validate_config(config), validate_config(named)
    status = check_model_support(use.family, use.path)[0].status
    expected = {"opt_out": {"MODEL-FAMILY-OPT-OUT"}, "caveat": {"MODEL-FAMILY-CAVEAT"}}.get(status, set())
    assert {i for i in after.rule_ids if i.startswith("MODEL-FAMILY-")} == expected
    # naming the family adds no error: the same errors as the committed recipe
    assert {f.rule_id for f in after.violations} == {f.rule_id for f in before.violations}


def test_the_generated_page_names_the_recipe_commit_checked_here():
    from reference_impl.docgen import model_support_document

    assert INDEX["upstream"].split("@", 1)[1][:7] in model_support_document()
