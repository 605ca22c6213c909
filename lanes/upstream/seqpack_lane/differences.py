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

from seqpack_lane.pins import BRIDGE_VERSION, MCORE_VERSION

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
# tests/upstream/test_diff_offline.py: Bridge's preparation (its own dataset builder, a real HF
# tokenizer) against ``seqpack pack --bridge-compat`` on the same JSONL; its bin packing functions
# against ``seqpack.packing.offline.bridge_compat``.

PREPARE = function("bridge.prepare_gpt_sft_packed_data", "megatron.bridge.data.packing.offline.prepare_gpt_sft_packed_data")
BUILDER_PREPARE = function("bridge.GPTSFTDatasetBuilder.prepare_data",
                           "megatron.bridge.data.builders.gpt_sft.GPTSFTDatasetBuilder.prepare_data")
FIRST_FIT = function("bridge.algorithms.first_fit", "megatron.bridge.data.packing.algorithms.first_fit")
FIRST_FIT_DECREASING = function("bridge.algorithms.first_fit_decreasing", "megatron.bridge.data.packing.algorithms.first_fit_decreasing")
FIRST_FIT_SHUFFLE = function("bridge.algorithms.first_fit_shuffle", "megatron.bridge.data.packing.algorithms.first_fit_shuffle")
PACKING_STRATEGY = function("bridge.algorithms.create_packing_strategy", "megatron.bridge.data.packing.algorithms.create_packing_strategy")
FILL_STRATEGY = function("bridge.algorithms.fill_packing_strategy", "megatron.bridge.data.packing.algorithms.fill_packing_strategy")

difference(
    "offline-legacy-template-mask", PREPARE,
    "legacy template mode (no prompt_completion_config: \"{input} {output}\"): Bridge stores no loss mask and its "
    "fill step derives one from answer_start_idx, which is 1 on every segment's last stored token and on the "
    "pre-padding; seqpack stores the explicit mask (token ids and boundaries are the same)",
    "quirk Q3: seqpack never stores loss on alignment padding. The collated batches still agree: Bridge's collate "
    "drops each segment's last stored position and zeroes the loss wherever the input token is EOS, which the "
    "pre-padding is when EOD equals EOS (every Hugging Face tokenizer)",
)
difference(
    "offline-unsupervised-sample", PREPARE,
    "a sample with no trained label (empty completion without EOS under completion loss) is packed by Bridge and "
    "skipped by seqpack, which counts it with its line",
    "it trains nothing and only takes pack space; seqpack accounts for every skipped row",
)
difference(
    "offline-short-sample", PREPARE,
    "a sample of fewer than two tokens makes Bridge's whole preparation raise ValueError; seqpack skips that "
    "sample, counts it with its line and packs the rest",
    "one bad row should not stop a preparation; nothing is lost silently",
)
difference(
    "offline-seq-length-above-pack", PREPARE,
    "max_seq_length above packed_sequence_size: seqpack refuses up front (PACK-OFFLINE-MAX-SINGLE-LE-PACK); Bridge "
    "packs when no sample is longer than the pack and raises KeyError in its fill step when one is",
    "whether Bridge fails depends on the data; the config is refused before any tokenization",
)
difference(
    "offline-override-without-multiple", PREPARE,
    "pad_seq_length_to_mult in dataset_kwargs with pad_seq_to_mult=1: Bridge does not pre-pad at all and ignores it; "
    "seqpack --bridge-compat refuses the combination",
    "the override would silently have no effect",
)
difference(
    "offline-override-not-multiple", PREPARE,
    "pad_seq_length_to_mult not a multiple of pad_seq_to_mult: Bridge pre-pads samples to the override's multiple "
    "(capped at the rounded budget); seqpack refuses (PACK-OFFLINE-PAD-MULT-TOPOLOGY)",
    "such segments break the per-sequence alignment context parallelism needs (Transformer Engine's THD partition "
    "asserts every boundary divisible by 2*CP)",
)
difference(
    "offline-special-token-loss", PREPARE,
    "a special token of Bridge's VLM list (e.g. Qwen's <|im_start|>, Llama's <|start_header_id|>) written in the "
    "text gets loss 0 in Bridge's prompt/completion tokenization; seqpack trains it like any completion token",
    "seqpack supervises exactly the completion the row holds; a row that needs such tokens masked is a chat row",
)

