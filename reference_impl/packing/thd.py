"""The one builder of canonical THD micro-batches, and a checker for them.

Every packing path (offline packs, in-batch collators, Energon groups, the global-batch path) hands
a list of per-sequence rows to :func:`build_thd_batch` and gets back the canonical micro-batch of
DESIGN.md section 3: one physical row holding all sequences back to back, plus the boundary
arrays attention kernels need. No other module computes ``cu_seqlens``.

Vocabulary used below:

* *row*: one input sequence (already shifted: ``labels[i]`` is the target of ``tokens[i]``);
* *logical length* ``v_i``: the number of real tokens of row ``i`` (``valid_length``, default the
  row length);
* *physical length* ``p_i``: the room row ``i`` occupies, its length rounded up to the alignment
  multiple ``m`` (``pad_seq_to_mult``);
* ``cu_seqlens_q`` / ``cu_seqlens_kv`` hold cumulative logical lengths, ``*_padded`` cumulative
  physical lengths (the Transformer Engine convention); the padded pair is present only when the
  two differ.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from reference_impl.errors import AlignmentError, PackingError, UsageError

__all__ = [
    "CORE_ROW_KEYS",
    "RESERVED_KEYS",
    "SLACK_MODES",
    "build_thd_batch",
    "padding_mask_from_lengths",
    "segment_lengths",
    "validate_thd_batch",
]

#: Keys every input row must carry.
CORE_ROW_KEYS: tuple[str, ...] = ("tokens", "labels", "loss_mask")

#: Ways to fill a fixed width larger than the packed content (see :func:`build_thd_batch`).
SLACK_MODES: tuple[str, ...] = ("last_segment", "pad_sequence")

#: Names the builder writes itself; rows may not use them as extra keys.
RESERVED_KEYS: frozenset[str] = frozenset(
    {
        "tokens",
        "labels",
        "loss_mask",
        "position_ids",
        "valid_length",
        "padding_mask",
        "attention_mask",
        "cu_seqlens_q",
        "cu_seqlens_kv",
        "cu_seqlens_q_padded",
        "cu_seqlens_kv_padded",
        "max_seqlen_q",
        "max_seqlen_kv",
    }
)

_INT32_MAX = int(np.iinfo(np.int32).max)
_MAX_LISTED = 16  # lengths quoted in an error message before eliding


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _check_positive_int(name: str, value: Any, *, allow_none: bool = True) -> None:
    if value is None and allow_none:
        return
    if not _is_int(value) or int(value) < 1:
        raise UsageError(f"{name} must be a positive integer, got {value!r}", field=name)


def _quote_lengths(lengths: Sequence[int]) -> str:
    shown = [int(x) for x in lengths[:_MAX_LISTED]]
    text = ", ".join(str(x) for x in shown)
    if len(lengths) > _MAX_LISTED:
        text += f", ... ({len(lengths)} in all)"
    return f"[{text}]"


def _to_numpy_1d(value: Any, *, row: int, key: str) -> np.ndarray:
    """One row field as a 1-D numpy array (torch tensors are copied to host memory)."""
    if isinstance(value, torch.Tensor):
        arr = value.detach().cpu().numpy()
    elif isinstance(value, np.ndarray):
        arr = value
    elif isinstance(value, (list, tuple)):
        arr = np.asarray(value)
    else:
        raise PackingError(
            f"expected a 1-D tensor, array or list, got {type(value).__name__}", row=row, field=key
        )
    if arr.ndim != 1:
        raise PackingError(
            f"expected a 1-D sequence, got shape {tuple(arr.shape)}", row=row, field=key
        )
    return arr


def _as_integer(arr: np.ndarray, *, row: int, key: str) -> np.ndarray:
    if arr.dtype.kind in "iub" or arr.size == 0:
        return arr.astype(np.int64, copy=False)
    raise PackingError(f"expected integer values, got dtype {arr.dtype}", row=row, field=key)


def build_thd_batch(
    rows: Sequence[Mapping[str, Any]],
    *,
    pad_seq_to_mult: int = 1,
    max_length: int | None = None,
    max_row_length: int | None = None,
    pad_to_max_length: bool = False,
    slack: str = "last_segment",
    pad_token_id: int = 0,
    label_pad_id: int = -100,
    static_num_seqs: int | None = None,
    static_max_seqlen: int | None = None,
    extra_pad_values: Mapping[str, Any] | None = None,
    device: torch.device | str | None = None,
) -> dict[str, Any]:
    """Pack ``rows`` into one canonical THD micro-batch (DESIGN.md section 3).

    Each row is a mapping with 1-D ``tokens``, ``labels`` and ``loss_mask`` (torch tensors, numpy
    arrays or lists, already shifted so that ``labels[i]`` is the target of ``tokens[i]``), an
    optional 1-D ``position_ids`` (default ``0..len-1``), optional extra 1-D keys (each padded
    with ``extra_pad_values[key]``), and an optional int ``valid_length``: the number of real
    tokens at the start of the row. Positions from ``valid_length`` on are kept exactly as given
    (tokens, labels, loss mask, positions) but count as padding; this is how a caller passes a
    segment whose alignment padding is already materialised, as stored offline packs do.

    Layout: row ``i`` of length ``u_i`` occupies ``p_i = ceil(u_i / m) * m`` positions
    (``m = pad_seq_to_mult``). Gap positions get ``pad_token_id``, ``label_pad_id``, loss 0 and
    position ids that keep counting from the row's last position. The width is
    ``T = sum(p_i)``, or ``max_length`` when ``pad_to_max_length``; the slack
    ``max_length - sum(p_i)`` then goes

    * ``slack="last_segment"`` (in-batch packing's behaviour): into the last row's physical
      segment, whose position ids keep counting; ``max_seqlen`` may grow to that enlarged segment;
    * ``slack="pad_sequence"`` (offline packing's behaviour): into one trailing padding sequence
      of logical length 0 (its logical boundary repeats, its physical boundary is ``T``); its
      position ids are all 0, it counts toward ``max_seqlen`` and toward ``static_num_seqs``.

    ``max_length`` also bounds ``sum(p_i)`` when ``pad_to_max_length`` is False;
    ``max_row_length`` bounds every single row's length (in-batch packing's check, where the packed
    width itself may exceed the per-sample sequence length).

    Static shapes (CUDA graphs, Bridge's ``pad_cu_seqlens``): ``static_num_seqs`` extends every
    boundary array to ``static_num_seqs + 1`` entries by repeating its last value (zero-length
    trailing sequences); ``static_max_seqlen`` is reported as ``max_seqlen_*`` and must be at
    least the longest physical sequence.

    Returns a dict with ``tokens``, ``labels`` (int64 ``[1, T]``), ``loss_mask`` (float32),
    ``position_ids`` (int64), ``padding_mask`` (bool, True where a position is not a real token),
    ``cu_seqlens_q`` / ``cu_seqlens_kv`` (int32 ``[n+1]``, logical), ``cu_seqlens_q_padded`` /
    ``cu_seqlens_kv_padded`` (int32, physical; only when they differ from the logical arrays),
    ``max_seqlen_q`` / ``max_seqlen_kv`` (Python ints, longest physical sequence) and any extra
    keys (``[1, T]``). Tensors live on ``device``, default the device of the first row's
    ``tokens`` when that is a torch tensor, else the CPU.

    Raises UsageError for bad arguments, PackingError for bad rows or content that does not fit,
    AlignmentError when a fixed width is not a multiple of ``pad_seq_to_mult``.
    """
    m = pad_seq_to_mult
    _check_positive_int("pad_seq_to_mult", m, allow_none=False)
    m = int(m)
    _check_positive_int("max_length", max_length)
    _check_positive_int("max_row_length", max_row_length)
    _check_positive_int("static_num_seqs", static_num_seqs)
    _check_positive_int("static_max_seqlen", static_max_seqlen)
    if slack not in SLACK_MODES:
        raise UsageError(
            f"unknown slack mode {slack!r}; choose one of {', '.join(SLACK_MODES)}", field="slack"
        )
    if pad_to_max_length and max_length is None:
        raise UsageError(
            "pad_to_max_length=True needs max_length", field="max_length",
            fix="pass max_length (the fixed packed width) or set pad_to_max_length=False",
        )
    if pad_to_max_length and max_length % m != 0:
        raise AlignmentError(
            f"fixed width max_length={max_length} is not a multiple of pad_seq_to_mult={m}, so the "
            "padding at the end of the row would break per-sequence alignment",
            field="max_length", fix=f"use a max_length divisible by {m}",
        )
    pad_values = dict(extra_pad_values or {})
    clashes = sorted(set(pad_values) & RESERVED_KEYS)
    if clashes:
        raise UsageError(
            f"extra_pad_values may not name reserved keys {clashes}", field="extra_pad_values"
        )
    if isinstance(rows, Mapping) or not isinstance(rows, Sequence):
        raise UsageError(f"rows must be a sequence of mappings, got {type(rows).__name__}")
    if len(rows) == 0:
        raise UsageError("rows is empty: a THD batch needs at least one sequence", field="rows")

    # ---- validate rows and turn every field into a 1-D numpy array ---------------------------
    first = rows[0]
    if not isinstance(first, Mapping):
        raise UsageError(f"each row must be a mapping, got {type(first).__name__}", row=0)
    array_keys = [k for k in first if k not in ("valid_length", "attention_mask")]
    for key in CORE_ROW_KEYS:
        if key not in first:
            hint = ""
            if key == "tokens" and "input_ids" in first:
                hint = " (rename input_ids to tokens)"
            raise PackingError(f"row is missing required key '{key}'{hint}", row=0, field=key)
    for key in array_keys:
        if key in RESERVED_KEYS and key not in ("position_ids", *CORE_ROW_KEYS):
            raise UsageError(
                f"rows may not carry '{key}': the builder computes it", row=0, field=key,
                fix="drop the key; use valid_length to mark materialised padding",
            )
    extra_keys = [k for k in array_keys if k not in RESERVED_KEYS]
    missing_pads = [k for k in extra_keys if k not in pad_values]
    if missing_pads:
        raise UsageError(
            f"extra row keys {missing_pads} have no pad value", field=missing_pads[0],
            fix="pass extra_pad_values={key: value} for every extra per-token key",
        )
    key_set = set(array_keys)

    columns: dict[str, list[np.ndarray]] = {k: [] for k in array_keys}
    lengths = np.empty(len(rows), dtype=np.int64)
    valid = np.empty(len(rows), dtype=np.int64)
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise UsageError(f"each row must be a mapping, got {type(row).__name__}", row=i)
        row_keys = {k for k in row if k not in ("valid_length", "attention_mask")}
        if row_keys != key_set:
            extra = sorted(row_keys - key_set)
            lacking = sorted(key_set - row_keys)
            raise PackingError(
                "rows must all carry the same keys; this row "
                + (f"has {extra} that row 0 lacks" if extra else "")
                + (" and " if extra and lacking else "")
                + (f"lacks {lacking} that row 0 has" if lacking else ""),
                row=i, field=(extra or lacking)[0],
            )
        u = -1
        for key in array_keys:
            arr = _to_numpy_1d(row[key], row=i, key=key)
            if key == "tokens":
                u = arr.shape[0]
                if u == 0:
                    raise PackingError("row is empty (0 tokens)", row=i, field="tokens")
                if max_row_length is not None and u > max_row_length:
                    raise PackingError(
                        f"row length {u} exceeds max_row_length {max_row_length}",
                        row=i, field="tokens",
                    )
            elif arr.shape[0] != u:
                raise PackingError(
                    f"length {arr.shape[0]} differs from the row's {u} tokens", row=i, field=key
                )
            columns[key].append(arr)
        attn = row.get("attention_mask")
        if attn is not None:
            attn_arr = _to_numpy_1d(attn, row=i, key="attention_mask")
            if attn_arr.shape[0] != u or not bool(np.all(attn_arr)):
                raise PackingError(
                    "a row attention_mask must be all true over the row; pass real tokens only "
                    "and mark materialised padding with valid_length",
                    row=i, field="attention_mask",
                )
        v = row.get("valid_length", u)
        if isinstance(v, (torch.Tensor, np.ndarray)) and v.ndim == 0 and v.dtype not in (
            torch.bool, np.bool_
        ):
            v = v.item()
        if not _is_int(v) or not 0 <= int(v) <= u:
            raise PackingError(
                f"valid_length must be an integer in [0, {u}], got {v!r}", row=i,
                field="valid_length",
            )
        lengths[i] = u
        valid[i] = int(v)

    # ---- layout ------------------------------------------------------------------------------
    physical = -(-lengths // m) * m
    content = int(physical.sum())
    if max_length is not None and content > max_length:
        raise PackingError(
            f"packed length {content} exceeds max_length {max_length} "
            f"(aligned row lengths {_quote_lengths(physical.tolist())}, pad_seq_to_mult={m})",
            field="max_length",
        )
    logical = valid.copy()
    trailing_pad = 0
    if pad_to_max_length and content < max_length:
        slack_len = max_length - content
        if slack == "last_segment":
            physical[-1] += slack_len
        else:
            trailing_pad = slack_len
    width = int(physical.sum()) + trailing_pad
    if width > _INT32_MAX:
        raise PackingError(f"packed width {width} does not fit int32 boundaries", field="tokens")

    starts = np.zeros(len(rows), dtype=np.int64)
    np.cumsum(physical[:-1], out=starts[1:])
    cu_padded = np.concatenate(([0], np.cumsum(physical)))
    cu_logical = np.concatenate(([0], np.cumsum(logical)))
    if trailing_pad:
        cu_padded = np.append(cu_padded, width)
        cu_logical = np.append(cu_logical, cu_logical[-1])
    num_seqs = len(cu_padded) - 1
    if static_num_seqs is not None:
        if num_seqs > static_num_seqs:
            raise PackingError(
                f"batch has {num_seqs} sequences "
                f"({'including the trailing padding sequence' if trailing_pad else 'rows'}) but "
                f"static_num_seqs is {static_num_seqs}",
                field="static_num_seqs",
                fix="raise static_num_seqs (e.g. max samples per pack + 1) or pack fewer rows",
            )
        extra_entries = static_num_seqs - num_seqs
        cu_padded = np.concatenate((cu_padded, np.full(extra_entries, cu_padded[-1])))
        cu_logical = np.concatenate((cu_logical, np.full(extra_entries, cu_logical[-1])))
    longest = int(np.diff(cu_padded).max())
    max_seqlen = longest
    if static_max_seqlen is not None:
        if longest > static_max_seqlen:
            raise PackingError(
                f"longest physical sequence is {longest} but static_max_seqlen is "
                f"{static_max_seqlen}",
                field="static_max_seqlen",
            )
        max_seqlen = int(static_max_seqlen)

    # Destination of every input position: row i's j-th element goes to starts[i] + j.
    total_in = int(lengths.sum())
    row_offsets = np.zeros(len(rows), dtype=np.int64)
    np.cumsum(lengths[:-1], out=row_offsets[1:])
    dense = total_in == width  # no gaps, no slack: concatenation is already the layout
    dest = None if dense else np.arange(total_in) + np.repeat(starts - row_offsets, lengths)

    def place(parts: list[np.ndarray], pad: Any, dtype: Any) -> np.ndarray:
        flat = np.concatenate(parts).astype(dtype, copy=False)
        if dense:
            return flat
        out = np.full(width, pad, dtype=dtype)
        out[dest] = flat
        return out

    tokens = place(
        [_as_integer(a, row=i, key="tokens") for i, a in enumerate(columns["tokens"])],
        pad_token_id, np.int64,
    )
    labels = place(
        [_as_integer(a, row=i, key="labels") for i, a in enumerate(columns["labels"])],
        label_pad_id, np.int64,
    )
    for i, a in enumerate(columns["loss_mask"]):
        if a.dtype.kind not in "biuf":
            raise PackingError(
                f"expected numeric values, got dtype {a.dtype}", row=i, field="loss_mask"
            )
    loss_mask = place(columns["loss_mask"], 0, np.float32)

    # Position ids: restart at 0 for every physical segment and keep counting through gaps.
    seg_index = np.repeat(np.arange(len(rows)), physical)
    within = np.arange(int(physical.sum())) - np.repeat(starts, physical)
    if "position_ids" in columns:
        given = [
            _as_integer(a, row=i, key="position_ids")
            for i, a in enumerate(columns["position_ids"])
        ]
        last = np.array([int(a[-1]) for a in given], dtype=np.int64)
        # gap position j (>= u_i) continues as last_i + 1 + (j - u_i)
        counting = within + (last + 1 - lengths)[seg_index]
        positions = np.zeros(width, dtype=np.int64)
        positions[: counting.shape[0]] = counting
        flat = np.concatenate(given)
        if dense:
            positions = flat
        else:
            positions[dest] = flat
    else:
        positions = np.zeros(width, dtype=np.int64)
        positions[: within.shape[0]] = within

    padding = padding_mask_from_lengths(starts, logical, width)

    extras: dict[str, np.ndarray] = {}
    for key in extra_keys:
        dtype = np.result_type(*columns[key])
        extras[key] = place(columns[key], pad_values[key], dtype)

    # ---- tensors -----------------------------------------------------------------------------
    if device is None:
        tok0 = first["tokens"]
        device = tok0.device if isinstance(tok0, torch.Tensor) else torch.device("cpu")
    device = torch.device(device)

    def tensor(arr: np.ndarray, *, row: bool = True) -> torch.Tensor:
        t = torch.from_numpy(np.ascontiguousarray(arr))
        if row:
            t = t.unsqueeze(0)
        return t if device.type == "cpu" else t.to(device)

    cu_q = tensor(cu_logical.astype(np.int32), row=False)
    batch: dict[str, Any] = {
        "tokens": tensor(tokens),
        "labels": tensor(labels),
        "loss_mask": tensor(loss_mask),
        "position_ids": tensor(positions),
        "padding_mask": tensor(padding),
        "cu_seqlens_q": cu_q,
        "cu_seqlens_kv": cu_q.clone(),
    }
    if not np.array_equal(cu_padded, cu_logical):
        cu_p = tensor(cu_padded.astype(np.int32), row=False)
        batch["cu_seqlens_q_padded"] = cu_p
        batch["cu_seqlens_kv_padded"] = cu_p.clone()
    batch["max_seqlen_q"] = max_seqlen
    batch["max_seqlen_kv"] = max_seqlen
    for key, arr in extras.items():
        batch[key] = tensor(arr)
    return batch


def padding_mask_from_lengths(starts: np.ndarray, logical: np.ndarray, width: int) -> np.ndarray:
    """Bool ``[width]`` mask: False on ``[starts[i], starts[i] + logical[i])``, True elsewhere."""
    starts = np.asarray(starts, dtype=np.int64)
    logical = np.asarray(logical, dtype=np.int64)
    mask = np.ones(width, dtype=bool)
    total_valid = int(logical.sum())
    if total_valid:
        offsets = np.zeros(logical.size, dtype=np.int64)
        np.cumsum(logical[:-1], out=offsets[1:])
        mask[np.arange(total_valid) + np.repeat(starts - offsets, logical)] = False
    return mask


def segment_lengths(batch: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(logical, physical) per-sequence lengths of a canonical batch, as int64 numpy arrays."""
    cu_q = _boundary_array(batch, "cu_seqlens_q")
    padded = batch.get("cu_seqlens_q_padded")
    cu_p = cu_q if padded is None else _boundary_array(batch, "cu_seqlens_q_padded")
    return np.diff(cu_q), np.diff(cu_p)


def _boundary_array(batch: Mapping[str, Any], key: str) -> np.ndarray:
    value = batch.get(key)
    if not isinstance(value, torch.Tensor):
        raise PackingError(f"expected an int32 tensor, got {type(value).__name__}", field=key)
    if value.dtype != torch.int32 or value.dim() != 1 or value.numel() < 2:
        raise PackingError(
            f"expected int32 [n+1] with n >= 1, got {value.dtype} {tuple(value.shape)}", field=key
        )
    return value.detach().cpu().numpy().astype(np.int64)


_ROW_KEYS_DTYPES: tuple[tuple[str, torch.dtype], ...] = (
    ("tokens", torch.int64),
    ("labels", torch.int64),
    ("loss_mask", torch.float32),
    ("position_ids", torch.int64),
    ("padding_mask", torch.bool),
)


def validate_thd_batch(batch: Mapping[str, Any], *, pad_seq_to_mult: int = 1) -> None:
    """Check that ``batch`` honours the canonical THD contract; raise PackingError if not.

    Checks dtypes and shapes, monotone boundary arrays of equal length that start at 0 and end at
    ``T``, logical lengths not above physical ones, a padded pair present only when it differs,
    ``max_seqlen_*`` at least the longest physical sequence, and ``padding_mask`` equal to "outside
    ``[start_i, start_i + logical_i)``". With ``pad_seq_to_mult`` > 1 every physical length must be
    a multiple of it (AlignmentError otherwise).
    """
    _check_positive_int("pad_seq_to_mult", pad_seq_to_mult, allow_none=False)
    width = None
    for key, dtype in _ROW_KEYS_DTYPES:
        value = batch.get(key)
        if not isinstance(value, torch.Tensor):
            raise PackingError(f"missing or not a tensor ({type(value).__name__})", field=key)
        if value.dtype != dtype or value.dim() != 2 or value.shape[0] != 1:
            raise PackingError(
                f"expected {dtype} [1, T], got {value.dtype} {tuple(value.shape)}", field=key
            )
        if width is None:
            width = int(value.shape[1])
        elif int(value.shape[1]) != width:
            raise PackingError(f"width {value.shape[1]} differs from tokens' {width}", field=key)
    cu_q = _boundary_array(batch, "cu_seqlens_q")
    if not np.array_equal(_boundary_array(batch, "cu_seqlens_kv"), cu_q):
        raise PackingError("cu_seqlens_kv differs from cu_seqlens_q", field="cu_seqlens_kv")
    has_padded = "cu_seqlens_q_padded" in batch
    if has_padded != ("cu_seqlens_kv_padded" in batch):
        raise PackingError("cu_seqlens_q_padded and cu_seqlens_kv_padded must come together",
                           field="cu_seqlens_q_padded")
    if has_padded:
        cu_p = _boundary_array(batch, "cu_seqlens_q_padded")
        if not np.array_equal(_boundary_array(batch, "cu_seqlens_kv_padded"), cu_p):
            raise PackingError("cu_seqlens_kv_padded differs from cu_seqlens_q_padded",
                               field="cu_seqlens_kv_padded")
        if np.array_equal(cu_p, cu_q):
            raise PackingError("padded boundaries equal the logical ones; omit the padded keys",
                               field="cu_seqlens_q_padded")
        if cu_p.shape != cu_q.shape:
            raise PackingError(
                f"cu_seqlens_q has {cu_q.size} entries but cu_seqlens_q_padded {cu_p.size}",
                field="cu_seqlens_q_padded",
            )
    else:
        cu_p = cu_q
    for key, arr in (("cu_seqlens_q", cu_q), ("cu_seqlens_q_padded", cu_p)):
        if arr[0] != 0 or np.any(np.diff(arr) < 0):
            raise PackingError(f"boundaries must start at 0 and never decrease: {arr.tolist()}",
                               field=key)
    if cu_p[-1] != width:
        raise PackingError(f"last physical boundary {cu_p[-1]} is not the width {width}",
                           field="cu_seqlens_q_padded" if has_padded else "cu_seqlens_q")
    logical, physical = np.diff(cu_q), np.diff(cu_p)
    if np.any(logical > physical):
        raise PackingError("a logical length exceeds its physical length", field="cu_seqlens_q")
    if pad_seq_to_mult > 1 and np.any(physical % pad_seq_to_mult):
        bad = physical[physical % pad_seq_to_mult != 0]
        raise AlignmentError(
            f"physical sequence lengths {_quote_lengths(bad.tolist())} are not multiples of "
            f"{pad_seq_to_mult}", field="cu_seqlens_q_padded",
        )
    for key in ("max_seqlen_q", "max_seqlen_kv"):
        value = batch.get(key)
        if not _is_int(value):
            raise PackingError(f"expected a Python int, got {type(value).__name__}", field=key)
        if value < int(physical.max()):
            raise PackingError(f"{value} is below the longest physical sequence {physical.max()}",
                               field=key)
    expected = padding_mask_from_lengths(cu_p[:-1], logical, width)
    got = batch["padding_mask"][0].detach().cpu().numpy()
    if not np.array_equal(got, expected):
        first_bad = int(np.flatnonzero(got != expected)[0])
        raise PackingError(
            f"padding_mask disagrees with the boundaries (first at position {first_bad})",
            field="padding_mask",
        )
