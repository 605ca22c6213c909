"""MoE and MTP with packing: dispatch widths, HybridEP padding, token dropping, the MTP roll, pipeline shapes.

The dispatch width rules themselves live in :mod:`seqpack.config.dispatch` (the validation
report shows them under ``moe_dispatch``); the rules here flag the configurations that break them
or that upstream does not cover. Energon's EP-overlap override is ``PACK-ENERGON-EP-OVERLAP`` (energon
family), the router-scoped CUDA-graph refusal ``PACK-MOE-MASK-CUDA-GRAPH`` (cuda_graphs family) and
Energon's MTP refusal ``PACK-ENERGON-NO-MTP``.
"""

from __future__ import annotations

from seqpack.config.dispatch import HYBRIDEP_TOKEN_ALIGNMENT
from seqpack.config.resolve import Resolved
from seqpack.config.rules.common import IN_BATCH, OFFLINE, fmt, offline_on
from seqpack.config.rules.evidence import bridge, mcore
from seqpack.config.rules.registry import rule

FAMILY = "moe"

MOE = {"model.num_moe_experts": 8}
EP2 = {**MOE, "model.expert_model_parallel_size": 2, "dist.world_size": 2}
HYBRIDEP = {"model.moe_token_dispatcher_type": "flex", "model.moe_flex_dispatcher_backend": "hybridep"}
FIXED = {"dataset.dataset_kwargs.pad_to_max_length": True}
TE_MLP_GRAPH = {"model.cuda_graph_impl": "transformer_engine", "model.cuda_graph_scope": ["mlp"]}


def _moe(r: Resolved) -> bool:
    return bool(r.packed and r.cfg.model.num_moe_experts)


def _graphs(r: Resolved) -> bool:
    m = r.cfg.model
    return m.cuda_graph_impl != "none"


def _width_rule(r: Resolved) -> str | None:
    width = r.moe_dispatch()
    return None if width is None else width.width_rule


@rule(
    "MOE-ALLGATHER-EQUAL-WIDTH",
    family=FAMILY,
    severity="error",
    title="the allgather MoE dispatcher needs equal token counts on every EP rank: fixed-width packs",
    fields=("model.moe_token_dispatcher_type", "model.expert_model_parallel_size", "dataset.pad_to_max_length"),
    provenance="upstream",
    source="Megatron-Core MoEAllGatherTokenDispatcher: all-gather of equal splits over the TP x EP group",
    fix="Set dataset_kwargs.pad_to_max_length=true (fixed-width packs), or use the alltoall dispatcher.",
    trigger={**OFFLINE, **EP2, "model.moe_token_dispatcher_type": "allgather"},
    fixed=FIXED,
    upstream_check=(
        mcore("megatron/core/transformer/moe/token_dispatcher.py", 297, "tp_ep_group",
              "the allgather dispatcher gathers the hidden states of every TP x EP rank without split sizes",
              kind="kernel"),
        mcore("megatron/core/tensor_parallel/mappings.py", 146, "dist_all_gather_func",
              "all_gather_into_tensor needs the same number of tokens on every rank", kind="kernel"),
    ),
    note="EP groups are carved out of data parallelism, so their ranks hold different packs; packs of "
    "different widths give them different token counts."
    " Not reproduced in the upstream lane: the failure is a multi-rank GPU all-gather.",
)
def allgather_equal_width(r: Resolved) -> str | None:
    if _moe(r) and _width_rule(r) == "fixed_required" and r.cfg.model.moe_token_dispatcher_type == "allgather":
        return (
            f"the allgather dispatcher with expert_model_parallel_size={r.ep} needs the same token count on every "
            f"EP rank, but {'/'.join(r.paths)} packs vary in width (pad_to_max_length is off)"
        )
    return None


