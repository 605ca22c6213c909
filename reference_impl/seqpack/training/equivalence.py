"""Packed against unpacked in one batched computation: per-sequence losses, outputs and gradients.

The smoke test's central claim is that a packed row trains exactly like its sequences run alone.
Running every sequence alone, one forward and backward each, is slow; this module runs each side
as a padded stack of rows instead:

* the **packed side** is every packed micro-batch as one row (:func:`packed_row`): its tokens,
  labels, loss mask and position ids as the packing path produced them, and the attention mask
  built from its ``cu_seqlens`` (:func:`~seqpack.training.attention.attention_mask`, the
  function the context-parallel step uses too);
* the **unpacked side** is every sample as one row of its own (:func:`unpacked_row`): positions
  ``0..n-1`` and a plain causal mask, built here from the sample alone, with no packing code;
* both sides are stacked (:func:`stack_rows`, right padding; a padding position attends to itself
  only) in chunks of at most ``budget`` query-key pairs and run through the model's
  ``token_outputs`` and ``token_losses`` (rows of a stack never see each other).

:func:`compare_packed_unpacked` then checks, for every named per-token output and loss of the
model:

* every output at every real token, packed against the same token of its sample run alone;
* every loss's per-sequence sum and supervised-token count, and that no supervised token lies
  outside every sequence (alignment gaps, width padding);
* the gradient of one random weighted sum of all per-sequence losses (the weights are drawn
  from ``seed``; a sequence's sample gets the same weight on the unpacked side): equal gradients
  under random weights mean equal per-sequence gradients, except with probability zero, at the
  cost of one backward pass per side instead of one per sequence.

:func:`perturbation_leak` is the leakage probe: it changes one sequence's tokens and measures
how far every other position's outputs move.

What plugs in: a model option that adds a per-token output or loss returns it from
``token_outputs`` / ``token_losses`` (see :class:`~seqpack.training.model.TinyGPT`), and a
per-token input the option needs (image embeddings, M-RoPE positions) travels as an
``extra_keys`` entry of the batches and samples, into :attr:`TokenRows.extras`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from seqpack.core.errors import InputError
from seqpack.training.attention import attention_mask
from seqpack.training.boundaries import thd_layout

__all__ = [
    "DEFAULT_BUDGET",
    "EquivalenceResult",
    "LeakResult",
    "Row",
    "RowsResult",
    "TokenLoss",
    "TokenRows",
    "compare_packed_unpacked",
    "packed_row",
    "perturbation_leak",
    "run_rows",
    "stack_chunks",
    "stack_rows",
    "unpacked_row",
]

#: Query-key pairs per chunk of rows (the attention scores of one chunk: ``budget * heads`` floats).
DEFAULT_BUDGET = 1 << 20


@dataclass
class TokenLoss:
    """A per-token loss of a stack of rows: ``values`` ``[B, T]`` and the ``weight`` of each position."""

    values: torch.Tensor
    weight: torch.Tensor


@dataclass
class _PerToken:
    """The per-token tensors a row and a stack of rows share (see :class:`Row`, :class:`TokenRows`)."""

    tokens: torch.Tensor
    labels: torch.Tensor
    loss_mask: torch.Tensor
    position_ids: torch.Tensor
    attention: torch.Tensor
    segments: torch.Tensor


@dataclass
class Row(_PerToken):
    """One unpadded row: 1-D per-token tensors, its ``[T, T]`` attention mask and its sequences.

    ``segments`` gives, per position, the index of the compared sequence its real token belongs
    to, or -1 (alignment gap, padding). ``sequences`` lists ``(start, physical length, real
    length)`` of the row's sequences with real tokens, in order.
    """

    sequences: list[tuple[int, int, int]] = field(default_factory=list)
    extras: dict[str, torch.Tensor] = field(default_factory=dict)
    #: How MTP rolls this row, when given (:func:`~seqpack.training.mtp.roll_by_source`; None: inside each segment).
    mtp_source: torch.Tensor | None = None

    @property
    def length(self) -> int:
        """Number of positions."""
        return int(self.tokens.shape[0])


@dataclass
class TokenRows(_PerToken):
    """A stack of rows padded on the right to ``T``: what the model's ``token_outputs`` and ``token_losses`` read.

    ``tokens``, ``labels``, ``position_ids``, ``segments`` int64 ``[B, T]``; ``loss_mask`` float
    ``[B, T]``; ``attention`` bool ``[B, T, T]``; ``lengths`` int64 ``[B]``; ``extras`` per-token
    inputs ``[B, T, ...]`` (zero padded). Padding positions carry token 0, loss mask 0, segment -1
    and attend to themselves only.
    """

    lengths: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.int64))
    extras: dict[str, torch.Tensor] = field(default_factory=dict)
    #: ``[B, T]`` MTP source maps when some row gave one (the others roll inside their segments), else None.
    mtp_source: torch.Tensor | None = None


class EquivalenceModel(Protocol):
    """What the comparison needs of a model (:class:`~seqpack.training.model.TinyGPT` has it)."""

    def token_outputs(self, rows: TokenRows) -> dict[str, torch.Tensor]: ...

    def token_losses(self, rows: TokenRows, outputs: dict[str, torch.Tensor]) -> dict[str, TokenLoss]: ...

    def named_parameters(self) -> Any: ...


def _one_row(batch: Mapping[str, Any], key: str) -> torch.Tensor:
    value = batch.get(key)
    if not isinstance(value, torch.Tensor) or value.dim() < 2 or value.shape[0] != 1:
        raise InputError(f"batch needs a tensor '{key}' of shape [1, T]", field=key)
    return value[0]


def packed_row(
    batch: Mapping[str, Any], *, mode: str = "thd", first_segment: int = 0, extra_keys: Sequence[str] = ()
) -> Row:
    """A canonical packed micro-batch as a row: its own tensors, the mask of its boundaries (``mode``:
    ``"thd"`` or the ``"causal"`` negative control), and segment ids ``first_segment, first_segment + 1, ...``
    for its sequences with real tokens (zero-length ones get none)."""
    layout = thd_layout(batch)
    everything = torch.arange(layout.total_tokens)
    seq_id, is_real = layout.token_segments()
    starts, real = layout.physical[:-1].tolist(), layout.real_lengths().tolist()
    physical = layout.physical_lengths().tolist()
    numbered = [i for i in range(layout.num_sequences) if real[i] > 0]
    number = torch.full((layout.num_sequences + 1,), -1, dtype=torch.int64)
    number[numbered] = torch.arange(first_segment, first_segment + len(numbered))
    segments = torch.where(is_real, number[seq_id], torch.full_like(seq_id, -1))
    return Row(
        tokens=_one_row(batch, "tokens").to(torch.int64),
        labels=_one_row(batch, "labels").to(torch.int64),
        loss_mask=_one_row(batch, "loss_mask"),
        position_ids=_one_row(batch, "position_ids").to(torch.int64),
        attention=attention_mask(layout, everything, everything, mode),
        segments=segments,
        sequences=[(starts[i], physical[i], real[i]) for i in numbered],
        extras={k: _one_row(batch, k) for k in extra_keys},
    )


def unpacked_row(sample: Mapping[str, Any], segment: int, *, extra_keys: Sequence[str] = ()) -> Row:
    """One sample alone (``tokens``, ``labels``, ``loss_mask`` and ``extra_keys``, 1-D): positions from 0,
    plain causal attention, every token in ``segment``. Built without any packing code."""
    tokens = torch.as_tensor(sample["tokens"], dtype=torch.int64).reshape(-1)
    n = int(tokens.shape[0])
    return Row(
        tokens=tokens,
        labels=torch.as_tensor(sample["labels"], dtype=torch.int64).reshape(-1),
        loss_mask=torch.as_tensor(sample["loss_mask"], dtype=torch.float32).reshape(-1),
        position_ids=torch.arange(n, dtype=torch.int64),
        attention=torch.ones(n, n, dtype=torch.bool).tril(),
        segments=torch.full((n,), segment, dtype=torch.int64),
        sequences=[(0, n, n)] if n else [],
        extras={k: torch.as_tensor(sample[k]) for k in extra_keys},
    )


def _largest(values: torch.Tensor) -> float:
    """Largest absolute value (0 for an empty tensor)."""
    return float(values.abs().max()) if values.numel() else 0.0


def _pad(values: Sequence[torch.Tensor], width: int, fill: float | int) -> torch.Tensor:
    out = values[0].new_full((len(values), width, *values[0].shape[1:]), fill)
    for i, v in enumerate(values):
        out[i, : v.shape[0]] = v
    return out


def stack_rows(rows: Sequence[Row]) -> TokenRows:
    """Pad ``rows`` on the right to the longest and stack them (see :class:`TokenRows`)."""
    if not rows:
        raise InputError("no rows to stack")
    width = max(r.length for r in rows)
    attention = torch.eye(width, dtype=torch.bool).repeat(len(rows), 1, 1)
    for i, r in enumerate(rows):
        attention[i, : r.length, : r.length] = r.attention
    return TokenRows(
        tokens=_pad([r.tokens for r in rows], width, 0),
        labels=_pad([r.labels for r in rows], width, 0),
        loss_mask=_pad([r.loss_mask for r in rows], width, 0),
        position_ids=_pad([r.position_ids for r in rows], width, 0),
        attention=attention,
        segments=_pad([r.segments for r in rows], width, -1),
        lengths=torch.tensor([r.length for r in rows], dtype=torch.int64),
        extras={k: _pad([r.extras[k] for r in rows], width, 0) for k in rows[0].extras},
        mtp_source=_sources(rows, width),
    )


def _sources(rows: Sequence[Row], width: int) -> torch.Tensor | None:
    """The rows' MTP source maps padded to ``width`` (a row without one: its in-segment map), or None."""
    if all(r.mtp_source is None for r in rows):
        return None
    from seqpack.training.mtp import segment_source

    return _pad([r.mtp_source if r.mtp_source is not None else segment_source(r.segments) for r in rows], width, 0)


