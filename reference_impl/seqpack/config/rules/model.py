"""MTP and model families: what the model (family) allows on top of the packing path."""

from __future__ import annotations

from seqpack.config.model_support import find_family
from seqpack.config.resolve import Resolved
from seqpack.config.rules.common import OFFLINE
from seqpack.config.rules.evidence import bridge
from seqpack.config.rules.registry import rule

FAMILY = "model"


def _family_status(r: Resolved, status: str) -> str | None:
    fam = find_family(r.cfg.model.family)
    if fam is None:
        return None
    hits = [p for p in r.paths if fam.paths.get(p) == status]
    if not hits:
        return None
    notes = "; ".join(f"{p}: {fam.notes[p]}" for p in hits)
    word = "opts out of" if status == "opt_out" else "has a caveat for"
    return f"model.family={r.cfg.model.family} ({fam.name}) {word} {', '.join(hits)} packing ({notes}; {fam.evidence})"


@rule(
    "PACK-MTP-DOCUMENTED",
    family=FAMILY,
    severity="warning",
    title="MTP fine-tuning is documented as incompatible with packed sequences",
    fields=("model.mtp_num_layers",),
    provenance="documented",
    source="packed-sequences and MTP docs; upstream rejects MTP only for Energon native packing",
    fix="Verify with `seqpack smoke` and a loss sentinel, or set mtp_num_layers=0.",
    trigger={**OFFLINE, "model.mtp_num_layers": 1},
    fixed={"model.mtp_num_layers": 0},
    note="The statement predates Megatron-Core's packed MTP: core_v0.15 rolled MTP targets over the whole row; "
        "core_v0.16.0 and later roll them inside each packed sequence (multi_token_prediction.py "
        "_roll_tensor_packed_seq). One Bridge recipe (Nemotron-3 Super) combines MTP=2 with offline packing. "
        "With per-sequence alignment padding the roll still misplaces sequences (MTP-PACKED-ALIGNMENT-ROLL).",
)
def mtp_documented(r: Resolved) -> str | None:
    mtp = r.cfg.model.mtp_num_layers or 0
    paths = [p for p in r.paths if p in ("offline", "in_batch", "global_batch")]
    if mtp > 0 and paths:
        return (
            f"model.mtp_num_layers={mtp} with {', '.join(paths)} packing: the packing docs call MTP fine-tuning "
            "incompatible with packed sequences, although no upstream check rejects it"
        )
    return None


@rule(
    "MODEL-FAMILY-OPT-OUT",
    family=FAMILY,
    severity="warning",
    title="the model family's recipes opt out of this packing path",
    fields=("model.family",),
    provenance="documented",
    source="Megatron-Bridge model recipes (see the model-support table); a recipe turning the path off is "
    "advice, not a check: no upstream code rejects the combination",
    fix="Use a path the family supports (`seqpack model-support FAMILY` lists them), or verify with "
    "`seqpack smoke` before training packed.",
    trigger={**OFFLINE, "model.family": "qwen3_next"},
    fixed={"model.family": "llama3"},
)
def family_opt_out(r: Resolved) -> str | None:
    return _family_status(r, "opt_out")


@rule(
    "MODEL-FAMILY-CAVEAT",
    family=FAMILY,
    severity="warning",
    title="the model family has a documented caveat for this packing path",
    fields=("model.family",),
    provenance="documented",
    source="Megatron-Bridge model recipes (see the model-support table)",
    fix="Read the caveat and verify with `seqpack smoke` before launching.",
    trigger={**OFFLINE, "model.family": "nemotron3_super"},
    fixed={"model.family": "llama3"},
)
def family_caveat(r: Resolved) -> str | None:
    return _family_status(r, "caveat")


@rule(
    "PACK-LLAVA-PP-CP",
    family=FAMILY,
    severity="error",
    title="LLaVA packed batches require PP=1 and CP=1",
    fields=("model.family", "model.pipeline_model_parallel_size", "model.context_parallel_size"),
    provenance="upstream",
    source="V57: Megatron-Bridge llava_step",
    fix="Run LLaVA packing with PP=1 and CP=1.",
    trigger={**OFFLINE, "model.family": "llava", "model.pipeline_model_parallel_size": 2, "dist.world_size": 2},
    fixed={"model.pipeline_model_parallel_size": 1},
    upstream_check=bridge(
        "training/llava_step.py",
        96,
        "cp_size",
        "llava_step raises ValueError for packed batches with PP > 1 or CP > 1",
        kind="runtime",
    ),
)
def llava(r: Resolved) -> str | None:
    fam = find_family(r.cfg.model.family)
    if fam and fam.family == "llava" and r.packed and (r.pp > 1 or r.cp > 1):
        return (
            f"model.family={r.cfg.model.family}: LLaVA packed batches require PP=1 and CP=1 "
            f"(pipeline_model_parallel_size={r.pp}, context_parallel_size={r.cp})"
        )
    return None