@rule(
    "MOE-HYBRIDEP-GRAPHS-FIXED-WIDTH",
    family=FAMILY,
    severity="error",
    title="HybridEP under CUDA graphs needs equal per-rank dispatch shapes: fixed-width packs",
    fields=("model.moe_flex_dispatcher_backend", "model.cuda_graph_impl", "dataset.pad_to_max_length"),
    provenance="upstream",
    source="Megatron-Core HybridEP manager (equal per-rank inputs) and Megatron-Bridge TransformerConfig "
    "(uneven-input padding stays off under CUDA graphs)",
    fix="Use fixed-width packs (dataset_kwargs.pad_to_max_length=true), or disable CUDA graphs so the "
    "uneven-input padding can run.",
    trigger={**IN_BATCH, **MOE, **HYBRIDEP, **TE_MLP_GRAPH},
    fixed=FIXED,
    upstream_check=(
        mcore("megatron/core/transformer/moe/token_dispatcher.py", 1055, "equal per-rank input sizes",
              "HybridEP dispatch expects the same token count on every rank; only the uneven-input padding "
              "evens packed THD counts out", kind="kernel"),
        bridge("models/transformer_config.py", 125, "cuda_graphs_enabled",
               "Bridge leaves moe_hybridep_pad_uneven_dispatch_inputs as configured when CUDA graphs are on"),
    ),
    note="Not reproduced in the upstream lane: HybridEP's dispatch is a multi-rank GPU collective."
)
def hybridep_graphs_fixed_width(r: Resolved) -> str | None:
    m = r.cfg.model
    if _moe(r) and _graphs(r) and _width_rule(r) == "fixed_required" and m.moe_flex_dispatcher_backend == "hybridep":
        return (
            f"HybridEP with CUDA graphs (cuda_graph_impl={m.cuda_graph_impl}) needs equal per-rank dispatch shapes, "
            f"but {'/'.join(r.paths)} packs vary in width (pad_to_max_length is off)"
        )
    return None


@rule(
    "MOE-HYBRIDEP-GRAPHS-PADDING",
    family=FAMILY,
    severity="warning",
    title="HybridEP's uneven-input padding synchronises with the host, which CUDA-graph capture cannot contain",
    fields=("model.moe_hybridep_pad_uneven_dispatch_inputs", "model.cuda_graph_impl"),
    provenance="stricter",
    source="Megatron-Core _HybridEPManager.setup_metadata reads the all-reduced count with .item() "
    "(token_dispatcher.py 1082 at d98e8a64); Megatron-Bridge's TransformerConfig comment calls it not "
    "capture-safe and keeps it off under CUDA graphs. Whether capture fails depends on the graph scope, "
    "so this is a warning.",
    fix="Set moe_hybridep_pad_uneven_dispatch_inputs=false and give every rank the same width "
    "(dataset_kwargs.pad_to_max_length=true).",
    trigger={**IN_BATCH, **MOE, **HYBRIDEP, **TE_MLP_GRAPH, **FIXED,
             "model.moe_hybridep_pad_uneven_dispatch_inputs": True},
    fixed={"model.moe_hybridep_pad_uneven_dispatch_inputs": False},
)
def hybridep_graphs_padding(r: Resolved) -> str | None:
    m = r.cfg.model
    if (m.num_moe_experts and m.moe_flex_dispatcher_backend == "hybridep" and m.moe_token_dispatcher_type == "flex"
            and _graphs(r) and m.moe_hybridep_pad_uneven_dispatch_inputs):
        return (
            "moe_hybridep_pad_uneven_dispatch_inputs=true with CUDA graphs: the padding reads the EP group's "
            "largest token count back to the host, which graph capture cannot contain"
        )
    return None


@rule(
    "MOE-HYBRIDEP-CHUNK-WIDTH",
    family=FAMILY,
    severity="warning",
    title="fixed-width packs for HybridEP: tokens per rank should be a whole number of its token chunk",
    fields=("model.moe_flex_dispatcher_backend", "dataset.offline_packing_specs.packed_sequence_size",
            "model.seq_length"),
    provenance="documented",
    source=f"Megatron-Bridge packed-sequences guide (a HybridEP combine chunk of 128 tokens needs a width "
    f"divisible by 128); Megatron-Core pads HybridEP inputs to a multiple of {HYBRIDEP_TOKEN_ALIGNMENT} "
    "(fused_a2a.py 282, token_dispatcher.py 1083 at d98e8a64). A width off the chunk costs padding, "
    "not a failure, in the code seqpack can read.",
    fix="Choose a pack width that is a multiple of the width_multiple in the report's moe_dispatch "
    "(`seqpack validate` shows it).",
    trigger={**OFFLINE, **EP2, **HYBRIDEP, **FIXED, "dataset.offline_packing_specs.packed_sequence_size": 2000,
             "model.seq_length": 2000},
    fixed={"dataset.offline_packing_specs.packed_sequence_size": 2048, "model.seq_length": 2048},
)
def hybridep_chunk_width(r: Resolved) -> str | None:
    width = r.moe_dispatch() if _moe(r) else None
    if width is None or width.dispatcher != "hybridep" or not width.chunk_padding:
        return None
    field = "packed_sequence_size" if "offline" in r.paths else "seq_length"
    return (
        f"{field}={width.fixed_width} (fixed width) gives {width.per_rank_tokens} tokens per rank "
        f"(CP*TP_sp={width.tokens_divisor}), "
        f"not a multiple of HybridEP's {width.chunk}-token chunk: every dispatch pads {width.chunk_padding} more; "
        f"use a width multiple of {width.width_multiple}"
    )