# --- packed readers (GPTSFTPackedParquetDataset, collate_fn) ----------------------------------------
# tests/upstream/test_diff_readers.py: packs written by seqpack and by Bridge, read by both sides'
# datasets with every reader option; micro-batches turned into PackedSeqParams; statistics.

COLLATE = function("bridge.GPTSFTPackedParquetDataset.collate_fn",
                   "megatron.bridge.data.packing.parquet.GPTSFTPackedParquetDataset.collate_fn")
SAMPLES_MAPPING = function("bridge.GPTSFTPackedParquetDataset.samples_mapping",
                           "megatron.bridge.data.packing.parquet.GPTSFTPackedParquetDataset._build_samples_mapping")
READER_PARAMS = function("bridge.get_packed_seq_params.offline",
                         "megatron.bridge.training.utils.packed_seq_utils.get_packed_seq_params (offline micro-batches)")
AVG_SEQLEN = function("bridge.algorithms.calculate_avg_seqlen", "megatron.bridge.data.packing.algorithms.calculate_avg_seqlen")
#: tests/upstream/test_diff_inspect.py: the labels inspect's reader rule counts as trained, against the loss mask
#: of Bridge's collate of the same packs (legacy prompt-template, prompt/completion and chat-template packs).
READER_TRAINED = function("bridge.GPTSFTPackedParquetDataset.collate_fn.loss_mask",
                          "megatron.bridge.data.packing.parquet.GPTSFTPackedParquetDataset.collate_fn (loss_mask: "
                          "what seqpack inspect's reader rule counts as trained)")

difference(
    "readers-width-padding-sequence", READER_PARAMS,
    "pad_seq_to_mult=1 with width padding: Bridge's cu_seqlens_q counts the padding at the row's end as one more "
    "real sequence; seqpack's canonical micro-batch gives it logical length 0 and carries the physical boundaries "
    "in cu_seqlens_*_padded",
    "quirk Q13: attention and loss never read the width padding as a sequence; seqpack's Bridge-form collate "
    "(collate_bridge) keeps Bridge's form exactly",
)
difference(
    "readers-padded-boundaries-equal", READER_PARAMS,
    "pad_seq_to_mult > 1 and a row without any alignment or width padding: Bridge's micro-batch passes "
    "cu_seqlens_*_padded equal to the real boundaries (a separate tensor); seqpack's canonical micro-batch leaves "
    "the padded fields None",
    "the canonical THD batch carries padded boundaries only when they differ from the real ones; attention sees "
    "the same sequences either way",
)
difference(
    "readers-width-not-aligned", COLLATE,
    "a free width (pad_to_max_length=False) rounded to a pad_seq_length_to_mult that is not a multiple of "
    "pad_seq_to_mult: seqpack raises AlignmentError; Bridge emits the batch",
    "a row width that breaks the alignment fails Transformer Engine's THD partition under context parallelism",
)
difference(
    "readers-own-epoch-order", SAMPLES_MAPPING,
    "max_num_samples on packs not written with --bridge-compat (or foreign packs without bridge_compat=True): "
    "seqpack shuffles each epoch with its own generator (default_rng(seed + epoch)); Bridge with the global "
    "legacy numpy RNG seeded once",
    "seqpack never touches the global numpy RNG; --bridge-compat packs (and bridge_compat=True) get Bridge's order",
)

# --- in-batch packing (THD builders, prompt/completion collator) -----------------------------------

BRIDGE_ROWS = function("bridge.in_batch.rows",
                       "megatron.bridge.data.packing.in_batch.build_mcore_thd_sequence_batch_from_rows")
