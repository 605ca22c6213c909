"""The one DataLoader assembly shared by the runtime JSONL paths (in-batch and global-batch).

A path resolves its config (rules, DP size, alignment) and then calls :func:`build_sft_loader`
with what differs: the dataset class, the micro-batch size and the collate. Everything else is
the same for both: the lazy JSONL dataset (or a ready one), the usable-row restriction of a
:class:`~seqpack.packing.sft_dataset.RowScan`, the micro-batch sampler of the dataloader
type, the worker count and the DataLoader.

A ready dataset is used as it is: tokenizer, schema, truncation and cache directory belong to
its construction, so passing any of them with a ready dataset is refused (both paths alike).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch.utils.data

from seqpack.core.errors import PackingError, UsageError
from seqpack.packing.samplers import make_micro_batch_sampler
from seqpack.packing.sft_dataset import RowScan, SFTJsonlDataset

log = logging.getLogger(__name__)

__all__ = ["DatasetArgs", "SamplerSettings", "build_sft_loader", "dataset_for"]


@dataclass(frozen=True)
class DatasetArgs:
    """How to build the lazy dataset from a JSONL path (all must stay unset for a ready dataset)."""

    tokenizer: Any = None
    schema: Any = None
    truncation: str = "right"
    cache_dir: str | os.PathLike[str] | None = None
    vision: Any = None

    def given(self) -> list[str]:
        """Names of the arguments that differ from their defaults."""
        out = [k for k in ("tokenizer", "schema", "cache_dir", "vision") if getattr(self, k) is not None]
        return out + (["truncation"] if self.truncation != "right" else [])


@dataclass(frozen=True)
class SamplerSettings:
    """What the micro-batch sampler needs from the resolved config."""

    dataloader_type: str
    micro_batch_size: int
    dp_size: int
    seed: int
    drop_last: bool


def dataset_for(
    source: str | os.PathLike[str] | SFTJsonlDataset,
    *,
    dataset_class: type[SFTJsonlDataset],
    seq_length: int,
    args: DatasetArgs = DatasetArgs(),
) -> SFTJsonlDataset:
    """``source`` when it is a ready dataset of ``dataset_class`` (checked), else a new one over the JSONL path."""
    if isinstance(source, SFTJsonlDataset):
        if not isinstance(source, dataset_class):
            raise UsageError(f"pass a {dataset_class.__name__} (its items feed this path's collate), "
                             f"got {type(source).__name__}", field="source")
        clash = args.given()
        if clash:
            raise UsageError(f"{clash} cannot be applied to a ready dataset; set them when building it",
                             field=clash[0])
        if source.seq_length != seq_length:
            raise UsageError(
                f"the dataset tokenizes to seq_length={source.seq_length} but the config has {seq_length}",
                field="seq_length",
            )
        return source
    extra = {} if args.vision is None else {"vision": args.vision}
    return dataset_class(source, seq_length=seq_length, tokenizer=args.tokenizer, schema=args.schema,
                         truncation=args.truncation, cache_dir=args.cache_dir, **extra)


def build_sft_loader(
    dataset: SFTJsonlDataset,
    *,
    sampler: SamplerSettings,
    make_collate: Callable[[SFTJsonlDataset], Callable[..., Any]],
    dp_rank: int = 0,
    consumed_samples: int = 0,
    row_scan: RowScan | None = None,
    check_usable: Callable[[int, str], None] | None = None,
    num_workers: int = 0,
    pin_memory: bool = False,
    name: str = "sft",
) -> torch.utils.data.DataLoader:
    """The DataLoader of DP rank ``dp_rank`` over ``dataset`` (see the module docstring).

    ``row_scan`` restricts sampling to the usable rows (a PackingError when there is none);
    ``check_usable(count, file)`` sees the number of usable rows before anything is built (the
    global-batch validation plan uses it).
    """
    indices = None
    if row_scan is not None:
        row_scan.check_matches(dataset)
        if row_scan.usable.size == 0:
            raise PackingError("every row of the file was rejected; nothing to train on", file=dataset.path)
        indices = row_scan.usable
    if check_usable is not None:
        check_usable(len(dataset) if indices is None else int(indices.size), dataset.path)
    batch_sampler = make_micro_batch_sampler(
        sampler.dataloader_type,
        None if indices is not None else len(dataset),
        micro_batch_size=sampler.micro_batch_size,
        consumed_samples=consumed_samples,
        data_parallel_rank=dp_rank,
        data_parallel_size=sampler.dp_size,
        drop_last=sampler.drop_last,
        seed=sampler.seed,
        indices=indices,
    )
    collate = make_collate(dataset)
    log.info(
        "%s loader: %r, %s sampler (MBS %d, DP rank %d of %d), %r, %d worker(s)",
        name, dataset, sampler.dataloader_type, sampler.micro_batch_size, dp_rank, sampler.dp_size, collate,
        num_workers,
    )
    return torch.utils.data.DataLoader(
        dataset, batch_sampler=batch_sampler, collate_fn=collate, num_workers=num_workers, pin_memory=pin_memory,
    )
