"""Global-batch online packing: the runtime THD constraints of the global-batch scheduler."""

from __future__ import annotations

from seqpack.config.resolve import Resolved
from seqpack.config.rules.common import BRIDGE_CC, GLOBAL, flag_mismatch, global_on
from seqpack.config.rules.evidence import GLOBAL_BATCH_GUIDE, MLM_DEV, bridge, bridge_guide, mcore, mcore_main
from seqpack.config.rules.registry import rule
from seqpack.core.alignment import DYNAMIC_CP_DESIGNS
from seqpack.core.versions import BRIDGE_MAIN, BRIDGE_RELEASE, MCORE_MAIN_COMMIT, MCORE_RELEASE, bridge_pr

FAMILY = "global_batch"

#: What a release lacks for global-batch packing, checked in the lane: megatron-core 0.19.2 has no
#: ``sequence_packing_scheduler`` field (and no DpBalancedScheduler), megatron-bridge 0.6.2 no switch.
NOT_RELEASED = (
    f"global-batch packing is in no Megatron-Bridge release: megatron-bridge {BRIDGE_RELEASE} has no "
    f"dataset.enable_global_batch_packing and megatron-core {MCORE_RELEASE} no sequence_packing_scheduler "
    f"(nor DpBalancedScheduler); {bridge_pr(6127)} (open) adds the Bridge side, Megatron-LM main "
    f"({MCORE_MAIN_COMMIT[:8]}) has the scheduler"
)

#: Scheduler names the validator accepts (Megatron-Core registers dp_balanced; balanced is seqpack's).
KNOWN_SCHEDULERS = ("dp_balanced", "balanced")


@rule(
    "PACK-GLOBAL-BRIDGE-VERSION",
    family=FAMILY,
    targets=(BRIDGE_RELEASE,),
    prs=(6127,),
    severity="error",
    title="global-batch packing is in no Megatron-Bridge release",
    fields=("dataset.enable_global_batch_packing", "model.sequence_packing_scheduler",
            "dataset.yields_unpacked_samples"),
    provenance="upstream",
    source=f"megatron-bridge {BRIDGE_RELEASE} / megatron-core {MCORE_RELEASE} (checked in the lane): no global-batch "
    "switch, no sequence_packing_scheduler field, no DpBalancedScheduler; Megatron-Bridge PR #6127 is open",
    fix=f"On megatron-bridge {BRIDGE_RELEASE} use offline packing (MBS1) or Direct-HF in-batch packing; seqpack's own "
    "global-batch path (`seqpack smoke --path global_batch`) follows Megatron-LM main and is validated with "
    "--bridge-version main.",
    trigger={**GLOBAL},
    fixed={"dataset.enable_global_batch_packing": False, "model.max_seqlen_per_dp_cp_rank": None},
    upstream_check=(
        bridge(
            "data/builders/gpt_sft.py",
            105,
            "class GPTSFTDatasetConfig",
            "the dataset configs declare no enable_global_batch_packing (nor yields_unpacked_samples): building "
            "one with it raises TypeError",
        ),
        mcore("megatron/core/model_parallel_config.py", 111, "max_seqlen_per_dp_cp_rank",
              "the model-parallel config has max_seqlen_per_dp_cp_rank (for hybrid CP) but no "
              "sequence_packing_scheduler: building the model config with it raises TypeError"),
    ),
)
def global_version(r: Resolved) -> str | None:
    d, m = r.cfg.dataset, r.cfg.model
    if d.enable_global_batch_packing or m.sequence_packing_scheduler is not None or d.yields_unpacked_samples is not None:
        return NOT_RELEASED
    return None


@rule(
    "PACK-GLOBAL-BRIDGE-PR",
    family=FAMILY,
    targets=(BRIDGE_MAIN,),
    prs=(6127,),
    severity="warning",
    title="global-batch packing is not on Megatron-Bridge main yet (PR #6127, open); the scheduler is Megatron-LM main's",
    fields=("dataset.enable_global_batch_packing",),
    provenance="documented",
    source="Megatron-Bridge PR #6127 (open as of 2026-09-16) adds dataset.enable_global_batch_packing and the "
    "validation the global-batch rules mirror; Megatron-LM main has DpBalancedScheduler (d98e8a64). seqpack's "
    "global-batch path runs that scheduler itself; Bridge main at 067f987 has no switch for it",
    fix="Train with seqpack's global-batch path (or a Bridge build with PR #6127); the global-batch rules below "
    "follow that PR's documented checks.",
    trigger={**GLOBAL},
    fixed={"dataset.enable_global_batch_packing": False, "model.max_seqlen_per_dp_cp_rank": None},
)
def global_pr(r: Resolved) -> str | None:
    if r.cfg.dataset.enable_global_batch_packing:
        return (f"dataset.enable_global_batch_packing=true: Megatron-Bridge main has no such switch yet "
                f"({bridge_pr(6127)} is open); seqpack's global-batch path provides it, with Megatron-LM main's "
                "dp_balanced scheduler")
    return None