BRIDGE_RIGHT_PADDED = function("bridge.in_batch.right_padded",
                               "megatron.bridge.data.packing.in_batch.pack_right_padded_sequence_batch_to_mcore_thd")
BRIDGE_PC_COLLATE = function("bridge.collators.text_prompt_completion",
                             "megatron.bridge.data.collators.sft.text_prompt_completion_collate_fn "
                             "(enable_in_batch_packing=True)")

for _fn in (BRIDGE_ROWS, BRIDGE_RIGHT_PADDED):
    _suffix = "" if _fn == BRIDGE_ROWS else "-right-padded"
    difference(
        f"thd-padded-keys-only-when-different{_suffix}", _fn,
        f"with pad_to_multiple_of > 1 and every row already aligned, {BRIDGE} still writes "
        "cu_seqlens_q_padded / cu_seqlens_kv_padded (equal to the real boundaries); seqpack's "
        "build_thd_batch writes the padded pair only when it differs",
        "the canonical THD batch (DESIGN.md section 3) carries the padded pair only when some sequence "
        "has alignment padding, so a consumer can tell padded from unpadded batches by the keys; equal "
        "arrays add nothing. Every other field is compared and equal in these cases")
    difference(
        f"thd-rows-without-position-ids{_suffix}", _fn,
        f"{BRIDGE} raises when a row has no position_ids; seqpack counts them from 0 per sequence",
        "position ids restart at 0 for every packed sequence, which is what a missing position_ids "
        "means for a text row; rows that carry them are copied exactly as Bridge does")
    difference(
        f"thd-labels-and-loss-mask-required{_suffix}", _fn,
        f"{BRIDGE} packs rows without labels or loss_mask (the keys are then absent); seqpack raises",
        "the canonical THD micro-batch always has labels and a loss mask (the training step reads both); "
        "a caller shifts them before packing")
    difference(
        f"thd-canonical-dtypes{_suffix}", _fn,
        f"{BRIDGE} keeps the dtypes of the rows (e.g. a bool loss_mask, int32 ids); seqpack's batch has "
        "int64 tokens, labels and position ids and a float32 loss mask",
        "one dtype per key is the canonical contract every consumer (loss, CP split, PackedSeqParams) "
        "relies on; the values are equal")

difference(
    "collate-row-layout", BRIDGE_PC_COLLATE,
    f"{BRIDGE}'s packed prompt/completion collate keeps each sample's last input token (its label "
    "is ignore_index, loss 0) and writes ignore_index on every masked label; seqpack's in-batch "
    "collator drops that position (rows are input_ids[:-1] / input_ids[1:]) and keeps the target id "
    "under loss mask 0. Checked per case: same samples in the same order, the same input tokens, "
    "loss mask and trained targets per sequence, position ids restarting at 0, boundaries aligned to "
    "the multiple",
    "the last input token has no next token to train, so it costs a slot and alignment padding for "
    "nothing; seqpack's rows follow Megatron's offline packed SFT layout (tokens = ids[:-1]) on every "
    "path. The loss is the same: the dropped position and the masked labels are never trained")
difference(
    "collate-fixed-width", BRIDGE_PC_COLLATE,
    f"with pad_to_max_length the packed width is seq_length in seqpack (the slack goes into the last "
    f"sequence's segment, as {BRIDGE}'s Nemotron Omni in-batch packer does); {BRIDGE}'s text "
    "collators ignore pad_to_max_length on the packed path and use the emergent width; seqpack "
    "raises when the aligned rows do not fit that width or it is not a multiple of the alignment",
    "a fixed width is what pad_to_max_length asks for (CUDA graphs, pipeline parallelism need one "
    "shape); seqpack's default (pad_to_max_length false) is the 0.6.2 emergent width")
