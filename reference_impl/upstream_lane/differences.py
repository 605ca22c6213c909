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
