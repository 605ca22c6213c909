"""Read the sequence boundaries of a packed THD micro-batch, whatever form they come in.

Three forms reach the training layer:

* the canonical batch (DESIGN.md section 3): 1-D int32 ``cu_seqlens_q`` (real tokens) and, when
  alignment padding exists, ``cu_seqlens_q_padded`` (physical layout);
* Megatron-Bridge's offline collate: the same keys as ``[1, N]`` arrays (one row per micro-batch);
* legacy batches: ``cu_seqlens`` (physical) and optionally ``cu_seqlens_unpadded`` (real), padded
  on the right with ``-1`` sentinels, with ``cu_seqlens_argmin`` giving the index of the first one.

:func:`thd_layout` turns any of them into a :class:`ThdLayout` (real and physical boundaries as
1-D int64 tensors) and checks them, so the rest of the training layer deals with one form only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from seqpack.core.errors import InputError

__all__ = [
    "MBS1_MESSAGE",
    "ThdLayout",
    "boundary_vector",
    "check_boundaries",
    "physical_boundaries_for_cp",
    "thd_layout",
    "trim_sentinels",
]

#: Start of the error raised when a boundary tensor holds more than one physical row.
MBS1_MESSAGE = "packed THD batches need micro-batch size 1 (one physical row per micro-batch)"


def boundary_vector(value: Any, field: str) -> torch.Tensor:
    """Return boundary array ``value`` (list, ``[N]`` or ``[1, N]`` tensor) as a 1-D integer tensor.

    The device and integer dtype of a tensor are kept. A ``[B, N]`` array with ``B != 1`` is
    rejected: a packed THD micro-batch is one physical row.
    """
    if isinstance(value, torch.Tensor):
        tensor = value
    else:
        try:
            tensor = torch.as_tensor(value)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise InputError(f"cannot read boundaries from {type(value).__name__}: {exc}", field=field) from exc
    if tensor.dtype.is_floating_point or tensor.dtype.is_complex or tensor.dtype == torch.bool:
        raise InputError(f"boundaries must be integers, got dtype {tensor.dtype}", field=field)
    if tensor.dim() == 2:
        if tensor.shape[0] != 1:
            raise InputError(
                f"{MBS1_MESSAGE}; got boundaries of shape {list(tensor.shape)} ({tensor.shape[0]} rows)",
                field=field,
                fix="set micro_batch_size=1 (grow the pack instead of the micro-batch)",
            )
        tensor = tensor[0]
    if tensor.dim() != 1:
        raise InputError(f"boundaries must be 1-D or [1, N], got shape {list(tensor.shape)}", field=field)
    return tensor


def _single_int(value: Any, field: str) -> int:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise InputError(f"{field} must contain exactly one value, got {value.numel()}", field=field)
        return int(value.reshape(-1)[0].item())
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise InputError(f"{field} must be an integer, got {value!r}", field=field)
    return int(value)


def trim_sentinels(cu: torch.Tensor, argmin: Any, field: str) -> torch.Tensor:
    """Cut a legacy boundary vector before its ``-1`` sentinels.

    With ``argmin`` (Bridge's ``cu_seqlens_argmin``) the vector is cut at that index. Without it,
    it is cut at the first negative entry, and kept whole when there is none. (Bridge's step uses
    ``torch.argmin`` there, which returns 0 for a sentinel-free array and would drop every
    boundary; we keep the array instead.)
    """
    if argmin is not None:
        end = _single_int(argmin, f"{field}_argmin")
        if not 0 <= end <= cu.numel():
            raise InputError(f"{field}_argmin {end} is outside the boundary array of {cu.numel()} entries", field=field)
        return cu[:end]
    negative = torch.nonzero(cu < 0)
    if negative.numel():
        return cu[: int(negative[0, 0].item())]
    return cu


def check_boundaries(cu: torch.Tensor, field: str) -> None:
    """Raise InputError unless ``cu`` starts at 0, has at least 2 entries and never decreases."""
    if cu.numel() < 2:
        raise InputError(f"boundaries need at least 2 entries ([0, end]), got {cu.tolist()}", field=field)
    if int(cu[0].item()) != 0:
        raise InputError(f"boundaries must start at 0, got {cu[0].item()}", field=field)
    steps = cu[1:] - cu[:-1]
    bad = torch.nonzero(steps < 0)
    if bad.numel():
        i = int(bad[0, 0].item())
        raise InputError(
            f"boundaries must not decrease: entry {i + 1} is {cu[i + 1].item()} after {cu[i].item()}", field=field
        )


def _present(batch: Mapping[str, Any], key: str) -> bool:
    return batch.get(key) is not None


@dataclass(frozen=True)
class ThdLayout:
    """Real and physical sequence boundaries of one packed row, as 1-D int64 tensors.

    ``physical[i]:physical[i+1]`` is the room sequence ``i`` occupies; its first
    ``real[i+1] - real[i]`` positions are real tokens, the rest is alignment padding. Positions at
    or past ``physical[-1]`` (up to ``total_tokens``) belong to no sequence.
    """

    real: torch.Tensor
    physical: torch.Tensor
    total_tokens: int

    @property
    def num_sequences(self) -> int:
        """Number of sequences (including zero-length ones)."""
        return int(self.physical.numel()) - 1

    def real_lengths(self) -> torch.Tensor:
        """Real tokens per sequence."""
        return self.real[1:] - self.real[:-1]

    def physical_lengths(self) -> torch.Tensor:
        """Physical length (real tokens plus alignment padding) per sequence."""
        return self.physical[1:] - self.physical[:-1]

    def token_segments(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Per position: the sequence index (``num_sequences`` past the last boundary) and whether it is real."""
        n = self.num_sequences
        lengths = self.physical_lengths().cpu()
        tail = self.total_tokens - int(self.physical[-1].item())
        seq_id = torch.repeat_interleave(torch.arange(n + 1), torch.cat([lengths, torch.tensor([tail])]))
        starts = torch.cat([self.physical[:-1].cpu(), torch.tensor([int(self.physical[-1].item())])])
        real_len = torch.cat([self.real_lengths().cpu(), torch.tensor([0])])
        offset = torch.arange(self.total_tokens) - starts[seq_id]
        return seq_id, offset < real_len[seq_id]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"real": self.real.tolist(), "physical": self.physical.tolist(), "total_tokens": self.total_tokens}


