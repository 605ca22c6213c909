"""Convert a packed THD micro-batch into Megatron-Core's ``PackedSeqParams``.

The field mapping follows Megatron-Bridge's ``get_packed_seq_params`` (megatron-bridge 0.6.2 with
megatron-core 0.19.2, compared field by field in the upstream lane):

* canonical / offline keys: ``cu_seqlens_q`` (real boundaries), ``cu_seqlens_kv`` (falls back to
  ``cu_seqlens_q``), ``cu_seqlens_q_padded`` / ``cu_seqlens_kv_padded`` (physical boundaries, or
  ``None``), ``max_seqlen_q`` / ``max_seqlen_kv`` (one integer each, kv falls back to q);
* legacy keys: ``cu_seqlens`` (physical) and ``cu_seqlens_unpadded`` (real), trimmed before their
  ``-1`` sentinels. With an unpadded array the real boundaries go to ``cu_seqlens_q/kv`` and the
  physical ones to the ``*_padded`` fields; without one the physical boundaries go to
  ``cu_seqlens_q/kv`` and the padded fields stay ``None``. ``max_seqlen`` fills both max fields.

Boundary arrays may be 1-D or ``[1, N]``; max lengths may be ints, 0-d, ``[1]`` or ``[1, 1]``
tensors. Fields that only some Megatron-Core releases have (``total_tokens`` from 0.17,
``cp_partition_mode`` on dev) are passed only when the installed dataclass declares them.

Where we are stricter than Bridge: boundaries must start at 0 and never decrease, a padded array
must have as many entries as its real one with no sequence shorter than its real length, and a
``max_seqlen`` below the longest physical sequence is rejected. Where we differ: a legacy array
without sentinels and without ``*_argmin`` is kept whole (Bridge's ``torch.argmin`` would cut it
to nothing), and a missing ``cu_seqlens_kv_padded`` falls back to ``cu_seqlens_q_padded``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

import torch

from seqpack.core.errors import InputError, UsageError
from seqpack.training.boundaries import boundary_vector, check_boundaries, trim_sentinels

__all__ = ["batch_with_params", "pad_between_seqs", "packed_seq_params_kwargs", "to_packed_seq_params"]

logger = logging.getLogger(__name__)


def _max_seqlen(value: Any, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise InputError(
                f"{field} must contain exactly one value, got {value.numel()} (shape {list(value.shape)})",
                field=field,
                fix="pass one micro-batch row (micro_batch_size=1); max_seqlen is a single integer",
            )
        if value.dtype.is_floating_point or value.dtype == torch.bool:
            raise InputError(f"{field} must be an integer, got dtype {value.dtype}", field=field)
        return int(value.reshape(-1)[0].item())
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise InputError(f"{field} must be an integer or a one-element tensor, got {value!r}", field=field)
    return int(value)


def _checked(value: Any, field: str, argmin: Any = None, legacy: bool = False) -> torch.Tensor:
    cu = boundary_vector(value, field)
    if legacy:
        cu = trim_sentinels(cu, argmin, field)
    check_boundaries(cu, field)
    return cu.to(torch.int32)


def _check_pair(real: torch.Tensor, padded: torch.Tensor, real_field: str, padded_field: str) -> None:
    if real.numel() != padded.numel():
        raise InputError(
            f"{real_field} has {real.numel()} entries but {padded_field} has {padded.numel()}", field=padded_field
        )
    real_len = real[1:] - real[:-1]
    padded_len = padded[1:] - padded[:-1]
    short = torch.nonzero(padded_len < real_len)
    if short.numel():
        i = int(short[0, 0].item())
        raise InputError(
            f"sequence {i} has {int(real_len[i])} real tokens but only {int(padded_len[i])} physical slots",
            field=padded_field,
        )


def _check_max(max_len: int | None, physical: torch.Tensor, field: str) -> None:
    if max_len is None:
        return
    longest = int((physical[1:] - physical[:-1]).max().item())
    if max_len < longest:
        raise InputError(
            f"{field} is {max_len} but the longest physical sequence has {longest} tokens", field=field
        )


def packed_seq_params_kwargs(batch: Mapping[str, Any]) -> dict[str, Any]:
    """Every ``PackedSeqParams`` field Bridge's step would set for ``batch`` (no Megatron-Core import).

    Keys: ``qkv_format``, the four ``cu_seqlens*`` fields (int32 1-D tensors or None), the two
    ``max_seqlen*`` fields (int or None), ``total_tokens``, ``cp_partition_mode`` and ``pad_between_seqs``
    (the batch's own key, Bridge main's; None when it has none, as megatron-bridge 0.6.2 sets it). Use
    :func:`to_packed_seq_params` to get the dataclass itself.
    """
    if not isinstance(batch, Mapping):
        raise UsageError(f"batch must be a mapping of names to tensors, got {type(batch).__name__}")
    if batch.get("cu_seqlens_q") is not None:
        cu_q = _checked(batch["cu_seqlens_q"], "cu_seqlens_q")
        cu_kv = cu_q if batch.get("cu_seqlens_kv") is None else _checked(batch["cu_seqlens_kv"], "cu_seqlens_kv")
        cu_q_padded = None
        cu_kv_padded = None
        if batch.get("cu_seqlens_q_padded") is not None:
            cu_q_padded = _checked(batch["cu_seqlens_q_padded"], "cu_seqlens_q_padded")
            _check_pair(cu_q, cu_q_padded, "cu_seqlens_q", "cu_seqlens_q_padded")
        if batch.get("cu_seqlens_kv_padded") is not None:
            cu_kv_padded = _checked(batch["cu_seqlens_kv_padded"], "cu_seqlens_kv_padded")
            _check_pair(cu_kv, cu_kv_padded, "cu_seqlens_kv", "cu_seqlens_kv_padded")
        elif cu_q_padded is not None:
            cu_kv_padded = cu_q_padded
        max_q = _max_seqlen(batch.get("max_seqlen_q"), "max_seqlen_q")
        max_kv = _max_seqlen(batch.get("max_seqlen_kv"), "max_seqlen_kv")
        if max_kv is None:
            max_kv = max_q
        _check_max(max_q, cu_q if cu_q_padded is None else cu_q_padded, "max_seqlen_q")
        _check_max(max_kv, cu_kv if cu_kv_padded is None else cu_kv_padded, "max_seqlen_kv")
    elif batch.get("cu_seqlens") is not None:
        padded = _checked(batch["cu_seqlens"], "cu_seqlens", batch.get("cu_seqlens_argmin"), legacy=True)
        if batch.get("cu_seqlens_unpadded") is not None:
            unpadded = _checked(
                batch["cu_seqlens_unpadded"],
                "cu_seqlens_unpadded",
                batch.get("cu_seqlens_unpadded_argmin"),
                legacy=True,
            )
            _check_pair(unpadded, padded, "cu_seqlens_unpadded", "cu_seqlens")
            cu_q = cu_kv = unpadded
            cu_q_padded = cu_kv_padded = padded
        else:
            cu_q = cu_kv = padded
            cu_q_padded = cu_kv_padded = None
        max_q = max_kv = _max_seqlen(batch.get("max_seqlen"), "max_seqlen")
        _check_max(max_q, padded, "max_seqlen")
    else:
        raise InputError(
            "batch has no sequence boundaries: expected cu_seqlens_q (canonical) or cu_seqlens (legacy)",
            field="cu_seqlens_q",
        )
    total_tokens = batch.get("total_tokens")
    if total_tokens is not None:
        total_tokens = _max_seqlen(total_tokens, "total_tokens")
    explicit = batch.get("pad_between_seqs")
    if explicit is not None and not isinstance(explicit, bool):
        raise InputError(f"pad_between_seqs must be true or false, got {explicit!r}", field="pad_between_seqs")
    return {
        "qkv_format": "thd",
        "cu_seqlens_q": cu_q,
        "cu_seqlens_kv": cu_kv,
        "cu_seqlens_q_padded": cu_q_padded,
        "cu_seqlens_kv_padded": cu_kv_padded,
        "max_seqlen_q": max_q,
        "max_seqlen_kv": max_kv,
        "total_tokens": total_tokens,
        "cp_partition_mode": batch.get("cp_partition_mode", "zigzag"),
        "pad_between_seqs": explicit,
    }


def pad_between_seqs(batch: Mapping[str, Any]) -> bool:
    """True when any physical boundary of ``batch`` differs from its logical one, the last entry included.

    A batch whose sequences are all aligned but whose row ends in width padding differs only in its last
    entry (logical ``[0, 4, 8, 8]``, physical ``[0, 4, 8, 12]``); Transformer Engine's padded-layout
    inference missed exactly that case (Megatron-Bridge #5630: NaNs; TransformerEngine #3331), so a batch
    that says ``pad_between_seqs`` explicitly (Bridge main's collate does, PR #5610) is not at its mercy.
    """
    kwargs = packed_seq_params_kwargs({k: v for k, v in batch.items() if k != "pad_between_seqs"})
    padded = kwargs["cu_seqlens_q_padded"]
    return padded is not None and not torch.equal(kwargs["cu_seqlens_q"], padded)


def to_packed_seq_params(batch: Mapping[str, Any], *, params_cls: type | None = None) -> Any:
    """Build ``megatron.core.packed_seq_params.PackedSeqParams(qkv_format="thd", ...)`` for ``batch``.

    Accepts the canonical batch, Bridge's offline ``[1, N]`` form and legacy ``cu_seqlens`` batches
    (see the module docstring). Only the fields the installed dataclass declares are passed, so
    the same call works with Megatron-Core 0.16 (no ``total_tokens``) and 0.17+ (``total_tokens``
    fills ``seq_idx``). ``params_cls`` replaces the Megatron-Core class (for tests of other
    releases' field sets).
    """
    kwargs = packed_seq_params_kwargs(batch)
    if params_cls is None:
        from megatron.core.packed_seq_params import PackedSeqParams as params_cls  # noqa: N813 (lazy, slow import)
    if not dataclasses.is_dataclass(params_cls):
        raise UsageError(f"params_cls must be a dataclass, got {params_cls!r}")
    fields = {f.name for f in dataclasses.fields(params_cls) if f.init}
    dropped = sorted(k for k, v in kwargs.items() if k not in fields and v is not None)
    if dropped:
        logger.debug("%s has no field(s) %s; not passed", params_cls.__name__, ", ".join(dropped))
    return params_cls(**{k: v for k, v in kwargs.items() if k in fields})


#: Per-token keys :func:`batch_with_params` keeps from the batch.
TOKEN_KEYS = ("tokens", "labels", "loss_mask", "position_ids")


def batch_with_params(batch: Mapping[str, Any], params: Any, extra_keys: tuple[str, ...] = ()) -> dict[str, Any]:
    """The per-token tensors of ``batch`` (``tokens``, ``labels``, ``loss_mask``, ``position_ids`` and
    ``extra_keys``) with every boundary taken from ``params``: a ``PackedSeqParams`` object or the
    mapping :func:`packed_seq_params_kwargs` returns. Code that runs on this view reads its sequence
    boundaries from what Megatron-Core's attention would receive, not from the batch."""
    get = params.get if isinstance(params, Mapping) else (lambda name: getattr(params, name))
    out = {k: batch[k] for k in (*TOKEN_KEYS, *extra_keys)}
    out["cu_seqlens_q"], out["cu_seqlens_kv"] = get("cu_seqlens_q"), get("cu_seqlens_kv")
    if get("cu_seqlens_q_padded") is not None:
        out["cu_seqlens_q_padded"] = get("cu_seqlens_q_padded")
        out["cu_seqlens_kv_padded"] = get("cu_seqlens_kv_padded")
    out["max_seqlen_q"], out["max_seqlen_kv"] = get("max_seqlen_q"), get("max_seqlen_kv")
    return out
