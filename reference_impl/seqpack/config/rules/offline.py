"""Offline packed SFT: the packing specs, their sizes and how they fit the topology."""

from __future__ import annotations

import math

from seqpack.core.alignment import cp_multiple
from seqpack.config.resolve import Resolved
from seqpack.config.rules.common import BRIDGE_CC, CP2, OFFLINE, SPECS, near_multiples, offline_on, topology
from seqpack.config.rules.evidence import bridge, bridge_cc, sp_scatter, te_partition
from seqpack.config.rules.registry import rule

FAMILY = "offline"


@rule(
    "PACK-OFFLINE-SPECS-REQUIRED",
    family=FAMILY,
    severity="error",
    title="enable_offline_packing needs offline_packing_specs",
    fields=("dataset.enable_offline_packing", SPECS),
    provenance="upstream",
    source=f"V7: {BRIDGE_CC}",
    fix="Set dataset.offline_packing_specs (at least packed_sequence_size and pad_seq_to_mult).",
    trigger={"dataset.enable_offline_packing": True},
    fixed={f"{SPECS}.packed_sequence_size": 2048},
    upstream_check=bridge_cc(
        1158,
        "offline_packing_specs",
        "raises ValueError: specs must be set when offline packing is on",
    ),
)
def offline_specs_required(r: Resolved) -> str | None:
    if r.cfg.dataset.enable_offline_packing and r.specs is None:
        return "dataset.enable_offline_packing=true but dataset.offline_packing_specs is not set"
    return None


@rule(
    "PACK-OFFLINE-ENABLE-REQUIRED",
    family=FAMILY,
    severity="error",
    title="offline_packing_specs needs enable_offline_packing=true",
    fields=("dataset.enable_offline_packing", SPECS),
    provenance="upstream",
    source=f"V8: {BRIDGE_CC}",
    fix="Set dataset.enable_offline_packing=true, or remove offline_packing_specs.",
    trigger={f"{SPECS}.packed_sequence_size": 2048},
    fixed={"dataset.enable_offline_packing": True},
    upstream_check=bridge_cc(
        1160,
        "enable_offline_packing",
        "raises ValueError: specs without enable_offline_packing",
    ),
)
def offline_enable_required(r: Resolved) -> str | None:
    if r.specs is not None and not r.cfg.dataset.enable_offline_packing:
        return "dataset.offline_packing_specs is set but dataset.enable_offline_packing=false"
    return None


@rule(
    "PACK-OFFLINE-SIZE-POSITIVE",
    family=FAMILY,
    severity="error",
    title="packed_sequence_size must be > 0 (its default is -1)",
    fields=(f"{SPECS}.packed_sequence_size",),
    provenance="upstream",
    source="V9: GPTSFTDatasetConfig.validate",
    fix="Set offline_packing_specs.packed_sequence_size, normally equal to seq_length.",
    trigger={"dataset.enable_offline_packing": True, f"{SPECS}.pad_seq_to_mult": 1},
    fixed={f"{SPECS}.packed_sequence_size": 2048},
    upstream_check=(
        bridge(
            "data/builders/gpt_sft.py",
            198,
            "packed_sequence_size",
            "GPTSFTDatasetConfig.validate raises ValueError for packed_sequence_size <= 0",
        ),
        bridge_cc(1464, "packed_sequence_size", "ConfigContainer.validate raises the same"),
    ),
)
def offline_size_positive(r: Resolved) -> str | None:
    if offline_on(r) and r.specs.packed_sequence_size <= 0:  # type: ignore[union-attr]
        return f"offline_packing_specs.packed_sequence_size={r.specs.packed_sequence_size} must be > 0"  # type: ignore[union-attr]
    return None


