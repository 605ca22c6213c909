"""Energon online packing: Qwen-VL native packing and the Energon dataset settings."""

from __future__ import annotations

from seqpack.config.resolve import Resolved
from seqpack.config.rules.common import BRIDGE_CC, ENERGON, flag_mismatch, fmt
from seqpack.config.rules.evidence import bridge, bridge_cc, bridge_main, energon
from seqpack.config.rules.registry import rule
from seqpack.core.versions import BRIDGE_MAIN, BRIDGE_RELEASE, ENERGON_RELEASE, bridge_pr

FAMILY = "energon"


@rule(
    "PACK-ENERGON-NATIVE-BRIDGE-VERSION",
    family=FAMILY,
    severity="error",
    title=f"Energon native packing (packing_buffer_size) is not in megatron-bridge {BRIDGE_RELEASE} (Bridge main has it)",
    fields=("dataset.packing_buffer_size", "dataset.kind"),
    provenance="upstream",
    source=f"megatron-bridge {BRIDGE_RELEASE}: no Energon task encoder implements the packing hooks "
    f"(select_samples_to_pack, pack_selected_samples), and megatron-energon {ENERGON_RELEASE} asserts both when "
    "packing_buffer_size is set; ConfigContainer.validate accepts the config. Megatron-Bridge main "
    "(067f987) has Energon native packing for the Qwen-VL task encoder",
    fix=f"On megatron-bridge {BRIDGE_RELEASE} drop packing_buffer_size and use collator in-batch packing "
    "(dataset.enable_in_batch_packing=true, micro_batch_size > 1); or target Bridge main (--bridge-version main).",
    trigger={**ENERGON},
    fixed={"dataset.packing_buffer_size": None},
    targets=(BRIDGE_RELEASE,),
    upstream_check=energon(
        "task_encoder/base.py",
        582,
        "select_samples_to_pack_provided and pack_selected_samples_provided",
        "TaskEncoder.build_batch asserts that the task encoder implements both packing hooks when "
        "packing_buffer_size is set; the Bridge release's Energon task encoders implement neither",
    ),
)
def energon_native_version(r: Resolved) -> str | None:
    if r.cfg.energon_packing:
        return (
            f"dataset.packing_buffer_size={r.cfg.dataset.packing_buffer_size} selects Energon native packing, which is "
            f"not in megatron-bridge {BRIDGE_RELEASE}: its task encoders implement no packing hooks, so "
            f"megatron-energon {ENERGON_RELEASE} fails when the loader is built (Bridge main has it)"
        )
    return None


@rule(
    "PACK-ENERGON-BUFFER-POSITIVE",
    family=FAMILY,
    severity="error",
    title="packing_buffer_size must be > 0",
    fields=("dataset.packing_buffer_size",),
    provenance="upstream",
    source="V35: EnergonDatasetConfig.validate",
    fix="Start at 8-16 candidate samples per worker and measure bin fill, RSS and first-batch latency.",
    trigger={**ENERGON, "dataset.packing_buffer_size": 0},
    fixed={"dataset.packing_buffer_size": 16},
    upstream_check=bridge(
        "data/builders/energon.py",
        163,
        "packing_buffer_size",
        "EnergonDatasetConfig.validate raises ValueError for a buffer <= 0",
    ),
)
def energon_buffer_positive(r: Resolved) -> str | None:
    if r.cfg.energon_packing and r.cfg.dataset.packing_buffer_size <= 0:  # type: ignore[operator]
        return f"dataset.packing_buffer_size={r.cfg.dataset.packing_buffer_size} must be > 0"
    return None


@rule(
    "PACK-ENERGON-DATASET-KIND",
    family=FAMILY,
    severity="error",
    title="packing_buffer_size only applies to Energon datasets",
    fields=("dataset.packing_buffer_size", "dataset.kind"),
    provenance="stricter",
    source="only EnergonDatasetConfig has packing_buffer_size",
    fix="Remove packing_buffer_size, or use dataset.kind=energon.",
    trigger={"dataset.packing_buffer_size": 16},
    fixed={"dataset.packing_buffer_size": None},
    upstream_check=bridge(
        "data/builders/direct_hf_sft.py",
        54,
        "DirectHFSFTDatasetConfig",
        "only EnergonDatasetConfig declares packing_buffer_size; the other configs cannot be built "
        "with it",
    ),
)
def energon_kind(r: Resolved) -> str | None:
    d = r.cfg.dataset
    if d.packing_buffer_size is not None and d.kind != "energon":
        return f"dataset.packing_buffer_size={d.packing_buffer_size} on a '{d.kind}' dataset; it selects Energon packing"
    return None


