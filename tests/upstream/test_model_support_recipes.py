"""The model-support table against megatron-bridge 0.6.2's own recipes (their config dumps in ``recipes/``).

Derives, per model family, which packing paths the 0.6.2 recipe functions turn on (as Bridge built them,
``index.json``) and with what pad_seq_to_mult, CP and MTP (read from Bridge's dump by seqpack's loader),
then checks the static table in ``seqpack.config.model_support``:

* every (family, path) a recipe turns on is recorded ``supported`` or ``caveat`` (never ``unknown``,
  never ``opt_out`` except the conflicts acknowledged below, each with its reason);
* every recipe a note names exists, belongs to that family, turns the path on and pins the
  pad_seq_to_mult (offline) or MBS (in-batch) and CP the note states; a stated recipe count matches;
  the evidence names the recipe's module;
* every record names the version it holds for: megatron-bridge 0.6.2, or a Bridge main commit for a
  claim whose recipe exists only there (said in the note; the lane cannot check it).
"""

from __future__ import annotations

import functools
import json
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from seqpack.config import load_config
from seqpack.config.model_support import FAMILIES, MAIN, MAIN_ONLY, RELEASE, check_model_support, find_family

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

#: index.json path label -> model-support packing path.
PATH_OF = {"offline": "offline", "in_batch": "in_batch", "in_batch_deferred": "in_batch", "energon": "energon",
           "global_batch": "global_batch"}

#: (family, path) pairs a recipe turns on although the table records opt_out, and why that entry stays.
ACKNOWLEDGED_CONFLICTS: dict[tuple[str, str], str] = {}

CLAIM = re.compile(r"(\w+_config) pins pad_seq_to_mult=(\d+) \(CP(\d+)\)")
IN_BATCH_CLAIM = re.compile(r"(\w+_config) packs at MBS (\d+) \(CP(\d+)\)")
MTP = re.compile(r"\bwith MTP=(\d+)")
COUNT = re.compile(r"\bin (\d+) recipes?\b|\brecipes \((\d+)\)")


@dataclass(frozen=True)
class RecipeUse:
    """One recipe: its family, the packing path it turns on, and the alignment it pins."""

    name: str
    source: str
    family: str
    path: str | None
    cp: int
    pad_seq_to_mult: int | None
    mtp: int
    mbs: int = 1


def family_of(recipe: str) -> str:
    """The model-support family of a recipe name (longest prefix in FAMILY_BY_PREFIX); KeyError if none."""
    hits = [p for p in FAMILY_BY_PREFIX if recipe.startswith(p)]
    if not hits:
        raise KeyError(f"recipe {recipe} matches no family prefix")
    return FAMILY_BY_PREFIX[max(hits, key=len)]


def recipe_use(name: str, config: Any, source: str = "", path: str | None = None) -> RecipeUse:
    """The packing use of one recipe: ``config`` is a Bridge dump path or a seqpack config dict; ``path`` the
    index label of the packing path Bridge's built object turns on (else the loaded config's active path)."""
    cfg = load_config(config)
    if path is None:
        active = cfg.active_paths()
        path = active[0] if active else "none"
        if path == "in_batch" and cfg.dataset.defer_in_batch_packing_to_step:
            path = "in_batch_deferred"
    packing = PATH_OF.get(path)
    specs = cfg.dataset.offline_packing_specs
    mult = specs.pad_seq_to_mult if packing == "offline" and specs is not None else None
    return RecipeUse(name, source, family_of(name), packing, cfg.model.context_parallel_size, mult,
                     int(cfg.model.mtp_num_layers or 0), cfg.train.micro_batch_size)


def committed_uses() -> list[RecipeUse]:
    """Every committed recipe dump's packing use."""
    return [recipe_use(e["recipe"], RECIPES / e["file"], e["source"], e["path"]) for e in INDEX["recipes"]
            if e.get("file")]


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


@functools.cache
def uses() -> tuple[RecipeUse, ...]:
    """:func:`committed_uses`, loaded when a test first needs them (not when the suite is collected: loading
    every dump costs seconds in every run, the fast lane's too)."""
    return tuple(committed_uses())


ROWS = {e["recipe"]: e for e in INDEX["recipes"]}
#: The recipes whose use turns a packing path on (``recipe_use`` reads the path from the index entry).
PACKING_RECIPES = [e["recipe"] for e in INDEX["recipes"] if e.get("file") and PATH_OF.get(e["path"])]