@rule(
    "PACK-GLOBAL-MBS1",
    family=FAMILY,
    targets=(BRIDGE_MAIN,),
    prs=(6127,),
    severity="error",
    title="global-batch packing requires micro_batch_size=1",
    fields=("dataset.enable_global_batch_packing", "train.micro_batch_size"),
    provenance="upstream",
    source=f"{BRIDGE_CC} (runtime THD constraints)",
    fix="Set train.micro_batch_size=1; the scheduler decides how many micro-batches a step runs.",
    trigger={**GLOBAL, "train.micro_batch_size": 2},
    fixed={"train.micro_batch_size": 1},
    upstream_check=mcore_main(
        "megatron/core/datasets/data_schedule_utils.py",
        61,
        "shape[0] == 1",
        "wrap_data_iterator asserts one sample per collated entry (MBS 1)",
    ),
)
def global_mbs1(r: Resolved) -> str | None:
    if global_on(r) and r.cfg.train.micro_batch_size != 1:
        return f"global-batch packing requires train.micro_batch_size=1 (got {r.cfg.train.micro_batch_size})"
    return None


@rule(
    "PACK-GLOBAL-PER-TOKEN-LOSS",
    family=FAMILY,
    targets=(BRIDGE_MAIN,),
    prs=(6127,),
    severity="error",
    title="global-batch packing requires calculate_per_token_loss=true",
    fields=("dataset.enable_global_batch_packing", "model.calculate_per_token_loss"),
    provenance="upstream",
    source=f"{BRIDGE_CC} (runtime THD constraints)",
    fix="Set model.calculate_per_token_loss=true.",
    trigger={**GLOBAL, "model.calculate_per_token_loss": False},
    fixed={"model.calculate_per_token_loss": True},
    upstream_check=bridge_guide(
        GLOBAL_BATCH_GUIDE,
        "ConfigContainer.validate requires per-token loss for global-batch packing",
    ),
)
def global_per_token_loss(r: Resolved) -> str | None:
    bad = flag_mismatch(r, "model.calculate_per_token_loss", True) if global_on(r) else None
    return f"global-batch packing requires {bad}" if bad else None


@rule(
    "PACK-GLOBAL-AVG-COLLECTIVE",
    family=FAMILY,
    targets=(BRIDGE_MAIN,),
    prs=(6127,),
    severity="error",
    title="global-batch packing requires ddp.average_in_collective=false",
    fields=("dataset.enable_global_batch_packing", "ddp.average_in_collective"),
    provenance="upstream",
    source=f"{BRIDGE_CC} (runtime THD constraints)",
    fix="Set ddp.average_in_collective=false.",
    trigger={**GLOBAL, "ddp.average_in_collective": True},
    fixed={"ddp.average_in_collective": False},
    upstream_check=bridge_guide(GLOBAL_BATCH_GUIDE, "ConfigContainer.validate requires average_in_collective=False"),
)
def global_avg_collective(r: Resolved) -> str | None:
    bad = flag_mismatch(r, "ddp.average_in_collective", False) if global_on(r) else None
    return f"global-batch packing requires {bad}" if bad else None


@rule(
    "PACK-GLOBAL-NO-CUDA-GRAPHS",
    family=FAMILY,
    targets=(BRIDGE_MAIN,),
    prs=(6127,),
    severity="error",
    title="global-batch packing does not support CUDA graphs",
    fields=("dataset.enable_global_batch_packing", "model.cuda_graph_impl"),
    provenance="upstream",
    source=f"{BRIDGE_CC} (runtime THD constraints)",
    fix="Set model.cuda_graph_impl=none (pack shapes change every step).",
    trigger={**GLOBAL, "model.cuda_graph_impl": "local"},
    fixed={"model.cuda_graph_impl": "none"},
    upstream_check=bridge_guide(
        GLOBAL_BATCH_GUIDE,
        "ConfigContainer.validate rejects CUDA graphs with global-batch packing",
    ),
)
def global_no_graphs(r: Resolved) -> str | None:
    if global_on(r) and r.any_graph:
        return f"global-batch packing does not support CUDA graphs (cuda_graph_impl={r.cfg.model.cuda_graph_impl})"
    return None


