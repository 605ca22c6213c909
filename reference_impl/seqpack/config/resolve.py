"""Values derived from a :class:`TrainingConfig` once, then shared by every rule and the report."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from seqpack.core.alignment import Alignment, AlignmentRequirement, alignment_requirement, derive_alignment
from seqpack.config.dispatch import DispatchWidth, dispatch_width, dispatcher_name
from seqpack.config.schema import SFT_KINDS, OfflinePackingSpecs, TrainingConfig
from seqpack.core.versions import DEFAULT_BRIDGE_TARGET

ROUTER_SCOPES = ("moe", "moe_router", "moe_preprocess")


@dataclass(frozen=True)
class Resolved:
    """A config plus everything the rules need to know about it."""

    cfg: TrainingConfig
    tp: int
    pp: int
    cp: int
    ep: int
    sp: bool
    model_parallel: int
    dp: int | None
    eval_cp: int
    eval_dp: int | None
    alignment: Alignment
    seq_length: int
    paths: tuple[str, ...]
    specs: OfflinePackingSpecs | None
    pad_to_max_length: bool
    dataloader_type: str
    is_sft: bool
    full_iteration_graph: bool
    te_graph: bool
    training_graphs: bool
    graph_captures_attention: bool
    graph_captures_router: bool
    any_graph: bool
    bridge_version: str = DEFAULT_BRIDGE_TARGET
    requirement: AlignmentRequirement | None = None

    @property
    def packed(self) -> bool:
        """True when any packing path is on."""
        return bool(self.paths)

    def fixed_pack_width(self) -> int | None:
        """The width of every packed micro-batch when packs are fixed-width, else None."""
        if not self.packed or not self.pad_to_max_length or "global_batch" in self.paths:
            return None
        if "offline" in self.paths and self.specs is not None and self.specs.packed_sequence_size > 0:
            return self.specs.packed_sequence_size
        return self.seq_length

    def moe_dispatch(self) -> DispatchWidth | None:
        """The MoE dispatch width rule of a packed MoE config (:mod:`seqpack.config.dispatch`), else None."""
        m = self.cfg.model
        if not self.packed or not m.num_moe_experts:
            return None
        multiple = self.alignment.pad_seq_to_mult
        if "offline" in self.paths and self.specs is not None and self.specs.pad_seq_to_mult:
            multiple = self.specs.pad_seq_to_mult
        return dispatch_width(
            dispatcher=dispatcher_name(m.moe_token_dispatcher_type, m.moe_flex_dispatcher_backend),
            ep=self.ep, tp=self.tp, cp=self.cp, sp=self.sp, pad_seq_to_mult=multiple,
            fixed_width=self.fixed_pack_width(), cuda_graphs=m.cuda_graph_impl != "none",
            hybridep_padding=self.hybridep_padding(),
        )

    def hybridep_padding(self) -> bool | None:
        """``moe_hybridep_pad_uneven_dispatch_inputs`` as Megatron-Bridge leaves it after validating the config:
        a packed (THD) eager config gets True whatever it set (megatron-bridge 0.6.2 ``training/config.py``
        1249 -> ``models/transformer_config.py`` 91-134, the backport PR #5931 of #5915; Bridge main at 067f987
        turns it on for every eager HybridEP config); under CUDA graphs the configured value stays."""
        m = self.cfg.model
        if self.packed and m.cuda_graph_impl == "none":
            return True
        return m.moe_hybridep_pad_uneven_dispatch_inputs

    def configured_pad_seq_to_mult(self) -> int | None:
        """The per-sequence multiple the config itself pins (offline ``pad_seq_to_mult``), else None: the other
        paths derive theirs (Bridge overwrites an in-batch value). The summary's ``pad_seq_to_mult`` is the
        recommended value (:attr:`alignment`), ``pad_seq_to_mult_required`` the minimum the target needs."""
        if "offline" in self.paths and self.specs is not None and self.specs.pad_seq_to_mult \
                and self.specs.pad_seq_to_mult > 0:
            return int(self.specs.pad_seq_to_mult)
        return None

    def summary(self) -> dict[str, Any]:
        """The resolved values a user sees in the validation report."""
        cfg = self.cfg
        gbs, mbs = cfg.train.global_batch_size, cfg.train.micro_batch_size
        width = self.specs.packed_sequence_size if "offline" in self.paths and self.specs else self.seq_length
        per_step = None
        if self.dp and gbs % (mbs * self.dp) == 0:
            per_step = gbs // (mbs * self.dp)
        out: dict[str, Any] = {
            "data_parallel_size": self.dp,
            "model_parallel_size": self.model_parallel,
            "world_size": cfg.dist.world_size,
            "alignment": self.alignment.to_dict(),
            "pad_seq_to_mult": self.alignment.pad_seq_to_mult,
            "pad_seq_to_mult_configured": self.configured_pad_seq_to_mult(),
            "pad_seq_to_mult_required": None if self.requirement is None else self.requirement.required,
            "alignment_requirement": None if self.requirement is None else self.requirement.to_dict(),
            "seq_length": self.seq_length,
            "packing_path": self.paths[0] if len(self.paths) == 1 else ("none" if not self.paths else list(self.paths)),
            "dataloader_type": self.dataloader_type,
            "pad_to_max_length": self.pad_to_max_length,
            "micro_batches_per_step_per_rank": per_step,
            "token_slots_per_step": width * gbs if width and width > 0 else None,
        }
        if "offline" in self.paths and self.specs is not None:
            out["packed_sequence_size"] = self.specs.packed_sequence_size
            out["offline_pad_seq_to_mult"] = self.specs.pad_seq_to_mult
        if "in_batch" in self.paths or "energon" in self.paths:
            out["in_batch_packing_pad_to_multiple_of"] = self.alignment.pad_seq_to_mult
        dispatch = self.moe_dispatch()
        if dispatch is not None:
            out["moe_dispatch"] = dispatch.to_dict()
        if "global_batch" in self.paths:
            cap = cfg.model.max_seqlen_per_dp_cp_rank
            out["global_batch_capacity_tokens"] = cap * self.cp if cap else None
            out["sequence_packing_scheduler"] = cfg.model.sequence_packing_scheduler or "dp_balanced"
        return out


def alignment_for_config(cfg: TrainingConfig) -> Alignment:
    """``derive_alignment`` for the config's TP / CP / SP and evaluation CP."""
    m = cfg.model
    return derive_alignment(
        m.tensor_model_parallel_size, m.context_parallel_size, m.sequence_parallel,
        cfg.dist.eval_context_parallel_size,
    )


