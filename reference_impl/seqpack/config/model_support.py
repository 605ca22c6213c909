"""Which model families support which packing path, as recorded in Megatron-Bridge's recipes.

Every record names the version it holds for: the recipes of megatron-bridge 0.6.2 (run in the upstream
lane; ``tests/upstream/test_model_support_recipes.py`` checks the records against them), the 0.6.2
source file it was read from, or a Bridge main commit for what exists only there (said in the note).

One table, used by the ``MODEL-FAMILY-*`` validation rules, the ``check_model_support`` MCP tool
and the docs. A status is one of:

* ``supported``: the family's recipes use or allow the path;
* ``opt_out``: a recipe explicitly turns the path off (it is not supported there);
* ``caveat``: allowed, but with a documented limitation worth knowing before launch;
* ``unknown``: nothing is recorded; verify with ``seqpack smoke`` before spending GPU hours.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from seqpack.core.choices import SUPPORT_STATUSES
from seqpack.core.errors import UsageError
from seqpack.core.packing_paths import path_names
from seqpack.core.results import Result
from seqpack.core.versions import BRIDGE_MAIN_COMMIT, BRIDGE_RELEASE

STATUSES: tuple[str, ...] = SUPPORT_STATUSES


def __getattr__(name: str) -> Any:
    # ``PATHS`` is read from the packing-path registry each time (a path registered later counts)
    if name == "PATHS":
        return path_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class FamilyEntry:
    """One model family and its recorded packing support."""

    family: str
    name: str
    paths: dict[str, str]
    notes: dict[str, str]
    evidence: str
    aliases: tuple[str, ...] = field(default=())
    #: The Megatron-Bridge forward step that packs this family's batches itself (at step time), so
    #: in-batch packing must be deferred to it (``defer_in_batch_packing_to_step=true``); None = the
    #: generic steps, which pack at collate time.
    step_packer: str | None = None


def _entry(
    family: str,
    name: str,
    evidence: str,
    aliases: tuple[str, ...] = (),
    step_packer: str | None = None,
    **paths: tuple[str, str],
) -> FamilyEntry:
    return FamilyEntry(
        family=family,
        name=name,
        paths={p: s for p, (s, _) in paths.items()},
        notes={p: n for p, (_, n) in paths.items()},
        evidence=evidence,
        aliases=aliases,
        step_packer=step_packer,
    )


#: The versions a record holds for. Recipe-backed records are checked against megatron-bridge 0.6.2's recipe
#: functions run in the upstream lane (tests/upstream/recipes); claims whose recipes exist only on Bridge main
#: name that commit and say so (the lane cannot check them).
RELEASE = f"megatron-bridge {BRIDGE_RELEASE}"
MAIN = f"Megatron-Bridge main {BRIDGE_MAIN_COMMIT[:7]}"
MAIN_ONLY = f"{MAIN} only, not in {RELEASE} (not checkable in the lane)"

_VLM_OFF = ("opt_out", f"the {RELEASE} SFT/PEFT recipes turn in-batch packing off explicitly")

FAMILIES: tuple[FamilyEntry, ...] = (
    _entry(
        "qwen3_next", "Qwen3-Next (80B-A3B)", f"{RELEASE} recipes/qwen/h100/qwen3_next.py", ("qwen3-next",),
        offline=("opt_out", "the SFT recipe disables offline packing; its docstring says packing is not supported"),
    ),
    _entry(
        "glm45", "GLM-4.5", f"{RELEASE} recipes/glm/h100/glm45.py", ("glm-4.5", "glm4.5"),
        offline=("opt_out", "SFT and PEFT recipes disable offline packing; documented as not supported"),
    ),
    _entry(
        "deepseek_v4", "DeepSeek-V4", f"{RELEASE} recipes/deepseek/h100/deepseek_v4.py; recipes/deepseek/deepseek_v4.py",
        ("deepseek-v4",),
        offline=(
            "caveat",
            "the MTP SFT recipes run unpacked (SBHD); deepseek_v4_flash_sft_openmath_thinking_packed_config pins "
            "pad_seq_to_mult=2 (CP1) and packs offline with MTP=1, but megatron-core 0.19.2 rejects its "
            "recompute_modules ('mhc') in runtime_config_update",
        ),
    ),
    _entry(
        "qwen35_vl", "Qwen3.5-VL", f"{RELEASE} recipes/qwen_vl/h100/qwen35_vl.py; models/qwen_vl/qwen3_vl_step.py",
        ("qwen3.5-vl",), step_packer="qwen3_vl_step",
        in_batch=(
            "caveat",
            f"the {RELEASE} recipes run unpacked (in-batch off, deferral to qwen3_vl_step on); a long-context SFT "
            f"recipe that packs in qwen3_vl_step is {MAIN_ONLY}; that step needs defer_in_batch_packing_to_step=true "
            "(it rejects collate-time packed batches)",
        ),
    ),
    _entry(
        "qwen3_vl", "Qwen3-VL", f"{RELEASE} recipes/qwen_vl/h100/qwen3_vl.py; models/qwen_vl/qwen3_vl_step.py",
        ("qwen3-vl",), step_packer="qwen3_vl_step",
        in_batch=(
            "caveat",
            "the SFT/PEFT recipes (6) pack in qwen3_vl_step, which needs defer_in_batch_packing_to_step=true (it "
            "rejects collate-time packed batches); the Energon recipe runs unpacked",
        ),
        energon=("supported", f"the Qwen-VL task encoder implements Energon native packing (eager, MBS1, no PP, no "
                              f"CUDA graphs): {MAIN_ONLY}, where no task encoder but the diffusion ones packs"),
    ),
    _entry(
        "gemma3_vl", "Gemma3-VL", f"{RELEASE} recipes/gemma3_vl/h100/gemma3_vl.py", ("gemma3-vl",),
        in_batch=("opt_out", "its bidirectional image attention mask cannot be expressed as THD boundaries"),
    ),
    _entry(
        "gemma4_vl", "Gemma4-VL", f"{RELEASE} recipes/gemma4_vl/h100/gemma4_vl.py", ("gemma4-vl",),
        in_batch=("caveat", "off by default only because the recipe uses MBS=1; in-batch packing needs MBS>1"),
    ),
    _entry("glm45v", "GLM-4.5V", f"{RELEASE} recipes/glm_vl/h100/glm_45v.py", ("glm-4.5v",), in_batch=_VLM_OFF),
    _entry("kimi_k25_vl", "Kimi-K2.5-VL", f"{RELEASE} recipes/kimi_vl/h100/kimi_k25_vl.py", ("kimi-k2.5-vl",),
           in_batch=_VLM_OFF),
    _entry(
        "ministral3", "Ministral3", f"{RELEASE} recipes/ministral3/h100/ministral3.py", (),
        in_batch=(
            "caveat",
            f"the {RELEASE} SFT/PEFT recipes (6) inherit in-batch packing from the VLM template at MBS 1, which "
            f"runtime_config_update rejects (PACK-IN-BATCH-MBS): raise MBS above 1 or turn it off; {MAIN} turns "
            "it off explicitly",
        ),
    ),
    _entry(
        "nemotron_nano_v2_vl", "Nemotron Nano V2 VL", f"{RELEASE} recipes/nemotron_vl/h100/nemotron_nano_v2_vl.py", (),
        in_batch=_VLM_OFF,
    ),
    _entry(
        "nemotron_omni", "Nemotron Omni", f"{RELEASE} recipes/nemotron_omni/h100/nemotron_omni.py", (),
        in_batch=(
            "caveat",
            f"the {RELEASE} CORD-v2 and VALOR SFT/PEFT recipes turn in-batch packing off; a long-context CORD-v2 "
            f"SFT recipe that packs (MBS 2, CP2, pad_seq_to_mult 8) is {MAIN_ONLY}; packed MoE layers count the "
            f"alignment padding in their router statistics: the {RELEASE} model takes no padding mask at all, and "
            f"on {MAIN} the collate emits padding_mask but the model does not pass it to the language model until "
            "Megatron-Bridge PR #6113 (open) does",
        ),
    ),
    _entry("qwen3_omni", "Qwen3-Omni", f"{RELEASE} recipes/qwen_omni/h100/qwen3_omni.py", ("qwen3-omni",),
           in_batch=_VLM_OFF),
    _entry("exaone45", "EXAONE 4.5", f"{RELEASE} recipes/exaone/h100/exaone45.py", ("exaone-4.5",), in_batch=_VLM_OFF),
    _entry(
        "nemotron3_super", "Nemotron-3 Super", f"{RELEASE} recipes/nemotronh/h100/nemotron_3_super.py",
        ("nemotron-3-super",),
        offline=(
            "caveat",
            "keeps offline packing on together with MTP=2 and pad_seq_to_mult=1 under TP8+SP; CUDA graphs are off "
            "because packed SFT passes explicit masks that Mamba graphs cannot take; the 32K SFT recipe keeps the "
            "2K recipe's packed_sequence_size=2048 and pad_seq_to_mult=1 at CP2, which seqpack rejects",
        ),
    ),
    _entry(
        "llava", "LLaVA", f"{RELEASE} training/llava_step.py", (),
        offline=("caveat", "packed batches require PP=1 and CP=1 in the LLaVA step"),
        in_batch=("caveat", "packed batches require PP=1 and CP=1 in the LLaVA step"),
    ),
    _entry(
        "qwen_vl", "Qwen2.5-VL", f"{RELEASE} recipes/qwen_vl/h100/qwen25_vl.py; models/qwen_vl/data/energon.py",
        ("qwen25_vl", "qwen2.5-vl"),
        in_batch=("supported", "collate-time in-batch packing in 8 recipes; qwen25_vl_7b_sft_2gpu_h100_bf16_config "
                               "packs at MBS 2 (CP1)"),
        energon=("supported", f"the only task encoder with Energon native packing (eager, MBS1, no PP, no CUDA "
                              f"graphs): {MAIN_ONLY}"),
    ),
    _entry(
        "qwen36_moe", "Qwen3.6-35B-A3B", f"{MAIN} packed-sequences docs (not in {RELEASE}; not checkable in the lane)",
        ("qwen3.6-35b-a3b",),
        energon=(
            "caveat",
            "functional coverage with eager alltoall EP at TP1/PP1/EP8 with EP overlap disabled; no performance claim",
        ),
    ),
    _entry(
        "megatron_mimo", "MegatronMIMO",
        f"{MAIN} training/megatron_mimo_step.py and data/megatron_mimo/sequence_pack.py (Megatron-Bridge PR #5131, "
        f"merged 2026-08-05; not in {RELEASE}, whose MIMO step has no packing code; not checkable in the lane)",
        ("mimo",), step_packer="megatron_mimo_step",
        in_batch=("caveat", f"packs only at step time (defer_in_batch_packing_to_step required), one whole shard per "
                            f"pack: {MAIN_ONLY}"),
    ),
    _entry(
        "diffusion_gemma", "DiffusionGemma",
        f"{MAIN} and {RELEASE} have no DiffusionGemma; a later Bridge read in a code index (merge state unknown) "
        "has an SFT step that rejects every packing switch and any batch carrying cu_seqlens (not checkable in the "
        "lane)",
        ("diffusiongemma", "diffusion-gemma"),
        offline=("opt_out", "its SFT step rejects packed batches (any batch with cu_seqlens)"),
        in_batch=("opt_out", "its SFT step rejects every packing switch"),
        energon=("opt_out", "its SFT step rejects every packing switch"),
        global_batch=("opt_out", "its SFT step rejects every packing switch"),
    ),
)


def _recipes(
    family: str,
    name: str,
    modules: str,
    aliases: tuple[str, ...],
    count: int,
    pins: tuple[tuple[str, int, int], ...],
    mtp: int = 0,
) -> FamilyEntry:
    """A family whose ``count`` Bridge recipes pack offline; ``pins`` are (recipe, pad_seq_to_mult, CP) examples."""
    plural = "recipe" if count == 1 else "recipes"
    mtp_note = f", with MTP={mtp} (the MTP rules apply)" if mtp else ""
    named = ", ".join(f"{recipe} pins pad_seq_to_mult={mult} (CP{cp})" for recipe, mult, cp in pins)
    evidence = f"{RELEASE} " + "; ".join(f"recipes/{m}.py" for m in modules.split())
    return _entry(family, name, evidence, aliases,
                  offline=("supported", f"offline packed SFT in {count} {plural}{mtp_note}; {named}"))


#: Families whose megatron-bridge 0.6.2 recipes (run in the upstream lane; their dumps are in tests/upstream/recipes)
#: turn offline packed SFT on with no recorded exception. Each note names recipes with the pad_seq_to_mult and CP
#: they pin; tests/upstream/test_model_support_recipes.py checks every such claim against those dumps.
_OFFLINE_RECIPES: tuple[FamilyEntry, ...] = (
    _recipes("llama3", "Llama 3", "llama/h100/llama3", ("llama", "llama-3", "llama3.1", "llama-3.1", "llama3.2",
                                                         "llama-3.2"), 14,
             (("llama3_8b_sft_2gpu_h100_bf16_config", 1, 1), ("llama31_405b_sft_128gpu_h100_bf16_config", 1, 1))),
    _recipes("gemma3", "Gemma 2/3", "gemma/h100/gemma2 gemma/h100/gemma3", ("gemma2",), 8,
             (("gemma2_9b_sft_4gpu_h100_bf16_config", 1, 1), ("gemma3_1b_sft_1gpu_h100_bf16_config", 1, 1))),
    _recipes("gpt_oss", "gpt-oss", "gpt_oss/h100/gpt_oss", ("gpt-oss",), 9,
             (("gpt_oss_20b_sft_8gpu_h100_bf16_config", 1, 1), ("gpt_oss_120b_sft_32gpu_h100_bf16_config", 1, 1))),
    _recipes("qwen3", "Qwen3 (dense)", "qwen/h100/qwen3", ("qwen-3",), 14, (
        ("qwen3_8b_sft_4gpu_h100_bf16_config", 1, 1), ("qwen3_8b_sft_8gpu_h100_bf16_32k_config", 8, 2),
        ("qwen3_600m_sft_8gpu_h100_bf16_128k_config", 16, 8))),
    _recipes("qwen3_moe", "Qwen3 MoE (30B-A3B, 235B-A22B)", "qwen/h100/qwen3_moe", ("qwen3-moe", "qwen-3-moe"),
             5, (("qwen3_30b_a3b_sft_8gpu_h100_bf16_config", 4, 1),
                 ("qwen3_235b_a22b_sft_64gpu_h100_bf16_config", 1, 1))),
    _recipes("qwen25", "Qwen2.5", "qwen/h100/qwen2", ("qwen2.5", "qwen-2.5"), 12,
             (("qwen25_7b_sft_2gpu_h100_bf16_config", 1, 1),)),
    _recipes("qwen2", "Qwen2", "qwen/h100/qwen2", ("qwen-2",), 8, (("qwen2_7b_sft_2gpu_h100_bf16_config", 1, 1),)),
    _recipes("glm5", "GLM-5.2", "glm/h100/glm5 glm/gb200/glm5", ("glm-5", "glm52", "glm-5.2"), 6, (
        ("glm52_peft_208gpu_h100_bf16_config", 4, 1), ("glm52_sft_416gpu_h100_bf16_config", 32, 16),
        ("glm52_sft_608gpu_h100_bf16_200k_config", 64, 32)), mtp=1),
    _recipes("minimax_m3", "MiniMax-M3", "minimax/h100/minimax_m3", ("minimax-m3",), 1,
             (("minimax_m3_sft_128gpu_h100_bf16_config", 1, 1),)),
    _recipes("moonlight", "Moonlight-16B", "moonlight/h100/moonlight_16b", ("moonlight-16b",), 5, (
        ("moonlight_16b_sft_8gpu_h100_bf16_config", 4, 1), ("moonlight_16b_sft_8gpu_h100_bf16_8k_config", 4, 2))),
    _recipes("olmoe", "OLMoE", "olmoe/h100/olmoe_7b", (), 2, (("olmoe_7b_sft_8gpu_h100_bf16_config", 1, 1),)),
    _recipes("exaone4", "EXAONE 4.0", "exaone/h100/exaone4", ("exaone-4", "exaone-4.0"), 2,
             (("exaone4_1p2b_sft_1gpu_h100_bf16_config", 1, 1),)),
    _recipes("exaone_moe", "K-EXAONE MoE", "exaone/h100/exaone_moe", ("exaone-moe", "k-exaone"), 2,
             (("exaone_moe_236b_a23b_sft_64gpu_h100_bf16_config", 1, 1),)),
    _recipes("nemotronh", "Nemotron-H", "nemotronh/h100/nemotronh", ("nemotron-h",), 8,
             (("nemotronh_8b_sft_2gpu_h100_bf16_config", 1, 1),)),
    _recipes("nemotron_nano_v2", "Nemotron Nano V2", "nemotronh/h100/nemotron_nano_v2", ("nemotron-nano-v2",),
             4, (("nemotron_nano_9b_v2_sft_2gpu_h100_bf16_config", 1, 1),)),
    _recipes("nemotron3_nano", "Nemotron-3 Nano (30B-A3B, 4B)",
             "nemotronh/h100/nemotron_3_nano nemotronh/h100/nemotron_3_nano_4b", ("nemotron-3-nano",), 5, (
                 ("nemotron_3_nano_sft_8gpu_h100_bf16_config", 1, 1),
                 ("nemotron_3_nano_4b_sft_8gpu_h100_bf16_32k_config", 4, 2))),
    _recipes("nemotron35_lightning", "Nemotron 3.5 Lightning", "nemotronh/h100/nemotron_3_nano",
             ("nemotron-3.5-lightning",), 4,
             (("nemotron_3_5_lightning_sft_openmathinstruct2_packed_config", 2, 1),), mtp=2),
    _recipes("nemotron3_ultra", "Nemotron-3 Ultra", "nemotronh/h100/nemotron_3_ultra", ("nemotron-3-ultra",),
             2, (("nemotron_3_ultra_sft_192gpu_h100_bf16_openmathinstruct2_packed_config", 1, 1),), mtp=2),
)
FAMILIES = FAMILIES + _OFFLINE_RECIPES

_BY_NAME: dict[str, FamilyEntry] = {}
for _e in FAMILIES:
    for _key in (_e.family, *_e.aliases):
        _BY_NAME[_key.lower().replace("-", "_").replace(".", "")] = _e


def _normalise(name: str) -> str:
    return name.strip().lower().replace("-", "_").replace(".", "").replace(" ", "_")


def find_family(name: str | None) -> FamilyEntry | None:
    """The table entry for a family id or alias (case, dots and dashes ignored), or None."""
    if not name:
        return None
    return _BY_NAME.get(_normalise(name))


@dataclass(frozen=True)
class ModelSupport(Result):
    """Answer of :func:`check_model_support`."""

    family: str
    path: str
    status: str
    note: str
    evidence: str
    known_family: bool


def check_model_support(family: str, path: str | None = None) -> list[ModelSupport]:
    """Recorded support of ``family`` for one packing path (or every registered path when ``path`` is None)."""
    names = path_names()
    if path is not None and path not in names:
        raise UsageError(f"unknown packing path {path!r}; choose one of {', '.join(names)}", field="path")
    entry = find_family(family)
    out = []
    for p in (path,) if path else names:
        if entry is None:
            out.append(ModelSupport(family, p, "unknown", "no record for this family; verify with `seqpack smoke`", "", False))
        elif p in entry.paths:
            out.append(ModelSupport(entry.family, p, entry.paths[p], entry.notes[p], entry.evidence, True))
        else:
            out.append(
                ModelSupport(entry.family, p, "unknown", "no recipe evidence for this path; verify with `seqpack smoke`",
                             entry.evidence, True)
            )
    return out