def stack_chunks(rows: Sequence[Row], budget: int) -> list[list[int]]:
    """Indices of ``rows`` in chunks of at most ``budget`` query-key pairs (longest rows first; a row
    longer than the budget gets a chunk of its own)."""
    order = sorted(range(len(rows)), key=lambda i: -rows[i].length)
    out: list[list[int]] = []
    for i in order:
        width = rows[out[-1][0]].length if out else 0
        if out and (len(out[-1]) + 1) * width * width <= budget:
            out[-1].append(i)
        else:
            out.append([i])
    return out


@dataclass
class RowsResult:
    """What :func:`run_rows` computed over a set of rows.

    ``sums`` / ``counts``: per loss name, ``[S + 1]`` loss sums and weights (supervised tokens) per
    segment, the last bucket holding every position outside a segment; ``outputs``: per output
    name, the values at every real token in (segment, position) order, ``token_segments`` the
    segment of each; ``grads``: the gradient of the weighted sum of all loss sums.
    """

    sums: dict[str, torch.Tensor]
    counts: dict[str, torch.Tensor]
    outputs: dict[str, torch.Tensor]
    token_segments: torch.Tensor
    grads: dict[str, torch.Tensor]


def run_rows(model: EquivalenceModel, rows: Sequence[Row], weights: torch.Tensor,
             budget: int = DEFAULT_BUDGET) -> RowsResult:
    """Forward and backward of every row, in chunks of at most ``budget`` query-key pairs.

    ``weights`` ``[S + 1]`` weigh each segment's loss sums (the last one: positions outside every
    segment) in the objective whose gradient is returned. The parameters' ``.grad`` is not touched.
    """
    buckets = weights.shape[0]
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    grads = {n: torch.zeros_like(p) for n, p in params}
    sums: dict[str, torch.Tensor] = {}
    counts: dict[str, torch.Tensor] = {}
    kept: dict[str, list[torch.Tensor]] = {}
    keys: list[torch.Tensor] = []
    segs: list[torch.Tensor] = []
    span = max((r.length for r in rows), default=0) + 1  # key = segment * span + position orders all chunks alike
    for chunk in stack_chunks(rows, budget):
        stack = stack_rows([rows[i] for i in chunk])
        outputs = model.token_outputs(stack)
        losses = model.token_losses(stack, outputs)
        bucket = torch.where(stack.segments >= 0, stack.segments, buckets - 1).reshape(-1)
        objective = None
        for name, loss in losses.items():
            w = loss.weight.to(loss.values.dtype).reshape(-1)
            s = torch.zeros(buckets, dtype=loss.values.dtype).index_add(0, bucket, loss.values.reshape(-1) * w)
            c = torch.zeros(buckets, dtype=loss.values.dtype).index_add(0, bucket, w.detach())
            sums[name] = sums[name] + s.detach() if name in sums else s.detach()
            counts[name] = counts[name] + c if name in counts else c
            term = (s * weights.to(s.dtype)).sum()
            objective = term if objective is None else objective + term
        if objective is not None and objective.requires_grad:
            got = torch.autograd.grad(objective, [p for _, p in params], allow_unused=True)
            for (n, _), g in zip(params, got):
                if g is not None:
                    grads[n] += g
        real = stack.segments >= 0
        position = torch.arange(stack.segments.shape[1]).expand_as(stack.segments)
        keys.append((stack.segments * span + position)[real])
        segs.append(stack.segments[real])
        for name, value in outputs.items():
            kept.setdefault(name, []).append(value.detach()[real])
    order = torch.argsort(torch.cat(keys)) if keys else torch.zeros(0, dtype=torch.int64)
    return RowsResult(sums, counts, {n: torch.cat(v)[order] for n, v in kept.items()},
                      torch.cat(segs)[order] if segs else order, grads)


