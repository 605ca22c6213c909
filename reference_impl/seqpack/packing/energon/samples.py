"""Energon sample types of the packing path, and the cooker that reads our shards.

Flow inside a dataloader worker::

    crude webdataset sample {"json": {...}, "media0": bytes, ...}
      -> cook_row_sample        -> RowSample      (the JSONL row, where it came from, its image bytes)
      -> encode_sample          -> EncodedSample  (shifted tokens/labels/loss mask, lengths)
      -> select_samples_to_pack -> groups of EncodedSample
      -> pack_selected_samples  -> PackedGroup
      -> batch                  -> one canonical THD micro-batch (a dict)

Every type derives from ``megatron.energon.Sample``: its ``__restore_key__`` is what energon
stores in a checkpoint instead of the sample, so encoded samples must inherit it
(``derive_from``) and packs start with an empty one that energon fills in.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from megatron.energon import Sample, basic_sample_keys, edataclass, stateless

from seqpack.core.errors import ArtifactError
from seqpack.packing.energon.media import MEMBER_PREFIX


@edataclass
class RowSample(Sample):
    """One input row as stored in a shard."""

    #: The JSONL row (images replaced by ``{"member": name}`` references, markers in the text).
    row: dict
    #: ``{"file", "line", "row"}`` of the row in the source JSONL.
    source: dict
    #: Image member name -> encoded image bytes (empty for a text-only sample).
    media: dict = None  # type: ignore[assignment]


@edataclass
class EncodedSample(Sample):
    """A tokenized, shifted sample: what sits in the packing buffer."""

    #: int64 ``[L]`` inputs, int64 ``[L]`` next-token targets, float32 ``[L]`` loss mask.
    tokens: np.ndarray
    labels: np.ndarray
    loss_mask: np.ndarray
    #: Real length ``L`` and the physical length after alignment padding.
    length: int
    aligned_length: int
    #: The sample's images and videos in token order (VisualItem), empty for text.
    visuals: Any
    #: Where the row came from (``{"file", "line", "row"}``).
    source: dict


@edataclass
class PackedGroup(Sample):
    """The samples ``select_samples_to_pack`` put in one pack, in placement order."""

    samples: list


@stateless
def cook_row_sample(crude: dict) -> RowSample:
    """Turn a crude webdataset sample (``json`` and optional ``media<k>`` parts) into a RowSample."""
    doc = crude.get("json")
    key = crude.get("__key__")
    if not isinstance(doc, dict) or not isinstance(doc.get("row"), dict) or not isinstance(doc.get("source"), dict):
        raise ArtifactError(
            f"sample {key}: the shard member '{key}.json' is not a seqpack row document",
            fix="prepare the data with `seqpack energon-prepare`",
        )
    media = {name: bytes(value) for name, value in crude.items()
             if name.startswith(MEMBER_PREFIX) and isinstance(value, (bytes, bytearray))}
    return RowSample(**basic_sample_keys(crude), row=doc["row"], source=doc["source"], media=media)