@rule(
    "MOE-CAPACITY-PACKING",
    family=FAMILY,
    severity="warning",
    title="expert capacity / token dropping with packed sequences has no upstream runtime coverage",
    fields=("model.moe_expert_capacity_factor",),
    provenance="documented",
    source="Megatron-Bridge packed-sequences guide (expert-capacity/token-dropping configurations lack native-"
    "packing runtime coverage); Megatron-Core sizes capacity from every token of the micro-batch and lets "
    "padding compete for it (router.py 793, moe_utils.py 1052 at d98e8a64)",
    fix="Prefer dropless MoE (moe_expert_capacity_factor=null) for packed fine-tuning, or verify with "
    "`seqpack smoke --moe` and a loss sentinel.",
    trigger={**OFFLINE, **MOE, "model.moe_expert_capacity_factor": 1.0},
    fixed={"model.moe_expert_capacity_factor": None},
    note="Which tokens an expert drops depends on everything in the micro-batch, so a packed sequence is not "
    "trained as it would be alone; seqpack's reference model shows the loss moving when sequences share a pack.",
)
def capacity_packing(r: Resolved) -> str | None:
    cf = r.cfg.model.moe_expert_capacity_factor
    if _moe(r) and cf is not None:
        return (
            f"moe_expert_capacity_factor={cf} with {'/'.join(r.paths)} packing: capacity counts the padding of each "
            "pack, padding competes for it, and which tokens are dropped depends on what shares the pack; "
            "upstream has no runtime coverage of this combination"
        )
    return None


@rule(
    "MTP-PACKED-ALIGNMENT-ROLL",
    family=FAMILY,
    severity="warning",
    title="Megatron-Core's packed MTP roll misplaces sequences when they carry alignment padding",
    fields=("model.mtp_num_layers", "dataset.offline_packing_specs.pad_seq_to_mult", "model.context_parallel_size"),
    provenance="stricter",
    source="Megatron-Core _roll_tensor_packed_seq (multi_token_prediction.py 333 at d98e8a64, since "
    "core_v0.16.0) rolls windows of cu_seqlens_q, the real boundaries, over a row laid out by the padded "
    "ones; open fixes NVIDIA/Megatron-LM#4495 and #6205. The MTP loss is silently wrong (CP > 1 can also "
    "crash), so no upstream check fires.",
    fix="Keep per-sequence alignment at 1 (CP=1, no SP) for packed MTP, use a Megatron-Core with the fix, or "
    "set mtp_num_layers=0; `seqpack smoke --mtp` runs Megatron-Core's own roll on your packs and fails there.",
    trigger={**OFFLINE, "model.mtp_num_layers": 1, "model.context_parallel_size": 2,
             "model.calculate_per_token_loss": True, "dist.world_size": 2,
             "dataset.offline_packing_specs.pad_seq_to_mult": 4},
    fixed={"model.context_parallel_size": 1, "dist.world_size": 1, "dataset.offline_packing_specs.pad_seq_to_mult": 1},
    note="Megatron-Bridge's GLM-5.2 PEFT recipe (recipes/glm/gb200/glm5.py, glm52_peft_192gpu_gb200_bf16_config, "
    "at 067f987) combines mtp_num_layers=1 with offline packing at pad_seq_to_mult=4 and CP1, so this warning "
    "fires on it.",
)
def mtp_alignment_roll(r: Resolved) -> str | None:
    mtp = r.cfg.model.mtp_num_layers or 0
    if not (mtp > 0 and r.packed):
        return None
    multiple = r.alignment.pad_seq_to_mult
    if offline_on(r) and r.specs is not None and r.specs.pad_seq_to_mult:
        multiple = max(multiple, r.specs.pad_seq_to_mult)
    if multiple > 1:
        return (
            f"mtp_num_layers={mtp} with per-sequence alignment {multiple} ({'/'.join(r.paths)} packing): "
            "Megatron-Core rolls MTP inputs and targets over cu_seqlens_q (real boundaries) while the row is laid "
            "out by the padded ones, so every sequence after the first gets wrong MTP targets"
        )
    return None