def test_every_recipe_of_the_release_maps_to_a_family():
    for entry in INDEX["recipes"]:
        if entry["path"] != "none":
            family_of(entry["recipe"])


def test_the_derivation_sees_the_packing_recipes():
    paths = {e["recipe"]: PATH_OF.get(e["path"]) for e in INDEX["recipes"] if e.get("file")}
    assert {u.name: u.path for u in uses()} == paths
    found = uses_by_family(list(uses()))
    assert ("qwen3", "offline") in found and ("qwen_vl", "in_batch") in found and ("llama3", "offline") in found
    assert len(found[("qwen3", "offline")]) == 14


def test_families_recorded_opt_out_pack_nothing_in_the_release():
    found = uses_by_family(list(uses()))
    for e in FAMILIES:
        for path, status in e.paths.items():
            if status == "opt_out":
                assert (e.family, path) not in found or (e.family, path) in ACKNOWLEDGED_CONFLICTS, (e.family, path)


def test_every_path_a_recipe_turns_on_is_recorded():
    assert unrecorded(list(uses())) == []


def test_acknowledged_conflicts_are_still_conflicts():
    found = uses_by_family(list(uses()))
    for family, path in ACKNOWLEDGED_CONFLICTS:
        assert (family, path) in found
        assert check_model_support(family, path)[0].status == "opt_out"


def test_negative_control_a_packing_recipe_of_an_unrecorded_family_is_reported():
    synthetic = {"model": {"context_parallel_size": 1}, "dataset": {"enable_in_batch_packing": True}}
    use = recipe_use("deepseek_v2_lite_sft_8gpu_h100_bf16_config", synthetic)  # a family with no table entry
    assert (use.family, use.path) == ("deepseek_v2", "in_batch")
    assert check_model_support("deepseek_v2", "in_batch")[0].status == "unknown"
    assert unrecorded([*uses(), use]) == [f"deepseek_v2/in_batch is unknown but {use.name} turns it on"]
    # a recorded family, path unknown for it (Qwen3 records offline only) and an opt-out without an acknowledgement
    energon = recipe_use("qwen3_8b_sft_energon_config", {"dataset": {"kind": "energon", "packing_buffer_size": 8}})
    glm = recipe_use("glm45_355b_sft_config", {"dataset": {"enable_offline_packing": True}})
    gbp = recipe_use("olmoe_7b_sft_gbp_config", {"dataset": {"enable_global_batch_packing": True}})
    assert unrecorded([energon, glm, gbp]) == [
        "glm45/offline is opt_out but glm45_355b_sft_config turns it on",
        "olmoe/global_batch is unknown but olmoe_7b_sft_gbp_config turns it on",
        "qwen3/energon is unknown but qwen3_8b_sft_energon_config turns it on",
    ]


def _notes() -> list[tuple[str, str, str, str, str]]:
    return [(e.family, p, e.paths[p], e.notes[p], e.evidence) for e in FAMILIES for p in e.paths]


def note_problems(family: str, path: str, status: str, note: str, evidence: str) -> list[str]:
    """What a record's note states about the release's recipes that they do not bear out (one line each)."""
    claims = CLAIM.findall(note) + IN_BATCH_CLAIM.findall(note)
    if status == "supported" and not claims:
        return [] if MAIN_ONLY in note else [f"{family}/{path}: names no {RELEASE} recipe and no main commit"]
    problems = []
    by_name = {u.name: u for u in uses()}
    for recipe, value, cp in claims:
        use = by_name.get(recipe)
        if use is None:
            problems.append(f"{recipe} is not a committed {RELEASE} recipe")
            continue
        pinned = use.pad_seq_to_mult if path == "offline" else use.mbs
        module = use.source.split(":")[0].removeprefix("megatron/bridge/")
        if (use.family, use.path) != (family, path):
            problems.append(f"{recipe} is {use.family}/{use.path}, not {family}/{path}")
        elif (pinned, use.cp) != (int(value), int(cp)):
            problems.append(f"{recipe} pins {pinned} at CP{use.cp}, not {value} at CP{cp}")
        elif module not in evidence:
            problems.append(f"{family}: the evidence does not name {module}")
    group = uses_by_family(list(uses())).get((family, path), [])
    for count in COUNT.findall(note):
        if int(next(c for c in count if c)) != len(group):
            problems.append(f"{family}/{path}: the note counts {count} recipes, the release has {len(group)}")
    if status == "supported" and {str(u.mtp) for u in group if u.mtp} != set(MTP.findall(note)):
        problems.append(f"{family}/{path}: MTP must be stated exactly when the recipes use it")
    return problems