@rule(
    "PACK-ENERGON-MBS1",
    family=FAMILY,
    severity="error",
    title="Energon native packing requires micro_batch_size=1",
    fields=("dataset.packing_buffer_size", "train.micro_batch_size"),
    provenance="upstream",
    source=f"V27: {BRIDGE_CC}",
    fix="Set train.micro_batch_size=1 (and dataset.micro_batch_size=1).",
    trigger={**ENERGON, "train.micro_batch_size": 2},
    fixed={"train.micro_batch_size": 1},
    targets=(BRIDGE_MAIN,),
    upstream_check=bridge_main("training/config.py", 1329, "micro_batch_size",
                               "raises ValueError: Energon native packing needs train MBS 1"),
)
def energon_mbs1(r: Resolved) -> str | None:
    if r.cfg.energon_packing and r.cfg.train.micro_batch_size != 1:
        return f"Energon native packing requires train.micro_batch_size=1 (got {r.cfg.train.micro_batch_size})"
    return None


@rule(
    "PACK-ENERGON-DATASET-MBS",
    family=FAMILY,
    severity="error",
    title="the Energon dataset micro_batch_size must match train.micro_batch_size",
    fields=("dataset.micro_batch_size", "train.micro_batch_size"),
    provenance="upstream",
    source=f"V26: {BRIDGE_CC}",
    fix="Make dataset.micro_batch_size equal to train.micro_batch_size.",
    trigger={**ENERGON, "dataset.micro_batch_size": 2},
    fixed={"dataset.micro_batch_size": 1},
    upstream_check=bridge_cc(1199, "micro_batch_size", "raises ValueError: Energon dataset MBS must match train MBS"),
)
def energon_dataset_mbs(r: Resolved) -> str | None:
    d = r.cfg.dataset
    if d.kind == "energon" and d.micro_batch_size is not None and d.micro_batch_size != r.cfg.train.micro_batch_size:
        return (
            f"dataset.micro_batch_size={d.micro_batch_size} must match "
            f"train.micro_batch_size={r.cfg.train.micro_batch_size}"
        )
    return None


@rule(
    "PACK-ENERGON-PER-TOKEN-LOSS",
    family=FAMILY,
    severity="error",
    title="Energon native packing requires calculate_per_token_loss=true",
    fields=("dataset.packing_buffer_size", "model.calculate_per_token_loss"),
    provenance="upstream",
    source=f"V28: {BRIDGE_CC}",
    fix="Set model.calculate_per_token_loss=true.",
    trigger={**ENERGON, "model.calculate_per_token_loss": False},
    fixed={"model.calculate_per_token_loss": True},
    targets=(BRIDGE_MAIN,),
    upstream_check=bridge_main(
        "training/config.py",
        1331,
        "calculate_per_token_loss",
        "raises ValueError: Energon native packing needs per-token loss",
    ),
)
def energon_per_token_loss(r: Resolved) -> str | None:
    bad = flag_mismatch(r, "model.calculate_per_token_loss", True) if r.cfg.energon_packing else None
    return f"Energon native packing requires {bad}" if bad else None


@rule(
    "PACK-ENERGON-AVG-COLLECTIVE",
    family=FAMILY,
    severity="error",
    title="Energon native packing requires ddp.average_in_collective=false",
    fields=("dataset.packing_buffer_size", "ddp.average_in_collective"),
    provenance="upstream",
    source=f"V29: {BRIDGE_CC}",
    fix="Set ddp.average_in_collective=false.",
    trigger={**ENERGON, "ddp.average_in_collective": True},
    fixed={"ddp.average_in_collective": False},
    targets=(BRIDGE_MAIN,),
    upstream_check=bridge_main(
        "training/config.py",
        1333,
        "average_in_collective",
        "raises ValueError: Energon native packing needs average_in_collective=False",
    ),
)
def energon_avg_collective(r: Resolved) -> str | None:
    bad = flag_mismatch(r, "ddp.average_in_collective", False) if r.cfg.energon_packing else None
    return f"Energon native packing requires {bad}" if bad else None


