"""Runtime in-batch packing: each micro-batch of MBS JSONL rows becomes one canonical THD row.

The JSONL stays on disk. Per DataLoader step, a micro-batch sampler
(:mod:`seqpack.packing.samplers`) picks MBS row indices, the lazy dataset
(:class:`~seqpack.packing.sft_dataset.SFTJsonlDataset`) reads, parses and tokenizes only
those rows, and :class:`InBatchPackingCollator` hands them to
:func:`seqpack.packing.thd.build_thd_batch`, the one builder of canonical batches.

Layout of one packed row (``m`` = alignment multiple, ``u_i`` = row lengths):

* row ``i`` occupies ``ceil(u_i / m) * m`` positions; the gap after its real tokens holds the pad
  token, label ``-100``, loss 0, and position ids that keep counting;
* ``cu_seqlens_q/kv`` are the real-token boundaries; ``cu_seqlens_*_padded`` the physical ones,
  present only when some gap (or width slack) was inserted;
* width: the sum of the aligned lengths (emergent width, the default, as megatron-bridge 0.6.2's
  text collators and row packer build it), or with ``pad_to_max_length`` a fixed ``width``
  (default ``seq_length``; 0.6.2's text collators ignore ``pad_to_max_length`` when packing). The
  slack ``width - sum(aligned)`` goes into the **last** sequence's physical segment (as 0.6.2's
  Nemotron Omni in-batch packer does; ``max_seqlen`` may grow to that segment), and rows whose
  aligned lengths do not fit raise a PackingError naming them. Each row must itself be at most
  ``seq_length`` tokens.

Every row's loss mask is copied unchanged (prompt/completion and chat semantics come from the
tokenization), so a row's labels and mask inside a packed batch equal those of the row alone.
Extra keys on each batch: ``row_indices`` (dataset rows, in order), ``token_count`` (real tokens
per row) and ``pack_info`` (:class:`PackInfo`: padding accounting and truncated rows).

VLM rows (a dataset built with ``vision``, items carrying ``visuals``): the rows' image and video
tokens go through the same builder, so the alignment covers them like text, and
:func:`seqpack.packing.vlm.attach_visual_inputs` adds the patch rows, grids, the
patch-to-sequence index, ``vision_index`` and the M-RoPE ids (restarting per sequence). Rows with
and without images mix freely.

The alignment multiple comes from :func:`seqpack.core.alignment.derive_alignment` for the
configured topology (train and eval CP); :func:`build_in_batch_loader` derives it from the config
and runs the rule registry's in-batch checks (``check_rules``) before building anything.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.utils.data

from seqpack.core.alignment import Alignment, round_up
from seqpack.core.arguments import positive_int
from seqpack.config import TrainingConfig, load_config
from seqpack.config.resolve import alignment_for_config
from seqpack.config.validate import check_rules
from seqpack.core.errors import AlignmentError, PackingError, SeqpackError, UsageError
from seqpack.packing.pack_info import PackInfo, PaddingTotals
from seqpack.packing.samplers import (
    CyclicMicroBatchSampler,
    SingleMicroBatchSampler,
    make_micro_batch_sampler,
)
from seqpack.packing.sft_dataset import RowScan, SFTJsonlDataset, scan_rows
from seqpack.packing.sft_loader import DatasetArgs, SamplerSettings, build_sft_loader, dataset_for
from seqpack.core.packing_paths import get_path
from seqpack.packing.thd import SLACK_MODES, build_thd_batch
from seqpack.packing.vlm import attach_visual_inputs

log = logging.getLogger(__name__)

__all__ = [
    "IN_BATCH_DATASET_KINDS",
    "IN_BATCH_RULE_IDS",
    "CyclicMicroBatchSampler",
    "InBatchPackingCollator",
    "PackInfo",
    "PaddingTotals",
    "RowScan",
    "SFTJsonlDataset",
    "SingleMicroBatchSampler",
    "alignment_for_config",
    "build_in_batch_loader",
    "make_micro_batch_sampler",
    "scan_rows",
]

#: Registry rules the loader builder enforces (in this order) before it builds anything.
IN_BATCH_RULE_IDS: tuple[str, ...] = (
    "PACK-EXCLUSIVE-OFFLINE-IN-BATCH",
    "PACK-EXCLUSIVE-GLOBAL-BATCH",
    "PACK-IN-BATCH-DATASET-KIND",
    "PACK-IN-BATCH-MBS",
    "PACK-IN-BATCH-DATALOADER",
    "TOPO-WORLD-DIVISIBLE",
    "SEQ-LENGTH-MATCH",
    "CP-SEQ-DIVISIBLE",
    "ALIGN-SEQ-LENGTH",
    "PACK-IN-BATCH-MULTIPLE-OVERRIDDEN",
)

#: Dataset kinds whose rows are JSONL text samples this loader can read.
IN_BATCH_DATASET_KINDS: tuple[str, ...] = get_path("in_batch").dataset_kinds

_ROW_KEYS = ("tokens", "labels", "loss_mask")


def _collator_words(message: str) -> str:
    """The builder's argument names in a message, as the collator calls them."""
    return message.replace("max_row_length", "seq_length").replace("max_length", "width")


