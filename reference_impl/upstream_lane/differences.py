"""Where seqpack and the released upstream differ on purpose, per upstream function.

The differential tests (``tests/upstream/test_diff_*.py``) compare seqpack with the upstream
function running in the lane, case by case. A case either comes out equal, or differs in a way
listed here (the test names the entry), or fails. ``docs/compatibility.md`` shows the table of
cases per function, generated from a lane run (``tests/upstream/compat.py``) and these entries.
Pure data: no upstream code, no I/O.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from reference_impl.upstream_lane.pins import BRIDGE_VERSION, MCORE_VERSION

BRIDGE = f"megatron-bridge {BRIDGE_VERSION}"
MCORE = f"megatron-core {MCORE_VERSION}"

#: Upstream functions the lane compares against: key -> (qualified name, package it ships in).
FUNCTIONS: dict[str, tuple[str, str]] = {}


def function(key: str, qualname: str, package: str = BRIDGE) -> str:
    """Register an upstream function compared in the lane; returns ``key``."""
    FUNCTIONS[key] = (qualname, package)
    return key


@dataclass(frozen=True)
class Difference:
    """One documented, deliberate difference between seqpack and an upstream function."""

    id: str
    function: str
    summary: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


DIFFERENCES: dict[str, Difference] = {}


def difference(id: str, function_key: str, summary: str, reason: str) -> Difference:
    """Register a documented difference (ids are unique; the function must be registered)."""
    if id in DIFFERENCES:
        raise ValueError(f"duplicate difference id {id}")
    if function_key not in FUNCTIONS:
        raise ValueError(f"difference {id}: unknown upstream function {function_key}")
    DIFFERENCES[id] = Difference(id, function_key, summary, reason)
    return DIFFERENCES[id]


# --- offline preparation (prepare_gpt_sft_packed_data) ---------------------------------------------

# --- packed readers (GPTSFTPackedParquetDataset, collate_fn) ----------------------------------------

# --- in-batch packing (THD builders, prompt/completion collator) -----------------------------------

# --- PackedSeqParams and context-parallel partition ------------------------------------------------

# --- schedulers (BalancedCPScheduler) ---------------------------------------------------------------

# --- configuration validation (ConfigContainer.validate, runtime_config_update, recipes) -----------

CONSTRUCT = function("config.construct", "megatron.bridge config dataclasses (GPTSFTDatasetConfig(...), "
                     "PackedSequenceSpecs(...), GPTModelProvider(...), ...)")
VALIDATE = function("config.validate", "megatron.bridge.training.config.runtime_config_update")
LATER = function("config.later", "later upstream steps (packed reader and collate, packing fill, batch split, "
                 "vlm/qwen3_vl/llava steps, loaders, micro-batch calculator, Energon build_batch)",
                 f"{BRIDGE}, {MCORE}, megatron-energon 7.4.1")

#: Rules that refuse a config Bridge's validation accepts: rule id -> (difference id, how the lane covers the
#: later failure). "reproduced": a test in tests/upstream/test_diff_validate.py runs the failing upstream code;
#: "not run": the failure is in a GPU kernel or a multi-rank collective the CPU lane cannot execute.
LATER_FAILURES: dict[str, tuple[str, str]] = {
    "PACK-ENERGON-NATIVE-BRIDGE-VERSION": ("energon-native-not-in-release", "reproduced"),
    "PACK-OFFLINE-PAD-MULT-NULL": ("collate-pad-seq-to-mult-null", "reproduced"),
    "PACK-OFFLINE-SEQ-LE-PACK": ("fill-sample-longer-than-pack", "reproduced"),
    "PACK-OFFLINE-PAD-CU-METADATA": ("reader-pad-cu-seqlens-metadata", "reproduced"),
    "PACK-IN-BATCH-DATALOADER": ("batch-loader-splits-packed-row", "reproduced"),
    "PACK-IN-BATCH-DEFERRED": ("vlm-step-deferred-packing", "reproduced"),
    "PACK-IN-BATCH-STEP-PACKER": ("qwen3-vl-step-collate-packed", "reproduced"),
    "PACK-LLAVA-PP-CP": ("llava-step-packed-pp-cp", "reproduced"),
    "BATCH-GBS-DIVISIBLE": ("microbatch-calculator-gbs", "reproduced"),
    "PACK-ENERGON-DATALOADER": ("energon-loader-type", "reproduced"),
    "PACK-OFFLINE-PAD-MULT-TOPOLOGY": ("te-thd-cp-partition", "not run"),
    "PACK-OFFLINE-WIDTH-ALIGNED": ("te-thd-cp-partition", "not run"),
    "PACK-OFFLINE-WIDTH-ROUNDING": ("te-thd-cp-partition", "not run"),
    "MOE-ALLGATHER-EQUAL-WIDTH": ("ep-collective-equal-tokens", "not run"),
    "MOE-HYBRIDEP-GRAPHS-FIXED-WIDTH": ("ep-collective-equal-tokens", "not run"),
    "PACK-PP-VARIABLE-SHAPES": ("pp-p2p-fixed-shapes", "not run"),
}

difference("energon-native-not-in-release", VALIDATE,
           "seqpack refuses Energon native packing (packing_buffer_size) for megatron-bridge 0.6.2; validate() "
           "accepts it",
           "0.6.2's Energon task encoders implement no packing hooks: megatron-energon 7.4.1's "
           "TaskEncoder.build_batch asserts them when the loader is built (reproduced)")
difference("collate-pad-seq-to-mult-null", VALIDATE,
           "seqpack refuses offline_packing_specs.pad_seq_to_mult=null; validate() accepts it",
           "the packed collate compares None > 1 and raises TypeError on the first batch (reproduced)")
difference("fill-sample-longer-than-pack", VALIDATE,
           "seqpack refuses seq_length > packed_sequence_size without max_single_sequence_length",
           "offline preparation tokenizes samples up to seq_length; fill_packing_strategy has no bucket for a "
           "sample longer than the pack and raises KeyError (reproduced)")
difference("reader-pad-cu-seqlens-metadata", VALIDATE,
           "seqpack refuses pad_cu_seqlens with explicit packed paths but no packed_metadata_path",
           "the packed dataset needs the metadata file for static shapes: without it the reader asserts "
           "(reproduced); the builder's default metadata path lies under dataset_root, next to packs it manages")
difference("batch-loader-splits-packed-row", VALIDATE,
           "seqpack refuses in-batch packing with dataloader_type=batch when a step has several micro-batches",
           "the batch loader collates the per-rank global batch into one packed row; "
           "split_batch_into_microbatches then raises ValueError (reproduced)")
difference("vlm-step-deferred-packing", VALIDATE,
           "seqpack refuses defer_in_batch_packing_to_step for the VLM step",
           "vlm_step.forward_step raises ValueError on the first step (reproduced)")
difference("qwen3-vl-step-collate-packed", VALIDATE,
           "seqpack refuses collate-time in-batch packing for families whose step packs (Qwen3-VL)",
           "qwen3_vl_step.get_batch_from_iterator raises ValueError for a batch carrying cu_seqlens (reproduced)")
difference("llava-step-packed-pp-cp", VALIDATE,
           "seqpack refuses packed LLaVA training with PP > 1 or CP > 1",
           "llava_step raises ValueError for packed batches on such process groups (reproduced with torch's fake "
           "process-group backend)")
difference("microbatch-calculator-gbs", VALIDATE,
           "seqpack checks global_batch_size % (MBS*DP) even when an explicit eval batch size is given",
           "validate() checks it only through the evaluation batch (which defaults to the training one); "
           "Megatron-Core's micro-batch calculator asserts it when training starts (reproduced)")
difference("energon-loader-type", VALIDATE,
           "seqpack refuses dataloader_type other than external on Energon datasets",
           "the Energon builder returns ready loaders; build_pretraining_data_loader wraps one in a Megatron "
           "sampler that indexes it like a dataset and fails on the first batch (reproduced with a torch "
           "DataLoader, which Energon's loaders subclass)")
difference("te-thd-cp-partition", VALIDATE,
           "seqpack refuses packed boundaries that context parallelism cannot split (pad_seq_to_mult, pack width "
           "and width rounding not multiples of 2*CP / the alignment)",
           "Transformer Engine's THD CP partition kernel requires every boundary divisible by 2*CP and the "
           "sequence-parallel scatter a width divisible by TP; a CUDA kernel, not run in the CPU lane")
difference("ep-collective-equal-tokens", VALIDATE,
           "seqpack refuses variable-width packs for dispatchers that need equal token counts per EP rank "
           "(allgather; HybridEP under CUDA graphs)",
           "the all-gather over TP x EP and HybridEP's dispatch need equal per-rank sizes; multi-rank GPU "
           "collectives, not run in the CPU lane")
difference("pp-p2p-fixed-shapes", VALIDATE,
           "seqpack refuses variable-width offline packs under PP without variable_seq_lengths (single/cyclic "
           "loader, no fixed width)",
           "pipeline P2P buffers then keep the fixed seq_length shape while narrower packs are sent; multi-rank "
           "communication, not run in the CPU lane")