@rule(
    "PACK-GLOBAL-NO-PP",
    family=FAMILY,
    targets=(BRIDGE_MAIN,),
    prs=(6127,),
    severity="error",
    title="global-batch packing does not support pipeline parallelism",
    fields=("dataset.enable_global_batch_packing", "model.pipeline_model_parallel_size"),
    provenance="upstream",
    source=f"{BRIDGE_CC} (runtime THD constraints)",
    fix="Set pipeline_model_parallel_size=1.",
    trigger={**GLOBAL, "model.pipeline_model_parallel_size": 2, "dist.world_size": 2},
    fixed={"model.pipeline_model_parallel_size": 1},
    upstream_check=bridge_guide(
        GLOBAL_BATCH_GUIDE,
        "ConfigContainer.validate rejects pipeline parallelism with global-batch packing",
    ),
)
def global_no_pp(r: Resolved) -> str | None:
    if global_on(r) and r.pp > 1:
        return f"global-batch packing does not support pipeline parallelism (pipeline_model_parallel_size={r.pp})"
    return None


@rule(
    "PACK-GLOBAL-NO-VPP",
    family=FAMILY,
    targets=(BRIDGE_MAIN,),
    prs=(6127,),
    severity="error",
    title="global-batch packing does not support virtual pipeline parallelism",
    fields=("dataset.enable_global_batch_packing", "model.virtual_pipeline_model_parallel_size"),
    provenance="upstream",
    source=f"{BRIDGE_CC} (global-batch packing requirements)",
    fix="Unset model.virtual_pipeline_model_parallel_size.",
    trigger={**GLOBAL, "model.virtual_pipeline_model_parallel_size": 2},
    fixed={"model.virtual_pipeline_model_parallel_size": None},
    upstream_check=bridge_guide(GLOBAL_BATCH_GUIDE, "ConfigContainer.validate rejects virtual pipeline parallelism"),
)
def global_no_vpp(r: Resolved) -> str | None:
    vpp = r.cfg.model.virtual_pipeline_model_parallel_size
    if global_on(r) and vpp is not None:
        return f"global-batch packing does not support virtual pipeline parallelism (virtual_pipeline_model_parallel_size={vpp})"
    return None


@rule(
    "PACK-GLOBAL-DATALOADER",
    family=FAMILY,
    targets=(BRIDGE_MAIN,),
    prs=(6127,),
    severity="error",
    title="global-batch packing needs the single or cyclic dataloader",
    fields=("dataset.enable_global_batch_packing", "dataset.dataloader_type"),
    provenance="upstream",
    source=f"{BRIDGE_CC} (global-batch packing requirements)",
    fix="Set dataset.dataloader_type=single (or cyclic).",
    trigger={**GLOBAL, "dataset.dataloader_type": "batch"},
    fixed={"dataset.dataloader_type": "single"},
    upstream_check=bridge_guide(GLOBAL_BATCH_GUIDE, "ConfigContainer.validate requires a single or cyclic dataloader"),
)
def global_loader(r: Resolved) -> str | None:
    if global_on(r) and r.dataloader_type not in ("single", "cyclic"):
        return f"global-batch packing needs dataloader_type single or cyclic (got {r.dataloader_type})"
    return None


