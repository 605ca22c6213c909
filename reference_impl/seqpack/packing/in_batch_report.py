"""What the in-batch loader produces for a file: the first batches' layout and their padding.

:func:`inspect_in_batch` is the library function behind ``seqpack batches --mode in-batch`` (and
the matching MCP tool): it builds the real loader (so the registry rules, the alignment derivation
and the collator are exactly the training ones) and summarises the first ``num_batches``
micro-batches. :func:`in_batch_config` turns command-line style settings into a
:class:`~seqpack.config.TrainingConfig`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

from seqpack.core.arguments import positive_int
from seqpack.config import TrainingConfig, load_config
from seqpack.config.resolve import alignment_for_config
from seqpack.core.limits import MAX_BATCHES_SHOWN
from seqpack.packing.pack_info import PackInfo, PaddingTotals
from seqpack.core.results import Result

__all__ = ["BatchSummary", "InBatchReport", "in_batch_config", "inspect_in_batch"]


def in_batch_config(
    *,
    micro_batch_size: int,
    seq_length: int,
    tp: int = 1,
    cp: int = 1,
    sp: bool = False,
    eval_cp: int | None = None,
    dataloader_type: str = "single",
    seed: int = 1234,
    pad_to_max_length: bool = False,
    kind: str = "gpt_sft",
    fold_alignment_padding: bool = False,
) -> TrainingConfig:
    """A GPT-SFT in-batch config for one data-parallel rank of the given topology.

    The world size is the smallest that fits the train and eval model-parallel groups with one
    data-parallel replica, so every rule about the topology sees a consistent config.
    """
    for name, value in (("tp", tp), ("cp", cp), ("eval_cp", eval_cp or 1)):
        positive_int(name, value)
    world = math.lcm(tp * cp, tp * (eval_cp or cp))
    data: dict[str, Any] = {
        "model": {
            "seq_length": seq_length,
            "tensor_model_parallel_size": tp,
            "context_parallel_size": cp,
            "sequence_parallel": sp,
        },
        "dataset": {
            "kind": kind,
            "seq_length": seq_length,
            "seed": seed,
            "enable_in_batch_packing": True,
            "dataloader_type": dataloader_type,
            "dataset_kwargs": {"pad_to_max_length": pad_to_max_length},
            "fold_alignment_padding": fold_alignment_padding,
        },
        "train": {"micro_batch_size": micro_batch_size, "global_batch_size": micro_batch_size},
        "dist": {"world_size": world, "eval_context_parallel_size": eval_cp},
    }
    return load_config(data)


@dataclass(frozen=True, kw_only=True)
class BatchSummary(PackInfo):
    """One packed micro-batch: its :class:`PackInfo` (padding accounting) plus the boundary arrays it carries."""

    step: int
    cu_seqlens: list[int]
    cu_seqlens_padded: list[int] | None
    max_seqlen: int
    images: int = 0
    videos: int = 0
    vision_tokens: int = 0

    @classmethod
    def of(cls, step: int, info: PackInfo, batch: dict[str, Any]) -> BatchSummary:
        """The summary of ``batch`` (a canonical batch with its ``pack_info``)."""
        from seqpack.packing.vlm import visual_summary

        padded = batch.get("cu_seqlens_q_padded")
        vis = visual_summary(batch)
        return cls(info.rows, info.lengths, info.aligned_lengths, info.pad_seq_to_mult, info.width,
                   info.truncated_rows, step=step, cu_seqlens=batch["cu_seqlens_q"].tolist(),
                   cu_seqlens_padded=None if padded is None else padded.tolist(),
                   max_seqlen=int(batch["max_seqlen_q"]), images=vis["images"], videos=vis["videos"],
                   vision_tokens=vis["vision_tokens"])


@dataclass(frozen=True)
class InBatchReport(Result):
    """Result of :func:`inspect_in_batch`; ``totals`` covers the batches shown. ``vision`` is the
    vision spec of a VLM file (None for text); ``vision_tokens``: image and video tokens in the
    batches shown (part of the real tokens)."""

    mode: str = field(default="in-batch", init=False)
    file: str
    rows: int
    schema: dict[str, Any]
    tokenizer: str
    seq_length: int
    micro_batch_size: int
    dataloader_type: str
    alignment: dict[str, Any]
    pad_to_max_length: bool
    width: int | None
    steps_per_pass: int
    batches: list[BatchSummary]
    totals: PaddingTotals = field(default_factory=PaddingTotals)
    vision: dict[str, Any] | None = None
    vision_tokens: int = 0
    warnings: list[str] = field(default_factory=list)


def inspect_in_batch(
    path: str | os.PathLike[str],
    cfg: TrainingConfig,
    *,
    num_batches: int = 3,
    tokenizer: Any = None,
    schema: Any = None,
    truncation: str = "right",
    width: int | None = None,
    vision: Any = None,
) -> InBatchReport:
    """Build the in-batch loader for ``cfg`` on ``path`` (rank 0) and summarise its first batches.

    The last incomplete micro-batch is kept (``drop_last=False``) so a small file shows every row;
    no worker processes are started. ``vision`` (a spec or preset name) reads VLM rows.
    """
    from seqpack.packing.in_batch import build_in_batch_loader

    positive_int("num_batches", num_batches, maximum=MAX_BATCHES_SHOWN)
    loader = build_in_batch_loader(
        cfg, path, tokenizer=tokenizer, schema=schema, truncation=truncation, width=width,
        num_workers=0, drop_last=False, vision=vision,
    )
    dataset = loader.dataset
    totals = PaddingTotals()
    batches: list[BatchSummary] = []
    for step, batch in enumerate(loader):
        if step >= num_batches:
            break
        info: PackInfo = batch["pack_info"]
        totals.add(info)
        batches.append(BatchSummary.of(step, info, batch))
    collator = loader.collate_fn
    return InBatchReport(
        file=dataset.path,
        rows=len(dataset),
        schema=dataset.schema.to_dict(),
        tokenizer=dataset.tokenizer.name,
        seq_length=dataset.seq_length,
        micro_batch_size=cfg.train.micro_batch_size,
        dataloader_type=cfg.dataloader_type,
        alignment=alignment_for_config(cfg).to_dict(),
        pad_to_max_length=collator.pad_to_max_length,
        width=collator.width,
        steps_per_pass=len(loader),
        batches=batches,
        totals=totals,
        vision=None if dataset.vlm is None else dataset.vlm.vision.to_dict(),
        vision_tokens=sum(b.vision_tokens for b in batches),
    )