@dataclass
class EquivalenceResult:
    """Largest packed-vs-unpacked differences over every compared sequence, output, loss and parameter.

    ``outside_loss_tokens`` counts supervised positions (of any loss) that belong to no sequence
    on the packed side; ``unmatched`` counts packed sequences without a sample to compare with.
    ``output_diffs``, ``loss_diffs`` and ``count_diffs`` hold the same maxima per output and loss name
    (a model option's own check reads its names there).
    """

    sequences: int
    unmatched: int
    outputs: tuple[str, ...]
    losses: tuple[str, ...]
    max_output_diff: float
    max_loss_diff: float
    max_count_diff: float
    outside_loss_tokens: float
    max_grad_diff: float
    chunks: dict[str, int]
    output_diffs: dict[str, float] = field(default_factory=dict)
    loss_diffs: dict[str, float] = field(default_factory=dict)
    count_diffs: dict[str, float] = field(default_factory=dict)

    def ok(self, tolerance: float) -> bool:
        """Every difference within ``tolerance``, nothing supervised outside a sequence, something compared."""
        return (self.sequences > 0 and self.unmatched == 0 and self.outside_loss_tokens == 0
                and max(self.max_output_diff, self.max_loss_diff, self.max_count_diff, self.max_grad_diff) <= tolerance)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