def requirement_for_config(
    cfg: TrainingConfig, bridge_version: str = DEFAULT_BRIDGE_TARGET, path: str | None = None
) -> AlignmentRequirement:
    """:func:`~seqpack.core.alignment.alignment_requirement` of the config's packing path (``path``, else its
    first active path, else offline) on ``bridge_version``, with its TP / CP / SP / eval CP, DP and dynamic CP."""
    m = cfg.model
    paths = cfg.active_paths()
    path = path or (paths[0] if paths else "offline")
    world, mp = cfg.dist.world_size, m.tensor_model_parallel_size * m.pipeline_model_parallel_size * \
        m.context_parallel_size
    dp = world // mp if world and world % mp == 0 else None
    dynamic = bool(m.dynamic_context_parallel) and path == "global_batch"
    return alignment_requirement(
        path, m.tensor_model_parallel_size, m.context_parallel_size, m.sequence_parallel,
        cfg.dist.eval_context_parallel_size, bridge_version=bridge_version, dp=dp if dynamic else None,
        dynamic_cp=dynamic and dp is not None)


def resolve(cfg: TrainingConfig, bridge_version: str = DEFAULT_BRIDGE_TARGET) -> Resolved:
    """Derive topology, alignment, active paths and CUDA-graph facts from ``cfg``, for that Megatron-Bridge."""
    m = cfg.model
    tp, pp, cp, ep = (
        m.tensor_model_parallel_size,
        m.pipeline_model_parallel_size,
        m.context_parallel_size,
        m.expert_model_parallel_size,
    )
    world = cfg.dist.world_size
    mp = tp * pp * cp
    eval_cp = cfg.dist.eval_context_parallel_size or cp
    eval_mp = tp * pp * eval_cp
    scope = list(m.cuda_graph_scope)
    te_graph = m.cuda_graph_impl == "transformer_engine"
    full_iter = m.cuda_graph_impl == "local" and "full_iteration" in scope
    requirement = requirement_for_config(cfg, bridge_version)
    alignment = requirement.alignment() if requirement.available else alignment_for_config(cfg)
    return Resolved(
        cfg=cfg,
        tp=tp,
        pp=pp,
        cp=cp,
        ep=ep,
        sp=m.sequence_parallel,
        model_parallel=mp,
        dp=world // mp if world % mp == 0 else None,
        eval_cp=eval_cp,
        eval_dp=world // eval_mp if world % eval_mp == 0 else None,
        alignment=alignment,
        seq_length=cfg.seq_length,
        paths=tuple(cfg.active_paths()),
        specs=cfg.dataset.offline_packing_specs,
        pad_to_max_length=cfg.pad_to_max_length,
        dataloader_type=cfg.dataloader_type,
        is_sft=cfg.dataset.kind in SFT_KINDS,
        full_iteration_graph=full_iter,
        te_graph=te_graph,
        training_graphs=full_iter or te_graph,
        graph_captures_attention=full_iter or (te_graph and (not scope or "attn" in scope)),
        graph_captures_router=te_graph and (not scope or any(s in scope for s in ROUTER_SCOPES)),
        any_graph=m.cuda_graph_impl != "none" or m.vision_cuda_graph_impl != "none",
        bridge_version=bridge_version,
        requirement=requirement,
    )