@rule(
    "PACK-PP-VARIABLE-SHAPES",
    family=FAMILY,
    severity="error",
    title="pipeline parallelism with packs of varying width needs variable-length pipeline shapes",
    fields=("model.pipeline_model_parallel_size", "model.variable_seq_lengths", "dataset.dataloader_type",
            "dataset.pad_to_max_length"),
    provenance="upstream",
    source="Megatron-Core sizes pipeline P2P buffers from the seq_length the schedule gets unless "
    "variable_seq_lengths is set. Megatron-Bridge's batch dataloader collates a step's rows to one width and "
    "passes it as seq_length (training/train.py 893-900, data/batch_utils.py prepare_finetuning_batch at "
    "067f987); it sets variable_seq_lengths for in-batch and Energon packing with PP > 1 "
    "(models/transformer_config.py 185-186); offline packs from a single or cyclic loader get neither",
    fix="Keep dataset.dataloader_type=batch (the GPT-SFT default), set dataset_kwargs.pad_to_max_length=true, or "
    "set model.variable_seq_lengths=true.",
    trigger={**OFFLINE, "model.pipeline_model_parallel_size": 2, "dist.world_size": 2,
             "dataset.dataloader_type": "single"},
    fixed=FIXED,
    upstream_check=(
        mcore("megatron/core/pipeline_parallel/schedules.py", 2104, "variable_seq_lengths",
              "without variable_seq_lengths every P2P buffer has the fixed shape seq_length/CP(/TP) while a "
              "narrower pack sends fewer tokens", kind="kernel"),
        mcore("megatron/core/pipeline_parallel/p2p_communication.py", 322, "variable_seq_lengths",
              "shapes are exchanged only with variable_seq_lengths (or a standalone MTP stage)", kind="kernel"),
    ),
    note="Global-batch and Energon packing reject PP outright (PACK-GLOBAL-NO-PP, PACK-ENERGON-NO-PP); "
    "in-batch packing gets the flag from Bridge; Bridge's recipes that combine offline packing with PP use "
    "the batch dataloader (for example GLM-5.2 PEFT at PP6)."
    " Not reproduced in the upstream lane: the mismatch is in pipeline P2P communication between GPU ranks.",
)
def pp_variable_shapes(r: Resolved) -> str | None:
    m = r.cfg.model
    if (r.pp > 1 and offline_on(r) and not r.pad_to_max_length and r.dataloader_type != "batch"
            and m.variable_seq_lengths is not True):
        return (
            f"pipeline_model_parallel_size={r.pp} with offline packs of varying width (pad_to_max_length is off), "
            f"dataloader_type={r.dataloader_type} and variable_seq_lengths={fmt(m.variable_seq_lengths)}: every "
            "micro-batch keeps its own width, but the pipeline stages exchange seq_length-wide buffers"
        )
    return None


@rule(
    "MOE-ALLGATHER-PP-VARIABLE",
    family=FAMILY,
    severity="warning",
    title="Megatron-Core refuses variable-length pipeline shapes with the allgather dispatcher; Bridge sets them after that check",
    fields=("model.moe_token_dispatcher_type", "model.pipeline_model_parallel_size", "model.variable_seq_lengths"),
    provenance="upstream",
    source="Megatron-Core TransformerConfig raises for allgather with variable_seq_lengths (transformer_config.py "
    "2977 at d98e8a64); Megatron-Bridge sets variable_seq_lengths after that check for in-batch and Energon "
    "packing with PP > 1 (models/transformer_config.py 181-186 at 067f987), so a MoE model with the allgather "
    "dispatcher runs the combination Megatron-Core refuses",
    fix="Use the alltoall dispatcher for packed MoE training with pipeline parallelism.",
    trigger={**IN_BATCH, **MOE, "model.moe_token_dispatcher_type": "allgather",
             "model.pipeline_model_parallel_size": 2, "dist.world_size": 2},
    fixed={"model.moe_token_dispatcher_type": "alltoall"},
)
def allgather_pp_variable(r: Resolved) -> str | None:
    m = r.cfg.model
    marked = any(p in r.paths for p in ("in_batch", "energon", "global_batch"))
    if _moe(r) and m.moe_token_dispatcher_type == "allgather" and r.pp > 1 and marked and m.variable_seq_lengths is not True:
        return (
            f"allgather dispatcher with pipeline_model_parallel_size={r.pp} and variable-length pipeline shapes "
            f"({'/'.join(r.paths)} packing): Megatron-Core's config check refuses this pair"
        )
    return None