difference(
    "collate-skipped-tokens", BRIDGE_PC_COLLATE,
    f"{BRIDGE} never trains a target whose token is one of the image/pad markers it lists "
    "(megatron.bridge.data.token_utils.PAD_TOKENS) when the tokenizer has it as an added token; "
    "seqpack trains it like any completion token",
    "seqpack's loss mask comes from the sample's schema alone; a marker token in a completion is "
    "data the user chose to supervise (docs/compatibility.md, Tokenization)")

# --- PackedSeqParams and context-parallel partition ------------------------------------------------

BRIDGE_PSP = function("bridge.get_packed_seq_params",
                      "megatron.bridge.training.utils.packed_seq_utils.get_packed_seq_params")
BRIDGE_CP_INDICES = function("bridge.get_packed_seq_cp_partition_indices",
                             "megatron.bridge.training.utils.packed_seq_utils.get_packed_seq_cp_partition_indices")
BRIDGE_CP_PARTITION = function("bridge.gpt_step.partition_packed_batch_for_cp",
                               "megatron.bridge.training.gpt_step._partition_packed_batch_for_cp")
MCORE_CP_BATCH = function("mcore.get_batch_on_this_cp_rank",
                          "megatron.core.utils.get_batch_on_this_cp_rank (is_hybrid_cp=False)", MCORE)

difference(
    "psp-legacy-without-sentinel", BRIDGE_PSP,
    f"a legacy cu_seqlens array with no -1 sentinel and no cu_seqlens_argmin: {BRIDGE} cuts it at "
    "torch.argmin, i.e. to nothing (an empty boundary tensor); seqpack keeps it whole",
    "an increasing boundary array has its minimum at index 0, so Bridge's fallback drops every "
    "boundary; keeping the array is the only reading that trains")
difference(
    "psp-kv-padded-fallback", BRIDGE_PSP,
    f"cu_seqlens_q_padded given without cu_seqlens_kv_padded: {BRIDGE} leaves the kv field None, "
    "seqpack uses the q array (as it already does for cu_seqlens_kv)",
    "packed self-attention has identical q and kv boundaries; a None kv array with a padded q array "
    "is an inconsistent pair for Transformer Engine")
difference(
    "psp-stricter-boundaries", BRIDGE_PSP,
    f"boundaries that do not start at 0, decrease, have a padded sequence shorter than its real "
    f"one, a max_seqlen below the longest physical sequence, or more than one row: {BRIDGE} passes "
    "them on, seqpack raises an InputError naming the field",
    "each of these gives wrong attention or an out-of-range access in the kernel later; refusing "
    "them at the boundary names the cause")
difference(
    "psp-int32-boundaries", BRIDGE_PSP,
    f"int64 boundary tensors: {BRIDGE} passes the dtype through, seqpack converts to int32",
    "Transformer Engine's fused attention and THD kernels take int32 offsets; the values are equal")
difference(
    "psp-total-tokens-int", BRIDGE_PSP,
    f"total_tokens given as a one-element tensor: {BRIDGE} stores the tensor, seqpack stores a "
    "Python int; seq_idx is equal",
    f"{MCORE}'s PackedSeqParams declares total_tokens an int")
difference(
    "cp-total-tokens-past-last-boundary", BRIDGE_CP_INDICES,
    "CP > 1 with total_tokens different from the last physical boundary: seqpack raises (an "
    "AlignmentError for tokens past it, an InputError for a row shorter than the boundaries); "
    "Transformer Engine's partition is undefined there (its contract covers "
    "total_tokens == cu_seqlens[-1]; the stand-in reports that instead of an answer)",
    "tokens past the last boundary would be split as part of no sequence (overlapping indices); "
    "Megatron itself always passes the last boundary")
difference(
    "cp-partition-total-tokens-past-last-boundary", BRIDGE_CP_PARTITION,
    "a row wider than its last physical boundary with CP > 1: seqpack raises an AlignmentError; "
    "Transformer Engine's partition is undefined there",
    "as for cp-total-tokens-past-last-boundary")