@rule(
    "PACK-OFFLINE-PAD-MULT-POSITIVE",
    family=FAMILY,
    severity="error",
    title="pad_seq_to_mult must be a positive integer",
    fields=(f"{SPECS}.pad_seq_to_mult",),
    provenance="upstream",
    source="V1: PackedSequenceSpecs",
    fix="Set pad_seq_to_mult to the derived alignment (`seqpack align`).",
    trigger={**OFFLINE, f"{SPECS}.pad_seq_to_mult": 0},
    fixed={f"{SPECS}.pad_seq_to_mult": 1},
    upstream_check=bridge(
        "data/packing/config.py",
        47,
        "pad_seq_to_mult",
        "PackedSequenceSpecs raises ValueError for a value <= 0",
    ),
)
def pad_mult_positive(r: Resolved) -> str | None:
    if r.specs is not None and r.specs.pad_seq_to_mult is not None and r.specs.pad_seq_to_mult <= 0:
        return f"offline_packing_specs.pad_seq_to_mult={r.specs.pad_seq_to_mult} must be a positive integer"
    return None


@rule(
    "PACK-OFFLINE-PAD-MULT-NULL",
    family=FAMILY,
    severity="error",
    title="pad_seq_to_mult=null passes packing but breaks the runtime collate",
    fields=(f"{SPECS}.pad_seq_to_mult",),
    provenance="stricter",
    source="quirk: upstream accepts None when packing, then compares it with 1 at collate time",
    fix="Set pad_seq_to_mult to an integer (1 when no CP/SP alignment is needed).",
    trigger={**OFFLINE, f"{SPECS}.pad_seq_to_mult": None},
    fixed={f"{SPECS}.pad_seq_to_mult": 1},
    upstream_check=bridge(
        "data/packing/gpt_sft.py",
        205,
        "_pad_seq_to_mult",
        "the packed collate compares None > 1 and raises TypeError on the first batch",
        kind="runtime",
    ),
)
def pad_mult_null(r: Resolved) -> str | None:
    if offline_on(r) and r.specs.pad_seq_to_mult is None:  # type: ignore[union-attr]
        return (
            "offline_packing_specs.pad_seq_to_mult=null is accepted when packing but breaks the runtime "
            "collate, which compares it with 1"
        )
    return None


@rule(
    "PACK-OFFLINE-MAX-SINGLE-POSITIVE",
    family=FAMILY,
    severity="error",
    title="max_single_sequence_length must be > 0",
    fields=(f"{SPECS}.max_single_sequence_length",),
    provenance="upstream",
    source="V2: PackedSequenceSpecs",
    fix="Leave max_single_sequence_length unset (defaults to seq_length) or set a positive value.",
    trigger={**OFFLINE, f"{SPECS}.max_single_sequence_length": 0},
    fixed={f"{SPECS}.max_single_sequence_length": 1024},
    upstream_check=bridge(
        "data/packing/config.py",
        50,
        "max_single_sequence_length",
        "PackedSequenceSpecs raises ValueError for a value <= 0",
    ),
)
def max_single_positive(r: Resolved) -> str | None:
    s = r.specs
    if s is not None and s.max_single_sequence_length is not None and s.max_single_sequence_length <= 0:
        return f"offline_packing_specs.max_single_sequence_length={s.max_single_sequence_length} must be > 0"
    return None


@rule(
    "PACK-OFFLINE-MAX-SINGLE-LE-PACK",
    family=FAMILY,
    severity="error",
    title="max_single_sequence_length cannot exceed packed_sequence_size",
    fields=(f"{SPECS}.max_single_sequence_length", f"{SPECS}.packed_sequence_size"),
    provenance="upstream",
    source="V3: PackedSequenceSpecs",
    fix="Lower max_single_sequence_length to at most packed_sequence_size.",
    trigger={**OFFLINE, f"{SPECS}.max_single_sequence_length": 4096},
    fixed={f"{SPECS}.max_single_sequence_length": 2048},
    upstream_check=bridge(
        "data/packing/config.py",
        52,
        "max_single_sequence_length",
        "PackedSequenceSpecs raises ValueError when it exceeds packed_sequence_size",
    ),
)
def max_single_le_pack(r: Resolved) -> str | None:
    s = r.specs
    if s is None or s.max_single_sequence_length is None or s.packed_sequence_size <= 0:
        return None
    if s.max_single_sequence_length > s.packed_sequence_size:
        return (
            f"offline_packing_specs.max_single_sequence_length={s.max_single_sequence_length} exceeds "
            f"packed_sequence_size={s.packed_sequence_size}"
        )
    return None


