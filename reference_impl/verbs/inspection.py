"""``inspect_packs``: integrity, statistics and topology fitness of packed Parquet (ours or Megatron-Bridge's)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from reference_impl.arguments import non_negative_int, positive_int
from reference_impl.reports import InspectReport
from reference_impl.limits import MAX_PACK_LEN, MAX_TOKEN_ID
from reference_impl.verbs.common import TopologyOptions, check_path

__all__ = ["InspectOptions", "inspect_packs"]


@dataclass(frozen=True, kw_only=True)
class InspectOptions(TopologyOptions):
    """The artifact (file, glob or directory), an optional topology to check it against, and what a
    foreign artifact cannot tell (``pack_size``, ``eos_id``); ``fixed_width``: the run pads rows to
    ``pack_size`` (None: as the manifest says)."""

    path: str | os.PathLike[str]
    pack_size: int | None = None
    eos_id: int | None = None
    fixed_width: bool | None = None


def inspect_packs(options: InspectOptions) -> InspectReport:
    """Inspect the packs (:func:`reference_impl.inspect.inspect_packed_dataset`); the topology check
    runs when any topology field is set."""
    from reference_impl.inspect import inspect_packed_dataset

    return inspect_packed_dataset(
        check_path("path", options.path),
        options.topology if options.topology_given else None,
        pack_size=positive_int("pack_size", options.pack_size, allow_none=True, maximum=MAX_PACK_LEN),
        eos_id=non_negative_int("eos_id", options.eos_id, allow_none=True, maximum=MAX_TOKEN_ID),
        pad_to_max_length=options.fixed_width,
    )
