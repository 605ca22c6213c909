"""CUDA graphs and fixed shapes: what captured graphs need from packed batches."""

from __future__ import annotations

from seqpack.config.resolve import Resolved
from seqpack.config.rules.common import BRIDGE_CC, OFFLINE, SPECS, offline_on
from seqpack.config.rules.evidence import bridge, bridge_cc, bridge_main
from seqpack.config.rules.registry import rule
from seqpack.core.versions import BRIDGE_RELEASE

FAMILY = "cuda_graphs"


@rule(
    "PACK-OFFLINE-PAD-CU-FIXED-WIDTH",
    family=FAMILY,
    severity="error",
    title="pad_cu_seqlens=true requires pad_to_max_length=true",
    fields=(f"{SPECS}.pad_cu_seqlens", "dataset.dataset_kwargs.pad_to_max_length"),
    provenance="upstream",
    source=f"V11: {BRIDGE_CC}",
    fix="Set dataset.dataset_kwargs.pad_to_max_length=true.",
    trigger={**OFFLINE, f"{SPECS}.pad_cu_seqlens": True},
    fixed={"dataset.dataset_kwargs.pad_to_max_length": True},
    upstream_check=bridge_cc(1169, "pad_cu_seqlens", "raises ValueError: pad_cu_seqlens requires pad_to_max_length"),
)
def pad_cu_fixed_width(r: Resolved) -> str | None:
    if r.specs is not None and r.specs.pad_cu_seqlens and not r.pad_to_max_length:
        return "offline_packing_specs.pad_cu_seqlens=true requires pad_to_max_length=true (dataset_kwargs)"
    return None


@rule(
    "PACK-OFFLINE-PAD-CU-METADATA",
    family=FAMILY,
    severity="error",
    title="pad_cu_seqlens=true needs the pack metadata file",
    fields=(f"{SPECS}.pad_cu_seqlens", f"{SPECS}.packed_metadata_path", f"{SPECS}.packed_train_data_path"),
    provenance="upstream",
    source="V14: packed dataset construction asserts a metadata file",
    fix="Set offline_packing_specs.packed_metadata_path to the metadata JSON written with the packs.",
    trigger={**OFFLINE, f"{SPECS}.pad_cu_seqlens": True, "dataset.dataset_kwargs.pad_to_max_length": True,
        f"{SPECS}.packed_train_data_path": "/data/packed/training_2048.idx.parquet"},
    fixed={f"{SPECS}.packed_metadata_path": "/data/packed/2048_metadata.jsonl"},
    upstream_check=bridge(
        "data/packing/gpt_sft.py",
        76,
        "pack_metadata_file_path",
        "the packed dataset asserts a metadata file when pad_cu_seqlens is on",
        kind="runtime",
    ),
)
def pad_cu_metadata(r: Resolved) -> str | None:
    s = r.specs
    if s is None or not s.pad_cu_seqlens:
        return None
    if (s.packed_train_data_path or s.packed_val_data_path) and not s.packed_metadata_path:
        return (
            "offline_packing_specs.pad_cu_seqlens=true with explicit packed data paths but no "
            "packed_metadata_path: the static shapes come from the pack metadata file"
        )
    return None


@rule(
    "PACK-CUDA-GRAPH-FIXED-WIDTH",
    family=FAMILY,
    severity="error",
    title="offline packing with CUDA graphs (full-iteration or Transformer Engine) needs pad_to_max_length",
    fields=("model.cuda_graph_impl", "model.cuda_graph_scope", "dataset.dataset_kwargs.pad_to_max_length"),
    provenance="upstream",
    source=f"V12: {BRIDGE_CC}",
    fix="Set dataset.dataset_kwargs.pad_to_max_length=true so every packed row has the captured width.",
    trigger={**OFFLINE, "model.cuda_graph_impl": "transformer_engine", "model.cuda_graph_scope": ["mlp"]},
    fixed={"dataset.dataset_kwargs.pad_to_max_length": True},
    upstream_check=bridge_cc(
        1178,
        "uses_training_cuda_graphs",
        "raises ValueError: offline packing with CUDA graphs needs pad_to_max_length",
    ),
)
def graph_fixed_width(r: Resolved) -> str | None:
    if offline_on(r) and r.training_graphs and not r.pad_to_max_length:
        impl = r.cfg.model.cuda_graph_impl
        return f"offline packing with CUDA graphs (cuda_graph_impl={impl}) requires pad_to_max_length=true"
    return None