@rule(
    "PACK-OFFLINE-SEQ-LE-PACK",
    family=FAMILY,
    severity="error",
    title="without max_single_sequence_length, seq_length must not exceed packed_sequence_size",
    fields=("model.seq_length", f"{SPECS}.packed_sequence_size", f"{SPECS}.max_single_sequence_length"),
    provenance="stricter",
    source="quirk: samples longer than the pack get singleton bins, then the fill step crashes",
    fix="Set max_single_sequence_length <= packed_sequence_size, or raise packed_sequence_size to seq_length.",
    trigger={**OFFLINE, "model.seq_length": 4096},
    fixed={f"{SPECS}.max_single_sequence_length": 2048},
    upstream_check=bridge(
        "data/packing/algorithms.py",
        301,
        "ifile_handles",
        "fill_packing_strategy has no bucket for a length above the pack size and raises KeyError",
        kind="runtime",
    ),
)
def seq_le_pack(r: Resolved) -> str | None:
    s = r.specs
    if not offline_on(r) or s.packed_sequence_size <= 0 or s.max_single_sequence_length is not None:  # type: ignore[union-attr]
        return None
    if r.seq_length > s.packed_sequence_size:  # type: ignore[union-attr]
        return (
            f"samples are tokenized up to seq_length={r.seq_length}, which exceeds "
            f"packed_sequence_size={s.packed_sequence_size} (max_single_sequence_length is unset): "  # type: ignore[union-attr]
            "samples longer than the pack reach the fill step and crash it"
        )
    return None


@rule(
    "PACK-OFFLINE-SIZE-EQ-SEQ",
    family=FAMILY,
    severity="warning",
    title="keep model, dataset and packed sequence lengths equal",
    fields=("model.seq_length", "dataset.seq_length", f"{SPECS}.packed_sequence_size"),
    provenance="documented",
    source="packed-sequences docs; upstream compares only model and dataset seq_length",
    fix="Set packed_sequence_size equal to seq_length (and rebuild the packs into a fresh output root).",
    trigger={**OFFLINE, f"{SPECS}.packed_sequence_size": 4096},
    fixed={"model.seq_length": 4096},
)
def size_eq_seq(r: Resolved) -> str | None:
    if offline_on(r) and r.specs.packed_sequence_size > 0 and r.specs.packed_sequence_size != r.seq_length:  # type: ignore[union-attr]
        return (
            f"offline_packing_specs.packed_sequence_size={r.specs.packed_sequence_size} differs from "  # type: ignore[union-attr]
            f"seq_length={r.seq_length}"
        )
    return None


@rule(
    "PACK-OFFLINE-MBS1",
    family=FAMILY,
    severity="error",
    title="offline packing requires micro_batch_size=1",
    fields=("train.micro_batch_size", "dataset.enable_offline_packing"),
    provenance="upstream",
    source=f"V16: {BRIDGE_CC}",
    fix="Set train.micro_batch_size=1; compare pack lengths at equal token slots (pack size x global batch "
        "size) with `seqpack plan`.",
    trigger={**OFFLINE, "train.micro_batch_size": 4},
    fixed={"train.micro_batch_size": 1},
    upstream_check=bridge_cc(
        1466,
        "micro_batch_size",
        "raises ValueError: micro batch size must be 1 with offline packing",
    ),
)
def offline_mbs1(r: Resolved) -> str | None:
    mbs = r.cfg.train.micro_batch_size
    if r.cfg.dataset.enable_offline_packing and mbs > 1:
        return (
            f"offline packing needs train.micro_batch_size=1 (got {mbs}): every packed row already holds "
            "several samples and is one physical micro-batch; global_batch_size then counts packs"
        )
    return None


