"""``energon_prepare``: JSONL -> WebDataset shards -> a prepared Megatron-Energon dataset."""

from __future__ import annotations

import os
from dataclasses import dataclass

from reference_impl.arguments import positive_int
from reference_impl.limits import MAX_SHARD_SIZE
from reference_impl.reports import PreparedEnergonDataset
from reference_impl.verbs.common import check_path, check_seed

__all__ = ["EnergonPrepareOptions", "energon_prepare"]


@dataclass(frozen=True, kw_only=True)
class EnergonPrepareOptions:
    """Input JSONL, output directory and the preparation settings.

    ``with_media`` attaches seeded synthetic image patches (and an ``<image>`` marker) to about
    half the rows; ``seed`` drives the validation split and the synthetic media.
    """

    input: str | os.PathLike[str]
    out: str | os.PathLike[str]
    with_media: bool = False
    shard_size: int = 1000
    val_fraction: float = 0.0
    seed: int = 1234
    overwrite: bool = False


def energon_prepare(options: EnergonPrepareOptions) -> PreparedEnergonDataset:
    """Prepare the dataset (:func:`reference_impl.packing.energon.prepare.prepare_energon_dataset`)."""
    from reference_impl.packing.energon.media import MediaSpec
    from reference_impl.packing.energon.prepare import prepare_energon_dataset

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
