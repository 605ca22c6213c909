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

The builder is four steps, each a pure function: :func:`read_rows` (rows -> :class:`THDRows`),
:func:`plan_layout` (lengths -> :class:`THDLayout`), :func:`place_rows` (rows and layout -> flat
numpy arrays) and :func:`to_tensors` (arrays and layout -> the batch). Its settings are a
:class:`THDOptions`, passed as an object or as keywords.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import torch

from seqpack.core.arguments import is_int, positive_int
from seqpack.core.errors import AlignmentError, PackingError, UsageError

__all__ = [
    "CORE_ROW_KEYS",
    "RESERVED_KEYS",
    "SLACK_MODES",
    "THDLayout",
    "THDOptions",
    "THDRows",
    "build_thd_batch",
    "padding_mask_from_lengths",
    "place_rows",
    "plan_layout",
    "read_rows",
    "segment_lengths",
    "to_tensors",
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


def _to_numpy_1d(value: Any, *, row: int, key: str) -> np.ndarray:
    """One row field as a 1-D numpy array (torch tensors are copied to host memory)."""
    if isinstance(value, np.ndarray):
        arr = value
    elif isinstance(value, torch.Tensor):
        arr = value.numpy(force=True)  # detached, on the host
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


def _quote_lengths(lengths: Sequence[int]) -> str:
    shown = [int(x) for x in lengths[:_MAX_LISTED]]
    text = ", ".join(str(x) for x in shown)
    if len(lengths) > _MAX_LISTED:
        text += f", ... ({len(lengths)} in all)"
    return f"[{text}]"


# ------------------------------------------------------------------------------------------------
# Options
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class THDOptions:
    """How :func:`build_thd_batch` lays rows out; every field is also a keyword of that function.

    ``pad_seq_to_mult``: alignment multiple ``m`` of every physical sequence. ``max_length``: bound
    on ``sum(p_i)``, and the fixed width when ``pad_to_max_length``. ``max_row_length``: bound on
    every row's length. ``slack``: where a fixed width's slack goes (:data:`SLACK_MODES`).
    ``pad_token_id`` / ``label_pad_id``: token and label on padding. ``static_num_seqs`` /
    ``static_max_seqlen``: static shapes. ``extra_pad_values``: pad value of every extra row key.
    ``fold_alignment_padding``: report every sequence's physical length as its length (the logical
    boundaries become the physical ones, so the batch carries no padding between sequences, as
    Megatron-Bridge PR #6127's option of that name does for FlashAttention, which rejects THD bins with
    such padding); the padding stays loss-masked, keeps counting position ids and stays True in
    ``padding_mask`` (MoE router statistics still skip it). It follows each sequence's last real
    token, so causal attention computes the same outputs for every real token.
    """

    pad_seq_to_mult: int = 1
    max_length: int | None = None
    max_row_length: int | None = None
    pad_to_max_length: bool = False
    slack: str = "last_segment"
    pad_token_id: int = 0
    label_pad_id: int = -100
    static_num_seqs: int | None = None
    static_max_seqlen: int | None = None
    extra_pad_values: Mapping[str, Any] | None = None
    fold_alignment_padding: bool = False

    def check(self) -> None:
        """Raise UsageError for a bad value, AlignmentError for a misaligned fixed width."""
        positive_int("pad_seq_to_mult", self.pad_seq_to_mult)
        for name in ("max_length", "max_row_length", "static_num_seqs", "static_max_seqlen"):
            if getattr(self, name) is not None:  # optional: unset means no cap
                positive_int(name, getattr(self, name))
        if self.slack not in SLACK_MODES:
            raise UsageError(
                f"unknown slack mode {self.slack!r}; choose one of {', '.join(SLACK_MODES)}", field="slack"
            )
        if self.pad_to_max_length and self.max_length is None:
            raise UsageError(
                "pad_to_max_length=True needs max_length", field="max_length",
                fix="pass max_length (the fixed packed width) or set pad_to_max_length=False",
            )
        m = int(self.pad_seq_to_mult)
        if self.pad_to_max_length and self.max_length % m != 0:
            raise AlignmentError(
                f"fixed width max_length={self.max_length} is not a multiple of pad_seq_to_mult={m}, so "
                "the padding at the end of the row would break per-sequence alignment",
                field="max_length", fix=f"use a max_length divisible by {m}",
            )
        clashes = sorted(set(dict(self.extra_pad_values or {})) & RESERVED_KEYS)
        if clashes:
            raise UsageError(
                f"extra_pad_values may not name reserved keys {clashes}", field="extra_pad_values"
            )


_OPTION_NAMES = frozenset(f.name for f in fields(THDOptions))


# ------------------------------------------------------------------------------------------------
# The builder: rows -> layout -> placement -> tensors
# ------------------------------------------------------------------------------------------------


def build_thd_batch(
    rows: Sequence[Mapping[str, Any]],
    options: THDOptions | None = None,
    *,
    device: torch.device | str | None = None,
    **keywords: Any,
) -> dict[str, Any]:
    """Pack ``rows`` into one canonical THD micro-batch (DESIGN.md section 3).

    Settings come from ``options`` and/or the same names as keywords (a keyword overrides the
    field of ``options``): ``build_thd_batch(rows, pad_seq_to_mult=8)`` equals
    ``build_thd_batch(rows, THDOptions(pad_seq_to_mult=8))``.

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

    * ``slack="last_segment"`` (in-batch packing with a fixed width, as megatron-bridge 0.6.2's
      Nemotron Omni packer does it): into the last row's physical
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

    The work is four steps, each a function of its own: :func:`read_rows` (check the rows, one
    numpy array per field), :func:`plan_layout` (lengths and boundaries), :func:`place_rows` (the
    flat ``[T]`` arrays) and :func:`to_tensors`.

    Raises UsageError for bad arguments, PackingError for bad rows or content that does not fit,
    AlignmentError when a fixed width is not a multiple of ``pad_seq_to_mult``.
    """
    unknown = sorted(set(keywords) - _OPTION_NAMES)
    if unknown:
        raise TypeError(f"build_thd_batch() got an unexpected keyword argument {unknown[0]!r}")
    opts = replace(options, **keywords) if options is not None else THDOptions(**keywords)
    opts.check()
    table = read_rows(rows, opts)
    layout = plan_layout(table.lengths, table.valid, opts)
    arrays = place_rows(table, layout, opts)
    if device is None:
        tok0 = rows[0]["tokens"]
        device = tok0.device if isinstance(tok0, torch.Tensor) else torch.device("cpu")
    return to_tensors(arrays, layout, torch.device(device))


@dataclass(frozen=True)
class THDRows:
    """Checked input rows (:func:`read_rows`): one 1-D numpy array per field and row."""

    #: ``columns[key][i]``: field ``key`` of row ``i``, in the key order of row 0.
    columns: dict[str, list[np.ndarray]]
    #: Row lengths ``u_i`` (int64).
    lengths: np.ndarray
    #: Real tokens at the start of every row, ``valid_length`` (int64).
    valid: np.ndarray
    #: Row keys that are neither core keys nor ``position_ids`` (padded with their pad value).
    extra_keys: tuple[str, ...]


def read_rows(rows: Sequence[Mapping[str, Any]], options: THDOptions) -> THDRows:
    """Step 1: check the rows (keys, shapes, lengths, ``valid_length``) and turn every field into a
    1-D numpy array. Value dtypes are checked where the fields are placed."""
    if isinstance(rows, Mapping) or not isinstance(rows, Sequence):
        raise UsageError(f"rows must be a sequence of mappings, got {type(rows).__name__}")
    if len(rows) == 0:
        raise UsageError("rows is empty: a THD batch needs at least one sequence", field="rows")
    array_keys, extra_keys = _row_keys(rows[0], options)
    array_keys = ["tokens", *(k for k in array_keys if k != "tokens")]  # the row length comes first
    key_set = set(array_keys)
    first_keys = rows[0].keys()
    columns: dict[str, list[np.ndarray]] = {k: [] for k in array_keys}
    lengths = np.empty(len(rows), dtype=np.int64)
    valid = np.empty(len(rows), dtype=np.int64)
    max_row = options.max_row_length
    for i, row in enumerate(rows):
        if type(row) is not dict and not isinstance(row, Mapping):
            raise UsageError(f"each row must be a mapping, got {type(row).__name__}", row=i)
        if row.keys() != first_keys:
            _check_same_keys(row, key_set, i)
        u = -1
        for key in array_keys:
            arr = _to_numpy_1d(row[key], row=i, key=key)
            if key == "tokens":
                u = arr.shape[0]
                if u == 0:
                    raise PackingError("row is empty (0 tokens)", row=i, field="tokens")
                if max_row is not None and u > max_row:
                    raise PackingError(f"row length {u} exceeds max_row_length {max_row}", row=i, field="tokens")
            elif arr.shape[0] != u:
                raise PackingError(f"length {arr.shape[0]} differs from the row's {u} tokens", row=i, field=key)
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
        lengths[i] = u
        valid[i] = u if "valid_length" not in row else _valid_length(row["valid_length"], u, i)
    return THDRows(columns=columns, lengths=lengths, valid=valid, extra_keys=extra_keys)


_NOT_ARRAYS = ("valid_length", "attention_mask")


def _row_keys(first: Any, options: THDOptions) -> tuple[list[str], tuple[str, ...]]:
    """The per-token keys of row 0 and which of them are extra keys; errors name what is wrong."""
    if not isinstance(first, Mapping):
        raise UsageError(f"each row must be a mapping, got {type(first).__name__}", row=0)
    array_keys = [k for k in first if k not in _NOT_ARRAYS]
    for key in CORE_ROW_KEYS:
        if key not in first:
            hint = " (rename input_ids to tokens)" if key == "tokens" and "input_ids" in first else ""
            raise PackingError(f"row is missing required key '{key}'{hint}", row=0, field=key)
    for key in array_keys:
        if key in RESERVED_KEYS and key not in ("position_ids", *CORE_ROW_KEYS):
            raise UsageError(
                f"rows may not carry '{key}': the builder computes it", row=0, field=key,
                fix="drop the key; use valid_length to mark materialised padding",
            )
    extra_keys = tuple(k for k in array_keys if k not in RESERVED_KEYS)
    pad_values = options.extra_pad_values or {}
    missing_pads = [k for k in extra_keys if k not in pad_values]
    if missing_pads:
        raise UsageError(
            f"extra row keys {missing_pads} have no pad value", field=missing_pads[0],
            fix="pass extra_pad_values={key: value} for every extra per-token key",
        )
    return array_keys, extra_keys


def _check_same_keys(row: Mapping[str, Any], key_set: set[str], i: int) -> None:
    row_keys = {k for k in row if k not in _NOT_ARRAYS}
    if row_keys == key_set:
        return
    extra = sorted(row_keys - key_set)
    lacking = sorted(key_set - row_keys)
    raise PackingError(
        "rows must all carry the same keys; this row "
        + (f"has {extra} that row 0 lacks" if extra else "")
        + (" and " if extra and lacking else "")
        + (f"lacks {lacking} that row 0 has" if lacking else ""),
        row=i, field=(extra or lacking)[0],
    )


def _valid_length(v: Any, u: int, i: int) -> int:
    if isinstance(v, (torch.Tensor, np.ndarray)) and v.ndim == 0 and v.dtype not in (torch.bool, np.bool_):
        v = v.item()
    if not is_int(v) or not 0 <= int(v) <= u:
        raise PackingError(f"valid_length must be an integer in [0, {u}], got {v!r}", row=i, field="valid_length")
    return int(v)


@dataclass(frozen=True)
class THDLayout:
    """Where every row goes in the packed row (:func:`plan_layout`)."""

    #: Physical length of every row's segment (aligned; the last one holds ``last_segment`` slack).
    physical: np.ndarray
    #: Offset of every row's segment.
    starts: np.ndarray
    #: Length of the trailing padding sequence (``pad_sequence`` slack), 0 if none.
    trailing_pad: int
    #: ``T``, the packed width.
    width: int
    #: Physical and logical boundaries, int64, static-shape entries included.
    cu_padded: np.ndarray
    cu_logical: np.ndarray
    #: Reported ``max_seqlen_q`` / ``max_seqlen_kv``.
    max_seqlen: int


def plan_layout(lengths: np.ndarray, valid: np.ndarray, options: THDOptions) -> THDLayout:
    """Step 2: physical lengths, slack, width and boundary arrays from the row lengths and valid
    lengths; PackingError when the content does not fit ``max_length`` or the static shapes."""
    m = int(options.pad_seq_to_mult)
    max_length = options.max_length
    physical = lengths.copy() if m == 1 else (lengths + (m - 1)) // m * m
    content = int(physical.sum())
    if max_length is not None and content > max_length:
        raise PackingError(
            f"packed length {content} exceeds max_length {max_length} "
            f"(aligned row lengths {_quote_lengths(physical.tolist())}, pad_seq_to_mult={m})",
            field="max_length",
        )
    trailing_pad = 0
    if options.pad_to_max_length and content < max_length:
        if options.slack == "last_segment":
            physical[-1] += max_length - content
        else:
            trailing_pad = max_length - content
    width = int(physical.sum()) + trailing_pad
    if width > _INT32_MAX:
        raise PackingError(f"packed width {width} does not fit int32 boundaries", field="tokens")
    n = len(lengths)
    extra = 1 if trailing_pad else 0
    static = options.static_num_seqs
    if static is not None and n + extra > static:
        raise PackingError(
            f"batch has {n + extra} sequences "
            f"({'including the trailing padding sequence' if trailing_pad else 'rows'}) but "
            f"static_num_seqs is {static}",
            field="static_num_seqs",
            fix="raise static_num_seqs (e.g. max samples per pack + 1) or pack fewer rows",
        )
    size = 1 + (n + extra if static is None else static)
    cu_padded = np.empty(size, dtype=np.int64)
    cu_logical = np.empty(size, dtype=np.int64)
    cu_padded[0] = cu_logical[0] = 0
    np.cumsum(physical, out=cu_padded[1 : n + 1])
    if options.fold_alignment_padding:
        cu_logical[1 : n + 1] = cu_padded[1 : n + 1]
    else:
        np.cumsum(valid, out=cu_logical[1 : n + 1])
    cu_padded[n + 1 :] = width
    cu_logical[n + 1 :] = width if options.fold_alignment_padding else cu_logical[n]
    longest = max(int(physical.max()), trailing_pad)
    max_seqlen = longest
    if options.static_max_seqlen is not None:
        if longest > options.static_max_seqlen:
            raise PackingError(
                f"longest physical sequence is {longest} but static_max_seqlen is {options.static_max_seqlen}",
                field="static_max_seqlen",
            )
        max_seqlen = int(options.static_max_seqlen)
    return THDLayout(physical=physical, starts=cu_padded[:n], trailing_pad=trailing_pad, width=width,
                     cu_padded=cu_padded, cu_logical=cu_logical, max_seqlen=max_seqlen)


def place_rows(table: THDRows, layout: THDLayout, options: THDOptions) -> dict[str, np.ndarray]:
    """Step 3: the flat ``[T]`` arrays (tokens, labels, loss mask, position ids, padding mask and
    extra keys), each row's values at its segment's start and padding in the gaps.

    Raises PackingError for a tokens, labels or position-ids row that is not integer, and a loss
    mask row that is not numeric."""
    cols = table.columns
    fill = _Gaps(table.lengths, layout)
    tokens = fill.place([_as_integer(a, row=i, key="tokens") for i, a in enumerate(cols["tokens"])],
                        options.pad_token_id, np.int64)
    labels = fill.place([_as_integer(a, row=i, key="labels") for i, a in enumerate(cols["labels"])],
                        options.label_pad_id, np.int64)
    for i, a in enumerate(cols["loss_mask"]):
        if a.dtype.kind not in "biuf":
            raise PackingError(f"expected numeric values, got dtype {a.dtype}", row=i, field="loss_mask")
    out = {"tokens": tokens, "labels": labels, "loss_mask": fill.place(cols["loss_mask"], 0, np.float32)}
    out["position_ids"] = _position_ids(table, layout, fill)
    out["padding_mask"] = padding_mask_from_lengths(layout.starts, table.valid, layout.width)
    pad_values = options.extra_pad_values or {}
    for key in table.extra_keys:
        out[key] = fill.place(cols[key], pad_values[key], np.result_type(*cols[key]))
    return out


class _Gaps:
    """Lays per-row arrays out with padding in every row's gap and in the trailing slack."""

    def __init__(self, lengths: np.ndarray, layout: THDLayout) -> None:
        self.gaps = (layout.physical - lengths).tolist()
        self.gaps[-1] += layout.trailing_pad
        self.widest = max(self.gaps)

    def place(self, parts: list[np.ndarray], pad: Any, dtype: Any, fillers: Any = None) -> np.ndarray:
        """Concatenate ``parts`` with the gaps filled by ``pad`` (or by ``fillers[i]`` after row ``i``)."""
        if not self.widest:
            return np.concatenate(parts).astype(dtype, copy=False)
        if fillers is None:
            padding = np.full(self.widest, pad, dtype=dtype)
            fillers = [padding[:g] for g in self.gaps]
        pieces = [array for pair in zip(parts, fillers) for array in pair]
        return np.concatenate(pieces, dtype=dtype, casting="unsafe")


def _position_ids(table: THDRows, layout: THDLayout, fill: _Gaps) -> np.ndarray:
    """Position ids: restart at 0 for every physical segment and keep counting through gaps; the
    trailing padding sequence is all 0; given ``position_ids`` are kept on real positions."""
    physical, starts = layout.physical, layout.starts
    within = np.arange(int(physical.sum()), dtype=np.int64) - np.repeat(starts, physical)
    if "position_ids" not in table.columns:
        if layout.trailing_pad:
            within = np.concatenate((within, np.zeros(layout.trailing_pad, dtype=np.int64)))
        return within
    given = [_as_integer(a, row=i, key="position_ids") for i, a in enumerate(table.columns["position_ids"])]
    last = np.array([int(a[-1]) for a in given], dtype=np.int64)
    # gap position j (>= u_i) continues as last_i + 1 + (j - u_i)
    counting = within + np.repeat(last + 1 - table.lengths, physical)
    ends = (starts + physical).tolist()
    fillers = [counting[s + u : e] for s, u, e in zip(starts.tolist(), table.lengths.tolist(), ends)]
    if layout.trailing_pad:
        fillers[-1] = np.concatenate((fillers[-1], np.zeros(layout.trailing_pad, dtype=np.int64)))
    return fill.place(given, 0, np.int64, fillers)


def to_tensors(arrays: Mapping[str, np.ndarray], layout: THDLayout, device: torch.device) -> dict[str, Any]:
    """Step 4: the canonical batch: ``[1, T]`` tensors of ``arrays``, the int32 boundary arrays
    (the padded pair only when it differs) and ``max_seqlen_*``, on ``device``."""

    on_host = device.type == "cpu"

    def tensor(arr: np.ndarray, *, row: bool = True) -> torch.Tensor:
        t = torch.from_numpy(np.ascontiguousarray(arr).reshape(1, -1) if row else arr)
        return t if on_host else t.to(device)

    batch: dict[str, Any] = {key: tensor(arrays[key]) for key in _ROW_KEYS}
    cu_q = layout.cu_logical.astype(np.int32)
    batch["cu_seqlens_q"] = tensor(cu_q, row=False)
    batch["cu_seqlens_kv"] = tensor(cu_q.copy(), row=False)
    if not np.array_equal(layout.cu_padded, layout.cu_logical):
        cu_p = layout.cu_padded.astype(np.int32)
        batch["cu_seqlens_q_padded"] = tensor(cu_p, row=False)
        batch["cu_seqlens_kv_padded"] = tensor(cu_p.copy(), row=False)
    batch["max_seqlen_q"] = layout.max_seqlen
    batch["max_seqlen_kv"] = layout.max_seqlen
    for key, arr in arrays.items():
        if key not in batch:
            batch[key] = tensor(arr)
    return batch


_ROW_KEYS = ("tokens", "labels", "loss_mask", "position_ids", "padding_mask")


def padding_mask_from_lengths(starts: np.ndarray, logical: np.ndarray, width: int) -> np.ndarray:
    """Bool ``[width]`` mask: False on ``[starts[i], starts[i] + logical[i])``, True elsewhere."""
    starts = np.asarray(starts, dtype=np.int64)
    logical = np.asarray(logical, dtype=np.int64)
    if starts.size == 0:
        return np.ones(width, dtype=bool)
    # runs: padding before segment 0, segment 0, padding before segment 1, ..., padding after the last
    runs = np.empty(2 * starts.size + 1, dtype=np.int64)
    runs[1:-1:2] = logical
    ends = starts + logical
    runs[0] = starts[0]
    runs[2:-1:2] = starts[1:] - ends[:-1]
    runs[-1] = width - ends[-1]
    if runs.min() >= 0:  # segments in order, not overlapping: one repeat
        pattern = np.ones(runs.size, dtype=bool)
        pattern[1::2] = False
        return np.repeat(pattern, runs)
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
    positive_int("pad_seq_to_mult", pad_seq_to_mult)
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
        if not is_int(value):
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