@rule(
    "PACK-GLOBAL-MAX-SEQLEN-REQUIRED",
    family=FAMILY,
    targets=(BRIDGE_MAIN,),
    prs=(6127,),
    severity="error",
    title="global-batch packing needs an explicit max_seqlen_per_dp_cp_rank",
    fields=("dataset.enable_global_batch_packing", "model.max_seqlen_per_dp_cp_rank"),
    provenance="upstream",
    source=f"{BRIDGE_CC} (global-batch packing requirements)",
    fix="Set model.max_seqlen_per_dp_cp_rank (e.g. ceil(seq_length / CP)).",
    trigger={**GLOBAL, "model.max_seqlen_per_dp_cp_rank": None},
    fixed={"model.max_seqlen_per_dp_cp_rank": 2048},
    upstream_check=mcore_main(
        "megatron/core/datasets/data_schedule.py",
        424,
        "max_seqlen_per_dp_cp_rank",
        "the dp_balanced scheduler multiplies max_seqlen_per_dp_cp_rank by CP; None raises TypeError",
    ),
)
def global_max_required(r: Resolved) -> str | None:
    if global_on(r) and r.cfg.model.max_seqlen_per_dp_cp_rank is None:
        return "global-batch packing needs an explicit model.max_seqlen_per_dp_cp_rank (tokens per rank per pack)"
    return None


@rule(
    "PACK-GLOBAL-CAPACITY",
    family=FAMILY,
    targets=(BRIDGE_MAIN,),
    prs=(6127,),
    severity="error",
    title="max_seqlen_per_dp_cp_rank * CP must cover the longest sample (seq_length)",
    fields=("model.max_seqlen_per_dp_cp_rank", "model.context_parallel_size", "model.seq_length"),
    provenance="upstream",
    source=f"{BRIDGE_CC} (global-batch packing requirements)",
    fix="Raise max_seqlen_per_dp_cp_rank to at least ceil(seq_length / CP).",
    trigger={**GLOBAL, "model.max_seqlen_per_dp_cp_rank": 1024},
    fixed={"model.max_seqlen_per_dp_cp_rank": 2048},
    upstream_check=mcore_main(
        "megatron/training/arguments.py",
        1795,
        "max_seqlen_per_dp_cp_rank",
        "validate_args asserts CP * max_seqlen_per_dp_cp_rank >= seq_length",
        ref=MLM_DEV,
    ),
)
def global_capacity(r: Resolved) -> str | None:
    cap = r.cfg.model.max_seqlen_per_dp_cp_rank
    if global_on(r) and cap is not None and cap * r.cp < r.seq_length:
        return (
            f"model.max_seqlen_per_dp_cp_rank*context_parallel_size = {cap}*{r.cp} = {cap * r.cp} is smaller than "
            f"seq_length={r.seq_length}, so the longest sample cannot fit in one pack"
        )
    return None


@rule(
    "PACK-GLOBAL-NO-HYBRID",
    family=FAMILY,
    targets=(BRIDGE_MAIN,),
    prs=(6127,),
    severity="error",
    title="global-batch packing does not support hybrid Mamba models",
    fields=("dataset.enable_global_batch_packing", "model.is_hybrid_model"),
    provenance="upstream",
    source=f"{BRIDGE_CC} (global-batch packing requirements)",
    fix="Use another packing path for hybrid models.",
    trigger={**GLOBAL, "model.is_hybrid_model": True},
    fixed={"model.is_hybrid_model": False},
    upstream_check=bridge_guide(GLOBAL_BATCH_GUIDE, "ConfigContainer.validate rejects Mamba hybrid models"),
)
def global_no_hybrid(r: Resolved) -> str | None:
    if global_on(r) and r.cfg.model.is_hybrid_model:
        return "global-batch packing does not support hybrid Mamba models (model.is_hybrid_model=true)"
    return None


@rule(
    "PACK-GLOBAL-NO-FSDP",
    family=FAMILY,
    targets=(BRIDGE_MAIN,),
    prs=(6127,),
    severity="error",
    title="global-batch packing does not support Megatron FSDP",
    fields=("dataset.enable_global_batch_packing", "ddp.use_megatron_fsdp"),
    provenance="upstream",
    source=f"{BRIDGE_CC} (global-batch packing requirements)",
    fix="Disable ddp.use_megatron_fsdp.",
    trigger={**GLOBAL, "ddp.use_megatron_fsdp": True},
    fixed={"ddp.use_megatron_fsdp": False},
    upstream_check=bridge_guide(GLOBAL_BATCH_GUIDE, "ConfigContainer.validate rejects Megatron FSDP"),
)
def global_no_fsdp(r: Resolved) -> str | None:
    if global_on(r) and r.cfg.ddp.use_megatron_fsdp:
        return "global-batch packing does not support Megatron FSDP (ddp.use_megatron_fsdp=true)"
    return None


