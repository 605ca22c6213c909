"""Stored packed rows and right-padded batches -> THD micro-batches, the way Megatron-Bridge's collators do it.

* stored packed rows (packed Parquet / ``.npy``) -> a batch, as Bridge's offline collate does it:
  :func:`collate_stored_rows` (Bridge form) and :func:`collate_stored_row_canonical` (canonical form);
* a right-padded ``[B, S]`` batch -> one THD row (Bridge's in-batch collators): :func:`right_padded_to_thd`.

Canonical batches come only from :func:`seqpack.packing.thd.build_thd_batch`; this module translates, it
never lays out sequences itself. Where the canonical form deliberately differs from a Bridge form, the
function docstrings say so under "Differs from Bridge".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from seqpack.core.arguments import non_negative_int, positive_int
from seqpack.core.errors import ArtifactError, PackingError, SeqpackError, UsageError
from seqpack.core.versions import BRIDGE_MAIN, resolve_target
from seqpack.packing.thd import build_thd_batch
from seqpack.packing.thd_compat import to_bridge_offline_batch

__all__ = [
    "causal_attention_masks", "collate_stored_row_canonical", "collate_stored_rows", "reader_version",
    "right_padded_to_thd", "static_shape_from_metadata", "stored_row_segments",
]


def reader_version(bridge_version: str | None) -> str:
    """The packed reader to follow: ``bridge_version`` checked (None: the default target,
    megatron-bridge 0.6.2); UsageError naming the choices otherwise."""
    return resolve_target(bridge_version)


# ------------------------------------------------------------------------------------------------
# stored packed rows (Bridge's offline collate)


def static_shape_from_metadata(
    pack_metadata: Mapping[str, Any] | Sequence[Mapping[str, Any]], width: int
) -> tuple[int, int]:
    """``(static_num_seqs, static_max_seqlen)`` for ``pad_cu_seqlens`` from pack metadata.

    ``pack_metadata`` is one metadata dict or the metadata JSON array (every entry counts, as in
    Bridge). Capacity = largest ``max_samples_per_bin`` + 1 (room for the trailing padding
    sequence); max_seqlen = max(largest ``dataset_max_seqlen``, ``width`` - smallest
    ``min_packed_seqlen``).
    """
    entries = [pack_metadata] if isinstance(pack_metadata, Mapping) else list(pack_metadata)
    if not entries:
        raise ArtifactError("pack metadata is an empty list", field="pack_metadata")
    values: dict[str, list[int]] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise ArtifactError(
                f"metadata entry {i} is a {type(entry).__name__}, not an object", row=i
            )
        for key in ("max_samples_per_bin", "dataset_max_seqlen", "min_packed_seqlen"):
            value = entry.get(key)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
                raise ArtifactError(
                    f"metadata entry {i} lacks a non-negative integer '{key}' (got {value!r})",
                    row=i, field=key,
                )
            values.setdefault(key, []).append(int(value))
    capacity = max(values["max_samples_per_bin"]) + 1
    max_seqlen = max(max(values["dataset_max_seqlen"]), width - min(values["min_packed_seqlen"]))
    return capacity, max_seqlen


def _row_array(row: Mapping[str, Any], key: str, *, row_index: int) -> np.ndarray:
    value = row.get(key)
    if value is None:
        raise ArtifactError(f"stored row has no '{key}'", row=row_index, field=key)
    arr = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
    if arr.ndim != 1:
        raise ArtifactError(f"expected a 1-D list, got shape {arr.shape}", row=row_index, field=key)
    if arr.size and arr.dtype.kind not in "biu":
        raise ArtifactError(f"expected integers, got dtype {arr.dtype}", row=row_index, field=key)
    return arr.astype(np.int64)


def stored_row_segments(
    row: Mapping[str, Any],
    *,
    eos_id: int,
    pad_seq_to_mult: int,
    answer_only_loss: bool = True,
    row_index: int = 0,
    bridge_version: str | None = None,
) -> list[dict[str, Any]]:
    """Split one stored packed row into canonical builder rows, one per segment.

    ``row`` holds ``input_ids`` and the rolled ``loss_mask`` of a packed Parquet row, plus either
    ``seq_start_id`` (segment starts) or ``seq_boundaries`` (starts and the row length). For a
    stored segment ``s``: tokens = ``s[:-1]``, labels = ``s[1:]`` (a label never crosses a segment
    boundary), loss mask = the stored mask over the token positions (or, without ``answer_only_loss``,
    1 wherever the input is not ``eos_id``); the stored mask on a segment's last token is never read.

    ``bridge_version`` picks the reader (default megatron-bridge 0.6.2, checked in the lane):

    * ``0.6.2``: the loss is also 0 wherever the *input* token is ``eos_id`` (which also keeps the loss
      off the EOS pre-padding of Bridge's legacy template packs, quirk Q3); with ``pad_seq_to_mult > 1``
      the segment's ``valid_length`` ends at its last input token that is not ``eos_id``;
    * ``main``: no EOS-input zeroing (Megatron-Bridge PR #5213), and ``valid_length`` drops trailing
      EOS inputs only while their stored mask is 0, so a supervised trailing EOS is real (PR #5610).

    With ``pad_seq_to_mult`` 1 every token is real.
    """
    ids = _row_array(row, "input_ids", row_index=row_index)
    stored_loss = _row_array(row, "loss_mask", row_index=row_index)
    if stored_loss.size != ids.size:
        raise ArtifactError(
            f"loss_mask has {stored_loss.size} entries but input_ids {ids.size}",
            row=row_index, field="loss_mask",
        )
    if row.get("seq_boundaries") is not None:
        field = "seq_boundaries"
        bounds = _row_array(row, field, row_index=row_index)
        if bounds.size < 2 or bounds[-1] != ids.size:
            raise ArtifactError(
                f"seq_boundaries must end at the row length {ids.size}: {bounds.tolist()[:8]}",
                row=row_index, field=field,
            )
    else:
        field = "seq_start_id"
        bounds = np.append(_row_array(row, field, row_index=row_index), ids.size)
    if bounds.size < 2 or bounds[0] != 0:
        raise ArtifactError(f"{field} must start with 0", row=row_index, field=field)
    seg_lens = np.diff(bounds)
    if np.any(seg_lens < 2):
        bad = int(np.flatnonzero(seg_lens < 2)[0])
        raise ArtifactError(
            f"segment {bad} has {int(seg_lens[bad])} stored tokens; every segment needs at least 2 "
            "(one input/label pair), and starts must increase and stay below the row length",
            row=row_index, field=field,
        )
    main = reader_version(bridge_version) == BRIDGE_MAIN
    segments = []
    for start, end in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        tokens = ids[start : end - 1]
        stored = stored_loss[start : end - 1]
        not_eos = tokens != eos_id
        if not answer_only_loss:
            loss = not_eos.astype(np.int64)
        elif main:  # PR #5213: the stored mask as is
            loss = stored
        else:  # 0.6.2: no loss where the input is EOS
            loss = stored * not_eos
        segment: dict[str, Any] = {
            "tokens": tokens, "labels": ids[start + 1 : end], "loss_mask": loss
        }
        if pad_seq_to_mult > 1:
            segment["valid_length"] = _logical_length(tokens, stored, eos_id, main=main)
        segments.append(segment)
    return segments


def _logical_length(tokens: np.ndarray, stored: np.ndarray, eos_id: int, *, main: bool) -> int:
    """Real tokens of a stored segment: 0.6.2 stops at the last input that is not EOS; main (PR #5610)
    drops trailing EOS inputs only while their stored mask is 0."""
    if main:
        n = tokens.size
        while n > 0 and tokens[n - 1] == eos_id and not stored[n - 1]:
            n -= 1
        return int(n)
    real = np.flatnonzero(tokens != eos_id)
    return int(real[-1]) + 1 if real.size else 0


def _aligned_sum(segments: Sequence[Mapping[str, Any]], m: int) -> int:
    return int(sum(-(-len(s["tokens"]) // m) * m for s in segments))


def _stored_width(
    content: Sequence[int], *, pack_size: int, pad_to_max_length: bool, pad_seq_length_to_mult: int,
    ceil_to_power_2: bool = False,
) -> int:
    """Bridge's collate width: ``pack_size`` when fixed; else the longest row rounded up to
    ``pad_seq_length_to_mult`` (or to the next power of two with ``ceil_to_power_2``), capped at
    ``pack_size``."""
    if pad_to_max_length:
        return pack_size
    longest = max(content)
    if ceil_to_power_2:
        return min(pack_size, 1 << max(0, (longest - 1).bit_length()))
    return min(pack_size, -(-longest // pad_seq_length_to_mult) * pad_seq_length_to_mult)


def causal_attention_masks(batch_size: int, width: int) -> torch.Tensor:
    """Bridge's ``return_cu_seqlen=False`` mask: bool ``[B, 1, L, L]``, True above the diagonal (masked).

    One causal mask over the whole row: packed sequences can attend to the ones before them.
    """
    upper = torch.ones(width, width, dtype=torch.bool).triu(1)
    return upper.expand(batch_size, 1, width, width).clone()


def _check_stored_args(
    pack_size: Any, pad_seq_to_mult: Any, eos_id: Any, pad_seq_length_to_mult: Any,
    pad_to_max_length: bool, pad_cu_seqlens: bool, pack_metadata: Any,
) -> None:
    positive_int("pack_size", pack_size)
    if pad_seq_to_mult is None:
        raise UsageError(
            "pad_seq_to_mult=None is not a multiple", field="pad_seq_to_mult",
            fix="pass 1 for no alignment (Bridge's collate fails on None too)",
        )
    positive_int("pad_seq_to_mult", pad_seq_to_mult)
    non_negative_int("eos_id", eos_id)
    positive_int("pad_seq_length_to_mult", pad_seq_length_to_mult)
    if pad_cu_seqlens and not pad_to_max_length:
        raise UsageError(
            "pad_cu_seqlens=True requires pad_to_max_length=True", field="pad_cu_seqlens"
        )
    if pad_cu_seqlens and pack_metadata is None:
        raise UsageError(
            "pad_cu_seqlens=True needs the pack metadata", field="pack_metadata",
            fix="pass the metadata JSON array written next to the packed data",
        )


def _build_stored(
    segments: list[dict[str, Any]], *, row_index: int, width: int, m: int, eos_id: int,
    static: tuple[int, int] | None,
) -> dict[str, Any]:
    try:
        return build_thd_batch(
            segments,
            pad_seq_to_mult=m,
            max_length=width,
            pad_to_max_length=True,
            slack="pad_sequence",
            pad_token_id=eos_id,
            label_pad_id=eos_id,
            static_num_seqs=None if static is None else static[0],
            static_max_seqlen=None if static is None else static[1],
        )
    except SeqpackError as err:
        where = f"stored row {row_index}"
        if err.row is not None:
            where += f", segment {err.row}"
        raise type(err)(
            f"{where}: {err.message}", row=row_index, field=err.field, fix=err.fix
        ) from err


def collate_stored_rows(
    rows: Sequence[Mapping[str, Any]],
    *,
    pack_size: int,
    pad_seq_to_mult: int,
    eos_id: int,
    pad_to_max_length: bool,
    pad_cu_seqlens: bool = False,
    pack_metadata: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
    answer_only_loss: bool = True,
    pad_seq_length_to_mult: int = 16,
    ceil_to_power_2: bool = False,
    return_cu_seqlen: bool = True,
    emit_padding_mask: bool | None = None,
    bridge_version: str | None = None,
) -> dict[str, Any]:
    """Collate stored packed rows into Bridge's offline batch form (``[B, L]``).

    Mirrors Bridge's packed collate: every stored row is split into segments
    (:func:`stored_row_segments`), the common width is ``L = pack_size`` with
    ``pad_to_max_length``, else the longest row rounded up to ``pad_seq_length_to_mult`` and capped
    at ``pack_size``; each row goes through ``build_thd_batch`` (``slack="pad_sequence"``,
    pad token and pad label ``eos_id`` as in Bridge's offline collate, where the in-batch path
    pads labels with -100, quirk Q6), and :func:`to_bridge_offline_batch` stacks the rows
    (padded keys iff ``pad_seq_to_mult > 1``). With ``pad_cu_seqlens`` the boundary arrays get the
    static size and ``max_seqlen`` the static value of :func:`static_shape_from_metadata`.

    Bridge's two collate options: ``ceil_to_power_2`` rounds a free width up to the next power of
    two instead of ``pad_seq_length_to_mult`` (still capped at ``pack_size``); with
    ``return_cu_seqlen=False`` the batch carries no ``cu_seqlens_*`` / ``max_seqlen_*`` keys and
    ``attention_mask`` is :func:`causal_attention_masks` (one causal mask over the whole row, so
    packed sequences attend to earlier ones, exactly as in Bridge).

    ``bridge_version`` (default megatron-bridge 0.6.2) picks the collate: the loss and logical-length
    rules of :func:`stored_row_segments`, and with ``main`` the keys Bridge main adds: ``padding_mask``
    (bool ``[B, L]``, PR #5470; ``emit_padding_mask`` turns it on or off for either version) and
    ``pad_between_seqs`` (a Python bool: True iff ``pad_seq_to_mult > 1`` and some row's logical
    boundaries differ from its physical ones, PR #5610).

    Differs from Bridge (all on inputs Bridge mishandles): a stored segment whose runtime length
    is not a multiple of ``pad_seq_to_mult`` is aligned by the builder (Bridge leaves it unaligned,
    which Transformer Engine rejects under context parallelism); ``L`` not a multiple of
    ``pad_seq_to_mult`` raises AlignmentError; a row with more segments than the metadata's
    ``max_samples_per_bin`` raises instead of being left longer (quirk Q14); a stored segment with
    fewer than two tokens raises ArtifactError.
    """
    _check_stored_args(pack_size, pad_seq_to_mult, eos_id, pad_seq_length_to_mult,
                       pad_to_max_length, pad_cu_seqlens, pack_metadata)
    if isinstance(rows, Mapping) or len(rows) == 0:
        raise UsageError("rows must be a non-empty sequence of stored rows", field="rows")
    m = int(pad_seq_to_mult)
    main = reader_version(bridge_version) == BRIDGE_MAIN
    if emit_padding_mask is None:
        emit_padding_mask = main
    split = [
        stored_row_segments(row, eos_id=eos_id, pad_seq_to_mult=m,
                            answer_only_loss=answer_only_loss, row_index=r, bridge_version=bridge_version)
        for r, row in enumerate(rows)
    ]
    content = [_aligned_sum(segments, m) for segments in split]
    width = _stored_width(content, pack_size=pack_size, pad_to_max_length=pad_to_max_length,
                          pad_seq_length_to_mult=pad_seq_length_to_mult, ceil_to_power_2=ceil_to_power_2)
    static = static_shape_from_metadata(pack_metadata, width) if pad_cu_seqlens else None
    batches = [
        _build_stored(segments, row_index=r, width=width, m=m, eos_id=eos_id, static=static)
        for r, segments in enumerate(split)
    ]
    out = to_bridge_offline_batch(
        batches, emit_padded_keys=m > 1, pad_cu_seqlens=pad_cu_seqlens, token_counts=content,
        emit_padding_mask=emit_padding_mask,
    )
    if main:
        out["pad_between_seqs"] = m > 1 and any(
            not torch.equal(b["cu_seqlens_q"], b.get("cu_seqlens_q_padded", b["cu_seqlens_q"])) for b in batches)
    if not return_cu_seqlen:
        for key in [k for k in out if k.startswith(("cu_seqlens", "max_seqlen"))]:
            del out[key]
        out["attention_mask"] = causal_attention_masks(len(rows), width)
    return out


def collate_stored_row_canonical(
    row: Mapping[str, Any],
    *,
    pack_size: int,
    pad_seq_to_mult: int,
    eos_id: int,
    pad_to_max_length: bool,
    pad_cu_seqlens: bool = False,
    pack_metadata: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
    answer_only_loss: bool = True,
    pad_seq_length_to_mult: int = 16,
    row_index: int = 0,
    ceil_to_power_2: bool = False,
    bridge_version: str | None = None,
) -> dict[str, Any]:
    """One stored packed row -> one canonical THD micro-batch (micro-batch size 1).

    Same rules as :func:`collate_stored_rows` for a single row (pad token and pad label
    ``eos_id``; trailing width padding is a logical-length-0 sequence whose position ids are 0), the
    loss and logical lengths of ``bridge_version``'s reader.

    Differs from Bridge: Bridge computes the width over every row handed to one collate (the whole
    per-rank global batch under its "batch" sampler, quirk Q7), so its micro-batches share one
    width; here, unless ``pad_to_max_length``, the width follows this row alone. With
    ``pad_seq_to_mult == 1`` Bridge reports the width padding as a real sequence in
    ``cu_seqlens_q``; here it has logical length 0 and appears only in the padded boundaries.
    """
    _check_stored_args(pack_size, pad_seq_to_mult, eos_id, pad_seq_length_to_mult,
                       pad_to_max_length, pad_cu_seqlens, pack_metadata)
    m = int(pad_seq_to_mult)
    segments = stored_row_segments(row, eos_id=eos_id, pad_seq_to_mult=m, answer_only_loss=answer_only_loss,
                                   row_index=row_index, bridge_version=bridge_version)
    width = _stored_width([_aligned_sum(segments, m)], pack_size=pack_size,
                          pad_to_max_length=pad_to_max_length,
                          pad_seq_length_to_mult=pad_seq_length_to_mult, ceil_to_power_2=ceil_to_power_2)
    static = static_shape_from_metadata(pack_metadata, width) if pad_cu_seqlens else None
    return _build_stored(
        segments, row_index=row_index, width=width, m=m, eos_id=eos_id, static=static
    )


# ------------------------------------------------------------------------------------------------
# right-padded [B, S] batch -> one THD row (in-batch collators)


def right_padded_to_thd(
    batch: Mapping[str, Any],
    *,
    token_key: str | None = None,
    pad_token_id: int = 0,
    label_pad_id: int = -100,
    pad_seq_to_mult: int = 1,
    max_row_length: int | None = None,
    max_length: int | None = None,
    pad_to_max_length: bool = False,
    slack: str = "last_segment",
    extra_pad_values: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Pack a right-padded ``[B, S]`` batch into one canonical THD row.

    The token key is ``token_key``, else ``tokens`` when it is a tensor, else ``input_ids``. A row's
    real length is the length of its ``attention_mask`` prefix when the batch has one, else of the
    prefix of tokens different from ``pad_token_id``; a mask that is not "ones then zeros" or an
    empty row is an error. ``labels`` and ``loss_mask`` (``[B, S]``, already shifted) are
    required; ``position_ids`` (``[B, S]``) is optional; keys named in ``extra_pad_values`` are
    sliced and padded too. The rows then go through ``build_thd_batch`` unchanged.

    Returns a new canonical dict; the input is not modified, and its other keys (``metadata``,
    a stale ``padding_mask`` ...) are not copied.

    Differs from Bridge (megatron-bridge 0.6.2's ``pack_right_padded_sequence_batch_to_mcore_thd``,
    compared in the upstream lane): Bridge mutates the batch in place, returns ``total_tokens`` and
    0-d tensor ``max_seqlen_*``, needs ``position_ids``, writes the padded boundary pair whenever
    ``pad_seq_to_mult > 1`` (here only when it differs), and tolerates ``labels=None`` /
    ``loss_mask=None``; the canonical batch always has labels and a loss mask, so here they are
    required.
    """
    if token_key is None:
        if isinstance(batch.get("tokens"), torch.Tensor):
            token_key = "tokens"
        elif "input_ids" in batch:
            token_key = "input_ids"
        else:
            raise UsageError("batch has neither a 'tokens' tensor nor 'input_ids'", field="tokens")
    tokens = batch.get(token_key)
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2:
        raise UsageError(
            f"expected a 2-D tensor, got {getattr(tokens, 'shape', type(tokens).__name__)}",
            field=token_key,
        )
    shape = tuple(tokens.shape)
    keys = ["labels", "loss_mask", "position_ids", *(extra_pad_values or {})]
    arrays: dict[str, np.ndarray] = {"tokens": tokens.detach().cpu().numpy()}
    for key in keys:
        value = batch.get(key)
        if value is None:
            if key == "position_ids":
                continue
            raise UsageError(
                f"'{key}' is required to build a canonical batch", field=key,
                fix="shift labels and loss mask inside the collator before packing",
            )
        if not isinstance(value, torch.Tensor) or tuple(value.shape) != shape:
            raise UsageError(
                f"expected a tensor of shape {shape}, "
                f"got {getattr(value, 'shape', type(value).__name__)}",
                field=key,
            )
        arrays[key] = value.detach().cpu().numpy()
    attention = batch.get("attention_mask")
    if attention is not None:
        if not isinstance(attention, torch.Tensor) or tuple(attention.shape) != shape:
            raise UsageError(f"attention_mask must have shape {shape}", field="attention_mask")
        active = attention.detach().cpu().numpy().astype(bool)
    else:
        active = arrays["tokens"] != pad_token_id
    lengths = active.sum(axis=1)
    prefix = np.arange(shape[1])[None, :] < lengths[:, None]
    not_prefix = np.flatnonzero(np.any(prefix != active, axis=1))
    if not_prefix.size:
        raise PackingError(
            "Direct sequence packing requires right-padded input rows "
            f"(real tokens first, then padding); row {int(not_prefix[0])} is not",
            row=int(not_prefix[0]), field="attention_mask" if attention is not None else token_key,
        )
    empty = np.flatnonzero(lengths == 0)
    if empty.size:
        raise PackingError(
            f"Cannot pack a batch containing an empty sequence row (row {int(empty[0])})",
            row=int(empty[0]), field=token_key,
        )
    rows = [
        {key: arr[i, : int(n)] for key, arr in arrays.items()}
        for i, n in enumerate(lengths.tolist())
    ]
    return build_thd_batch(
        rows,
        pad_seq_to_mult=pad_seq_to_mult,
        max_length=max_length,
        max_row_length=max_row_length,
        pad_to_max_length=pad_to_max_length,
        slack=slack,
        pad_token_id=pad_token_id,
        label_pad_id=label_pad_id,
        extra_pad_values=extra_pad_values,
        device=tokens.device,
    )