@rule(
    "PACK-CUDA-GRAPH-PAD-CU",
    family=FAMILY,
    severity="error",
    title="CUDA graphs that capture packed attention need pad_cu_seqlens=true",
    fields=("model.cuda_graph_impl", "model.cuda_graph_scope", f"{SPECS}.pad_cu_seqlens"),
    provenance="upstream",
    source=f"V13: {BRIDGE_CC}",
    fix="Set offline_packing_specs.pad_cu_seqlens=true (plus pad_to_max_length and the metadata file).",
    trigger={**OFFLINE, "model.cuda_graph_impl": "transformer_engine", "model.cuda_graph_scope": ["attn"],
        "dataset.dataset_kwargs.pad_to_max_length": True},
    fixed={f"{SPECS}.pad_cu_seqlens": True},
    note="The docs say CUDA graphs need pad_cu_seqlens; upstream requires it only when attention is captured "
        "(full-iteration, whole-layer or 'attn' scope). MLP-only graphs pass without it.",
    upstream_check=bridge_cc(
        1184,
        "captures_packed_attention",
        "raises ValueError: graphs that capture packed attention need pad_cu_seqlens",
    ),
)
def graph_pad_cu(r: Resolved) -> str | None:
    if offline_on(r) and r.graph_captures_attention and not r.specs.pad_cu_seqlens:  # type: ignore[union-attr]
        m = r.cfg.model
        return (
            f"CUDA graphs that capture packed attention (cuda_graph_impl={m.cuda_graph_impl}, "
            f"cuda_graph_scope={m.cuda_graph_scope}) require offline_packing_specs.pad_cu_seqlens=true"
        )
    return None


@rule(
    "CUDA-GRAPH-NAN-CHECK",
    family=FAMILY,
    severity="error",
    title="a full-iteration CUDA graph needs check_for_nan_in_loss=false",
    fields=("model.cuda_graph_impl", "model.cuda_graph_scope", "rerun_state_machine.check_for_nan_in_loss"),
    provenance="upstream",
    source=f"V55: {BRIDGE_CC}",
    fix="Set rerun_state_machine.check_for_nan_in_loss=false.",
    trigger={"model.cuda_graph_impl": "local", "model.cuda_graph_scope": ["full_iteration"]},
    fixed={"rerun_state_machine.check_for_nan_in_loss": False},
    upstream_check=bridge_cc(
        1371,
        "check_for_nan_in_loss",
        "asserts check_for_nan_in_loss is off with a full-iteration graph",
    ),
)
def graph_nan(r: Resolved) -> str | None:
    if r.full_iteration_graph and r.cfg.rerun_state_machine.check_for_nan_in_loss:
        return "a full-iteration CUDA graph requires rerun_state_machine.check_for_nan_in_loss=false"
    return None


@rule(
    "PACK-MOE-MASK-CUDA-GRAPH",
    family=FAMILY,
    severity="error",
    title="packed MoE padding masks are incompatible with router-scoped Transformer Engine CUDA graphs",
    fields=("model.num_moe_experts", "model.cuda_graph_impl", "model.cuda_graph_scope"),
    provenance="upstream",
    source="V54: Megatron-Bridge gpt_step (main; megatron-bridge 0.6.2 passes no padding mask to the model, so it has "
    "no such conflict and no guard)",
    fix="Limit cuda_graph_scope to attn/mlp (not the router), or disable CUDA graphs for this packed MoE run.",
    trigger={**OFFLINE, "model.num_moe_experts": 8, "model.cuda_graph_impl": "transformer_engine",
        "model.cuda_graph_scope": ["moe_router"], "dataset.dataset_kwargs.pad_to_max_length": True},
    fixed={"model.cuda_graph_scope": ["mlp"]},
    targets=("main",),
    upstream_check=bridge_main(
        "training/gpt_step.py",
        193,
        "captures_router",
        "gpt_step raises ValueError for packed MoE batches under router-scoped TE graphs",
        kind="runtime",
    ),
)
def moe_mask_graph(r: Resolved) -> str | None:
    if r.packed and r.cfg.model.num_moe_experts and r.graph_captures_router:
        return (
            f"packed MoE batches carry a padding mask that router-scoped Transformer Engine CUDA graphs cannot take "
            f"(cuda_graph_scope={r.cfg.model.cuda_graph_scope})"
        )
    return None


@rule(
    "CUDA-GRAPH-LOCAL-FULL-ITERATION",
    family=FAMILY,
    severity="error",
    title="cuda_graph_impl=local is supported only for full-iteration CUDA graphs",
    fields=("model.cuda_graph_impl", "model.cuda_graph_scope"),
    provenance="upstream",
    source=f"Megatron-Bridge validate_cuda_graph_configuration, called from {BRIDGE_CC} (megatron-bridge "
    f"{BRIDGE_RELEASE}; not read on main)",
    fix="Use cuda_graph_scope=[full_iteration] with the local implementation, or cuda_graph_impl=transformer_engine "
    "for scoped capture (attn, mlp, ...).",
    trigger={"model.cuda_graph_impl": "local"},
    fixed={"model.cuda_graph_impl": "transformer_engine"},
    targets=(BRIDGE_RELEASE,),
    upstream_check=bridge(
        "utils/cuda_graph.py",
        146,
        "is_full_iteration_cuda_graph",
        "raises ValueError for the local implementation without a full-iteration scope",
    ),
)
def local_full_iteration(r: Resolved) -> str | None:
    m = r.cfg.model
    if m.cuda_graph_impl == "local" and "full_iteration" not in m.cuda_graph_scope:
        return f"model.cuda_graph_impl=local with cuda_graph_scope={m.cuda_graph_scope} (no full_iteration)"
    return None