@rule(
    "PACK-GLOBAL-UNPACKED-SAMPLES",
    family=FAMILY,
    targets=(BRIDGE_MAIN,),
    prs=(6127,),
    severity="error",
    title="global-batch packing needs a dataset that yields unpacked samples",
    fields=("dataset.enable_global_batch_packing", "dataset.kind", "dataset.yields_unpacked_samples"),
    provenance="upstream",
    source=f"{BRIDGE_CC} (yields_unpacked_samples)",
    fix="Use a GPT-SFT dataset (it yields unpacked samples) or declare yields_unpacked_samples for yours.",
    trigger={**GLOBAL, "dataset.kind": "direct_hf"},
    fixed={"dataset.kind": "gpt_sft"},
    upstream_check=bridge_guide(
        GLOBAL_BATCH_GUIDE,
        "ConfigContainer.validate checks the dataset config declares yields_unpacked_samples",
    ),
)
def global_unpacked(r: Resolved) -> str | None:
    if global_on(r) and not r.cfg.yields_unpacked_samples:
        return (
            f"the '{r.cfg.dataset.kind}' dataset does not declare yields_unpacked_samples, which the global-batch "
            "scheduler needs (one unpacked sample per MBS1 micro-batch)"
        )
    return None


@rule(
    "PACK-GLOBAL-SCHEDULER",
    family=FAMILY,
    targets=(BRIDGE_MAIN,),
    prs=(6127,),
    severity="error",
    title="sequence_packing_scheduler must name a registered scheduler",
    fields=("model.sequence_packing_scheduler",),
    provenance="upstream",
    source=f"{BRIDGE_CC} checks the pinned Megatron-Core registers it",
    fix="Use dp_balanced (Megatron-Core) or balanced (seqpack).",
    trigger={**GLOBAL, "model.sequence_packing_scheduler": "default_dynamic_cp"},
    fixed={"model.sequence_packing_scheduler": "dp_balanced"},
    note="'balanced' exists only in seqpack; Megatron-Core registers dp_balanced.",
    upstream_check=mcore_main(
        "megatron/core/datasets/data_schedule.py",
        711,
        "PackingSchedulerEnum",
        "wrap_data_iterator looks the name up in PackingSchedulerEnum; an unknown name raises KeyError",
    ),
)
def global_scheduler(r: Resolved) -> str | None:
    sched = r.cfg.model.sequence_packing_scheduler
    if global_on(r) and sched is not None and sched not in KNOWN_SCHEDULERS:
        return f"model.sequence_packing_scheduler={sched} is not a registered scheduler ({', '.join(KNOWN_SCHEDULERS)})"
    return None


@rule(
    "PACK-GLOBAL-DYNAMIC-CP",
    family=FAMILY,
    targets=(BRIDGE_MAIN,),
    prs=(6127,),
    severity="warning",
    title="dynamic CP with global-batch packing pads every sample to 2*DP*CP (times TP under SP); provisional",
    fields=("dataset.enable_global_batch_packing", "model.dynamic_context_parallel",
            "model.context_parallel_size", "model.tensor_model_parallel_size", "model.sequence_parallel"),
    provenance="documented",
    source="Megatron-Bridge PR #6127 (open) pads global-batch samples to 2*DP*CP (times TP under SP) with "
    "model.dynamic_context_parallel; seqpack's global-batch path schedules with static CP only",
    fix="Train with static CP on seqpack's global-batch path, or pad every sample to the multiple this finding "
    "names and follow the design your Bridge/Megatron-LM build merged.",
    trigger={**GLOBAL, "model.dynamic_context_parallel": True},
    fixed={"model.dynamic_context_parallel": False},
    provisional=DYNAMIC_CP_DESIGNS,
    note=DYNAMIC_CP_DESIGNS,
)
def global_dynamic_cp(r: Resolved) -> str | None:
    if not (global_on(r) and r.cfg.model.dynamic_context_parallel):
        return None
    req = r.requirement
    need = req.required if req is not None and req.dynamic_cp else "2*DP*CP (DP unknown: set dist.world_size)"
    return (f"model.dynamic_context_parallel=true: PR #6127 pads every sample to {need} (2*DP*CP"
            f"{', times TP under SP' if r.sp and r.tp > 1 else ''}); seqpack's global-batch path runs static CP "
            "only, and dynamic CP is provisional upstream (PR #6127 vs DCP V2 / Megatron-LM PR #7045)")
