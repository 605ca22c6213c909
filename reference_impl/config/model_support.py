"""Which model families support which packing path, as recorded in Megatron-Bridge's recipes.

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

from reference_impl.choices import SUPPORT_STATUSES
from reference_impl.errors import UsageError
from reference_impl.packing_paths import path_names
from reference_impl.results import Result

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


_VLM_OFF = ("opt_out", "the recipe turns in-batch packing off explicitly")

FAMILIES: tuple[FamilyEntry, ...] = (
    _entry(
        "qwen3_next", "Qwen3-Next (80B-A3B)", "Megatron-Bridge recipes/qwen/h100/qwen3_next.py", ("qwen3-next",),
        offline=("opt_out", "the SFT recipe disables offline packing; its docstring says packing is not supported"),
    ),
    _entry(
        "glm45", "GLM-4.5", "Megatron-Bridge recipes/glm/h100/glm45.py", ("glm-4.5", "glm4.5"),
        offline=("opt_out", "SFT and PEFT recipes disable offline packing; documented as not supported"),
    ),
    _entry(
        "deepseek_v4", "DeepSeek-V4", "Megatron-Bridge recipes/deepseek/h100/deepseek_v4.py", ("deepseek-v4",),
        offline=("opt_out", "the MTP-enabled SFT recipes run unpacked (SBHD)"),
    ),
    _entry(
        "qwen35_vl", "Qwen3.5-VL", "Megatron-Bridge recipes/qwen_vl/h100/qwen35_vl.py; scripts/training/recipe_metadata.py",
        ("qwen3.5-vl",), step_packer="qwen3_vl_step",
        in_batch=(
            "caveat",
            "most recipes run unpacked; the long-context SFT recipe packs in qwen3_vl_step, which needs "
            "defer_in_batch_packing_to_step=true (it rejects collate-time packed batches)",
        ),
    ),
    _entry(
        "qwen3_vl", "Qwen3-VL", "Megatron-Bridge recipes/qwen_vl/h100/qwen3_vl.py; models/qwen_vl/qwen3_vl_step.py",
        ("qwen3-vl",), step_packer="qwen3_vl_step",
        in_batch=(
            "caveat",
            "the SFT/PEFT recipes pack in qwen3_vl_step, which needs defer_in_batch_packing_to_step=true (it rejects "
            "collate-time packed batches); the Energon recipe uses vlm_step",
        ),
        energon=("supported", "the Qwen-VL task encoder implements Energon native packing (eager, MBS1, no PP, no CUDA graphs)"),
    ),
    _entry(
        "gemma3_vl", "Gemma3-VL", "Megatron-Bridge recipes/gemma3_vl/h100/gemma3_vl.py", ("gemma3-vl",),
        in_batch=("opt_out", "its bidirectional image attention mask cannot be expressed as THD boundaries"),
    ),
    _entry(
        "gemma4_vl", "Gemma4-VL", "Megatron-Bridge recipes/gemma4_vl/h100/gemma4_vl.py", ("gemma4-vl",),
        in_batch=("caveat", "off by default only because the recipe uses MBS=1; in-batch packing needs MBS>1"),
    ),
    _entry("glm45v", "GLM-4.5V", "Megatron-Bridge GLM-4.5V recipe", ("glm-4.5v",), in_batch=_VLM_OFF),
    _entry("kimi_k25_vl", "Kimi-K2.5-VL", "Megatron-Bridge Kimi-K2.5-VL recipe", ("kimi-k2.5-vl",), in_batch=_VLM_OFF),
    _entry("ministral3", "Ministral3", "Megatron-Bridge Ministral3 recipe", (), in_batch=_VLM_OFF),
    _entry(
        "nemotron_nano_v2_vl", "Nemotron Nano V2 VL", "Megatron-Bridge Nemotron Nano V2 VL recipe", (), in_batch=_VLM_OFF
    ),
    _entry(
        "nemotron_omni", "Nemotron Omni", "Megatron-Bridge Nemotron Omni recipes", (),
        in_batch=(
            "caveat",
            "the CORD-v2 SFT/PEFT and VALOR recipes turn in-batch packing off; only the long-context CORD-v2 SFT "
            "recipe packs (MBS 2, CP2, pad_seq_to_mult 8)",
        ),
    ),
    _entry("qwen3_omni", "Qwen3-Omni", "Megatron-Bridge Qwen3-Omni recipe", ("qwen3-omni",), in_batch=_VLM_OFF),
    _entry("exaone45", "EXAONE 4.5", "Megatron-Bridge EXAONE 4.5 recipe", ("exaone-4.5",), in_batch=_VLM_OFF),
    _entry(
        "nemotron3_super", "Nemotron-3 Super", "Megatron-Bridge recipes/nemotronh/h100/nemotron_3_super.py",
        ("nemotron-3-super",),
        offline=(
            "caveat",
            "keeps offline packing on together with MTP=2 and pad_seq_to_mult=1 under TP8+SP; CUDA graphs are off "
            "because packed SFT passes explicit masks that Mamba graphs cannot take",
        ),
    ),
    _entry(
        "llava", "LLaVA", "Megatron-Bridge training/llava_step.py", (),
        offline=("caveat", "packed batches require PP=1 and CP=1 in the LLaVA step"),
        in_batch=("caveat", "packed batches require PP=1 and CP=1 in the LLaVA step"),
    ),
    _entry(
        "qwen_vl", "Qwen2.5-VL", "Megatron-Bridge models/qwen_vl/data/energon.py", ("qwen25_vl", "qwen2.5-vl"),
        in_batch=("supported", "collate-time in-batch packing is supported"),
        energon=("supported", "the only task encoder with Energon native packing (eager, MBS1, no PP, no CUDA graphs)"),
    ),
    _entry(
        "qwen36_moe", "Qwen3.6-35B-A3B", "Megatron-Bridge packed-sequences docs", ("qwen3.6-35b-a3b",),
        energon=(
            "caveat",
            "functional coverage with eager alltoall EP at TP1/PP1/EP8 with EP overlap disabled; no performance claim",
        ),
    ),
    _entry(
        "llama3", "Llama 3", "Megatron-Bridge llama3 recipes (pad_seq_to_mult = 2*CP when CP>1)",
        ("llama", "llama-3", "llama3.1", "llama-3.1", "llama3.2", "llama-3.2"),
        offline=("supported", "recipes pin pad_seq_to_mult = 2*CP when CP>1"),
    ),
    _entry(
        "gemma3", "Gemma 2/3", "Megatron-Bridge gemma2/gemma3 recipes", ("gemma2",),
        offline=("supported", "recipes pin pad_seq_to_mult = 2*CP when CP>1"),
    ),
    _entry(
        "gpt_oss", "gpt-oss", "Megatron-Bridge gpt_oss recipes", ("gpt-oss",),
        offline=("supported", "recipes pin pad_seq_to_mult to 8 or 2*CP"),
    ),
    _entry(
        "megatron_mimo", "MegatronMIMO", "Megatron-Bridge training/megatron_mimo_step.py", ("mimo",),
        step_packer="megatron_mimo_step",
        in_batch=("caveat", "packs only at step time (defer_in_batch_packing_to_step required), one whole shard per pack"),
    ),
)

def _offline_recipes(
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
    evidence = "Megatron-Bridge " + "; ".join(f"recipes/{m}.py" for m in modules.split())
    return _entry(family, name, evidence, aliases,
                  offline=("supported", f"offline packed SFT in {count} {plural}{mtp_note}; {named}"))


#: Families whose Megatron-Bridge recipes (converted in tests/upstream/recipes, upstream commit 067f987) turn
#: offline packed SFT on with no recorded exception. Each note names recipes with the pad_seq_to_mult and CP they
#: pin; tests/upstream/test_model_support_recipes.py checks every such claim against the converted recipes.
_OFFLINE_RECIPES: tuple[FamilyEntry, ...] = (
    _offline_recipes("qwen3", "Qwen3 (dense)", "qwen/h100/qwen3", ("qwen-3",), 14, (
        ("qwen3_8b_sft_4gpu_h100_bf16_config", 1, 1), ("qwen3_8b_sft_8gpu_h100_bf16_32k_config", 8, 2),
        ("qwen3_600m_sft_8gpu_h100_bf16_128k_config", 16, 8))),
    _offline_recipes("qwen3_moe", "Qwen3 MoE (30B-A3B, 235B-A22B)", "qwen/h100/qwen3_moe", ("qwen3-moe", "qwen-3-moe"),
                     5, (("qwen3_30b_a3b_sft_8gpu_h100_bf16_config", 4, 1),
                         ("qwen3_235b_a22b_sft_64gpu_h100_bf16_config", 1, 1))),
    _offline_recipes("qwen25", "Qwen2.5", "qwen/h100/qwen2", ("qwen2.5", "qwen-2.5"), 12,
                     (("qwen25_7b_sft_2gpu_h100_bf16_config", 1, 1),)),
    _offline_recipes("qwen2", "Qwen2", "qwen/h100/qwen2", ("qwen-2",), 8, (("qwen2_7b_sft_2gpu_h100_bf16_config", 1, 1),)),
    _offline_recipes("glm5", "GLM-5.2", "glm/h100/glm5 glm/gb200/glm5", ("glm-5", "glm52", "glm-5.2"), 6, (
        ("glm52_peft_208gpu_h100_bf16_config", 4, 1), ("glm52_sft_416gpu_h100_bf16_config", 32, 16),
        ("glm52_sft_608gpu_h100_bf16_200k_config", 64, 32)), mtp=1),
    _offline_recipes("minimax_m3", "MiniMax-M3", "minimax/h100/minimax_m3", ("minimax-m3",), 1,
                     (("minimax_m3_sft_128gpu_h100_bf16_config", 1, 1),)),
    _offline_recipes("moonlight", "Moonlight-16B", "moonlight/h100/moonlight_16b", ("moonlight-16b",), 5, (
        ("moonlight_16b_sft_8gpu_h100_bf16_config", 4, 1), ("moonlight_16b_sft_8gpu_h100_bf16_8k_config", 4, 2))),
    _offline_recipes("olmoe", "OLMoE", "olmoe/h100/olmoe_7b", (), 2, (("olmoe_7b_sft_8gpu_h100_bf16_config", 1, 1),)),
    _offline_recipes("exaone4", "EXAONE 4.0", "exaone/h100/exaone4", ("exaone-4", "exaone-4.0"), 2,
                     (("exaone4_1p2b_sft_1gpu_h100_bf16_config", 1, 1),)),
    _offline_recipes("exaone_moe", "K-EXAONE MoE", "exaone/h100/exaone_moe", ("exaone-moe", "k-exaone"), 4,
                     (("exaone_moe_236b_a23b_sft_64gpu_h100_bf16_config", 1, 1),)),
    _offline_recipes("nemotronh", "Nemotron-H", "nemotronh/h100/nemotronh", ("nemotron-h",), 8,
                     (("nemotronh_8b_sft_2gpu_h100_bf16_config", 1, 1),)),
    _offline_recipes("nemotron_nano_v2", "Nemotron Nano V2", "nemotronh/h100/nemotron_nano_v2", ("nemotron-nano-v2",),
                     4, (("nemotron_nano_9b_v2_sft_2gpu_h100_bf16_config", 1, 1),)),
    _offline_recipes("nemotron3_nano", "Nemotron-3 Nano (30B-A3B, 4B)",
                     "nemotronh/h100/nemotron_3_nano nemotronh/h100/nemotron_3_nano_4b", ("nemotron-3-nano",), 5, (
                         ("nemotron_3_nano_sft_8gpu_h100_bf16_config", 1, 1),
                         ("nemotron_3_nano_4b_sft_8gpu_h100_bf16_32k_config", 4, 2))),
    _offline_recipes("nemotron35_lightning", "Nemotron 3.5 Lightning", "nemotronh/h100/nemotron_3_nano",
                     ("nemotron-3.5-lightning",), 4,
                     (("nemotron_3_5_lightning_sft_openmathinstruct2_packed_config", 2, 1),), mtp=2),
    _offline_recipes("nemotron3_ultra", "Nemotron-3 Ultra", "nemotronh/h100/nemotron_3_ultra", ("nemotron-3-ultra",),
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