class InBatchPackingCollator:
    """Collate MBS tokenized rows into one canonical THD micro-batch (see the module docstring).

    Give the alignment either as ``alignment`` (an :class:`~seqpack.core.alignment.Alignment`
    from ``derive_alignment``) or as ``pad_seq_to_mult``, not both. ``seq_length`` bounds every
    row. ``pad_to_max_length`` fixes the packed width to ``width`` (default ``seq_length``; must
    be a multiple of the alignment); ``slack`` chooses where the extra width goes (the default
    ``"last_segment"`` is what megatron-bridge 0.6.2's Nemotron Omni packer does with a fixed width,
    ``"pad_sequence"`` the offline collate's). ``fold_alignment_padding`` reports every sequence's
    padding as part of it (no padding between sequences; see :class:`~seqpack.packing.thd.THDOptions`).

    Items are mappings with 1-D ``tokens``, ``labels`` and ``loss_mask`` (already shifted) and
    optionally ``row_index``, ``truncated`` and ``visuals`` (as :class:`SFTJsonlDataset` returns
    them). ``vlm`` (:class:`~seqpack.data.vlm.sample.VLMSettings`) is needed for items with
    ``visuals``. Errors name the dataset row (``row``) when they concern one row.
    """

    def __init__(
        self,
        pad_seq_to_mult: int | None = None,
        *,
        alignment: Alignment | None = None,
        seq_length: int,
        pad_to_max_length: bool = False,
        width: int | None = None,
        slack: str = "last_segment",
        pad_token_id: int = 0,
        label_pad_id: int = -100,
        vlm: Any = None,
        fold_alignment_padding: bool = False,
    ) -> None:
        if (pad_seq_to_mult is None) == (alignment is None):
            raise UsageError(
                "give the alignment once: either alignment=derive_alignment(...) or pad_seq_to_mult",
                field="pad_seq_to_mult",
            )
        if alignment is not None:
            if not isinstance(alignment, Alignment):
                raise UsageError(
                    f"alignment must come from derive_alignment, got {type(alignment).__name__}",
                    field="alignment",
                )
            pad_seq_to_mult = alignment.pad_seq_to_mult
        pad_seq_to_mult = positive_int("pad_seq_to_mult", pad_seq_to_mult)
        seq_length = positive_int("seq_length", seq_length)
        if slack not in SLACK_MODES:
            raise UsageError(f"unknown slack mode {slack!r}; choose one of {', '.join(SLACK_MODES)}",
                             field="slack")
        if width is not None and not pad_to_max_length:
            raise UsageError("width only applies with pad_to_max_length=True", field="width")
        if pad_to_max_length:
            width = seq_length if width is None else width
            width = positive_int("width", width)
            if width % pad_seq_to_mult:
                raise AlignmentError(
                    f"fixed width {width} is not a multiple of the alignment {pad_seq_to_mult}",
                    field="width",
                    fix=f"use a width that divides by {pad_seq_to_mult}, e.g. "
                        f"{round_up(width, pad_seq_to_mult)}",
                )
        self.pad_seq_to_mult = pad_seq_to_mult
        self.alignment = alignment
        self.seq_length = seq_length
        self.pad_to_max_length = bool(pad_to_max_length)
        self.width = width
        self.slack = slack
        self.pad_token_id = pad_token_id
        self.label_pad_id = label_pad_id
        self.vlm = vlm
        self.fold_alignment_padding = bool(fold_alignment_padding)

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        if isinstance(items, Mapping) or not isinstance(items, Sequence) or len(items) == 0:
            raise UsageError("a micro-batch must be a non-empty list of rows", field="items")
        rows: list[dict[str, Any]] = []
        row_ids: list[int] = []
        truncated: list[int] = []
        visuals: list[Any] = []
        for pos, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise UsageError(f"each row must be a mapping, got {type(item).__name__}", row=pos)
            rid = item.get("row_index", pos)
            missing = [k for k in _ROW_KEYS if k not in item]
            if missing:
                raise PackingError(f"row is missing {missing}", row=int(rid), field=missing[0])
            rows.append({k: item[k] for k in _ROW_KEYS})
            visuals.append(item.get("visuals"))
            row_ids.append(int(rid))
            if item.get("truncated"):
                truncated.append(int(rid))
        try:
            batch = build_thd_batch(
                rows,
                pad_seq_to_mult=self.pad_seq_to_mult,
                max_length=self.width if self.pad_to_max_length else None,
                max_row_length=self.seq_length,
                pad_to_max_length=self.pad_to_max_length,
                slack=self.slack,
                pad_token_id=self.pad_token_id,
                label_pad_id=self.label_pad_id,
                fold_alignment_padding=self.fold_alignment_padding,
            )
        except SeqpackError as err:
            too_wide = err.field == "max_length"  # the builder's name for the fixed width
            raise type(err)(
                f"micro-batch of rows {row_ids}: {_collator_words(err.message)}",
                row=None if err.row is None else row_ids[err.row],
                field="width" if too_wide else err.field,
                fix=err.fix or (
                    "raise the width (e.g. micro_batch_size * seq_length) or set pad_to_max_length=False"
                    if too_wide else None
                ),
            ) from err
        if self.vlm is not None or any(v is not None for v in visuals):
            if self.vlm is None or any(v is None for v in visuals):
                raise UsageError(
                    f"micro-batch of rows {row_ids}: VLM items need a collator with vlm settings, and every "
                    "item of a VLM batch needs visuals (build the dataset with vision=...)", field="visuals",
                )
            attach_visual_inputs(batch, visuals, self.vlm)
        lengths = [len(r["tokens"]) for r in rows]  # the builder checked: 1-D, non-empty
        aligned = tuple(round_up(u, self.pad_seq_to_mult) for u in lengths)
        info = PackInfo(
            rows=tuple(row_ids),
            lengths=tuple(lengths),
            aligned_lengths=aligned,
            pad_seq_to_mult=self.pad_seq_to_mult,
            width=int(batch["tokens"].shape[1]),
            truncated_rows=tuple(truncated),
        )
        batch["row_indices"] = list(row_ids)
        batch["token_count"] = list(lengths)
        batch["pack_info"] = info
        return batch

    def __repr__(self) -> str:
        fixed = f", width={self.width}" if self.pad_to_max_length else ""
        return (
            f"InBatchPackingCollator(pad_seq_to_mult={self.pad_seq_to_mult}, "
            f"seq_length={self.seq_length}{fixed})"
        )