# --- Megatron-Core's own model-config checks on the MoE fields seqpack carries --------------------------------
_TC = "megatron/core/transformer/transformer_config.py"


@rule(
    "MOE-ALLGATHER-VARIABLE-SEQ",
    family=FAMILY,
    severity="error",
    title="variable_seq_lengths=true does not work with the allgather token dispatcher",
    fields=("model.variable_seq_lengths", "model.moe_token_dispatcher_type"),
    provenance="upstream",
    source="Megatron-Core TransformerConfig.__post_init__ (checked for every model whose dispatcher is allgather, "
    "the Megatron-Core default)",
    fix="Use moe_token_dispatcher_type=alltoall, or leave variable_seq_lengths unset.",
    trigger={"model.variable_seq_lengths": True, "model.moe_token_dispatcher_type": "allgather"},
    fixed={"model.moe_token_dispatcher_type": "alltoall"},
    upstream_check=mcore(_TC, 2645, "variable_seq_lengths is True",
                         "raises ValueError: the allgather dispatcher does not support variable sequence lengths"),
)
def allgather_variable_seq(r: Resolved) -> str | None:
    m = r.cfg.model
    if m.variable_seq_lengths is True and m.moe_token_dispatcher_type == "allgather":
        return "model.variable_seq_lengths=true with moe_token_dispatcher_type=allgather"
    return None


@rule(
    "MOE-EP-OVERLAP",
    family=FAMILY,
    severity="error",
    title="MoE expert-parallel communication overlap (and delayed wgrad) needs EP > 1, alltoall/flex, VPP under PP, "
    "MTP <= 1 and no moe/mlp graph scope",
    fields=("model.overlap_moe_expert_parallel_comm", "model.delay_wgrad_compute", "model.expert_model_parallel_size",
            "model.moe_token_dispatcher_type"),
    provenance="upstream",
    source="Megatron-Core TransformerConfig.__post_init__ (the overlap's requirements on the fields seqpack carries; "
    "it also needs bf16/fp16, which the recipes use)",
    fix="Turn model.overlap_moe_expert_parallel_comm and delay_wgrad_compute off, or meet every requirement the "
    "message lists.",
    trigger={"model.overlap_moe_expert_parallel_comm": True},
    fixed={"model.num_moe_experts": 8, "model.expert_model_parallel_size": 2, "dist.world_size": 2},
    upstream_check=(
        mcore(_TC, 2682, "expert model parallelism", "asserts EP > 1 for the overlap"),
        mcore(_TC, 2686, "alltoall/flex", "asserts the alltoall or flex dispatcher"),
        mcore(_TC, 2676, "virtual_pipeline_model_parallel_size", "asserts VPP when PP > 1"),
        mcore(_TC, 2712, "MTP supports at most one layer", "asserts mtp_num_layers <= 1"),
        mcore(_TC, 2752, "must be enabled when enabling delay_wgrad_compute", "asserts the overlap for delayed wgrad"),
    ),
)
def ep_overlap(r: Resolved) -> str | None:
    m = r.cfg.model
    if m.delay_wgrad_compute and not m.overlap_moe_expert_parallel_comm:
        return "model.delay_wgrad_compute=true needs model.overlap_moe_expert_parallel_comm=true"
    if not m.overlap_moe_expert_parallel_comm:
        return None
    problems = []
    if r.ep <= 1:
        problems.append(f"expert_model_parallel_size > 1 (got {r.ep})")
    if m.moe_token_dispatcher_type not in ("alltoall", "flex"):
        problems.append(f"moe_token_dispatcher_type alltoall or flex (got {m.moe_token_dispatcher_type})")
    if r.pp > 1 and m.virtual_pipeline_model_parallel_size is None:
        problems.append(f"virtual_pipeline_model_parallel_size with pipeline_model_parallel_size={r.pp}")
    if (m.mtp_num_layers or 0) > 1:
        problems.append(f"mtp_num_layers <= 1 (got {m.mtp_num_layers})")
    if m.cuda_graph_impl == "transformer_engine" and any(s in m.cuda_graph_scope for s in ("moe", "mlp")):
        problems.append(f"no moe/mlp CUDA-graph scope (got {m.cuda_graph_scope})")
    if problems:
        return "model.overlap_moe_expert_parallel_comm=true needs " + "; ".join(problems)
    return None