@pytest.mark.parametrize("family,path,status,note,evidence", _notes(), ids=lambda v: str(v)[:24])
def test_notes_name_recipes_that_turn_the_path_on_as_stated(family, path, status, note, evidence):
    assert note_problems(family, path, status, note, evidence) == []


def test_negative_control_notes_that_misstate_the_release_are_reported():
    evidence = f"{RELEASE} recipes/qwen/h100/qwen3.py"
    assert note_problems("qwen3", "offline", "supported", "in 14 recipes; qwen3_8b_sft_8gpu_h100_bf16_32k_config "
                         "pins pad_seq_to_mult=4 (CP2)", evidence) == [
        "qwen3_8b_sft_8gpu_h100_bf16_32k_config pins 8 at CP2, not 4 at CP2"]
    assert note_problems("qwen3", "offline", "supported", "offline packed SFT in 15 recipes; "
                         "qwen3_8b_sft_4gpu_h100_bf16_config pins pad_seq_to_mult=1 (CP1)", evidence) == [
        "qwen3/offline: the note counts ('15', '') recipes, the release has 14"]
    assert note_problems("qwen3", "offline", "supported", "in 14 recipes; qwen3_9b_sft_config pins "
                         "pad_seq_to_mult=1 (CP1)", evidence) == [f"qwen3_9b_sft_config is not a committed {RELEASE} recipe"]
    assert note_problems("qwen_vl", "energon", "supported", "native packing", "x") == [
        f"qwen_vl/energon: names no {RELEASE} recipe and no main commit"]
    assert note_problems("qwen_vl", "in_batch", "supported", "qwen25_vl_7b_sft_2gpu_h100_bf16_config packs at MBS 4 "
                         "(CP1)", f"{RELEASE} recipes/qwen_vl/h100/qwen25_vl.py") == [
        "qwen25_vl_7b_sft_2gpu_h100_bf16_config pins 2 at CP1, not 4 at CP1"]


def test_every_record_names_the_version_it_holds_for():
    for e in FAMILIES:
        assert e.evidence.startswith((RELEASE, MAIN)), e.family
        if e.evidence.startswith(MAIN):
            assert "not checkable in the lane" in e.evidence, e.family


def test_family_ids_and_aliases_do_not_collide():
    owner: dict[str, set[str]] = defaultdict(set)
    for e in FAMILIES:
        for key in (e.family, *e.aliases):
            owner[key.lower().replace("-", "_").replace(".", "")].add(e.family)
    assert {k: v for k, v in owner.items() if len(v) > 1} == {}
    for alias, family in [("Qwen3", "qwen3"), ("qwen-3", "qwen3"), ("Qwen2.5", "qwen25"), ("llama3.1", "llama3"),
                          ("Nemotron-H", "nemotronh"), ("qwen3-next", "qwen3_next"), ("GLM-5.2", "glm5")]:
        assert find_family(alias).family == family, alias


@pytest.mark.parametrize("name", PACKING_RECIPES)
def test_naming_the_family_in_a_packing_recipe_warns_only_for_opt_out_or_caveat(name):
    from seqpack.config import validate_config

    from seqpack.config.load import load_config_with_keys

    use = next(u for u in uses() if u.name == name)
    assert use.path
    cfg = load_config(RECIPES / f"{use.name}.yaml", overrides=[f"dist.world_size={ROWS[use.name]['world_size']}"])
    named = load_config(cfg.to_dict(), overrides=[f"model.family={use.family}"])  # the dump names only some
    before, after = validate_config(cfg), validate_config(named)
    assert load_config_with_keys(RECIPES / f"{use.name}.yaml")[1] is not None
    status = check_model_support(use.family, use.path)[0].status
    expected = {"opt_out": {"MODEL-FAMILY-OPT-OUT"}, "caveat": {"MODEL-FAMILY-CAVEAT"}}.get(status, set())
    assert {i for i in after.rule_ids if i.startswith("MODEL-FAMILY-")} == expected
    # naming the family adds no error: the same errors as the committed recipe
    assert {f.rule_id for f in after.violations} == {f.rule_id for f in before.violations}


def test_the_generated_page_names_the_release_checked_here():
    from scripts.docgen import model_support_document

    page = model_support_document()
    assert RELEASE in page and "run in the upstream lane" in page