@rule(
    "PACK-ENERGON-NO-MTP",
    family=FAMILY,
    severity="warning",
    title="Energon native packing with MTP needs a Bridge main that contains PR #5990",
    fields=("dataset.packing_buffer_size", "model.mtp_num_layers"),
    provenance="upstream",
    source=f"V30: {BRIDGE_CC} at main 067f987 raises for MTP with Energon native packing; Megatron-Bridge PR #5990 "
    "(merged 2026-09-07) drops that check (MTP rolls per packed sequence in Megatron-Core)",
    fix="Use a Megatron-Bridge main that contains PR #5990, or set model.mtp_num_layers=0.",
    trigger={**ENERGON, "model.mtp_num_layers": 1},
    fixed={"model.mtp_num_layers": 0},
    targets=(BRIDGE_MAIN,),
    prs=(5990,),
    note=f"megatron-bridge {BRIDGE_RELEASE} has no Energon native packing at all "
    "(PACK-ENERGON-NATIVE-BRIDGE-VERSION); seqpack's reference model runs MTP on Energon packs "
    "(`seqpack smoke --path energon --mtp`).",
)
def energon_no_mtp(r: Resolved) -> str | None:
    if r.cfg.energon_packing and (r.cfg.model.mtp_num_layers or 0) > 0:
        return (
            f"Energon native packing with MTP (model.mtp_num_layers={r.cfg.model.mtp_num_layers}): Megatron-Bridge "
            f"main before {bridge_pr(5990)} (e.g. 067f987) raises; it is accepted since that PR"
        )
    return None


@rule(
    "PACK-ENERGON-NO-CUDA-GRAPHS",
    family=FAMILY,
    severity="error",
    title="Energon native packing does not support CUDA graphs (language or vision)",
    fields=("dataset.packing_buffer_size", "model.cuda_graph_impl", "model.vision_cuda_graph_impl"),
    provenance="upstream",
    source=f"V31: {BRIDGE_CC}",
    fix="Set cuda_graph_impl and vision_cuda_graph_impl to none.",
    trigger={**ENERGON, "model.vision_cuda_graph_impl": "transformer_engine"},
    fixed={"model.vision_cuda_graph_impl": "none"},
    targets=(BRIDGE_MAIN,),
    upstream_check=bridge_main(
        "training/config.py",
        1339,
        "CUDA graphs",
        "raises ValueError: Energon native packing does not support CUDA graphs",
    ),
)
def energon_no_graphs(r: Resolved) -> str | None:
    m = r.cfg.model
    if r.cfg.energon_packing and r.any_graph:
        return (
            "Energon native packing does not support CUDA graphs "
            f"(cuda_graph_impl={m.cuda_graph_impl}, vision_cuda_graph_impl={m.vision_cuda_graph_impl})"
        )
    return None


@rule(
    "PACK-ENERGON-NO-DISTTRAIN",
    family=FAMILY,
    severity="error",
    title="Energon native packing does not support Qwen3-VL DistTrain",
    fields=("dataset.packing_buffer_size", "model.qwen3_vl_disttrain"),
    provenance="upstream",
    source=f"V32: {BRIDGE_CC}",
    fix="Disable DistTrain, or use unpacked Energon data.",
    trigger={**ENERGON, "model.qwen3_vl_disttrain": True},
    fixed={"model.qwen3_vl_disttrain": False},
    targets=(BRIDGE_MAIN,),
    upstream_check=bridge_main(
        "training/config.py",
        1342,
        "DistTrain",
        "raises ValueError: Energon native packing does not support Qwen3-VL DistTrain",
    ),
)
def energon_no_disttrain(r: Resolved) -> str | None:
    bad = flag_mismatch(r, "model.qwen3_vl_disttrain", False) if r.cfg.energon_packing else None
    return f"Energon native packing requires {bad}" if bad else None


@rule(
    "PACK-ENERGON-NO-PP",
    family=FAMILY,
    severity="error",
    title="Energon native packing does not support pipeline parallelism",
    fields=("dataset.packing_buffer_size", "model.pipeline_model_parallel_size"),
    provenance="upstream",
    source=f"V33: {BRIDGE_CC}",
    fix="Set pipeline_model_parallel_size=1.",
    trigger={**ENERGON, "model.pipeline_model_parallel_size": 2, "dist.world_size": 2},
    fixed={"model.pipeline_model_parallel_size": 1},
    targets=(BRIDGE_MAIN,),
    upstream_check=bridge_main(
        "training/config.py",
        1344,
        "pipeline parallelism",
        "raises ValueError: Energon native packing does not support PP",
    ),
)
def energon_no_pp(r: Resolved) -> str | None:
    if r.cfg.energon_packing and r.pp > 1:
        return f"Energon native packing does not support pipeline parallelism (pipeline_model_parallel_size={r.pp})"
    return None