@rule(
    "PACK-OFFLINE-DATASET-KIND",
    family=FAMILY,
    severity="error",
    title="offline packing is for GPT-SFT datasets",
    fields=("dataset.enable_offline_packing", "dataset.kind"),
    provenance="upstream",
    source="only GPTSFTDatasetConfig carries offline packing specs",
    fix="Use dataset.kind=gpt_sft, or choose the in-batch path for this dataset.",
    trigger={**OFFLINE, "dataset.kind": "direct_hf"},
    fixed={"dataset.kind": "gpt_sft"},
    upstream_check=bridge(
        "data/builders/direct_hf_sft.py",
        54,
        "DirectHFSFTDatasetConfig",
        "the Direct-HF (and Energon, MockVLM) configs declare no offline packing fields, so they "
        "cannot be built with them",
    ),
)
def offline_kind(r: Resolved) -> str | None:
    if r.cfg.dataset.enable_offline_packing and r.cfg.dataset.kind != "gpt_sft":
        return f"dataset.enable_offline_packing=true on a '{r.cfg.dataset.kind}' dataset; offline packing is GPT-SFT only"
    return None


def _cp_requirement(r: Resolved) -> int:
    """The per-sequence multiple context parallelism enforces: lcm of 2*CP over train and eval CP > 1."""
    return math.lcm(cp_multiple(r.cp), cp_multiple(r.eval_cp))


def _offline_pad_mult(r: Resolved) -> int | None:
    if not offline_on(r) or not r.specs.pad_seq_to_mult or r.specs.pad_seq_to_mult <= 0:  # type: ignore[union-attr]
        return None
    return r.specs.pad_seq_to_mult  # type: ignore[union-attr]


@rule(
    "PACK-OFFLINE-PAD-MULT-TOPOLOGY",
    family=FAMILY,
    severity="error",
    title="with CP > 1, offline pad_seq_to_mult must be a multiple of 2*CP (train and eval CP)",
    fields=(f"{SPECS}.pad_seq_to_mult", "model.context_parallel_size", "dist.eval_context_parallel_size"),
    provenance="stricter",
    source="upstream never derives or checks it; Transformer Engine's THD CP partition fails on the first batch",
    fix="Set pad_seq_to_mult to the value `seqpack align` derives and rebuild the packs.",
    trigger={**OFFLINE, **CP2},
    fixed={f"{SPECS}.pad_seq_to_mult": 4},
    note="Bridge recipes set pad_seq_to_mult = 2*CP by hand when CP > 1; offline preparation never derives it."
    " Not reproduced in the upstream lane: the failing check is Transformer Engine's THD CP partition, a CUDA kernel.",
    upstream_check=te_partition(
        "the THD CP partition asserts every physical boundary is divisible by 2*CP; a segment padded "
        "to a smaller multiple fails there",
    ),
)
def pad_mult_topology(r: Resolved) -> str | None:
    have = _offline_pad_mult(r)
    need = _cp_requirement(r)
    if have is None or need == 1 or have % need == 0:
        return None
    return (
        f"offline_packing_specs.pad_seq_to_mult={have} but {topology(r)} needs a multiple of {need} (context "
        "parallelism splits every packed sequence into 2*CP chunks); Transformer Engine's THD partition would "
        "fail on the first batch"
    )