def build_in_batch_loader(
    cfg: TrainingConfig | Mapping[str, Any] | str | os.PathLike[str],
    source: str | os.PathLike[str] | SFTJsonlDataset,
    *,
    dp_rank: int = 0,
    consumed_samples: int = 0,
    tokenizer: Any = None,
    schema: Any = None,
    truncation: str = "right",
    row_scan: RowScan | None = None,
    width: int | None = None,
    num_workers: int | None = None,
    drop_last: bool | None = None,
    pin_memory: bool = False,
    cache_dir: str | os.PathLike[str] | None = None,
    vision: Any = None,
) -> torch.utils.data.DataLoader:
    """Build the in-batch packing DataLoader for ``cfg`` over the JSONL file ``source``.

    Runs the registry rules :data:`IN_BATCH_RULE_IDS` first (``ConfigViolationError`` with the
    rule id, message and fix when one is broken; warnings are logged), then wires the lazy
    dataset, the micro-batch sampler of ``cfg``'s dataloader type (DP size from the config, rank
    ``dp_rank``, resuming at ``consumed_samples``, seed ``dataset.seed``) and the collator with
    the alignment derived from the topology, ``seq_length`` and ``pad_to_max_length`` of the
    config. ``vision`` (a preset name, spec or settings) reads the rows as VLM samples. ``source``
    may be a ready :class:`SFTJsonlDataset` (then ``tokenizer``, ``schema``, ``truncation``,
    ``cache_dir`` and ``vision`` must be left unset). ``row_scan`` (from :func:`scan_rows`)
    restricts sampling to the usable rows. ``num_workers`` and ``drop_last`` default to the
    config's values.
    """
    cfg = load_config(cfg)
    if not cfg.dataset.enable_in_batch_packing:
        raise UsageError(
            "the config does not enable in-batch packing", field="dataset.enable_in_batch_packing",
            fix="set dataset.enable_in_batch_packing=true",
        )
    for finding in check_rules(cfg, IN_BATCH_RULE_IDS):
        log.warning("%s", finding.one_line())
    if cfg.dataset.kind not in IN_BATCH_DATASET_KINDS:
        raise UsageError(
            f"dataset.kind={cfg.dataset.kind!r} is not read from JSONL by this loader; "
            f"use one of {', '.join(IN_BATCH_DATASET_KINDS)}",
            field="dataset.kind",
        )
    from seqpack.config.resolve import resolve

    dp_size = resolve(cfg).dp
    if dp_size is None:  # TOPO-WORLD-DIVISIBLE reports this first; kept for direct callers
        raise UsageError("the data-parallel size is undefined for this topology", field="dist.world_size")
    alignment = alignment_for_config(cfg)
    seq_length = cfg.seq_length
    dataset = dataset_for(source, dataset_class=SFTJsonlDataset, seq_length=seq_length,
                          args=DatasetArgs(tokenizer, schema, truncation, cache_dir, vision))
    return build_sft_loader(
        dataset,
        sampler=SamplerSettings(
            dataloader_type=cfg.dataloader_type,
            micro_batch_size=cfg.train.micro_batch_size,
            dp_size=dp_size,
            seed=cfg.dataset.seed,
            drop_last=cfg.dataset.drop_last if drop_last is None else drop_last,
        ),
        make_collate=lambda ds: InBatchPackingCollator(
            alignment=alignment, seq_length=seq_length, pad_to_max_length=cfg.pad_to_max_length, width=width,
            pad_token_id=ds.tokenizer.pad_id, vlm=ds.vlm, fold_alignment_padding=cfg.dataset.fold_alignment_padding,
        ),
        dp_rank=dp_rank,
        consumed_samples=consumed_samples,
        row_scan=row_scan,
        num_workers=cfg.dataset.num_workers if num_workers is None else num_workers,
        pin_memory=pin_memory,
        name="in-batch",
    )

