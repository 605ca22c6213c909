"""The packing rule registry: one ordered list, the single source of truth.

Validation (:mod:`reference_impl.config.validate`), the docs tables, the SKILL reference and the
eval ground truth are all generated from or tested against :data:`RULES`.

Every rule has a stable id, a family, a severity, the config fields it reads, a provenance, a fix,
a check (``Resolved -> message | None``; the message names the offending fields with their values),
and two example override sets: ``trigger`` (a config that breaks the rule) and ``fixed`` (applied
on top of ``trigger``, a nearby config that satisfies it). The test-suite runs both for every rule.

Provenance:

* ``upstream``: Megatron-Bridge / Megatron-Core code rejects this (the ``source`` field says where;
  ``V<n>`` refers to the project's catalogue of Bridge validation rules).
* ``documented``: the packing documentation states it, but upstream code does not enforce it.
* ``stricter``: our own early check for a mistake upstream only reports later, as a crash inside
  a kernel or as silently wrong data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from reference_impl.config.model_support import find_family
from reference_impl.config.resolve import Resolved

Severity = Literal["error", "warning"]
Provenance = Literal["upstream", "documented", "stricter"]

FAMILIES: dict[str, str] = {
    "topology": "Topology and batch sizes",
    "context_parallel": "Context parallelism and alignment",
    "offline": "Offline packed SFT",
    "cuda_graphs": "CUDA graphs and fixed shapes",
    "exclusive": "One packing path at a time",
    "in_batch": "Runtime in-batch packing",
    "energon": "Energon online packing",
    "global_batch": "Global-batch online packing",
    "model": "MTP and model families",
    "dataset": "Dataset and dataloader",
}


@dataclass(frozen=True)
class Rule:
    """One packing rule."""

    id: str
    family: str
    severity: Severity
    title: str
    fields: tuple[str, ...]
    provenance: Provenance
    source: str
    fix: str
    check: Callable[[Resolved], str | None] = field(repr=False, compare=False)
    trigger: dict[str, Any] = field(default_factory=dict, compare=False)
    fixed: dict[str, Any] = field(default_factory=dict, compare=False)
    note: str = ""

    def describe(self) -> dict[str, Any]:
        """JSON-able description (everything but the check function)."""
        return {
            "id": self.id,
            "family": self.family,
            "family_title": FAMILIES[self.family],
            "severity": self.severity,
            "title": self.title,
            "fields": list(self.fields),
            "provenance": self.provenance,
            "source": self.source,
            "fix": self.fix,
            "note": self.note,
            "example_trigger": self.trigger,
            "example_fixed": self.fixed,
        }


# ----------------------------------------------------------------------------------------------
# Example building blocks (dotted overrides on top of the default config)
# ----------------------------------------------------------------------------------------------

OFFLINE = {
    "dataset.enable_offline_packing": True,
    "dataset.offline_packing_specs.packed_sequence_size": 2048,
    "model.seq_length": 2048,
}
IN_BATCH = {
    "dataset.enable_in_batch_packing": True,
    "dataset.dataloader_type": "single",
    "train.micro_batch_size": 4,
}
ENERGON = {
    "dataset.kind": "energon",
    "dataset.packing_buffer_size": 16,
    "model.calculate_per_token_loss": True,
}
GLOBAL = {
    "dataset.enable_global_batch_packing": True,
    "dataset.dataloader_type": "single",
    "model.max_seqlen_per_dp_cp_rank": 2048,
    "model.calculate_per_token_loss": True,
}
CP2 = {"model.context_parallel_size": 2, "model.calculate_per_token_loss": True, "dist.world_size": 2}


def _v(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)


def _near_multiples(value: int, multiple: int) -> str:
    lo = (value // multiple) * multiple
    hi = lo + multiple
    return f"{lo} or {hi}" if lo > 0 else str(hi)


def _topology(r: Resolved) -> str:
    return f"TP{r.tp}/CP{r.cp}/{'SP' if r.sp else 'no SP'}" + (
        f" (eval CP{r.cfg.dist.eval_context_parallel_size})" if r.cfg.dist.eval_context_parallel_size else ""
    )


# ----------------------------------------------------------------------------------------------
# Checks (each returns a message naming fields and values, or None)
# ----------------------------------------------------------------------------------------------


def _world_divisible(r: Resolved) -> str | None:
    world = r.cfg.dist.world_size
    if r.dp is None:
        return (
            f"dist.world_size={world} is not divisible by TP*PP*CP = {r.tp}*{r.pp}*{r.cp} = {r.model_parallel}, "
            "so the data-parallel size is undefined"
        )
    if r.eval_dp is None:
        mp = r.tp * r.pp * r.eval_cp
        return f"dist.world_size={world} is not divisible by TP*PP*eval CP = {mp}"
    return None


def _gbs_divisible(r: Resolved) -> str | None:
    if r.dp is None:
        return None
    gbs, mbs = r.cfg.train.global_batch_size, r.cfg.train.micro_batch_size
    unit = mbs * r.dp
    if gbs % unit:
        return (
            f"train.global_batch_size={gbs} is not divisible by micro_batch_size*DP = {mbs}*{r.dp} = {unit}; "
            f"nearest valid: {_near_multiples(gbs, unit)}"
        )
    return None


def _eval_gbs_divisible(r: Resolved) -> str | None:
    egbs = r.cfg.validation.eval_global_batch_size
    if egbs is None or r.eval_dp is None:
        return None
    embs = r.cfg.validation.eval_micro_batch_size or r.cfg.train.micro_batch_size
    unit = embs * r.eval_dp
    if egbs % unit:
        return (
            f"validation.eval_global_batch_size={egbs} is not divisible by eval micro batch * eval DP = "
            f"{embs}*{r.eval_dp} = {unit}; nearest valid: {_near_multiples(egbs, unit)}"
        )
    return None


def _seq_match(r: Resolved) -> str | None:
    ms, ds = r.cfg.model.seq_length, r.cfg.dataset.seq_length
    if ms is not None and ds is not None and ms != ds:
        return f"model.seq_length={ms} differs from dataset.seq_length={ds}"
    return None


def _cp_seq_divisible(r: Resolved) -> str | None:
    if r.cp > 1 and r.seq_length % (2 * r.cp):
        return (
            f"seq_length={r.seq_length} is not divisible by 2*context_parallel_size = {2 * r.cp}; "
            f"nearest valid: {_near_multiples(r.seq_length, 2 * r.cp)}"
        )
    return None


def _cp_per_token(r: Resolved) -> str | None:
    if r.cp > 1 and r.is_sft and not r.cfg.model.calculate_per_token_loss:
        return (
            f"fine-tuning ({r.cfg.dataset.kind}) with context_parallel_size={r.cp} needs "
            "model.calculate_per_token_loss=true (got false); otherwise the loss is scaled per CP shard"
        )
    return None


def _cp_avg(r: Resolved) -> str | None:
    if r.cp > 1 and r.is_sft and r.cfg.ddp.average_in_collective:
        return (
            f"fine-tuning ({r.cfg.dataset.kind}) with context_parallel_size={r.cp} needs "
            "ddp.average_in_collective=false (got true)"
        )
    return None


def _align_seq(r: Resolved) -> str | None:
    mult = r.alignment.seq_length_multiple
    if not r.is_sft or mult == 1:
        return None
    if r.cp > 1 and r.seq_length % (2 * r.cp):
        return None  # CP-SEQ-DIVISIBLE already reports the more basic problem
    if r.seq_length % mult:
        return (
            f"seq_length={r.seq_length} is not a multiple of the alignment {mult} required by {_topology(r)} "
            f"({r.alignment.explanation}); nearest valid: {_near_multiples(r.seq_length, mult)}"
        )
    return None


def _eval_cp_pg(r: Resolved) -> str | None:
    ecp = r.cfg.dist.eval_context_parallel_size
    if ecp is not None and ecp != r.cp and not r.cfg.dist.use_decentralized_pg:
        return (
            f"dist.eval_context_parallel_size={ecp} differs from context_parallel_size={r.cp} but "
            "dist.use_decentralized_pg=false: the distinct eval CP only reserves compatible data shapes"
        )
    return None


def _offline_specs_required(r: Resolved) -> str | None:
    if r.cfg.dataset.enable_offline_packing and r.specs is None:
        return "dataset.enable_offline_packing=true but dataset.offline_packing_specs is not set"
    return None


def _offline_enable_required(r: Resolved) -> str | None:
    if r.specs is not None and not r.cfg.dataset.enable_offline_packing:
        return "dataset.offline_packing_specs is set but dataset.enable_offline_packing=false"
    return None


def _offline_on(r: Resolved) -> bool:
    return r.cfg.dataset.enable_offline_packing and r.specs is not None


def _offline_size_positive(r: Resolved) -> str | None:
    if _offline_on(r) and r.specs.packed_sequence_size <= 0:  # type: ignore[union-attr]
        return f"offline_packing_specs.packed_sequence_size={r.specs.packed_sequence_size} must be > 0"  # type: ignore[union-attr]
    return None


def _pad_mult_positive(r: Resolved) -> str | None:
    if r.specs is not None and r.specs.pad_seq_to_mult is not None and r.specs.pad_seq_to_mult <= 0:
        return f"offline_packing_specs.pad_seq_to_mult={r.specs.pad_seq_to_mult} must be a positive integer"
    return None


def _pad_mult_null(r: Resolved) -> str | None:
    if _offline_on(r) and r.specs.pad_seq_to_mult is None:  # type: ignore[union-attr]
        return (
            "offline_packing_specs.pad_seq_to_mult=null is accepted when packing but breaks the runtime "
            "collate, which compares it with 1"
        )
    return None


def _max_single_positive(r: Resolved) -> str | None:
    s = r.specs
    if s is not None and s.max_single_sequence_length is not None and s.max_single_sequence_length <= 0:
        return f"offline_packing_specs.max_single_sequence_length={s.max_single_sequence_length} must be > 0"
    return None


def _max_single_le_pack(r: Resolved) -> str | None:
    s = r.specs
    if s is None or s.max_single_sequence_length is None or s.packed_sequence_size <= 0:
        return None
    if s.max_single_sequence_length > s.packed_sequence_size:
        return (
            f"offline_packing_specs.max_single_sequence_length={s.max_single_sequence_length} exceeds "
            f"packed_sequence_size={s.packed_sequence_size}"
        )
    return None


def _seq_le_pack(r: Resolved) -> str | None:
    s = r.specs
    if not _offline_on(r) or s.packed_sequence_size <= 0 or s.max_single_sequence_length is not None:  # type: ignore[union-attr]
        return None
    if r.seq_length > s.packed_sequence_size:  # type: ignore[union-attr]
        return (
            f"samples are tokenized up to seq_length={r.seq_length}, which exceeds "
            f"packed_sequence_size={s.packed_sequence_size} (max_single_sequence_length is unset): "  # type: ignore[union-attr]
            "samples longer than the pack reach the fill step and crash it"
        )
    return None


def _size_eq_seq(r: Resolved) -> str | None:
    if _offline_on(r) and r.specs.packed_sequence_size > 0 and r.specs.packed_sequence_size != r.seq_length:  # type: ignore[union-attr]
        return (
            f"offline_packing_specs.packed_sequence_size={r.specs.packed_sequence_size} differs from "  # type: ignore[union-attr]
            f"seq_length={r.seq_length}"
        )
    return None


def _offline_mbs1(r: Resolved) -> str | None:
    mbs = r.cfg.train.micro_batch_size
    if r.cfg.dataset.enable_offline_packing and mbs > 1:
        return (
            f"offline packing needs train.micro_batch_size=1 (got {mbs}): every packed row already holds "
            "several samples and is one physical micro-batch; global_batch_size then counts packs"
        )
    return None


def _offline_kind(r: Resolved) -> str | None:
    if r.cfg.dataset.enable_offline_packing and r.cfg.dataset.kind != "gpt_sft":
        return f"dataset.enable_offline_packing=true on a '{r.cfg.dataset.kind}' dataset; offline packing is GPT-SFT only"
    return None


def _pad_mult_topology(r: Resolved) -> str | None:
    if not _offline_on(r) or not r.specs.pad_seq_to_mult or r.specs.pad_seq_to_mult <= 0:  # type: ignore[union-attr]
        return None
    need, have = r.alignment.pad_seq_to_mult, r.specs.pad_seq_to_mult  # type: ignore[union-attr]
    if have % need:
        return (
            f"offline_packing_specs.pad_seq_to_mult={have} but {_topology(r)} needs a multiple of {need} "
            f"({r.alignment.explanation}); Transformer Engine would fail inside attention"
        )
    return None


def _width_aligned(r: Resolved) -> str | None:
    need = r.alignment.pad_seq_to_mult
    if not _offline_on(r) or need == 1 or r.specs.packed_sequence_size <= 0:  # type: ignore[union-attr]
        return None
    p = r.specs.packed_sequence_size  # type: ignore[union-attr]
    if p % need:
        return (
            f"offline_packing_specs.packed_sequence_size={p} is not a multiple of {need} ({_topology(r)}): the "
            f"trailing width padding becomes a sequence that cannot be split; nearest valid: {_near_multiples(p, need)}"
        )
    return None


def _width_rounding(r: Resolved) -> str | None:
    need = r.alignment.pad_seq_to_mult
    if not _offline_on(r) or need == 1 or r.pad_to_max_length:
        return None
    mult = r.cfg.dataset.dataset_kwargs.get("pad_seq_length_to_mult", 16)
    if isinstance(mult, int) and mult > 0 and mult % need:
        return (
            f"without a fixed width, packed rows are rounded up to dataset_kwargs.pad_seq_length_to_mult={mult}, "
            f"which is not a multiple of the alignment {need} ({_topology(r)})"
        )
    return None


def _pad_cu_fixed_width(r: Resolved) -> str | None:
    if r.specs is not None and r.specs.pad_cu_seqlens and not r.pad_to_max_length:
        return "offline_packing_specs.pad_cu_seqlens=true requires pad_to_max_length=true (dataset_kwargs)"
    return None


def _pad_cu_metadata(r: Resolved) -> str | None:
    s = r.specs
    if s is None or not s.pad_cu_seqlens:
        return None
    if (s.packed_train_data_path or s.packed_val_data_path) and not s.packed_metadata_path:
        return (
            "offline_packing_specs.pad_cu_seqlens=true with explicit packed data paths but no "
            "packed_metadata_path: the static shapes come from the pack metadata file"
        )
    return None


def _graph_fixed_width(r: Resolved) -> str | None:
    if _offline_on(r) and r.training_graphs and not r.pad_to_max_length:
        impl = r.cfg.model.cuda_graph_impl
        return f"offline packing with CUDA graphs (cuda_graph_impl={impl}) requires pad_to_max_length=true"
    return None


def _graph_pad_cu(r: Resolved) -> str | None:
    if _offline_on(r) and r.graph_captures_attention and not r.specs.pad_cu_seqlens:  # type: ignore[union-attr]
        m = r.cfg.model
        return (
            f"CUDA graphs that capture packed attention (cuda_graph_impl={m.cuda_graph_impl}, "
            f"cuda_graph_scope={m.cuda_graph_scope}) require offline_packing_specs.pad_cu_seqlens=true"
        )
    return None


def _graph_nan(r: Resolved) -> str | None:
    if r.full_iteration_graph and r.cfg.rerun_state_machine.check_for_nan_in_loss:
        return "a full-iteration CUDA graph requires rerun_state_machine.check_for_nan_in_loss=false"
    return None


def _moe_mask_graph(r: Resolved) -> str | None:
    if r.packed and r.cfg.model.num_moe_experts and r.graph_captures_router:
        return (
            f"packed MoE batches carry a padding mask that router-scoped Transformer Engine CUDA graphs cannot take "
            f"(cuda_graph_scope={r.cfg.model.cuda_graph_scope})"
        )
    return None


def _excl_offline_in_batch(r: Resolved) -> str | None:
    d = r.cfg.dataset
    if d.enable_offline_packing and d.enable_in_batch_packing:
        return "dataset.enable_offline_packing and dataset.enable_in_batch_packing are both true"
    return None


def _excl_energon_in_batch(r: Resolved) -> str | None:
    if r.cfg.energon_packing and r.cfg.dataset.enable_in_batch_packing:
        return (
            f"Energon native packing (packing_buffer_size={r.cfg.dataset.packing_buffer_size}) and collator-owned "
            "enable_in_batch_packing=true are both selected"
        )
    return None


def _excl_global(r: Resolved) -> str | None:
    others = [p for p in r.paths if p != "global_batch"]
    if "global_batch" in r.paths and others:
        return f"dataset.enable_global_batch_packing=true together with {', '.join(others)} packing"
    return None


def _energon_defer(r: Resolved) -> str | None:
    if r.cfg.energon_packing and r.cfg.dataset.defer_in_batch_packing_to_step:
        return "Energon native packing with dataset.defer_in_batch_packing_to_step=true"
    return None


def _in_batch_mbs(r: Resolved) -> str | None:
    if r.cfg.dataset.enable_in_batch_packing and r.cfg.train.micro_batch_size == 1:
        return "in-batch packing with train.micro_batch_size=1: a micro-batch must hold at least 2 rows to pack"
    return None


def _in_batch_loader(r: Resolved) -> str | None:
    if r.cfg.dataset.enable_in_batch_packing and r.dataloader_type == "batch":
        return (
            "in-batch packing with dataloader_type=batch: that loader hands the whole per-rank global batch to "
            "one collate, so it would be packed into one row"
        )
    return None


def _in_batch_kind(r: Resolved) -> str | None:
    if r.cfg.dataset.enable_in_batch_packing and r.cfg.dataset.kind == "pretrain":
        return "dataset.enable_in_batch_packing=true on a pretrain dataset, which already concatenates documents"
    return None


def _in_batch_mult_overridden(r: Resolved) -> str | None:
    user = r.cfg.dataset.in_batch_packing_pad_to_multiple_of
    if (r.cfg.dataset.enable_in_batch_packing or r.cfg.energon_packing) and user is not None:
        if user != r.alignment.pad_seq_to_mult:
            return (
                f"dataset.in_batch_packing_pad_to_multiple_of={user} is overwritten with the derived "
                f"{r.alignment.pad_seq_to_mult} ({_topology(r)})"
            )
    return None


def _deferred_step(r: Resolved) -> str | None:
    d = r.cfg.dataset
    fam = find_family(r.cfg.model.family)
    if d.enable_in_batch_packing and d.defer_in_batch_packing_to_step and not (fam and fam.family == "megatron_mimo"):
        return (
            "dataset.defer_in_batch_packing_to_step=true with in-batch packing: the VLM step requires "
            "collate-time packing"
        )
    return None


def _pad_multiple_positive(r: Resolved) -> str | None:
    d = r.cfg.dataset
    for name in ("pad_to_multiple_of", "in_batch_packing_pad_to_multiple_of"):
        value = getattr(d, name)
        if value is not None and value <= 0:
            return f"dataset.{name}={value} must be greater than 0"
    return None


def _energon_buffer_positive(r: Resolved) -> str | None:
    if r.cfg.energon_packing and r.cfg.dataset.packing_buffer_size <= 0:  # type: ignore[operator]
        return f"dataset.packing_buffer_size={r.cfg.dataset.packing_buffer_size} must be > 0"
    return None


def _energon_kind(r: Resolved) -> str | None:
    d = r.cfg.dataset
    if d.packing_buffer_size is not None and d.kind != "energon":
        return f"dataset.packing_buffer_size={d.packing_buffer_size} on a '{d.kind}' dataset; it selects Energon packing"
    return None


def _energon_mbs1(r: Resolved) -> str | None:
    if r.cfg.energon_packing and r.cfg.train.micro_batch_size != 1:
        return f"Energon native packing requires train.micro_batch_size=1 (got {r.cfg.train.micro_batch_size})"
    return None


def _energon_dataset_mbs(r: Resolved) -> str | None:
    d = r.cfg.dataset
    if d.kind == "energon" and d.micro_batch_size is not None and d.micro_batch_size != r.cfg.train.micro_batch_size:
        return (
            f"dataset.micro_batch_size={d.micro_batch_size} must match "
            f"train.micro_batch_size={r.cfg.train.micro_batch_size}"
        )
    return None


def _energon_flag(attr: str, want: bool, what: str) -> Callable[[Resolved], str | None]:
    section, name = attr.split(".")

    def check(r: Resolved) -> str | None:
        value = getattr(getattr(r.cfg, section), name)
        if r.cfg.energon_packing and bool(value) != want:
            return f"Energon native packing requires {attr}={_v(want)} (got {_v(value)}){what}"
        return None

    return check


def _energon_no_mtp(r: Resolved) -> str | None:
    if r.cfg.energon_packing and (r.cfg.model.mtp_num_layers or 0) > 0:
        return f"Energon native packing does not support MTP (model.mtp_num_layers={r.cfg.model.mtp_num_layers})"
    return None


def _energon_no_graphs(r: Resolved) -> str | None:
    m = r.cfg.model
    if r.cfg.energon_packing and r.any_graph:
        return (
            "Energon native packing does not support CUDA graphs "
            f"(cuda_graph_impl={m.cuda_graph_impl}, vision_cuda_graph_impl={m.vision_cuda_graph_impl})"
        )
    return None


def _energon_no_pp(r: Resolved) -> str | None:
    if r.cfg.energon_packing and r.pp > 1:
        return f"Energon native packing does not support pipeline parallelism (pipeline_model_parallel_size={r.pp})"
    return None


def _energon_ep_overlap(r: Resolved) -> str | None:
    m = r.cfg.model
    if r.cfg.energon_packing and (m.overlap_moe_expert_parallel_comm or m.delay_wgrad_compute):
        return (
            "Energon native packing disables MoE expert-parallel communication overlap "
            f"(overlap_moe_expert_parallel_comm={_v(m.overlap_moe_expert_parallel_comm)}, "
            f"delay_wgrad_compute={_v(m.delay_wgrad_compute)}); training runs the non-overlapped path"
        )
    return None


def _energon_encoder(r: Resolved) -> str | None:
    enc = r.cfg.dataset.task_encoder
    if r.cfg.energon_packing and enc not in (None, "qwen_vl"):
        return f"Energon native packing is implemented only by the Qwen-VL task encoder (dataset.task_encoder={enc})"
    return None


def _energon_loader(r: Resolved) -> str | None:
    if r.cfg.dataset.kind == "energon" and r.dataloader_type != "external":
        return f"Energon datasets use dataloader_type=external (got {r.dataloader_type})"
    return None


def _fixed_width_forced(r: Resolved) -> str | None:
    d = r.cfg.dataset
    if d.kind in ("direct_hf", "energon", "mock_vlm") and (r.pp > 1 or r.ep > 1) and not r.pad_to_max_length:
        return (
            f"with pipeline_model_parallel_size={r.pp} / expert_model_parallel_size={r.ep}, Megatron-Bridge "
            "forces dataset.pad_to_max_length=true on this dataset"
        )
    return None


def _global_on(r: Resolved) -> bool:
    return r.cfg.dataset.enable_global_batch_packing


def _global_mbs1(r: Resolved) -> str | None:
    if _global_on(r) and r.cfg.train.micro_batch_size != 1:
        return f"global-batch packing requires train.micro_batch_size=1 (got {r.cfg.train.micro_batch_size})"
    return None


def _global_flag(attr: str, want: bool) -> Callable[[Resolved], str | None]:
    section, name = attr.split(".")

    def check(r: Resolved) -> str | None:
        value = getattr(getattr(r.cfg, section), name)
        if _global_on(r) and bool(value) != want:
            return f"global-batch packing requires {attr}={_v(want)} (got {_v(value)})"
        return None

    return check


def _global_no_graphs(r: Resolved) -> str | None:
    if _global_on(r) and r.any_graph:
        return f"global-batch packing does not support CUDA graphs (cuda_graph_impl={r.cfg.model.cuda_graph_impl})"
    return None


def _global_no_pp(r: Resolved) -> str | None:
    if _global_on(r) and r.pp > 1:
        return f"global-batch packing does not support pipeline parallelism (pipeline_model_parallel_size={r.pp})"
    return None


def _global_no_vpp(r: Resolved) -> str | None:
    vpp = r.cfg.model.virtual_pipeline_model_parallel_size
    if _global_on(r) and vpp is not None:
        return f"global-batch packing does not support virtual pipeline parallelism (virtual_pipeline_model_parallel_size={vpp})"
    return None


def _global_loader(r: Resolved) -> str | None:
    if _global_on(r) and r.dataloader_type not in ("single", "cyclic"):
        return f"global-batch packing needs dataloader_type single or cyclic (got {r.dataloader_type})"
    return None


def _global_max_required(r: Resolved) -> str | None:
    if _global_on(r) and r.cfg.model.max_seqlen_per_dp_cp_rank is None:
        return "global-batch packing needs an explicit model.max_seqlen_per_dp_cp_rank (tokens per rank per pack)"
    return None


def _global_capacity(r: Resolved) -> str | None:
    cap = r.cfg.model.max_seqlen_per_dp_cp_rank
    if _global_on(r) and cap is not None and cap * r.cp < r.seq_length:
        return (
            f"model.max_seqlen_per_dp_cp_rank*context_parallel_size = {cap}*{r.cp} = {cap * r.cp} is smaller than "
            f"seq_length={r.seq_length}, so the longest sample cannot fit in one pack"
        )
    return None


def _global_no_hybrid(r: Resolved) -> str | None:
    if _global_on(r) and r.cfg.model.is_hybrid_model:
        return "global-batch packing does not support hybrid Mamba models (model.is_hybrid_model=true)"
    return None


def _global_no_fsdp(r: Resolved) -> str | None:
    if _global_on(r) and r.cfg.ddp.use_megatron_fsdp:
        return "global-batch packing does not support Megatron FSDP (ddp.use_megatron_fsdp=true)"
    return None


def _global_unpacked(r: Resolved) -> str | None:
    if _global_on(r) and not r.cfg.yields_unpacked_samples:
        return (
            f"the '{r.cfg.dataset.kind}' dataset does not declare yields_unpacked_samples, which the global-batch "
            "scheduler needs (one unpacked sample per MBS1 micro-batch)"
        )
    return None


KNOWN_SCHEDULERS = ("dp_balanced", "balanced")


def _global_scheduler(r: Resolved) -> str | None:
    sched = r.cfg.model.sequence_packing_scheduler
    if _global_on(r) and sched is not None and sched not in KNOWN_SCHEDULERS:
        return f"model.sequence_packing_scheduler={sched} is not a registered scheduler ({', '.join(KNOWN_SCHEDULERS)})"
    return None


def _mtp_documented(r: Resolved) -> str | None:
    mtp = r.cfg.model.mtp_num_layers or 0
    paths = [p for p in r.paths if p in ("offline", "in_batch", "global_batch")]
    if mtp > 0 and paths:
        return (
            f"model.mtp_num_layers={mtp} with {', '.join(paths)} packing: the packing docs call MTP fine-tuning "
            "incompatible with packed sequences, although no upstream check rejects it"
        )
    return None


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


def _llava(r: Resolved) -> str | None:
    fam = find_family(r.cfg.model.family)
    if fam and fam.family == "llava" and r.packed and (r.pp > 1 or r.cp > 1):
        return (
            f"model.family={r.cfg.model.family}: LLaVA packed batches require PP=1 and CP=1 "
            f"(pipeline_model_parallel_size={r.pp}, context_parallel_size={r.cp})"
        )
    return None


def _num_epochs(r: Resolved) -> str | None:
    ne = r.cfg.train.num_epochs
    if ne is None:
        return None
    if r.cfg.dataset.kind != "gpt_sft":
        return f"train.num_epochs={ne} is only supported for finite GPT-SFT datasets (dataset.kind={r.cfg.dataset.kind})"
    if r.dataloader_type != "batch":
        return f"train.num_epochs={ne} is only supported with dataloader_type=batch (got {r.dataloader_type})"
    return None


def _kwargs_max_samples(r: Resolved) -> str | None:
    if "max_num_samples" in r.cfg.dataset.dataset_kwargs:
        return (
            f"dataset.dataset_kwargs.max_num_samples={r.cfg.dataset.dataset_kwargs['max_num_samples']} is not "
            "accepted; the sample cap is dataset.max_train_samples"
        )
    return None


def _hf_rewrite(r: Resolved) -> str | None:
    s = r.specs
    if r.cfg.dataset.hf_rewrite and s is not None and (
        s.packed_train_data_path or s.packed_val_data_path or s.packed_metadata_path
    ):
        return "dataset.hf_rewrite=true cannot safely replace explicit packed data paths"
    return None


# ----------------------------------------------------------------------------------------------
# The registry
# ----------------------------------------------------------------------------------------------

BRIDGE_CC = "Megatron-Bridge ConfigContainer.validate"
SPECS = "dataset.offline_packing_specs"

RULES: tuple[Rule, ...] = (
    # --- topology and batch sizes ---------------------------------------------------------------
    Rule(
        "TOPO-WORLD-DIVISIBLE", "topology", "error",
        "world_size must be divisible by TP*PP*CP (and by TP*PP*eval CP)",
        ("dist.world_size", "model.tensor_model_parallel_size", "model.pipeline_model_parallel_size",
         "model.context_parallel_size", "dist.eval_context_parallel_size"),
        "stricter", "Megatron-Core parallel state initialisation fails otherwise",
        "Choose a world size that is a multiple of TP*PP*CP, or change the parallel sizes.",
        _world_divisible,
        {"dist.world_size": 6, "model.tensor_model_parallel_size": 4},
        {"dist.world_size": 8},
    ),
    Rule(
        "BATCH-GBS-DIVISIBLE", "topology", "error",
        "global_batch_size must be divisible by micro_batch_size * DP (hence also >= DP)",
        ("train.global_batch_size", "train.micro_batch_size", "dist.world_size"),
        "upstream", "V40: Megatron batch sampler / Megatron-Core micro-batch calculator",
        "Pick a global batch size that is a multiple of micro_batch_size * data_parallel_size.",
        _gbs_divisible,
        {"dist.world_size": 8, "train.global_batch_size": 12},
        {"train.global_batch_size": 16},
        note="The packing docs also ask for GBS >= DP with offline MBS1 packing; divisibility with GBS > 0 implies it.",
    ),
    Rule(
        "BATCH-EVAL-GBS-DIVISIBLE", "topology", "error",
        "eval_global_batch_size must be divisible by eval micro batch size * eval DP",
        ("validation.eval_global_batch_size", "validation.eval_micro_batch_size", "dist.eval_context_parallel_size"),
        "upstream", f"V41: {BRIDGE_CC}",
        "Pick an eval global batch size that is a multiple of eval_micro_batch_size * eval DP.",
        _eval_gbs_divisible,
        {"dist.world_size": 8, "validation.eval_global_batch_size": 12},
        {"validation.eval_global_batch_size": 16},
    ),
    Rule(
        "SEQ-LENGTH-MATCH", "topology", "error",
        "model.seq_length and dataset.seq_length must be equal",
        ("model.seq_length", "dataset.seq_length"),
        "upstream", f"V25: {BRIDGE_CC}",
        "Set model.seq_length and dataset.seq_length to the same value.",
        _seq_match,
        {"model.seq_length": 4096, "dataset.seq_length": 2048},
        {"dataset.seq_length": 4096},
    ),
    # --- context parallelism and alignment ------------------------------------------------------
    Rule(
        "CP-SEQ-DIVISIBLE", "context_parallel", "error",
        "with CP > 1, seq_length must be divisible by 2*CP",
        ("model.seq_length", "model.context_parallel_size"),
        "upstream", f"V18: {BRIDGE_CC}",
        "Round seq_length to a multiple of 2*context_parallel_size.",
        _cp_seq_divisible,
        {**CP2, "model.context_parallel_size": 3, "dist.world_size": 3, "model.seq_length": 256},
        {"model.seq_length": 258},
    ),
    Rule(
        "CP-FT-PER-TOKEN-LOSS", "context_parallel", "error",
        "fine-tuning with CP > 1 needs calculate_per_token_loss=true",
        ("model.context_parallel_size", "model.calculate_per_token_loss", "dataset.kind"),
        "upstream", f"V19: {BRIDGE_CC}",
        "Set model.calculate_per_token_loss=true.",
        _cp_per_token,
        {"model.context_parallel_size": 2, "dist.world_size": 2},
        {"model.calculate_per_token_loss": True},
    ),
    Rule(
        "CP-FT-AVG-COLLECTIVE", "context_parallel", "error",
        "fine-tuning with CP > 1 needs ddp.average_in_collective=false",
        ("model.context_parallel_size", "ddp.average_in_collective", "dataset.kind"),
        "upstream", f"V20: {BRIDGE_CC}",
        "Set ddp.average_in_collective=false (the per-token loss reduction does the averaging).",
        _cp_avg,
        {**CP2, "ddp.average_in_collective": True},
        {"ddp.average_in_collective": False},
    ),
    Rule(
        "ALIGN-SEQ-LENGTH", "context_parallel", "error",
        "SFT seq_length must be a multiple of lcm(2*CP per train/eval CP, CP*TP under SP)",
        ("model.seq_length", "model.context_parallel_size", "model.tensor_model_parallel_size",
         "model.sequence_parallel", "dist.eval_context_parallel_size"),
        "upstream", f"V21: {BRIDGE_CC} (direct_hf, energon, mock_vlm); documented for gpt_sft",
        "Round seq_length to a multiple of the derived alignment (`seqpack align`).",
        _align_seq,
        {**CP2, "dist.world_size": 8, "model.tensor_model_parallel_size": 4, "model.sequence_parallel": True,
         "model.seq_length": 20, "dataset.kind": "direct_hf"},
        {"model.seq_length": 24},
    ),
    Rule(
        "CP-EVAL-DECENTRALIZED", "context_parallel", "warning",
        "a distinct eval CP only takes effect with decentralized process groups",
        ("dist.eval_context_parallel_size", "dist.use_decentralized_pg"),
        "documented", "packed-sequences docs (practical caveats)",
        "Enable dist.use_decentralized_pg and manage eval groups, or drop eval_context_parallel_size.",
        _eval_cp_pg,
        {**CP2, "dist.world_size": 8, "dist.eval_context_parallel_size": 4, "model.seq_length": 4096},
        {"dist.use_decentralized_pg": True},
    ),
    # --- offline packed SFT ----------------------------------------------------------------------
    Rule(
        "PACK-OFFLINE-SPECS-REQUIRED", "offline", "error",
        "enable_offline_packing needs offline_packing_specs",
        ("dataset.enable_offline_packing", SPECS),
        "upstream", f"V7: {BRIDGE_CC}",
        "Set dataset.offline_packing_specs (at least packed_sequence_size and pad_seq_to_mult).",
        _offline_specs_required,
        {"dataset.enable_offline_packing": True},
        {f"{SPECS}.packed_sequence_size": 2048},
    ),
    Rule(
        "PACK-OFFLINE-ENABLE-REQUIRED", "offline", "error",
        "offline_packing_specs needs enable_offline_packing=true",
        ("dataset.enable_offline_packing", SPECS),
        "upstream", f"V8: {BRIDGE_CC}",
        "Set dataset.enable_offline_packing=true, or remove offline_packing_specs.",
        _offline_enable_required,
        {f"{SPECS}.packed_sequence_size": 2048},
        {"dataset.enable_offline_packing": True},
    ),
    Rule(
        "PACK-OFFLINE-SIZE-POSITIVE", "offline", "error",
        "packed_sequence_size must be > 0 (its default is -1)",
        (f"{SPECS}.packed_sequence_size",),
        "upstream", "V9: GPTSFTDatasetConfig.validate",
        "Set offline_packing_specs.packed_sequence_size, normally equal to seq_length.",
        _offline_size_positive,
        {"dataset.enable_offline_packing": True, f"{SPECS}.pad_seq_to_mult": 1},
        {f"{SPECS}.packed_sequence_size": 2048},
    ),
    Rule(
        "PACK-OFFLINE-PAD-MULT-POSITIVE", "offline", "error",
        "pad_seq_to_mult must be a positive integer",
        (f"{SPECS}.pad_seq_to_mult",),
        "upstream", "V1: PackedSequenceSpecs",
        "Set pad_seq_to_mult to the derived alignment (`seqpack align`).",
        _pad_mult_positive,
        {**OFFLINE, f"{SPECS}.pad_seq_to_mult": 0},
        {f"{SPECS}.pad_seq_to_mult": 1},
    ),
    Rule(
        "PACK-OFFLINE-PAD-MULT-NULL", "offline", "error",
        "pad_seq_to_mult=null passes packing but breaks the runtime collate",
        (f"{SPECS}.pad_seq_to_mult",),
        "stricter", "quirk: upstream accepts None when packing, then compares it with 1 at collate time",
        "Set pad_seq_to_mult to an integer (1 when no CP/SP alignment is needed).",
        _pad_mult_null,
        {**OFFLINE, f"{SPECS}.pad_seq_to_mult": None},
        {f"{SPECS}.pad_seq_to_mult": 1},
    ),
    Rule(
        "PACK-OFFLINE-MAX-SINGLE-POSITIVE", "offline", "error",
        "max_single_sequence_length must be > 0",
        (f"{SPECS}.max_single_sequence_length",),
        "upstream", "V2: PackedSequenceSpecs",
        "Leave max_single_sequence_length unset (defaults to seq_length) or set a positive value.",
        _max_single_positive,
        {**OFFLINE, f"{SPECS}.max_single_sequence_length": 0},
        {f"{SPECS}.max_single_sequence_length": 1024},
    ),
    Rule(
        "PACK-OFFLINE-MAX-SINGLE-LE-PACK", "offline", "error",
        "max_single_sequence_length cannot exceed packed_sequence_size",
        (f"{SPECS}.max_single_sequence_length", f"{SPECS}.packed_sequence_size"),
        "upstream", "V3: PackedSequenceSpecs",
        "Lower max_single_sequence_length to at most packed_sequence_size.",
        _max_single_le_pack,
        {**OFFLINE, f"{SPECS}.max_single_sequence_length": 4096},
        {f"{SPECS}.max_single_sequence_length": 2048},
    ),
    Rule(
        "PACK-OFFLINE-SEQ-LE-PACK", "offline", "error",
        "without max_single_sequence_length, seq_length must not exceed packed_sequence_size",
        ("model.seq_length", f"{SPECS}.packed_sequence_size", f"{SPECS}.max_single_sequence_length"),
        "stricter", "quirk: samples longer than the pack get singleton bins, then the fill step crashes",
        "Set max_single_sequence_length <= packed_sequence_size, or raise packed_sequence_size to seq_length.",
        _seq_le_pack,
        {**OFFLINE, "model.seq_length": 4096},
        {f"{SPECS}.max_single_sequence_length": 2048},
    ),
    Rule(
        "PACK-OFFLINE-SIZE-EQ-SEQ", "offline", "warning",
        "keep model, dataset and packed sequence lengths equal",
        ("model.seq_length", "dataset.seq_length", f"{SPECS}.packed_sequence_size"),
        "documented", "packed-sequences docs; upstream compares only model and dataset seq_length",
        "Set packed_sequence_size equal to seq_length (and rebuild the packs into a fresh output root).",
        _size_eq_seq,
        {**OFFLINE, f"{SPECS}.packed_sequence_size": 4096},
        {"model.seq_length": 4096},
    ),
    Rule(
        "PACK-OFFLINE-MBS1", "offline", "error",
        "offline packing requires micro_batch_size=1",
        ("train.micro_batch_size", "dataset.enable_offline_packing"),
        "upstream", f"V16: {BRIDGE_CC}",
        "Set train.micro_batch_size=1; compare pack lengths at equal token slots (pack size x global batch "
        "size) with `seqpack plan`.",
        _offline_mbs1,
        {**OFFLINE, "train.micro_batch_size": 4},
        {"train.micro_batch_size": 1},
    ),
    Rule(
        "PACK-OFFLINE-DATASET-KIND", "offline", "error",
        "offline packing is for GPT-SFT datasets",
        ("dataset.enable_offline_packing", "dataset.kind"),
        "upstream", "only GPTSFTDatasetConfig carries offline packing specs",
        "Use dataset.kind=gpt_sft, or choose the in-batch path for this dataset.",
        _offline_kind,
        {**OFFLINE, "dataset.kind": "direct_hf"},
        {"dataset.kind": "gpt_sft"},
    ),
    Rule(
        "PACK-OFFLINE-PAD-MULT-TOPOLOGY", "offline", "error",
        "offline pad_seq_to_mult must be a multiple of the alignment derived from TP/CP/SP",
        (f"{SPECS}.pad_seq_to_mult", "model.context_parallel_size", "model.tensor_model_parallel_size",
         "model.sequence_parallel"),
        "stricter", "upstream never derives or checks it; a wrong value fails inside Transformer Engine attention",
        "Set pad_seq_to_mult to the value `seqpack align` derives and rebuild the packs.",
        _pad_mult_topology,
        {**OFFLINE, **CP2},
        {f"{SPECS}.pad_seq_to_mult": 4},
        note="The docs state the lcm formula for offline SFT/PEFT; Bridge implements it only for collate-time paths.",
    ),
    Rule(
        "PACK-OFFLINE-WIDTH-ALIGNED", "offline", "error",
        "with CP/SP alignment, packed_sequence_size must be a multiple of the alignment",
        (f"{SPECS}.packed_sequence_size", "model.context_parallel_size"),
        "stricter", "the trailing width padding is one more THD sequence; TE requires it divisible by 2*CP",
        "Use a packed_sequence_size that is a multiple of the derived alignment.",
        _width_aligned,
        {**OFFLINE, **CP2, "model.context_parallel_size": 3, "dist.world_size": 3, f"{SPECS}.pad_seq_to_mult": 6},
        {f"{SPECS}.packed_sequence_size": 2046, "model.seq_length": 2046},
    ),
    Rule(
        "PACK-OFFLINE-WIDTH-ROUNDING", "offline", "error",
        "without fixed width, the row-width rounding multiple must be a multiple of the alignment",
        ("dataset.dataset_kwargs.pad_seq_length_to_mult", "dataset.dataset_kwargs.pad_to_max_length",
         "model.context_parallel_size"),
        "stricter", "the collate rounds row width to pad_seq_length_to_mult (default 16); TE needs 2*CP",
        "Set dataset_kwargs.pad_to_max_length=true, or pad_seq_length_to_mult to a multiple of the alignment.",
        _width_rounding,
        {**OFFLINE, **CP2, "model.context_parallel_size": 3, "dist.world_size": 3, f"{SPECS}.pad_seq_to_mult": 6,
         f"{SPECS}.packed_sequence_size": 2046, "model.seq_length": 2046},
        {"dataset.dataset_kwargs.pad_to_max_length": True},
    ),
    Rule(
        "PACK-OFFLINE-PAD-CU-FIXED-WIDTH", "cuda_graphs", "error",
        "pad_cu_seqlens=true requires pad_to_max_length=true",
        (f"{SPECS}.pad_cu_seqlens", "dataset.dataset_kwargs.pad_to_max_length"),
        "upstream", f"V11: {BRIDGE_CC}",
        "Set dataset.dataset_kwargs.pad_to_max_length=true.",
        _pad_cu_fixed_width,
        {**OFFLINE, f"{SPECS}.pad_cu_seqlens": True},
        {"dataset.dataset_kwargs.pad_to_max_length": True},
    ),
    Rule(
        "PACK-OFFLINE-PAD-CU-METADATA", "cuda_graphs", "error",
        "pad_cu_seqlens=true needs the pack metadata file",
        (f"{SPECS}.pad_cu_seqlens", f"{SPECS}.packed_metadata_path", f"{SPECS}.packed_train_data_path"),
        "upstream", "V14: packed dataset construction asserts a metadata file",
        "Set offline_packing_specs.packed_metadata_path to the metadata JSON written with the packs.",
        _pad_cu_metadata,
        {**OFFLINE, f"{SPECS}.pad_cu_seqlens": True, "dataset.dataset_kwargs.pad_to_max_length": True,
         f"{SPECS}.packed_train_data_path": "/data/packed/training_2048.idx.parquet"},
        {f"{SPECS}.packed_metadata_path": "/data/packed/2048_metadata.jsonl"},
    ),
    Rule(
        "PACK-CUDA-GRAPH-FIXED-WIDTH", "cuda_graphs", "error",
        "offline packing with CUDA graphs (full-iteration or Transformer Engine) needs pad_to_max_length",
        ("model.cuda_graph_impl", "model.cuda_graph_scope", "dataset.dataset_kwargs.pad_to_max_length"),
        "upstream", f"V12: {BRIDGE_CC}",
        "Set dataset.dataset_kwargs.pad_to_max_length=true so every packed row has the captured width.",
        _graph_fixed_width,
        {**OFFLINE, "model.cuda_graph_impl": "transformer_engine", "model.cuda_graph_scope": ["mlp"]},
        {"dataset.dataset_kwargs.pad_to_max_length": True},
    ),
    Rule(
        "PACK-CUDA-GRAPH-PAD-CU", "cuda_graphs", "error",
        "CUDA graphs that capture packed attention need pad_cu_seqlens=true",
        ("model.cuda_graph_impl", "model.cuda_graph_scope", f"{SPECS}.pad_cu_seqlens"),
        "upstream", f"V13: {BRIDGE_CC}",
        "Set offline_packing_specs.pad_cu_seqlens=true (plus pad_to_max_length and the metadata file).",
        _graph_pad_cu,
        {**OFFLINE, "model.cuda_graph_impl": "transformer_engine", "model.cuda_graph_scope": ["attn"],
         "dataset.dataset_kwargs.pad_to_max_length": True},
        {f"{SPECS}.pad_cu_seqlens": True},
        note="The docs say CUDA graphs need pad_cu_seqlens; upstream requires it only when attention is captured "
        "(full-iteration, whole-layer or 'attn' scope). MLP-only graphs pass without it.",
    ),
    Rule(
        "CUDA-GRAPH-NAN-CHECK", "cuda_graphs", "error",
        "a full-iteration CUDA graph needs check_for_nan_in_loss=false",
        ("model.cuda_graph_impl", "model.cuda_graph_scope", "rerun_state_machine.check_for_nan_in_loss"),
        "upstream", f"V55: {BRIDGE_CC}",
        "Set rerun_state_machine.check_for_nan_in_loss=false.",
        _graph_nan,
        {"model.cuda_graph_impl": "local", "model.cuda_graph_scope": ["full_iteration"]},
        {"rerun_state_machine.check_for_nan_in_loss": False},
    ),
    Rule(
        "PACK-MOE-MASK-CUDA-GRAPH", "cuda_graphs", "error",
        "packed MoE padding masks are incompatible with router-scoped Transformer Engine CUDA graphs",
        ("model.num_moe_experts", "model.cuda_graph_impl", "model.cuda_graph_scope"),
        "upstream", "V54: Megatron-Bridge gpt_step",
        "Limit cuda_graph_scope to attn/mlp (not the router), or disable CUDA graphs for this packed MoE run.",
        _moe_mask_graph,
        {**OFFLINE, "model.num_moe_experts": 8, "model.cuda_graph_impl": "transformer_engine",
         "model.cuda_graph_scope": ["moe_router"], "dataset.dataset_kwargs.pad_to_max_length": True},
        {"model.cuda_graph_scope": ["mlp"]},
    ),
    # --- mutual exclusion ----------------------------------------------------------------------
    Rule(
        "PACK-EXCLUSIVE-OFFLINE-IN-BATCH", "exclusive", "error",
        "offline and in-batch packing are mutually exclusive",
        ("dataset.enable_offline_packing", "dataset.enable_in_batch_packing"),
        "upstream", f"V10: {BRIDGE_CC}",
        "Choose one: offline packs on disk (MBS1) or runtime in-batch packing (MBS>1).",
        _excl_offline_in_batch,
        {**OFFLINE, "dataset.enable_in_batch_packing": True},
        {"dataset.enable_in_batch_packing": False},
    ),
    Rule(
        "PACK-EXCLUSIVE-ENERGON-IN-BATCH", "exclusive", "error",
        "Energon native packing and collator in-batch packing are mutually exclusive",
        ("dataset.packing_buffer_size", "dataset.enable_in_batch_packing"),
        "upstream", "V35: EnergonDatasetConfig.validate",
        "Select exactly one packing owner: packing_buffer_size (native) or enable_in_batch_packing.",
        _excl_energon_in_batch,
        {**ENERGON, "dataset.enable_in_batch_packing": True},
        {"dataset.enable_in_batch_packing": False},
    ),
    Rule(
        "PACK-EXCLUSIVE-GLOBAL-BATCH", "exclusive", "error",
        "global-batch packing excludes every other packing path on the dataset",
        ("dataset.enable_global_batch_packing", "dataset.enable_offline_packing", "dataset.enable_in_batch_packing",
         "dataset.packing_buffer_size"),
        "upstream", f"{BRIDGE_CC} (global-batch packing requirements)",
        "Turn the other packing path off.",
        _excl_global,
        {**GLOBAL, "dataset.enable_in_batch_packing": True},
        {"dataset.enable_in_batch_packing": False},
    ),
    Rule(
        "PACK-ENERGON-DEFER", "exclusive", "error",
        "Energon native packing cannot defer packing to the training step",
        ("dataset.packing_buffer_size", "dataset.defer_in_batch_packing_to_step"),
        "upstream", "V35: EnergonDatasetConfig.validate",
        "Set dataset.defer_in_batch_packing_to_step=false (native packs are built in the loader).",
        _energon_defer,
        {**ENERGON, "dataset.defer_in_batch_packing_to_step": True},
        {"dataset.defer_in_batch_packing_to_step": False},
    ),
    # --- in-batch -----------------------------------------------------------------------------
    Rule(
        "PACK-IN-BATCH-MBS", "in_batch", "error",
        "in-batch packing requires micro_batch_size > 1",
        ("dataset.enable_in_batch_packing", "train.micro_batch_size"),
        "upstream", f"V17: {BRIDGE_CC}",
        "Set train.micro_batch_size to 2 or more (the rows of a micro-batch become one THD row).",
        _in_batch_mbs,
        {**IN_BATCH, "train.micro_batch_size": 1},
        {"train.micro_batch_size": 4},
    ),
    Rule(
        "PACK-IN-BATCH-DATALOADER", "in_batch", "error",
        "in-batch packing needs the single or cyclic dataloader, not batch",
        ("dataset.enable_in_batch_packing", "dataset.dataloader_type"),
        "documented", "packed-sequences docs; no upstream guard exists",
        "Set dataset.dataloader_type=single (or cyclic).",
        _in_batch_loader,
        {**IN_BATCH, "dataset.dataloader_type": "batch"},
        {"dataset.dataloader_type": "single"},
    ),
    Rule(
        "PACK-IN-BATCH-DATASET-KIND", "in_batch", "error",
        "in-batch packing is for fine-tuning datasets",
        ("dataset.enable_in_batch_packing", "dataset.kind"),
        "stricter", "pretraining datasets have no in-batch packing switch",
        "Use an SFT dataset kind, or no packing for pretraining.",
        _in_batch_kind,
        {**IN_BATCH, "dataset.kind": "pretrain"},
        {"dataset.kind": "gpt_sft"},
    ),
    Rule(
        "PACK-IN-BATCH-MULTIPLE-OVERRIDDEN", "in_batch", "warning",
        "in_batch_packing_pad_to_multiple_of is derived from the topology; a user value is overwritten",
        ("dataset.in_batch_packing_pad_to_multiple_of",),
        "upstream", f"V23: {BRIDGE_CC} overwrites it",
        "Remove dataset.in_batch_packing_pad_to_multiple_of; the derived value is used.",
        _in_batch_mult_overridden,
        {**IN_BATCH, "dataset.in_batch_packing_pad_to_multiple_of": 16},
        {"dataset.in_batch_packing_pad_to_multiple_of": None},
    ),
    Rule(
        "PACK-IN-BATCH-DEFERRED", "in_batch", "error",
        "the VLM step requires collate-time in-batch packing (no deferral)",
        ("dataset.enable_in_batch_packing", "dataset.defer_in_batch_packing_to_step"),
        "upstream", "V56: Megatron-Bridge vlm_step",
        "Set dataset.defer_in_batch_packing_to_step=false (MegatronMIMO is the exception).",
        _deferred_step,
        {**IN_BATCH, "dataset.kind": "mock_vlm", "dataset.defer_in_batch_packing_to_step": True},
        {"dataset.defer_in_batch_packing_to_step": False},
    ),
    Rule(
        "PAD-TO-MULTIPLE-POSITIVE", "in_batch", "error",
        "pad_to_multiple_of and in_batch_packing_pad_to_multiple_of must be > 0",
        ("dataset.pad_to_multiple_of", "dataset.in_batch_packing_pad_to_multiple_of"),
        "upstream", "V36: DirectHF / Energon / MockVLM dataset configs",
        "Use a positive multiple (or leave it unset).",
        _pad_multiple_positive,
        {"dataset.kind": "direct_hf", "dataset.pad_to_multiple_of": -3},
        {"dataset.pad_to_multiple_of": 3},
    ),
    # --- energon ------------------------------------------------------------------------------
    Rule(
        "PACK-ENERGON-BUFFER-POSITIVE", "energon", "error",
        "packing_buffer_size must be > 0",
        ("dataset.packing_buffer_size",),
        "upstream", "V35: EnergonDatasetConfig.validate",
        "Start at 8-16 candidate samples per worker and measure bin fill, RSS and first-batch latency.",
        _energon_buffer_positive,
        {**ENERGON, "dataset.packing_buffer_size": 0},
        {"dataset.packing_buffer_size": 16},
    ),
    Rule(
        "PACK-ENERGON-DATASET-KIND", "energon", "error",
        "packing_buffer_size only applies to Energon datasets",
        ("dataset.packing_buffer_size", "dataset.kind"),
        "stricter", "only EnergonDatasetConfig has packing_buffer_size",
        "Remove packing_buffer_size, or use dataset.kind=energon.",
        _energon_kind,
        {"dataset.packing_buffer_size": 16},
        {"dataset.packing_buffer_size": None},
    ),
    Rule(
        "PACK-ENERGON-MBS1", "energon", "error",
        "Energon native packing requires micro_batch_size=1",
        ("dataset.packing_buffer_size", "train.micro_batch_size"),
        "upstream", f"V27: {BRIDGE_CC}",
        "Set train.micro_batch_size=1 (and dataset.micro_batch_size=1).",
        _energon_mbs1,
        {**ENERGON, "train.micro_batch_size": 2},
        {"train.micro_batch_size": 1},
    ),
    Rule(
        "PACK-ENERGON-DATASET-MBS", "energon", "error",
        "the Energon dataset micro_batch_size must match train.micro_batch_size",
        ("dataset.micro_batch_size", "train.micro_batch_size"),
        "upstream", f"V26: {BRIDGE_CC}",
        "Make dataset.micro_batch_size equal to train.micro_batch_size.",
        _energon_dataset_mbs,
        {**ENERGON, "dataset.micro_batch_size": 2},
        {"dataset.micro_batch_size": 1},
    ),
    Rule(
        "PACK-ENERGON-PER-TOKEN-LOSS", "energon", "error",
        "Energon native packing requires calculate_per_token_loss=true",
        ("dataset.packing_buffer_size", "model.calculate_per_token_loss"),
        "upstream", f"V28: {BRIDGE_CC}",
        "Set model.calculate_per_token_loss=true.",
        _energon_flag("model.calculate_per_token_loss", True, ""),
        {**ENERGON, "model.calculate_per_token_loss": False},
        {"model.calculate_per_token_loss": True},
    ),
    Rule(
        "PACK-ENERGON-AVG-COLLECTIVE", "energon", "error",
        "Energon native packing requires ddp.average_in_collective=false",
        ("dataset.packing_buffer_size", "ddp.average_in_collective"),
        "upstream", f"V29: {BRIDGE_CC}",
        "Set ddp.average_in_collective=false.",
        _energon_flag("ddp.average_in_collective", False, ""),
        {**ENERGON, "ddp.average_in_collective": True},
        {"ddp.average_in_collective": False},
    ),
    Rule(
        "PACK-ENERGON-NO-MTP", "energon", "error",
        "Energon native packing does not support MTP",
        ("dataset.packing_buffer_size", "model.mtp_num_layers"),
        "upstream", f"V30: {BRIDGE_CC}",
        "Set model.mtp_num_layers=0, or use unpacked Energon data.",
        _energon_no_mtp,
        {**ENERGON, "model.mtp_num_layers": 1},
        {"model.mtp_num_layers": 0},
    ),
    Rule(
        "PACK-ENERGON-NO-CUDA-GRAPHS", "energon", "error",
        "Energon native packing does not support CUDA graphs (language or vision)",
        ("dataset.packing_buffer_size", "model.cuda_graph_impl", "model.vision_cuda_graph_impl"),
        "upstream", f"V31: {BRIDGE_CC}",
        "Set cuda_graph_impl and vision_cuda_graph_impl to none.",
        _energon_no_graphs,
        {**ENERGON, "model.vision_cuda_graph_impl": "transformer_engine"},
        {"model.vision_cuda_graph_impl": "none"},
    ),
    Rule(
        "PACK-ENERGON-NO-DISTTRAIN", "energon", "error",
        "Energon native packing does not support Qwen3-VL DistTrain",
        ("dataset.packing_buffer_size", "model.qwen3_vl_disttrain"),
        "upstream", f"V32: {BRIDGE_CC}",
        "Disable DistTrain, or use unpacked Energon data.",
        _energon_flag("model.qwen3_vl_disttrain", False, ""),
        {**ENERGON, "model.qwen3_vl_disttrain": True},
        {"model.qwen3_vl_disttrain": False},
    ),
    Rule(
        "PACK-ENERGON-NO-PP", "energon", "error",
        "Energon native packing does not support pipeline parallelism",
        ("dataset.packing_buffer_size", "model.pipeline_model_parallel_size"),
        "upstream", f"V33: {BRIDGE_CC}",
        "Set pipeline_model_parallel_size=1.",
        _energon_no_pp,
        {**ENERGON, "model.pipeline_model_parallel_size": 2, "dist.world_size": 2},
        {"model.pipeline_model_parallel_size": 1},
    ),
    Rule(
        "PACK-ENERGON-EP-OVERLAP", "energon", "warning",
        "Energon native packing turns MoE EP communication overlap and delayed wgrad off",
        ("dataset.packing_buffer_size", "model.overlap_moe_expert_parallel_comm", "model.delay_wgrad_compute"),
        "upstream", f"V34: {BRIDGE_CC} (warning and override)",
        "Expect the non-overlapped EP path; set both flags false to silence this.",
        _energon_ep_overlap,
        {**ENERGON, "model.overlap_moe_expert_parallel_comm": True},
        {"model.overlap_moe_expert_parallel_comm": False},
    ),
    Rule(
        "PACK-ENERGON-TASK-ENCODER", "energon", "error",
        "Energon native packing is implemented only by the Qwen-VL task encoder",
        ("dataset.packing_buffer_size", "dataset.task_encoder"),
        "upstream", "V35: EnergonDatasetConfig.validate",
        "Use the qwen_vl task encoder, or collator-owned in-batch packing for other encoders.",
        _energon_encoder,
        {**ENERGON, "dataset.task_encoder": "nemotron_omni"},
        {"dataset.task_encoder": "qwen_vl"},
    ),
    Rule(
        "PACK-ENERGON-DATALOADER", "energon", "error",
        "Energon datasets use the external dataloader",
        ("dataset.kind", "dataset.dataloader_type"),
        "upstream", "Megatron-Bridge Energon dataset config",
        "Set dataset.dataloader_type=external (or leave it unset).",
        _energon_loader,
        {**ENERGON, "dataset.dataloader_type": "single"},
        {"dataset.dataloader_type": "external"},
    ),
    Rule(
        "PACK-FIXED-WIDTH-FORCED", "energon", "warning",
        "with PP>1 or EP>1, Bridge forces pad_to_max_length=true on direct_hf/energon/mock_vlm datasets",
        ("dataset.pad_to_max_length", "model.pipeline_model_parallel_size", "model.expert_model_parallel_size"),
        "upstream", f"V22: {BRIDGE_CC} (silent override)",
        "Set dataset.pad_to_max_length=true explicitly and choose seq_length for the fixed width.",
        _fixed_width_forced,
        {"dataset.kind": "direct_hf", "model.expert_model_parallel_size": 8, "model.num_moe_experts": 8},
        {"dataset.pad_to_max_length": True},
    ),
    # --- global batch -------------------------------------------------------------------------
    Rule(
        "PACK-GLOBAL-MBS1", "global_batch", "error",
        "global-batch packing requires micro_batch_size=1",
        ("dataset.enable_global_batch_packing", "train.micro_batch_size"),
        "upstream", f"{BRIDGE_CC} (runtime THD constraints)",
        "Set train.micro_batch_size=1; the scheduler decides how many micro-batches a step runs.",
        _global_mbs1,
        {**GLOBAL, "train.micro_batch_size": 2},
        {"train.micro_batch_size": 1},
    ),
    Rule(
        "PACK-GLOBAL-PER-TOKEN-LOSS", "global_batch", "error",
        "global-batch packing requires calculate_per_token_loss=true",
        ("dataset.enable_global_batch_packing", "model.calculate_per_token_loss"),
        "upstream", f"{BRIDGE_CC} (runtime THD constraints)",
        "Set model.calculate_per_token_loss=true.",
        _global_flag("model.calculate_per_token_loss", True),
        {**GLOBAL, "model.calculate_per_token_loss": False},
        {"model.calculate_per_token_loss": True},
    ),
    Rule(
        "PACK-GLOBAL-AVG-COLLECTIVE", "global_batch", "error",
        "global-batch packing requires ddp.average_in_collective=false",
        ("dataset.enable_global_batch_packing", "ddp.average_in_collective"),
        "upstream", f"{BRIDGE_CC} (runtime THD constraints)",
        "Set ddp.average_in_collective=false.",
        _global_flag("ddp.average_in_collective", False),
        {**GLOBAL, "ddp.average_in_collective": True},
        {"ddp.average_in_collective": False},
    ),
    Rule(
        "PACK-GLOBAL-NO-CUDA-GRAPHS", "global_batch", "error",
        "global-batch packing does not support CUDA graphs",
        ("dataset.enable_global_batch_packing", "model.cuda_graph_impl"),
        "upstream", f"{BRIDGE_CC} (runtime THD constraints)",
        "Set model.cuda_graph_impl=none (pack shapes change every step).",
        _global_no_graphs,
        {**GLOBAL, "model.cuda_graph_impl": "local"},
        {"model.cuda_graph_impl": "none"},
    ),
    Rule(
        "PACK-GLOBAL-NO-PP", "global_batch", "error",
        "global-batch packing does not support pipeline parallelism",
        ("dataset.enable_global_batch_packing", "model.pipeline_model_parallel_size"),
        "upstream", f"{BRIDGE_CC} (runtime THD constraints)",
        "Set pipeline_model_parallel_size=1.",
        _global_no_pp,
        {**GLOBAL, "model.pipeline_model_parallel_size": 2, "dist.world_size": 2},
        {"model.pipeline_model_parallel_size": 1},
    ),
    Rule(
        "PACK-GLOBAL-NO-VPP", "global_batch", "error",
        "global-batch packing does not support virtual pipeline parallelism",
        ("dataset.enable_global_batch_packing", "model.virtual_pipeline_model_parallel_size"),
        "upstream", f"{BRIDGE_CC} (global-batch packing requirements)",
        "Unset model.virtual_pipeline_model_parallel_size.",
        _global_no_vpp,
        {**GLOBAL, "model.virtual_pipeline_model_parallel_size": 2},
        {"model.virtual_pipeline_model_parallel_size": None},
    ),
    Rule(
        "PACK-GLOBAL-DATALOADER", "global_batch", "error",
        "global-batch packing needs the single or cyclic dataloader",
        ("dataset.enable_global_batch_packing", "dataset.dataloader_type"),
        "upstream", f"{BRIDGE_CC} (global-batch packing requirements)",
        "Set dataset.dataloader_type=single (or cyclic).",
        _global_loader,
        {**GLOBAL, "dataset.dataloader_type": "batch"},
        {"dataset.dataloader_type": "single"},
    ),
    Rule(
        "PACK-GLOBAL-MAX-SEQLEN-REQUIRED", "global_batch", "error",
        "global-batch packing needs an explicit max_seqlen_per_dp_cp_rank",
        ("dataset.enable_global_batch_packing", "model.max_seqlen_per_dp_cp_rank"),
        "upstream", f"{BRIDGE_CC} (global-batch packing requirements)",
        "Set model.max_seqlen_per_dp_cp_rank (e.g. ceil(seq_length / CP)).",
        _global_max_required,
        {**GLOBAL, "model.max_seqlen_per_dp_cp_rank": None},
        {"model.max_seqlen_per_dp_cp_rank": 2048},
    ),
    Rule(
        "PACK-GLOBAL-CAPACITY", "global_batch", "error",
        "max_seqlen_per_dp_cp_rank * CP must cover the longest sample (seq_length)",
        ("model.max_seqlen_per_dp_cp_rank", "model.context_parallel_size", "model.seq_length"),
        "upstream", f"{BRIDGE_CC} (global-batch packing requirements)",
        "Raise max_seqlen_per_dp_cp_rank to at least ceil(seq_length / CP).",
        _global_capacity,
        {**GLOBAL, "model.max_seqlen_per_dp_cp_rank": 1024},
        {"model.max_seqlen_per_dp_cp_rank": 2048},
    ),
    Rule(
        "PACK-GLOBAL-NO-HYBRID", "global_batch", "error",
        "global-batch packing does not support hybrid Mamba models",
        ("dataset.enable_global_batch_packing", "model.is_hybrid_model"),
        "upstream", f"{BRIDGE_CC} (global-batch packing requirements)",
        "Use another packing path for hybrid models.",
        _global_no_hybrid,
        {**GLOBAL, "model.is_hybrid_model": True},
        {"model.is_hybrid_model": False},
    ),
    Rule(
        "PACK-GLOBAL-NO-FSDP", "global_batch", "error",
        "global-batch packing does not support Megatron FSDP",
        ("dataset.enable_global_batch_packing", "ddp.use_megatron_fsdp"),
        "upstream", f"{BRIDGE_CC} (global-batch packing requirements)",
        "Disable ddp.use_megatron_fsdp.",
        _global_no_fsdp,
        {**GLOBAL, "ddp.use_megatron_fsdp": True},
        {"ddp.use_megatron_fsdp": False},
    ),
    Rule(
        "PACK-GLOBAL-UNPACKED-SAMPLES", "global_batch", "error",
        "global-batch packing needs a dataset that yields unpacked samples",
        ("dataset.enable_global_batch_packing", "dataset.kind", "dataset.yields_unpacked_samples"),
        "upstream", f"{BRIDGE_CC} (yields_unpacked_samples)",
        "Use a GPT-SFT dataset (it yields unpacked samples) or declare yields_unpacked_samples for yours.",
        _global_unpacked,
        {**GLOBAL, "dataset.kind": "direct_hf"},
        {"dataset.kind": "gpt_sft"},
    ),
    Rule(
        "PACK-GLOBAL-SCHEDULER", "global_batch", "error",
        "sequence_packing_scheduler must name a registered scheduler",
        ("model.sequence_packing_scheduler",),
        "upstream", f"{BRIDGE_CC} checks the pinned Megatron-Core registers it",
        "Use dp_balanced (Megatron-Core) or balanced (seqpack).",
        _global_scheduler,
        {**GLOBAL, "model.sequence_packing_scheduler": "default_dynamic_cp"},
        {"model.sequence_packing_scheduler": "dp_balanced"},
        note="'balanced' exists only in seqpack; Megatron-Core registers dp_balanced.",
    ),
    # --- MTP and model families ----------------------------------------------------------------
    Rule(
        "PACK-MTP-DOCUMENTED", "model", "warning",
        "MTP fine-tuning is documented as incompatible with packed sequences",
        ("model.mtp_num_layers",),
        "documented", "packed-sequences and MTP docs; upstream rejects MTP only for Energon native packing",
        "Verify with `seqpack smoke` and a loss sentinel, or set mtp_num_layers=0.",
        _mtp_documented,
        {**OFFLINE, "model.mtp_num_layers": 1},
        {"model.mtp_num_layers": 0},
        note="Megatron-Core's MTP rolls tokens per packed sequence; one Bridge recipe (Nemotron-3 Super) "
        "combines MTP=2 with offline packing.",
    ),
    Rule(
        "MODEL-FAMILY-OPT-OUT", "model", "error",
        "the model family's recipes opt out of this packing path",
        ("model.family",),
        "documented", "Megatron-Bridge model recipes (see the model-support table)",
        "Use a path the family supports (`seqpack rules --family`), or train unpacked.",
        lambda r: _family_status(r, "opt_out"),
        {**OFFLINE, "model.family": "qwen3_next"},
        {"model.family": "llama3"},
    ),
    Rule(
        "MODEL-FAMILY-CAVEAT", "model", "warning",
        "the model family has a documented caveat for this packing path",
        ("model.family",),
        "documented", "Megatron-Bridge model recipes (see the model-support table)",
        "Read the caveat and verify with `seqpack smoke` before launching.",
        lambda r: _family_status(r, "caveat"),
        {**OFFLINE, "model.family": "nemotron3_super"},
        {"model.family": "llama3"},
    ),
    Rule(
        "PACK-LLAVA-PP-CP", "model", "error",
        "LLaVA packed batches require PP=1 and CP=1",
        ("model.family", "model.pipeline_model_parallel_size", "model.context_parallel_size"),
        "upstream", "V57: Megatron-Bridge llava_step",
        "Run LLaVA packing with PP=1 and CP=1.",
        _llava,
        {**OFFLINE, "model.family": "llava", "model.pipeline_model_parallel_size": 2, "dist.world_size": 2},
        {"model.pipeline_model_parallel_size": 1},
    ),
    # --- dataset and dataloader ------------------------------------------------------------------
    Rule(
        "DATALOADER-NUM-EPOCHS", "dataset", "error",
        "num_epochs needs a GPT-SFT dataset with the batch dataloader",
        ("train.num_epochs", "dataset.kind", "dataset.dataloader_type"),
        "upstream", f"V37: {BRIDGE_CC} and the loader builder",
        "Unset train.num_epochs, or use dataset.kind=gpt_sft with dataloader_type=batch.",
        _num_epochs,
        {"train.num_epochs": 1, "dataset.dataloader_type": "single"},
        {"dataset.dataloader_type": "batch"},
    ),
    Rule(
        "DATASET-KWARGS-MAX-NUM-SAMPLES", "dataset", "error",
        "dataset_kwargs may not carry max_num_samples",
        ("dataset.dataset_kwargs.max_num_samples", "dataset.max_train_samples"),
        "upstream", "V43: GPTSFTDatasetConfig.validate",
        "Move the cap to dataset.max_train_samples.",
        _kwargs_max_samples,
        {"dataset.dataset_kwargs.max_num_samples": 100},
        {"dataset.dataset_kwargs": {}, "dataset.max_train_samples": 100},
    ),
    Rule(
        "HF-REWRITE-EXPLICIT-PATHS", "dataset", "error",
        "hf_rewrite cannot be combined with explicit packed data paths",
        ("dataset.hf_rewrite", f"{SPECS}.packed_train_data_path"),
        "upstream", "V42: GPTSFTDatasetConfig.validate",
        "Drop hf_rewrite, or let the builder manage the packed paths.",
        _hf_rewrite,
        {**OFFLINE, "dataset.hf_rewrite": True, f"{SPECS}.packed_train_data_path": "/data/packed/train.idx.parquet"},
        {"dataset.hf_rewrite": False},
    ),
)

RULES_BY_ID: dict[str, Rule] = {r.id: r for r in RULES}


def get_rule(rule_id: str) -> Rule | None:
    """The rule with this id (case-insensitive), or None."""
    return RULES_BY_ID.get(rule_id.strip().upper())


def search_rules(keyword: str) -> list[Rule]:
    """Rules whose id, title, fields, family or fix mention ``keyword`` (case-insensitive)."""
    words = keyword.lower().split()
    out = []
    for rule in RULES:
        text = " ".join(
            [rule.id, rule.title, rule.family, FAMILIES[rule.family], rule.fix, rule.note, *rule.fields]
        ).lower()
        if all(w in text for w in words):
            out.append(rule)
    return out


def rules_table(rules: tuple[Rule, ...] | list[Rule] = RULES) -> list[dict[str, Any]]:
    """JSON-able description of the rules, in registry order."""
    return [r.describe() for r in rules]