@rule(
    "PACK-OFFLINE-PAD-MULT-RECOMMENDED",
    family=FAMILY,
    severity="warning",
    title="offline pad_seq_to_mult is not a multiple of the recommended lcm(2*CP or 1, CP*TP under SP)",
    fields=(f"{SPECS}.pad_seq_to_mult", "model.context_parallel_size", "model.tensor_model_parallel_size",
        "model.sequence_parallel"),
    provenance="documented",
    source="packed-sequences docs give the lcm for offline SFT/PEFT; upstream does not enforce the SP term per "
    "sequence: sequence parallelism splits the whole row, whose width PACK-OFFLINE-WIDTH-ALIGNED checks",
    fix="Prefer the value `seqpack align` derives; keeping the current value is fine when the pack width is aligned.",
    trigger={**OFFLINE, "model.tensor_model_parallel_size": 8, "model.sequence_parallel": True,
        "dist.world_size": 8, f"{SPECS}.pad_seq_to_mult": 1},
    fixed={f"{SPECS}.pad_seq_to_mult": 8},
    note="Megatron-Bridge ships Nemotron-3 Super SFT with TP8 + SP, CP1 and pad_seq_to_mult=1.",
)
def pad_mult_recommended(r: Resolved) -> str | None:
    have = _offline_pad_mult(r)
    need = r.alignment.pad_seq_to_mult
    if have is None or have % need == 0 or have % _cp_requirement(r):
        return None  # aligned, or PACK-OFFLINE-PAD-MULT-TOPOLOGY reports the failing case
    return (
        f"offline_packing_specs.pad_seq_to_mult={have}; the recommended multiple for {topology(r)} is {need} "
        f"({r.alignment.explanation}); nothing upstream fails with {have} as long as the pack width is aligned"
    )


@rule(
    "PACK-OFFLINE-WIDTH-ALIGNED",
    family=FAMILY,
    severity="error",
    title="with CP/SP alignment, packed_sequence_size must be a multiple of the alignment",
    fields=(f"{SPECS}.packed_sequence_size", "model.context_parallel_size"),
    provenance="stricter",
    source="the trailing width padding is one more THD sequence; TE requires it divisible by 2*CP",
    fix="Use a packed_sequence_size that is a multiple of the derived alignment.",
    trigger={**OFFLINE, **CP2, "model.context_parallel_size": 3, "dist.world_size": 3, f"{SPECS}.pad_seq_to_mult": 6},
    fixed={f"{SPECS}.packed_sequence_size": 2046, "model.seq_length": 2046},
    upstream_check=(
        te_partition("the trailing width padding is one more THD segment; with CP > 1 it must be divisible by 2*CP"),
        sp_scatter("with SP the row width (per CP rank) must be divisible by TP"),
    ),
    note="Not reproduced in the upstream lane: Transformer Engine's THD CP partition is a CUDA kernel and the SP scatter needs TP ranks."
)
def width_aligned(r: Resolved) -> str | None:
    need = r.alignment.pad_seq_to_mult
    if not offline_on(r) or need == 1 or r.specs.packed_sequence_size <= 0:  # type: ignore[union-attr]
        return None
    p = r.specs.packed_sequence_size  # type: ignore[union-attr]
    if p % need:
        return (
            f"offline_packing_specs.packed_sequence_size={p} is not a multiple of {need} ({topology(r)}): the "
            f"trailing width padding becomes a sequence that cannot be split; nearest valid: {near_multiples(p, need)}"
        )
    return None


