"""Topology and batch sizes: world size, global batch divisibility, sequence lengths."""

from __future__ import annotations

from seqpack.config.resolve import Resolved
from seqpack.config.rules.common import BRIDGE_CC, near_multiples
from seqpack.config.rules.evidence import bridge, bridge_cc, mcore
from seqpack.config.rules.registry import rule

FAMILY = "topology"


@rule(
    "TOPO-WORLD-DIVISIBLE",
    family=FAMILY,
    severity="error",
    title="world_size must be divisible by TP*PP*CP (and by TP*PP*eval CP)",
    fields=("dist.world_size", "model.tensor_model_parallel_size", "model.pipeline_model_parallel_size",
        "model.context_parallel_size", "dist.eval_context_parallel_size"),
    provenance="upstream",
    source="Megatron-Bridge ConfigContainer.get_data_parallel_size; Megatron-Core parallel state initialisation",
    fix="Choose a world size that is a multiple of TP*PP*CP, or change the parallel sizes.",
    trigger={"dist.world_size": 6, "model.tensor_model_parallel_size": 4},
    fixed={"dist.world_size": 8},
    upstream_check=(
        bridge_cc(1024, "total_model_size", "get_data_parallel_size asserts world size % (TP*PP*CP) == 0"),
        bridge_cc(1328, "eval_model_parallel_size", "validate asserts the same for TP*PP*eval CP"),
    ),
)
def world_divisible(r: Resolved) -> str | None:
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


@rule(
    "BATCH-GBS-DIVISIBLE",
    family=FAMILY,
    severity="error",
    title="global_batch_size must be divisible by micro_batch_size * DP (hence also >= DP)",
    fields=("train.global_batch_size", "train.micro_batch_size", "dist.world_size"),
    provenance="upstream",
    source="V40: Megatron batch sampler / Megatron-Core micro-batch calculator",
    fix="Pick a global batch size that is a multiple of micro_batch_size * data_parallel_size.",
    trigger={"dist.world_size": 8, "train.global_batch_size": 12},
    fixed={"train.global_batch_size": 16},
    note="The packing docs also ask for GBS >= DP with offline MBS1 packing; divisibility with GBS > 0 implies it.",
    upstream_check=(
        bridge_cc(1335, "eval_dp_product", "validate asserts it through the evaluation batch, whose size defaults "
                  "to the training one"),
        mcore(
            "megatron/core/num_microbatches_calculator.py",
            381,
            "micro_batch_times_data_parallel_size",
            "with an explicit evaluation batch, the micro-batch calculator asserts it when training starts",
            kind="runtime",
        ),
        bridge(
            "data/samplers.py",
            263,
            "micro_batch_times_data_parallel_size",
            "the batch sampler raises RuntimeError when GBS % (MBS*DP) != 0",
            kind="runtime",
        ),
    ),
)
def gbs_divisible(r: Resolved) -> str | None:
    if r.dp is None:
        return None
    gbs, mbs = r.cfg.train.global_batch_size, r.cfg.train.micro_batch_size
    unit = mbs * r.dp
    if gbs % unit:
        return (
            f"train.global_batch_size={gbs} is not divisible by micro_batch_size*DP = {mbs}*{r.dp} = {unit}; "
            f"nearest valid: {near_multiples(gbs, unit)}"
        )
    return None


@rule(
    "BATCH-EVAL-GBS-DIVISIBLE",
    family=FAMILY,
    severity="error",
    title="eval_global_batch_size (default: global_batch_size) must be divisible by eval micro batch size * eval DP",
    fields=("validation.eval_global_batch_size", "validation.eval_micro_batch_size", "dist.eval_context_parallel_size"),
    provenance="upstream",
    source=f"V41: {BRIDGE_CC}",
    fix="Pick an eval global batch size that is a multiple of eval_micro_batch_size * eval DP.",
    trigger={"dist.world_size": 8, "validation.eval_global_batch_size": 12},
    fixed={"validation.eval_global_batch_size": 16},
    upstream_check=bridge_cc(1335, "eval_dp_product", "asserts eval_global_batch_size % (eval MBS * eval DP) == 0"),
)
def eval_gbs_divisible(r: Resolved) -> str | None:
    egbs = r.cfg.validation.eval_global_batch_size
    explicit_mbs = r.cfg.validation.eval_micro_batch_size
    if r.eval_dp is None:
        return None
    name = "validation.eval_global_batch_size"
    if egbs is None:  # Bridge evaluates with the training batch size
        if r.eval_dp == r.dp and explicit_mbs is None:
            return None  # the same product BATCH-GBS-DIVISIBLE checks
        egbs = r.cfg.train.global_batch_size
        name = "validation.eval_global_batch_size (unset: train.global_batch_size)"
    embs = explicit_mbs or r.cfg.train.micro_batch_size
    unit = embs * r.eval_dp
    if egbs % unit:
        return (
            f"{name}={egbs} is not divisible by eval micro batch * eval DP = "
            f"{embs}*{r.eval_dp} = {unit}; nearest valid: {near_multiples(egbs, unit)}"
        )
    return None


@rule(
    "SEQ-LENGTH-MATCH",
    family=FAMILY,
    severity="error",
    title="model.seq_length and dataset.seq_length must be equal",
    fields=("model.seq_length", "dataset.seq_length"),
    provenance="upstream",
    source=f"V25: {BRIDGE_CC}",
    fix="Set model.seq_length and dataset.seq_length to the same value.",
    trigger={"model.seq_length": 4096, "dataset.seq_length": 2048},
    fixed={"dataset.seq_length": 4096},
    upstream_check=bridge_cc(1505, "data_seq_length", "asserts model.seq_length == dataset.seq_length"),
)
def seq_match(r: Resolved) -> str | None:
    ms, ds = r.cfg.model.seq_length, r.cfg.dataset.seq_length
    if ms is not None and ds is not None and ms != ds:
        return f"model.seq_length={ms} differs from dataset.seq_length={ds}"
    return None