@rule(
    "PACK-ENERGON-EP-OVERLAP",
    family=FAMILY,
    severity="warning",
    title="Energon native packing turns MoE EP communication overlap and delayed wgrad off",
    fields=("dataset.packing_buffer_size", "model.overlap_moe_expert_parallel_comm", "model.delay_wgrad_compute"),
    provenance="upstream",
    source=f"V34: {BRIDGE_CC} (warning and override)",
    fix="Expect the non-overlapped EP path; set both flags false to silence this.",
    trigger={**ENERGON, "model.overlap_moe_expert_parallel_comm": True, "model.num_moe_experts": 8,
             "model.expert_model_parallel_size": 2, "dist.world_size": 2},
    fixed={"model.overlap_moe_expert_parallel_comm": False},
    targets=(BRIDGE_MAIN,),
)
def energon_ep_overlap(r: Resolved) -> str | None:
    m = r.cfg.model
    if r.cfg.energon_packing and (m.overlap_moe_expert_parallel_comm or m.delay_wgrad_compute):
        return (
            "Energon native packing disables MoE expert-parallel communication overlap "
            f"(overlap_moe_expert_parallel_comm={fmt(m.overlap_moe_expert_parallel_comm)}, "
            f"delay_wgrad_compute={fmt(m.delay_wgrad_compute)}); training runs the non-overlapped path"
        )
    return None


@rule(
    "PACK-ENERGON-TASK-ENCODER",
    family=FAMILY,
    severity="error",
    title="Energon native packing is implemented only by the Qwen-VL task encoder",
    fields=("dataset.packing_buffer_size", "dataset.task_encoder"),
    provenance="upstream",
    source="V35: EnergonDatasetConfig.validate",
    fix="Use the qwen_vl task encoder, or collator-owned in-batch packing for other encoders.",
    trigger={**ENERGON, "dataset.task_encoder": "nemotron_omni"},
    fixed={"dataset.task_encoder": "qwen_vl"},
    targets=(BRIDGE_MAIN,),
    upstream_check=bridge_main(
        "data/builders/energon.py",
        203,
        "QwenVLEnergonTaskEncoderConfig",
        "EnergonDatasetConfig.validate raises ValueError for other task encoders",
    ),
)
def energon_encoder(r: Resolved) -> str | None:
    enc = r.cfg.dataset.task_encoder
    if r.cfg.energon_packing and enc not in (None, "qwen_vl"):
        return f"Energon native packing is implemented only by the Qwen-VL task encoder (dataset.task_encoder={enc})"
    return None


@rule(
    "PACK-ENERGON-DATALOADER",
    family=FAMILY,
    severity="error",
    title="Energon datasets use the external dataloader",
    fields=("dataset.kind", "dataset.dataloader_type"),
    provenance="upstream",
    source="Megatron-Bridge Energon dataset config",
    fix="Set dataset.dataloader_type=external (or leave it unset).",
    trigger={**ENERGON, "dataset.dataloader_type": "single"},
    fixed={"dataset.dataloader_type": "external"},
    upstream_check=bridge(
        "data/samplers.py",
        72,
        "len(dataset)",
        "the Energon builder returns ready loaders; any other loader type wraps one in a Megatron sampler, "
        "which indexes it like a dataset and fails on the first batch (EnergonDatasetConfig declares "
        "dataloader_type as the literal 'external', which dataclasses do not enforce)",
        kind="runtime",
    ),
)
def energon_loader(r: Resolved) -> str | None:
    if r.cfg.dataset.kind == "energon" and r.dataloader_type != "external":
        return f"Energon datasets use dataloader_type=external (got {r.dataloader_type})"
    return None


@rule(
    "PACK-FIXED-WIDTH-FORCED",
    family=FAMILY,
    severity="warning",
    title="with PP>1 or EP>1, Bridge forces pad_to_max_length=true on direct_hf/energon/mock_vlm datasets",
    fields=("dataset.pad_to_max_length", "model.pipeline_model_parallel_size", "model.expert_model_parallel_size"),
    provenance="upstream",
    source=f"V22: {BRIDGE_CC} (silent override)",
    fix="Set dataset.pad_to_max_length=true explicitly and choose seq_length for the fixed width.",
    trigger={"dataset.kind": "direct_hf", "model.expert_model_parallel_size": 8, "model.num_moe_experts": 8},
    fixed={"dataset.pad_to_max_length": True},
)
def fixed_width_forced(r: Resolved) -> str | None:
    d = r.cfg.dataset
    if d.kind in ("direct_hf", "energon", "mock_vlm") and (r.pp > 1 or r.ep > 1) and not r.pad_to_max_length:
        return (
            f"with pipeline_model_parallel_size={r.pp} / expert_model_parallel_size={r.ep}, Megatron-Bridge "
            "forces dataset.pad_to_max_length=true on this dataset"
        )
    return None
