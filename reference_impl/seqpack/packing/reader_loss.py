"""What a packed-Parquet reader trains, per Megatron-Bridge version: the labels its loss mask selects.

``inspect`` judges a pack by this, not by the stored mask alone. Megatron-Bridge's packed reader (the
format seqpack writes too) cuts every segment ``[s, e)`` into inputs ``ids[s:e-1]`` and labels
``ids[s+1:e]`` (a label never crosses into the next segment) and trains the labels whose stored mask is
1 (``answer_only_loss``; otherwise every label whose input is not EOS). megatron-bridge 0.6.2 also drops
every position whose *input* is EOS (Megatron-Bridge main does not, since PR #5213). The stored mask on
a segment's last token is never read: Bridge's legacy prompt-template packs store 1 there (quirk Q3)
and train correctly all the same.

What can go wrong is a trained label that is alignment padding. A segment's padding is the trailing
run of the pre-padding id (``pad_id``: the tokenizer's end-of-document id Bridge pre-pads with,
``tokenizer.eod``; by default the EOS id):

* ``pad_id != eos_id``: the run is exactly the padding (the real EOS precedes it);
* ``pad_id == eos_id``: the run's first EOS is the sample's own; the rest is padding, unless the
  stored mask is in the rolled form (0 on the segment's last token, as every prompt/completion and chat
  pack has), where it names the supervised labels itself.

Pure numpy (no torch), so ``inspect`` stays light; :func:`seqpack.packing.thd_collate.stored_row_segments`
computes the same trained positions while it builds batches (a test holds them equal), and the upstream
lane holds both equal to Bridge's own collate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from seqpack.core.versions import BRIDGE_MAIN

__all__ = ["ReaderLoss", "reader_loss", "trained_labels"]


@dataclass(frozen=True)
class ReaderLoss:
    """One stored row as its reader trains it: ``trained`` labels, ``on_padding`` of them alignment
    padding (``first_bad``: the first segment with one, else None), ``mask_on_end``: segments whose stored
    mask is 1 on their last token (never read)."""

    trained: int
    on_padding: int
    first_bad: int | None
    mask_on_end: int


def trained_labels(
    ids: np.ndarray, mask: np.ndarray, start: int, end: int, *, eos_id: int, main: bool, answer_only_loss: bool = True,
) -> np.ndarray:
    """Bool over the labels ``ids[start+1:end]`` of one segment: which of them the reader trains."""
    inputs = ids[start : end - 1]
    not_eos = inputs != eos_id
    if not answer_only_loss:
        return not_eos
    trained = mask[start : end - 1] != 0
    return trained if main else trained & not_eos


def _first_pad(ids: np.ndarray, mask: np.ndarray, start: int, end: int, *, eos_id: int, pad_id: int) -> int:
    """Index of the first alignment-padding position of segment ``[start, end)`` (``end`` when none)."""
    seg = ids[start:end]
    others = np.flatnonzero(seg != pad_id)
    run_start = start + (int(others[-1]) + 1 if others.size else 0)
    if run_start >= end:
        return end
    if pad_id != eos_id:
        return run_start
    first = run_start + 1  # the run's first EOS is the sample's own
    if mask[end - 1] == 0:  # rolled mask: the writer names its supervised labels
        supervised = np.flatnonzero(mask[start : end - 1])
        if supervised.size:
            first = max(first, start + int(supervised[-1]) + 2)
    return min(first, end)


def reader_loss(
    ids: np.ndarray, mask: np.ndarray, bounds: np.ndarray, *, eos_id: int, pad_id: int | None = None,
    bridge_version: str | None = None, answer_only_loss: bool = True,
) -> ReaderLoss:
    """Check one stored row (``bounds``: segment starts plus the row length) the way its reader trains it."""
    main = bridge_version == BRIDGE_MAIN
    pad = eos_id if pad_id is None else int(pad_id)
    trained_total = on_padding = 0
    first_bad = None
    starts, ends = bounds[:-1].tolist(), bounds[1:].tolist()
    for k, (s, e) in enumerate(zip(starts, ends)):
        trained = trained_labels(ids, mask, s, e, eos_id=eos_id, main=main, answer_only_loss=answer_only_loss)
        trained_total += int(np.count_nonzero(trained))
        first = _first_pad(ids, mask, s, e, eos_id=eos_id, pad_id=pad)
        if first < e:
            bad = int(np.count_nonzero(trained[max(0, first - s - 1) :]))
            if bad:
                on_padding += bad
                first_bad = k if first_bad is None else first_bad
    mask_on_end = int(np.count_nonzero(mask[np.asarray(ends, dtype=np.int64) - 1])) if ends else 0
    return ReaderLoss(trained=trained_total, on_padding=on_padding, first_bad=first_bad, mask_on_end=mask_on_end)
