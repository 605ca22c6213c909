"""The unpacked-sample contract of the global-batch path, its per-sample collate and its checks.

One *unpacked sample* is one sequence, padded on the right to a multiple of the global-batch
alignment (``pad_seq_to_mult`` from :func:`seqpack.core.alignment.alignment_requirement` for the
``global_batch`` path: Megatron-Bridge PR #6127's product, ``2*CP`` when CP > 1 times TP under sequence
parallelism, lcm over the evaluation CP):

| key | dtype | shape | content |
|---|---|---|---|
| ``tokens`` | int64 | ``[P]`` | input ids, then ``pad_token_id`` |
| ``labels`` | int64 | ``[P]`` | next-token targets, then ``-100`` |
| ``loss_mask`` | float32 | ``[P]`` | 1.0 on trained targets; 0.0 on prompt (when masked) and padding |
| ``position_ids`` | int64 | ``[P]`` | ``0 .. P-1`` |
| ``original_seq_len`` | int32 | ``[1]`` | real length ``O`` (``1 <= O <= P``) |
| ``padded_seq_len`` | int32 | ``[1]`` | ``P``, a multiple of the alignment |

An optional ``row_index`` (int64 ``[1]``, the dataset row; seqpack's addition) travels with the
sample so errors and reports can name the row. A dataset yields one sample per MBS=1 micro-batch,
delivered as a list (``[sample]``), which is what Megatron-Core's ``wrap_data_iterator`` consumes.
Pre-packed samples (with ``cu_seqlens``, Megatron-Core's second accepted shape) are refused: the
global-batch path exists to form the packs itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from seqpack.core.alignment import round_up
from seqpack.data.tokenize import TokenizedSample, to_training_example
from seqpack.core.arguments import positive_int
from seqpack.core.errors import AlignmentError, InputError, UsageError

__all__ = [
    "LABEL_PAD_ID",
    "OPTIONAL_KEYS",
    "SAMPLE_KEYS",
    "TOKEN_KEYS",
    "UnpackedSampleCollator",
    "check_unpacked_sample",
    "make_unpacked_sample",
]

#: Per-token keys, in the fixed order the payload exchange sends them.
TOKEN_KEYS: tuple[str, ...] = ("tokens", "labels", "position_ids", "loss_mask")
#: Every key a sample must carry.
SAMPLE_KEYS: tuple[str, ...] = (*TOKEN_KEYS, "original_seq_len", "padded_seq_len")
#: Keys a sample may carry besides those.
OPTIONAL_KEYS: tuple[str, ...] = ("row_index",)
#: Label of padding positions (never read: their loss mask is 0).
LABEL_PAD_ID = -100

_DTYPES: dict[str, torch.dtype] = {
    "tokens": torch.int64,
    "labels": torch.int64,
    "position_ids": torch.int64,
    "loss_mask": torch.float32,
}


def make_unpacked_sample(
    tokens: Any,
    labels: Any,
    loss_mask: Any,
    *,
    pad_seq_to_mult: int,
    pad_token_id: int = 0,
    row_index: int | None = None,
) -> dict[str, torch.Tensor]:
    """One already shifted sequence as an unpacked sample, right-padded to ``pad_seq_to_mult``."""
    positive_int("pad_seq_to_mult", pad_seq_to_mult)
    tok = np.asarray(tokens, dtype=np.int64)
    lab = np.asarray(labels, dtype=np.int64)
    mask = np.asarray(loss_mask, dtype=np.float32)
    n = int(tok.shape[0]) if tok.ndim == 1 else -1
    if n < 1 or lab.shape != tok.shape or mask.shape != tok.shape:
        raise InputError(
            f"tokens, labels and loss_mask must be 1-D of one non-zero length, got shapes "
            f"{list(tok.shape)}, {list(lab.shape)}, {list(mask.shape)}",
            row=row_index, field="tokens",
        )
    p = round_up(n, pad_seq_to_mult)
    sample = {
        "tokens": torch.full((p,), int(pad_token_id), dtype=torch.int64),
        "labels": torch.full((p,), LABEL_PAD_ID, dtype=torch.int64),
        "position_ids": torch.arange(p, dtype=torch.int64),
        "loss_mask": torch.zeros(p, dtype=torch.float32),
        "original_seq_len": torch.tensor([n], dtype=torch.int32),
        "padded_seq_len": torch.tensor([p], dtype=torch.int32),
    }
    sample["tokens"][:n] = torch.from_numpy(tok)
    sample["labels"][:n] = torch.from_numpy(lab)
    sample["loss_mask"][:n] = torch.from_numpy(mask)
    if row_index is not None:
        sample["row_index"] = torch.tensor([int(row_index)], dtype=torch.int64)
    return sample


def _scalar(sample: Mapping[str, Any], key: str, where: str, row: int | None) -> int:
    value = sample[key]
    if not isinstance(value, torch.Tensor) or value.numel() != 1 or value.dtype.is_floating_point \
            or value.dtype == torch.bool:
        shown = f"{value.dtype} {list(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__
        raise InputError(f"{where}: '{key}' must be a one-element integer tensor, got {shown}", row=row, field=key)
    return int(value.reshape(-1)[0].item())


def check_unpacked_sample(
    sample: Any, *, pad_seq_to_mult: int = 1, where: str = "sample", row: int | None = None
) -> dict[str, torch.Tensor]:
    """Check one sample against the contract; return it normalised (``[1, P]`` squeezed to ``[P]``).

    ``where`` prefixes messages (e.g. ``"DP rank 1, sample 3"``); ``row`` goes into the error's
    location. Raises InputError (keys, dtypes, shapes, lengths) or AlignmentError (``P`` not a
    multiple of ``pad_seq_to_mult``).
    """
    if not isinstance(sample, Mapping):
        raise InputError(f"{where}: expected a dict (one unpacked sample), got {type(sample).__name__}", row=row)
    if "row_index" in sample and row is None:
        row = _scalar(sample, "row_index", where, row)
    if "cu_seqlens" in sample:
        raise InputError(
            f"{where}: pre-packed samples (with cu_seqlens) are not accepted; the global-batch path forms "
            "the packs itself", row=row, field="cu_seqlens",
            fix="yield one unpacked sample per micro-batch (see seqpack.packing.global_batch.samples)",
        )
    missing = [k for k in SAMPLE_KEYS if k not in sample]
    if missing:
        raise InputError(f"{where}: missing key(s) {missing}", row=row, field=missing[0],
                         fix="yield dicts with " + ", ".join(SAMPLE_KEYS))
    unknown = sorted(k for k in sample if k not in SAMPLE_KEYS and k not in OPTIONAL_KEYS)
    if unknown:
        raise InputError(f"{where}: unknown key(s) {unknown}; the payload exchange sends only the contract's keys",
                         row=row, field=unknown[0])
    padded = _scalar(sample, "padded_seq_len", where, row)
    original = _scalar(sample, "original_seq_len", where, row)
    out: dict[str, torch.Tensor] = {}
    for key in TOKEN_KEYS:
        value = sample[key]
        if not isinstance(value, torch.Tensor):
            raise InputError(f"{where}: '{key}' must be a torch tensor, got {type(value).__name__}", row=row, field=key)
        if value.dim() == 2 and value.shape[0] == 1:
            value = value[0]
        if value.dim() != 1:
            raise InputError(f"{where}: '{key}' must have shape [P] (or [1, P]), got {list(value.shape)}",
                             row=row, field=key)
        if value.dtype != _DTYPES[key]:
            raise InputError(f"{where}: '{key}' must be {_DTYPES[key]}, got {value.dtype}", row=row, field=key)
        if value.shape[0] != padded:
            raise InputError(f"{where}: '{key}' has {value.shape[0]} elements but padded_seq_len is {padded}",
                             row=row, field=key)
        out[key] = value
    if not 1 <= original <= padded:
        raise InputError(f"{where}: original_seq_len {original} must lie in [1, padded_seq_len={padded}]",
                         row=row, field="original_seq_len")
    if padded % pad_seq_to_mult:
        raise AlignmentError(
            f"{where}: padded_seq_len {padded} is not a multiple of the alignment {pad_seq_to_mult}",
            row=row, field="padded_seq_len",
            fix=f"pad every sample to a multiple of {pad_seq_to_mult} (pad_seq_to_mult from derive_alignment "
            "for this TP/CP/SP)",
        )
    out["original_seq_len"] = torch.tensor([original], dtype=torch.int32)
    out["padded_seq_len"] = torch.tensor([padded], dtype=torch.int32)
    if "row_index" in sample:
        out["row_index"] = torch.tensor([_scalar(sample, "row_index", where, row)], dtype=torch.int64)
    return out


class UnpackedSampleCollator:
    """Per-sample collate: shift, loss mask, right-pad to the alignment; returns a list of samples.

    Items are what :class:`~seqpack.packing.global_batch.dataset.GlobalBatchSFTDataset`
    yields: ``{"sample": TokenizedSample, "row_index": int}``. Samples are *not* stacked: the
    result is ``[unpacked_sample, ...]``, one per item, in order.
    """

    def __init__(self, *, pad_seq_to_mult: int, pad_token_id: int = 0) -> None:
        self.pad_seq_to_mult = positive_int("pad_seq_to_mult", pad_seq_to_mult)
        self.pad_token_id = int(pad_token_id)

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> list[dict[str, torch.Tensor]]:
        out = []
        for item in items:
            tokenized = item.get("sample") if isinstance(item, Mapping) else None
            if not isinstance(tokenized, TokenizedSample):
                raise UsageError("UnpackedSampleCollator expects dataset items {'sample': TokenizedSample, "
                                 f"'row_index': int}}, got {type(item).__name__}")
            example = to_training_example(tokenized)
            out.append(make_unpacked_sample(
                example.tokens, example.labels, example.loss_mask, pad_seq_to_mult=self.pad_seq_to_mult,
                pad_token_id=self.pad_token_id, row_index=item.get("row_index"),
            ))
        return out

    def __repr__(self) -> str:
        return f"UnpackedSampleCollator(pad_seq_to_mult={self.pad_seq_to_mult}, pad_token_id={self.pad_token_id})"