def _row_length(batch: Mapping[str, Any]) -> int | None:
    for key in ("tokens", "labels", "loss_mask", "position_ids"):
        value = batch.get(key)
        if isinstance(value, torch.Tensor):
            if value.dim() != 2 or value.shape[0] != 1:
                raise InputError(f"per-token tensors must have shape [1, T], got {list(value.shape)}", field=key)
            return int(value.shape[1])
    return None


def thd_layout(batch: Mapping[str, Any], *, total_tokens: int | None = None) -> ThdLayout:
    """Read and check the boundaries of a canonical, Bridge-offline or legacy THD micro-batch.

    ``total_tokens`` is the row length; by default it is the length of ``tokens`` (or another
    per-token tensor). Pass it explicitly for a context-parallel slice, whose boundaries stay global.
    """
    if _present(batch, "cu_seqlens_q"):
        real = boundary_vector(batch["cu_seqlens_q"], "cu_seqlens_q")
        if _present(batch, "cu_seqlens_q_padded"):
            physical = boundary_vector(batch["cu_seqlens_q_padded"], "cu_seqlens_q_padded")
            physical_field = "cu_seqlens_q_padded"
        else:
            physical, physical_field = real, "cu_seqlens_q"
        real_field = "cu_seqlens_q"
    elif _present(batch, "cu_seqlens"):
        physical = trim_sentinels(
            boundary_vector(batch["cu_seqlens"], "cu_seqlens"), batch.get("cu_seqlens_argmin"), "cu_seqlens"
        )
        physical_field = "cu_seqlens"
        if _present(batch, "cu_seqlens_unpadded"):
            real = trim_sentinels(
                boundary_vector(batch["cu_seqlens_unpadded"], "cu_seqlens_unpadded"),
                batch.get("cu_seqlens_unpadded_argmin"),
                "cu_seqlens_unpadded",
            )
            real_field = "cu_seqlens_unpadded"
        else:
            real, real_field = physical, "cu_seqlens"
    else:
        raise InputError("batch has no sequence boundaries (neither cu_seqlens_q nor legacy cu_seqlens)")

    real = real.to(torch.int64)
    physical = physical.to(torch.int64)
    check_boundaries(real, real_field)
    check_boundaries(physical, physical_field)
    if real.numel() != physical.numel():
        raise InputError(
            f"{real_field} has {real.numel()} entries but {physical_field} has {physical.numel()}", field=physical_field
        )
    real_lengths = real[1:] - real[:-1]
    physical_lengths = physical[1:] - physical[:-1]
    short = torch.nonzero(physical_lengths < real_lengths)
    if short.numel():
        i = int(short[0, 0].item())
        raise InputError(
            f"sequence {i} has {real_lengths[i].item()} real tokens "
            f"but only {physical_lengths[i].item()} physical slots",
            field=physical_field,
        )
    if total_tokens is None:
        total_tokens = _row_length(batch)
    if total_tokens is None:
        total_tokens = int(physical[-1].item())
    if int(physical[-1].item()) > total_tokens:
        raise InputError(
            f"boundaries end at {physical[-1].item()} but the row has only {total_tokens} tokens", field=physical_field
        )
    return ThdLayout(real=real, physical=physical, total_tokens=int(total_tokens))


def physical_boundaries_for_cp(batch: Mapping[str, Any]) -> torch.Tensor:
    """The boundaries a context-parallel split uses: the padded ones when present, else the real ones.

    Legacy ``cu_seqlens`` is physical already and is trimmed before its sentinels.
    """
    return thd_layout(batch).physical