difference(
    "cp-partition-stricter-boundaries", BRIDGE_CP_PARTITION,
    "boundaries seqpack refuses everywhere (not starting at 0, decreasing, a padded sequence "
    "shorter than its real one): seqpack raises, Bridge's step partitions by the padded array",
    "as for psp-stricter-boundaries")

# --- schedulers (BalancedCPScheduler) ---------------------------------------------------------------

BCP_GPUS_NEEDED = function("mcore.BalancedCPScheduler.gpus_needed",
                           "megatron.core.pipeline_parallel.hybrid_cp_schedule.BalancedCPScheduler.gpus_needed", MCORE)
BCP_WORKLOAD = function("mcore.BalancedCPScheduler.get_total_workload",
                        "megatron.core.pipeline_parallel.hybrid_cp_schedule.BalancedCPScheduler.get_total_workload",
                        MCORE)
BCP_GROUPS = function("mcore.BalancedCPScheduler.get_groups_and_subsamples",
                      "megatron.core.pipeline_parallel.hybrid_cp_schedule.BalancedCPScheduler."
                      "get_groups_and_subsamples", MCORE)

difference(
    "bcp-deferred-to-next-group", BCP_GROUPS,
    f"{MCORE}'s BalancedCPScheduler takes samples off the most loaded GPU into a later group "
    "(a barrier-separated round of the step) while that narrows the spread; seqpack's LPT "
    "assignment (the first step of its balanced scheduler) gives every sample of the step a rank. "
    "Checked per case: the samples left in the first group sit on the rank LPT gives them",
    "seqpack's global-batch path runs a whole step as equal micro-batch counts per DP rank with no "
    "group barriers; deferring is how hybrid CP keeps its groups balanced")
difference(
    "bcp-fills-idle-gpus", BCP_GROUPS,
    f"fewer samples than GPUs: {MCORE}'s BalancedCPScheduler spreads a sample over more GPUs "
    "(a larger CP size for it) until no GPU is idle; seqpack's LPT leaves those ranks without a "
    "sample (the global-batch path gives them loss-free filler packs). Checked: every sample is "
    "scheduled exactly once, one per rank in seqpack",
    "seqpack's CP size is fixed per run (one process group); changing a sample's CP size needs "
    "hybrid context parallelism, which seqpack does not implement")

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

# Bridge's own config dump and its recipe functions (tests/upstream/test_config_dump.py, test_recipes.py): a case
# is equal when Bridge's runtime_config_update raises exactly when seqpack validate, reading the dump Bridge wrote
# (ConfigContainer.to_yaml, the run_config.yaml form), reports an error.
function("config_dump.to_yaml", "megatron.bridge.training.config.ConfigContainer.to_yaml + runtime_config_update")
function("recipes.runtime_config_update", "megatron.bridge.recipes.*_config + training.config.runtime_config_update")
difference(
    "recipes-later-upstream-failure", "recipes.runtime_config_update",
    "seqpack rejects a packing recipe that runtime_config_update accepts",
    "the failure comes later, outside the config update: nemotron_3_super_sft_16gpu_h100_bf16_32k_config packs "
    "offline into 2048-token bins while tokenizing up to seq_length 32768, so Bridge's offline fill step "
    "(data/packing/algorithms.py fill_packing_strategy) raises on any sample longer than the pack "
    "(reproduced in the lane: tests/upstream/test_recipes.py), and with CP2 and pad_seq_to_mult=1 the packed "
    "segments break Transformer Engine's THD partition rule (a CUDA kernel; seqpack's reference partition shows it)",
)
difference(
    "recipes-bridge-rejects-outside-packing", "recipes.runtime_config_update",
    "runtime_config_update rejects a packing recipe for a setting seqpack does not check",
    "the rejected setting is not a packing one: megatron-bridge 0.6.2's DeepSeek-V4 packed SFT recipe lists "
    "'mhc' in recompute_modules, which megatron-core 0.19.2's TransformerConfig does not accept; seqpack "
    "validates packing, so it reports nothing there (the test lists each such recipe with Bridge's message)",
)
