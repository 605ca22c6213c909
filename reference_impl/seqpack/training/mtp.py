"""Multi-token prediction (MTP) for the reference model, and the boundary-aware roll it needs.

An MTP depth ``k`` predicts, at position ``i``, the token ``k + 1`` places ahead. It reads the
trunk's hidden state at ``i`` together with the embedding of the input token ``k`` places ahead,
so inputs, position ids, labels and loss mask are all *rolled left* once per depth. In a packed
row that roll must stay inside each sequence: the last real position of a sequence gets no token
and no target from the next one (it is filled with 0 and drops out of the loss).

This is what Megatron-Core's ``roll_tensor`` does for packed input since core_v0.16.0
(``megatron/core/transformer/multi_token_prediction.py``, ``_roll_tensor_packed_seq``, added by
NVIDIA/Megatron-LM#2173, commit 8c4df6b0): it rolls each window ``cu_seqlens_q[i]:cu_seqlens_q[i+1]``
and zeroes the window's last slot. Megatron-Core reads those windows from ``cu_seqlens_q``, the
*real* boundaries, as physical offsets (core_v0.16.0 to core_v0.19.0 and main at d98e8a64); with
per-sequence alignment padding (``cu_seqlens_q_padded`` differs) every window after the first is
misplaced (open fixes: NVIDIA/Megatron-LM#4495, #6205). :data:`ROLL_MODES` names the three ways
to roll so the smoke test and the tests can show the difference:

* ``"sequence"`` (what seqpack does): windows are the physical sequences (padded boundaries when
  present), only real tokens move, every other slot is 0;
* ``"mcore_real_offsets"``: Megatron-Core's rule above, windows from the real boundaries;
* ``"row"``: one roll over the whole row (Megatron-Core's path without ``packed_seq_params``),
  which crosses every boundary; a negative control.

The MTP loss of a depth follows ``process_mtp_loss``: the masked cross-entropy sum over the
rolled loss mask, divided by the rolled token count, times ``loss_scaling_factor / num_layers``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from seqpack.core.arguments import positive_int
from seqpack.core.errors import InputError, UsageError
from seqpack.training.boundaries import ThdLayout, thd_layout

__all__ = [
    "MTP_KEYS",
    "PACKED_ROLL_SINCE",
    "ROLL_MODES",
    "MTPConfig",
    "MTPHead",
    "mtp_streams",
    "roll_by_source",
    "roll_in_segments",
    "roll_packed",
    "segment_source",
    "segments_of",
    "stack_streams",
    "upstream_roll_name",
    "upstream_roll_source",
    "with_mtp_streams",
]

ROLL_MODES: tuple[str, ...] = ("sequence", "mcore_real_offsets", "row")
#: First Megatron-Core release whose MTP roll stays inside each packed sequence (NVIDIA/Megatron-LM#2173,
#: commit 8c4df6b0 of 2025-12-07; core_v0.15.3 rolls over the whole row).
PACKED_ROLL_SINCE = "core_v0.16.0"
#: Per-token keys :func:`with_mtp_streams` adds to a batch, each ``[1, T, num_layers]``.
MTP_KEYS: tuple[str, ...] = ("mtp_tokens", "mtp_position_ids", "mtp_labels", "mtp_loss_mask")


@dataclass(frozen=True)
class MTPConfig:
    """MTP head sizes: ``num_layers`` prediction depths (Megatron-Core's ``mtp_num_layers``).

    ``loss_scaling_factor`` is Megatron-Core's ``mtp_loss_scaling_factor`` (default 0.1): the MTP
    loss enters the objective as ``loss_scaling_factor / num_layers`` times each depth's mean.
    """

    num_layers: int = 1
    loss_scaling_factor: float = 0.1

    def __post_init__(self) -> None:
        positive_int("mtp.num_layers", self.num_layers, maximum=4)
        if not self.loss_scaling_factor >= 0:
            raise UsageError(f"mtp.loss_scaling_factor must be >= 0, got {self.loss_scaling_factor}",
                             field="loss_scaling_factor")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


def roll_in_segments(values: torch.Tensor, segments: torch.Tensor) -> torch.Tensor:
    """Roll ``values`` ``[..., T]`` one position left inside each segment; every other slot gets 0.

    ``segments`` ``[..., T]`` holds the sequence of each real token and -1 elsewhere (alignment
    gaps, width padding). Position ``i`` takes ``values[i + 1]`` when ``i + 1`` is a real token of
    the same sequence as ``i``: the last real token of a sequence gets nothing from the next one.
    """
    if segments.shape != values.shape:
        raise InputError(f"segments {list(segments.shape)} and values {list(values.shape)} must have one shape")
    out = torch.zeros_like(values)
    same = (segments[..., 1:] == segments[..., :-1]) & (segments[..., :-1] >= 0)
    out[..., :-1] = torch.where(same, values[..., 1:], out[..., :-1])
    return out


def segments_of(layout: ThdLayout) -> torch.Tensor:
    """Per position of the row: its sequence index for a real token, -1 elsewhere."""
    seq_id, real = layout.token_segments()
    return torch.where(real, seq_id, torch.full_like(seq_id, -1))


def roll_packed(values: torch.Tensor, layout: ThdLayout, mode: str = "sequence") -> torch.Tensor:
    """Roll a per-token row ``[T]`` one position left inside each window of ``mode`` (see module doc).

    In ``"sequence"`` mode (:func:`roll_in_segments`) a real position takes the next real token of
    its own sequence, and the last real position of every sequence, the alignment gaps and the
    tail past the last boundary hold 0. The other modes reproduce Megatron-Core's rules.
    """
    if mode not in ROLL_MODES:
        raise UsageError(f"roll mode must be one of {list(ROLL_MODES)}, got {mode!r}", field="mode")
    total = layout.total_tokens
    if values.shape[0] != total:
        raise InputError(f"cannot roll {values.shape[0]} positions with a layout of {total} tokens")
    if mode == "sequence":
        return roll_in_segments(values, segments_of(layout).to(values.device))
    if mode == "row":
        out = torch.zeros_like(values)
        out[: total - 1] = values[1:]
        return out
    out = values.clone()
    real = layout.real.tolist()
    for start, stop in zip(real[:-1], real[1:]):
        if stop > start:
            out[start:stop] = torch.roll(values[start:stop], shifts=-1, dims=0)
            out[stop - 1] = 0
    return out


def _row(batch: Mapping[str, Any], key: str) -> torch.Tensor:
    value = batch.get(key)
    if not isinstance(value, torch.Tensor) or value.dim() != 2 or value.shape[0] != 1:
        raise InputError(f"batch needs a tensor '{key}' of shape [1, T]", field=key)
    return value[0]


def mtp_streams(batch: Mapping[str, Any], num_layers: int, mode: str = "sequence") -> dict[str, torch.Tensor]:
    """The rolled inputs and targets of every MTP depth of a whole (not CP-sliced) packed row.

    Depth ``k`` (column ``k - 1``) holds the inputs rolled ``k`` times and the labels and loss
    mask rolled ``k`` times, as ``process_mtp_loss`` and the MTP layers roll them. Each value is
    ``[1, T, num_layers]``, so a context-parallel split slices them like any per-token tensor.
    """
    positive_int("num_layers", num_layers)
    layout = thd_layout(batch)
    current = {
        "mtp_tokens": _row(batch, "tokens"),
        "mtp_position_ids": _row(batch, "position_ids"),
        "mtp_labels": _row(batch, "labels"),
        "mtp_loss_mask": _row(batch, "loss_mask"),
    }
    rolled = _rolled(current, lambda value: roll_packed(value, layout, mode), num_layers)
    return {key: value[None] for key, value in rolled.items()}


def _rolled(values: Mapping[str, torch.Tensor], roll: Callable[[torch.Tensor], torch.Tensor],
            num_layers: int) -> dict[str, torch.Tensor]:
    """Each of ``values`` ``[..., T]`` rolled ``k`` times by ``roll`` in column ``k - 1`` of ``[..., T, D]``."""
    columns: dict[str, list[torch.Tensor]] = {key: [] for key in values}
    current = dict(values)
    for _ in range(num_layers):
        current = {key: roll(value) for key, value in current.items()}
        for key, value in current.items():
            columns[key].append(value)
    return {key: torch.stack(cols, dim=-1) for key, cols in columns.items()}


def roll_by_source(values: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """``values`` ``[..., T]`` rolled by a source map: position ``i`` takes ``values[source[i] - 1]``, or 0 where
    ``source[i]`` is 0 (the map :func:`upstream_roll_source` reads off Megatron-Core's roll)."""
    if source.shape != values.shape:
        raise InputError(f"source {list(source.shape)} and values {list(values.shape)} must have one shape")
    taken = torch.gather(values, -1, (source - 1).clamp(min=0))
    return torch.where(source > 0, taken, torch.zeros_like(taken))


def segment_source(segments: torch.Tensor) -> torch.Tensor:
    """The source map of :func:`roll_in_segments`: ``i + 2`` where position ``i + 1`` is a real token of the
    same sequence as ``i``, else 0."""
    out = torch.zeros_like(segments)
    same = (segments[..., 1:] == segments[..., :-1]) & (segments[..., :-1] >= 0)
    index = torch.arange(2, segments.shape[-1] + 1, dtype=segments.dtype).expand_as(segments[..., :-1])
    out[..., :-1] = torch.where(same, index, out[..., :-1])
    return out


def upstream_roll_source(batch: Mapping[str, Any]) -> torch.Tensor:
    """How the installed Megatron-Core's own ``roll_tensor`` rolls MTP inputs and targets over a packed row:
    it rolls the position numbers ``1..T`` of ``batch`` (its boundaries through a real ``PackedSeqParams``)
    and returns the map ``[T]`` (:func:`roll_by_source`): 1 + the position each slot takes its value from,
    0 where it takes nothing. Imports Megatron-Core (:func:`~seqpack.training.ranks.import_megatron_core`)."""
    from seqpack.training.packed_seq_params import to_packed_seq_params
    from seqpack.training.ranks import import_megatron_core

    import_megatron_core()
    from megatron.core.transformer.multi_token_prediction import roll_tensor

    width = int(_row(batch, "tokens").shape[0])
    numbers = torch.arange(1, width + 1, dtype=torch.int64)[None]
    rolled, _ = roll_tensor(numbers, shifts=-1, dims=-1, cp_group=None, packed_seq_params=to_packed_seq_params(batch))
    return rolled[0].to(torch.int64)


def upstream_roll_name() -> str:
    """``megatron-core <version> roll_tensor``: the roll :func:`upstream_roll_source` runs."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"megatron-core {version('megatron-core')} roll_tensor"
    except PackageNotFoundError:  # pragma: no cover - the train extra installs it
        return "megatron-core roll_tensor"


def stack_streams(values: Mapping[str, torch.Tensor], segments: torch.Tensor, num_layers: int,
                  source: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """The MTP streams of a stack of rows: each of ``values`` (``[..., T]``, keyed by :data:`MTP_KEYS`)
    rolled ``k`` times inside ``segments`` (:func:`roll_in_segments`) for depth ``k``, as ``[..., T, D]``;
    with a ``source`` map, rolled by it instead (:func:`roll_by_source`), depth after depth as Megatron-Core
    rolls the previous depth's values again."""
    if source is not None:
        return _rolled(values, lambda value: roll_by_source(value, source), num_layers)
    return _rolled(values, lambda value: roll_in_segments(value, segments), num_layers)


def with_mtp_streams(batch: Mapping[str, Any], num_layers: int, mode: str = "sequence") -> dict[str, Any]:
    """A shallow copy of ``batch`` with the :data:`MTP_KEYS` streams of :func:`mtp_streams` added."""
    return {**batch, **mtp_streams(batch, num_layers, mode)}


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


class MTPHead(nn.Module):
    """The MTP depths of the reference model (DeepSeek-V3 / Megatron-Core layout, tiny).

    Depth ``k``: ``h_k = block_k(proj_k([norm(embed(tokens rolled k)); norm(h_{k-1})]))`` with
    ``h_0`` the trunk's last hidden state, then logits ``lm_head(final_norm_k(h_k))`` through the
    shared embedding and output head of the trunk. ``make_block`` builds a transformer block like
    the trunk's (MoE when the trunk is MoE), so an MTP layer routes tokens too.
    """

    def __init__(self, config: MTPConfig, hidden_size: int, norm_eps: float,
                 draw: Callable[..., nn.Parameter], make_block: Callable[[], nn.Module]) -> None:
        super().__init__()
        self.config = config
        self.norm_eps = norm_eps
        h = hidden_size
        self.embed_norms = nn.ParameterList(draw(h, around_one=True) for _ in range(config.num_layers))
        self.hidden_norms = nn.ParameterList(draw(h, around_one=True) for _ in range(config.num_layers))
        self.projections = nn.ParameterList(draw(2 * h, h) for _ in range(config.num_layers))
        self.blocks = nn.ModuleList(make_block() for _ in range(config.num_layers))
        self.final_norms = nn.ParameterList(draw(h, around_one=True) for _ in range(config.num_layers))

    def forward(
        self,
        hidden: torch.Tensor,
        streams: Mapping[str, torch.Tensor],
        embedding: torch.Tensor,
        lm_head: torch.Tensor,
        mask: torch.Tensor,
        rope: Callable[[torch.Tensor, torch.dtype], tuple[torch.Tensor, torch.Tensor]],
        block_kwargs: Mapping[str, Any],
    ) -> list[torch.Tensor]:
        """Logits ``[B, T, V]`` of every depth for ``hidden`` ``[B, T, H]`` and ``mask`` ``[B, T, T_keys]``.

        ``streams`` hold the rolled ``mtp_tokens`` and ``mtp_position_ids`` as ``[B, T, D]`` (for one
        row: this rank's slice of :func:`with_mtp_streams`); ``rope`` gives the rotary tables of positions.
        """
        tokens, positions = streams["mtp_tokens"], streams["mtp_position_ids"]
        want = (*hidden.shape[:-1], self.config.num_layers)
        if tokens.dim() == len(want) + 1 and tokens.shape[0] == 1:
            tokens, positions = tokens[0], positions[0]
        if tuple(tokens.shape) != want:
            raise InputError(
                f"MTP streams have shape {list(tokens.shape)}; expected {list(want)} "
                "(build them with with_mtp_streams on the whole row before any CP split)",
                field="mtp_tokens",
            )
        eps = self.norm_eps
        out = []
        for k, block in enumerate(self.blocks):
            emb = _rms_norm(embedding[tokens[..., k]], self.embed_norms[k], eps)
            hidden = torch.cat([emb, _rms_norm(hidden, self.hidden_norms[k], eps)], dim=-1) @ self.projections[k]
            hidden = block(hidden, rope(positions[..., k], hidden.dtype), mask, **block_kwargs)
            out.append(_rms_norm(hidden, self.final_norms[k], eps) @ lm_head)
        return out