def compare_packed_unpacked(
    model: EquivalenceModel,
    packed: Sequence[Row],
    unpacked: Sequence[Row],
    match: Sequence[int],
    *,
    seed: int = 0,
    budget: int = DEFAULT_BUDGET,
) -> EquivalenceResult:
    """Compare packed rows with unpacked rows (see the module docstring).

    ``packed`` rows number their sequences ``0..K-1`` (``first_segment`` of :func:`packed_row`);
    unpacked row ``j`` is segment ``j``; ``match[k]`` is the unpacked row of packed sequence ``k``
    (-1: none; such a sequence is counted as unmatched and left out).
    """
    k_total = len(match)
    gen = torch.Generator().manual_seed(int(seed))
    # weights around 1 / (supervised tokens), so gradients are O(1) and rounding stays near 1e-15
    scale = max(float(sum(float(r.loss_mask.sum()) for r in packed)), 1.0)
    w = (0.5 + torch.rand(k_total, generator=gen, dtype=torch.float64)) / scale
    matched = torch.tensor([m >= 0 for m in match], dtype=torch.bool)
    target = torch.tensor([max(m, 0) for m in match], dtype=torch.int64)
    packed_w = torch.cat([torch.where(matched, w, torch.zeros_like(w)), torch.full((1,), 1.0 / scale)])
    unpacked_w = torch.zeros(len(unpacked) + 1, dtype=torch.float64).index_add(0, target[matched], w[matched])
    p = run_rows(model, packed, packed_w, budget)
    u = run_rows(model, unpacked, unpacked_w, budget)

    outside = 0.0
    loss_diffs: dict[str, float] = {}
    count_diffs: dict[str, float] = {}
    for name, sums in p.sums.items():
        if name not in u.sums:
            if not bool(matched.any()):  # nothing to compare with: no sequence counts (``sequences`` is 0)
                outside += float(p.counts[name][-1])
                continue
            raise InputError(f"the model gave the loss {name!r} for packed rows only")
        loss_diffs[name] = _largest((sums[:-1] - u.sums[name][target])[matched])
        count_diffs[name] = _largest((p.counts[name][:-1] - u.counts[name][target])[matched])
        outside += float(p.counts[name][-1])

    # tokens of packed sequence k against the tokens of its unpacked row, in order
    p_len = torch.bincount(p.token_segments, minlength=k_total)
    u_len = torch.bincount(u.token_segments, minlength=max(len(unpacked), 1))
    comparable = matched & (p_len == u_len[target])
    p_start = torch.cumsum(p_len, 0) - p_len
    u_start = torch.cumsum(u_len, 0) - u_len
    ks = torch.nonzero(comparable).reshape(-1)
    count = p_len[ks]
    offset = torch.arange(int(count.sum())) - torch.repeat_interleave(torch.cumsum(count, 0) - count, count)
    p_index = torch.repeat_interleave(p_start[ks], count) + offset
    u_index = torch.repeat_interleave(u_start[target[ks]], count) + offset
    output_diffs = {name: _largest(values[p_index] - u.outputs[name][u_index]) if ks.numel() else 0.0
                    for name, values in p.outputs.items()}
    if int((matched & ~comparable).sum()):  # a matched sequence of another length: a difference, not a pass
        output_diffs = {name: float("inf") for name in output_diffs}

    grad_diff = max((_largest(p.grads[n] - u.grads[n]) for n in p.grads), default=0.0)
    return EquivalenceResult(
        sequences=int(matched.sum()), unmatched=int((~matched).sum()), outputs=tuple(p.outputs),
        losses=tuple(p.sums), max_output_diff=max(output_diffs.values(), default=0.0),
        max_loss_diff=max(loss_diffs.values(), default=0.0), max_count_diff=max(count_diffs.values(), default=0.0),
        outside_loss_tokens=outside, max_grad_diff=grad_diff,
        chunks={"packed": len(stack_chunks(packed, budget)), "unpacked": len(stack_chunks(unpacked, budget))},
        output_diffs=output_diffs, loss_diffs=loss_diffs, count_diffs=count_diffs,
    )


