"""``energon_prepare``: JSONL -> WebDataset shards -> a prepared Megatron-Energon dataset."""

from __future__ import annotations

import os
from dataclasses import dataclass

from seqpack.core.arguments import positive_int
from seqpack.core.limits import MAX_SHARD_SIZE
from seqpack.core.reports import PreparedEnergonDataset
from seqpack.verbs.common import check_path, check_seed

__all__ = ["EnergonPrepareOptions", "energon_prepare"]


@dataclass(frozen=True, kw_only=True)
class EnergonPrepareOptions:
    """Input JSONL, output directory and the preparation settings.

    ``with_media`` gives about half the rows that carry no images a seeded synthetic picture (and
    an ``<image>`` marker); ``seed`` drives the validation split and the synthetic media. Rows with
    images or videos (the VLM sample contract, docs/vlm.md) keep them as shard members.
    """

    input: str | os.PathLike[str]
    out: str | os.PathLike[str]
    with_media: bool = False
    shard_size: int = 1000
    val_fraction: float = 0.0
    seed: int = 1234
    overwrite: bool = False


def energon_prepare(options: EnergonPrepareOptions) -> PreparedEnergonDataset:
    """Prepare the dataset (:func:`seqpack.packing.energon.prepare.prepare_energon_dataset`)."""
    from seqpack.packing.energon.media import MediaSpec
    from seqpack.packing.energon.prepare import prepare_energon_dataset

    seed = check_seed(options.seed)
    return prepare_energon_dataset(
        check_path("input", options.input),
        check_path("out", options.out),
        media=MediaSpec(seed=seed) if options.with_media else None,
        shard_size=positive_int("shard_size", options.shard_size, maximum=MAX_SHARD_SIZE),
        val_fraction=options.val_fraction,
        split_seed=seed,
        overwrite=options.overwrite,
    )
