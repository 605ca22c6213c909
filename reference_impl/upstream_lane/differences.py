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
# tests/upstream/test_diff_offline.py: Bridge's preparation (its own dataset builder, a real HF
# tokenizer) against ``seqpack pack --bridge-compat`` on the same JSONL; its bin packing functions
# against ``reference_impl.packing.bridge_compat``.

PREPARE = function("prepare_gpt_sft_packed_data", "megatron.bridge.data.packing.offline.prepare_gpt_sft_packed_data")
BUILDER_PREPARE = function("GPTSFTDatasetBuilder.prepare_data",
                           "megatron.bridge.data.builders.gpt_sft.GPTSFTDatasetBuilder.prepare_data")
FIRST_FIT = function("first_fit", "megatron.bridge.data.packing.algorithms.first_fit")
FIRST_FIT_DECREASING = function("first_fit_decreasing", "megatron.bridge.data.packing.algorithms.first_fit_decreasing")
FIRST_FIT_SHUFFLE = function("first_fit_shuffle", "megatron.bridge.data.packing.algorithms.first_fit_shuffle")
PACKING_STRATEGY = function("create_packing_strategy", "megatron.bridge.data.packing.algorithms.create_packing_strategy")
FILL_STRATEGY = function("fill_packing_strategy", "megatron.bridge.data.packing.algorithms.fill_packing_strategy")

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

COLLATE = function("GPTSFTPackedParquetDataset.collate_fn",
                   "megatron.bridge.data.packing.parquet.GPTSFTPackedParquetDataset.collate_fn")
SAMPLES_MAPPING = function("GPTSFTPackedParquetDataset.samples_mapping",
                           "megatron.bridge.data.packing.parquet.GPTSFTPackedParquetDataset._build_samples_mapping")
READER_PARAMS = function("get_packed_seq_params.offline",
                         "megatron.bridge.training.utils.packed_seq_utils.get_packed_seq_params (offline micro-batches)")
AVG_SEQLEN = function("calculate_avg_seqlen", "megatron.bridge.data.packing.algorithms.calculate_avg_seqlen")

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

# --- PackedSeqParams and context-parallel partition ------------------------------------------------

# --- schedulers (BalancedCPScheduler) ---------------------------------------------------------------

# --- configuration validation (ConfigContainer.validate, runtime_config_update, recipes) -----------