@dataclass
class LeakResult:
    """Leakage probe: rows probed, the largest change of another position's outputs, the smallest
    (over probed rows) largest change of the perturbed sequence's own outputs."""

    rows: int
    max_other_change: float
    min_own_change: float


def perturbation_leak(
    model: EquivalenceModel, rows: Sequence[Row], vocab_size: int, *, shift: int = 7, budget: int = DEFAULT_BUDGET,
    targets: Sequence[int] | None = None, perturbed_extras: Sequence[Mapping[str, torch.Tensor] | None] | None = None,
) -> LeakResult:
    """Change the tokens of one sequence of every row (``+shift`` mod ``vocab_size``; the ``targets[i]``-th
    sequence of row ``i``, by default the first) and compare every per-token output of the row before
    and after, in one forward without gradients per chunk. ``perturbed_extras[i]`` (optional) replaces
    row ``i``'s :attr:`Row.extras` in the perturbed run: inputs perturbed where they were built (a
    VLM sequence's images, changed before the per-token inputs were derived from the batch).

    Outputs of the perturbed sequence's positions must move; every other position of the row must not.
    """
    base, poked, own = [], [], []
    for i, r in enumerate(rows):
        start, length, real = r.sequences[targets[i] if targets is not None else 0]
        extras = perturbed_extras[i] if perturbed_extras is not None else None
        tokens = r.tokens.clone()
        tokens[start : start + real] = (tokens[start : start + real] + shift) % vocab_size
        mine = torch.zeros(r.length, dtype=torch.bool)
        mine[start : start + length] = True
        base.append(r)
        poked.append(Row(**{**r.__dict__, "tokens": tokens, "extras": dict(r.extras if extras is None else extras)}))
        own.append(mine)
    both = [*base, *poked]
    other_max, own_min = 0.0, float("inf")
    with torch.no_grad():
        results: dict[int, dict[str, torch.Tensor]] = {}
        for chunk in stack_chunks(both, budget):
            outputs = model.token_outputs(stack_rows([both[i] for i in chunk]))
            for j, i in enumerate(chunk):
                results[i] = {n: v[j, : both[i].length] for n, v in outputs.items()}
    for i, r in enumerate(rows):
        before, after = results[i], results[len(rows) + i]
        change = torch.stack([
            (after[n] - before[n]).abs().reshape(r.length, -1).amax(dim=1) for n in before
        ]).amax(dim=0)
        other_max = max(other_max, _largest(change[~own[i]]))
        own_min = min(own_min, _largest(change[own[i]]))
    return LeakResult(len(rows), other_max, own_min if rows else 0.0)
