"""Vision-language models: what packing images changes beyond the text rules.

The Energon VLM constraints (micro-batch size 1, no PP, no CUDA graphs in the language model or
the vision tower, no Qwen3-VL DistTrain, no MTP) live in the ``energon`` family, the step-owned
packers of Qwen3-VL/Qwen3.5-VL in ``in_batch`` and the LLaVA PP/CP limit and recipe opt-outs in
``model``; this family holds what comes from packing images into one row: every image of a packed
micro-batch goes through the vision tower in one call, and only some forward paths carry the
visual inputs.
"""

from __future__ import annotations

from seqpack.config.model_support import find_family
from seqpack.config.resolve import Resolved
from seqpack.config.rules.common import IN_BATCH, fmt
from seqpack.config.rules.evidence import bridge, bridge_main
from seqpack.config.rules.registry import rule

FAMILY = "vlm"

#: Dataset kinds whose rows carry images in Megatron-Bridge.
VLM_KINDS: tuple[str, ...] = ("mock_vlm", "energon")
#: Model families (ids of :mod:`seqpack.config.model_support`) that are vision-language models.
VLM_FAMILIES: tuple[str, ...] = (
    "qwen_vl", "qwen3_vl", "qwen35_vl", "gemma3_vl", "gemma4_vl", "glm45v", "kimi_k25_vl", "nemotron_nano_v2_vl",
    "nemotron_omni", "qwen3_omni", "llava",
)


def is_vlm(r: Resolved) -> bool:
    """The config trains a vision-language model: a VLM dataset kind or a VLM model family."""
    fam = find_family(r.cfg.model.family)
    return r.cfg.dataset.kind in VLM_KINDS or (fam is not None and fam.family in VLM_FAMILIES)


@rule(
    "VLM-VISION-GRAPH-PATCH-BUDGET",
    family=FAMILY,
    severity="warning",
    title="with vision CUDA graphs, a packed micro-batch's patches must fit the captured vision length",
    fields=("model.vision_cuda_graph_impl", "model.max_vision_cuda_graph_seq_length", "dataset.enable_in_batch_packing",
            "train.micro_batch_size"),
    provenance="upstream",
    source="Megatron-Bridge Qwen3-VL vision model: a captured vision graph has a fixed patch length "
    "(max_vision_cuda_graph_seq_length, default num_position_embeddings / merge_size**2) and a longer vision "
    "input raises; in-batch packing puts the images of all MBS rows into one vision call",
    fix="Set model.max_vision_cuda_graph_seq_length to at least the largest patch_rows `seqpack batches --vision "
    "<preset>` reports for your data and micro-batch size, or turn vision CUDA graphs off.",
    trigger={**IN_BATCH, "dataset.kind": "mock_vlm", "model.vision_cuda_graph_impl": "transformer_engine"},
    fixed={"model.max_vision_cuda_graph_seq_length": 16384},
    upstream_check=bridge(
        "models/qwen_vl/modelling_qwen3_vl/vision_model.py",
        57,
        "max_seq_len",
        "the vision model raises ValueError when a forward's patch rows exceed the captured vision length",
        kind="runtime",
    ),
    note="Packing does not change the total patch count per step, but it moves the patches of MBS rows into one "
    "vision forward, so the budget must cover a whole packed micro-batch. The check needs the data; upstream "
    "only raises at the first micro-batch over the budget.",
)
def vision_graph_patch_budget(r: Resolved) -> str | None:
    m = r.cfg.model
    graphs = m.vision_cuda_graph_impl == "transformer_engine"
    batched = r.cfg.dataset.enable_in_batch_packing or r.cfg.train.micro_batch_size > 1
    if graphs and batched and is_vlm(r) and m.max_vision_cuda_graph_seq_length is None:
        return (
            f"model.vision_cuda_graph_impl={m.vision_cuda_graph_impl} with "
            f"dataset.enable_in_batch_packing={fmt(r.cfg.dataset.enable_in_batch_packing)} and "
            f"train.micro_batch_size={r.cfg.train.micro_batch_size}: every packed micro-batch's patch rows go "
            "through one captured vision graph, but model.max_vision_cuda_graph_seq_length is null (the "
            "default length from the position embeddings)"
        )
    return None


@rule(
    "VLM-IN-BATCH-EP-OVERLAP",
    family=FAMILY,
    severity="warning",
    title="MoE EP communication overlap drops the visual inputs of collate-time packed VLM batches",
    fields=("dataset.enable_in_batch_packing", "model.overlap_moe_expert_parallel_comm", "dataset.kind",
            "model.family"),
    provenance="stricter",
    source="Megatron-Bridge vlm_step builds the EP-overlap schedule plan from tokens, positions, masks and labels "
    "only; ConfigContainer turns overlap off for Energon native packing for this reason, but not for "
    "collate-time in-batch packing",
    fix="Set model.overlap_moe_expert_parallel_comm=false (and delay_wgrad_compute=false) for packed VLM training.",
    trigger={**IN_BATCH, "dataset.kind": "mock_vlm", "model.overlap_moe_expert_parallel_comm": True,
             "model.num_moe_experts": 8, "model.expert_model_parallel_size": 2, "dist.world_size": 2},
    fixed={"model.overlap_moe_expert_parallel_comm": False},
    upstream_check=(
        bridge(
            "training/vlm_step.py",
            309,
            "build_schedule_plan",
            "the overlap path's schedule plan is built without visual inputs or packed-sequence metadata",
            kind="runtime",
        ),
        bridge_main(
            "training/config.py",
            1218,
            "_disable_native_energon_packing_moe_overlap",
            "Bridge disables the overlap only when Energon native packing is on",
        ),
    ),
    note="Nothing raises upstream: the micro-batch would train without its images and boundaries, hence a "
    "warning from us rather than an error upstream reports.",
)
def in_batch_ep_overlap(r: Resolved) -> str | None:
    m = r.cfg.model
    if r.cfg.dataset.enable_in_batch_packing and m.overlap_moe_expert_parallel_comm and is_vlm(r):
        return (
            "model.overlap_moe_expert_parallel_comm=true with dataset.enable_in_batch_packing=true on a VLM "
            f"(dataset.kind={r.cfg.dataset.kind}, model.family={fmt(m.family)}): vlm_step's overlap schedule plan "
            "carries no pixel values and no cu_seqlens"
        )
    return None