@rule(
    "PACK-OFFLINE-WIDTH-ROUNDING",
    family=FAMILY,
    severity="error",
    title="without fixed width, the row-width rounding multiple must be a multiple of the alignment",
    fields=("dataset.dataset_kwargs.pad_seq_length_to_mult", "dataset.dataset_kwargs.pad_to_max_length",
        "model.context_parallel_size"),
    provenance="stricter",
    source="the collate rounds row width to pad_seq_length_to_mult (default 16); the trailing padding must stay "
    "divisible by 2*CP (TE) and the width by CP*TP under SP; harmless when pad_seq_to_mult is a multiple of it",
    fix="Set dataset_kwargs.pad_to_max_length=true, or pad_seq_length_to_mult to a multiple of the alignment.",
    trigger={**OFFLINE, **CP2, "model.context_parallel_size": 3, "dist.world_size": 3, f"{SPECS}.pad_seq_to_mult": 6,
        f"{SPECS}.packed_sequence_size": 2046, "model.seq_length": 2046},
    fixed={"dataset.dataset_kwargs.pad_to_max_length": True},
    upstream_check=(
        bridge(
            "data/packing/gpt_sft.py",
            198,
            "pad_seq_length_to_mult",
            "the packed collate rounds the row width to pad_seq_length_to_mult",
            kind="runtime",
        ),
        te_partition("the resulting trailing segment must be divisible by 2*CP"),
    ),
    note="Not reproduced in the upstream lane: the width the collate rounds to then fails in Transformer Engine's THD CP partition, a CUDA kernel."
)
def width_rounding(r: Resolved) -> str | None:
    need = r.alignment.pad_seq_to_mult
    if not offline_on(r) or need == 1 or r.pad_to_max_length:
        return None
    mult = r.cfg.dataset.dataset_kwargs.get("pad_seq_length_to_mult", 16)
    if not isinstance(mult, int) or isinstance(mult, bool) or mult <= 0 or mult % need == 0:
        return None
    # Every stored segment is pre-padded to a multiple of pad_seq_to_mult, so a row's content length
    # x is such a multiple; the collate widens the longest row to ceil(x / mult) * mult. Only widths
    # that come out misaligned for some reachable x break the kernel constraints.
    seg = r.specs.pad_seq_to_mult if r.specs.pad_seq_to_mult and r.specs.pad_seq_to_mult > 0 else 1  # type: ignore[union-attr]
    period = math.lcm(seg, mult, need) // seg
    for k in range(1, period + 1):
        x = k * seg
        width = -(-x // mult) * mult
        if width % need:
            return (
                f"without a fixed width, packed rows are rounded up to dataset_kwargs.pad_seq_length_to_mult={mult}, "
                f"which is not a multiple of the alignment {need} ({topology(r)}): a longest row of {x} tokens "
                f"becomes {width} wide"
            )
    return None
    mult = r.cfg.dataset.dataset_kwargs.get("pad_seq_length_to_mult", 16)
    if isinstance(mult, int) and mult > 0 and mult % need:
        return (
            f"without a fixed width, packed rows are rounded up to dataset_kwargs.pad_seq_length_to_mult={mult}, "
            f"which is not a multiple of the alignment {need} ({topology(r)})"
        )
    return None


#: What Megatron-Bridge reads as packed data (data/packing/paths.py): packed Parquet files, globs of them or
#: a directory holding them; ``.npy`` packs are deprecated but still read.
PACKED_SUFFIXES = (".parquet", ".pq", ".npy")


def _path_form_ok(value: str) -> bool:
    name = value.rstrip("/").rsplit("/", 1)[-1].lower()
    if name.endswith(PACKED_SUFFIXES):
        return True
    if "*" in name or "?" in name:
        return ".parquet" in name or ".pq" in name
    return "." not in name  # a directory (seqpack cannot look: a folder of Parquet packs is what Bridge reads)


@rule(
    "PACK-OFFLINE-PATH-FORMAT",
    family=FAMILY,
    severity="error",
    title="explicit packed data paths must name packed Parquet (a .parquet/.pq file, a glob or a directory) or .npy",
    fields=(f"{SPECS}.packed_train_data_path", f"{SPECS}.packed_val_data_path"),
    provenance="upstream",
    source="PackedSequenceSpecs.__post_init__ checks the form of explicit packed data paths",
    fix="Point packed_train_data_path / packed_val_data_path at the packed Parquet output (training_<P>.idx.parquet, "
    "a glob of such files, or their directory), not at the JSONL input.",
    trigger={**OFFLINE, f"{SPECS}.packed_train_data_path": "/data/sft/training.jsonl"},
    fixed={f"{SPECS}.packed_train_data_path": "/data/packed/training_2048.idx.parquet"},
    upstream_check=bridge(
        "data/packing/config.py",
        85,
        "must be a .npy file or a packed parquet spec",
        "raises ValueError for a path that is neither a .npy file nor packed Parquet",
    ),
    note="Bridge also checks that the path exists when the config is built; seqpack's validator reads no files "
    "(`seqpack inspect` checks an artifact).",
)
def path_format(r: Resolved) -> str | None:
    s = r.specs
    if s is None:
        return None
    for name in ("packed_train_data_path", "packed_val_data_path"):
        value = getattr(s, name)
        if value and not _path_form_ok(str(value)):
            return f"offline_packing_specs.{name}={value} is neither packed Parquet (.parquet/.pq, a glob, a directory) nor .npy"
    return None
