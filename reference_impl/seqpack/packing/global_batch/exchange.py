"""The collectives of one global-batch step, over the data-parallel group (gloo works on CPU).

Three kinds of collectives per step, all over the DP group of the caller's CP lane (every CP lane
has its own DP group and computes the same schedule, because CP siblings hold identical samples):

1. :func:`gather_lengths`: every rank's sample count, then its padded lengths and dataset rows
   (right-padded to the largest count), in two ``all_gather`` calls. A rank that could not produce
   its samples sends the count ``-1`` instead, so every rank learns of the failure and raises,
   rather than the healthy ranks waiting forever in the next collective.
2. :func:`check_same_schedule`: every rank schedules on its own; one all-gather of a 63-bit
   fingerprint confirms they agree before any payload moves.
3. :func:`exchange_samples`: one ``all_to_all_single`` of int64 elements moves each sample from the
   rank that loaded it to the rank that runs it (a rank sends nothing to a rank that needs nothing:
   zero-sized splits, never a dummy element). Each sample travels as one record: ``tokens``,
   ``labels``, ``position_ids`` (``P`` each), ``loss_mask`` (``P`` float32 values, their bit patterns
   widened to int64, so the values arrive bit for bit), then ``original_seq_len``,
   ``padded_seq_len`` and ``row_index`` (``-1`` when absent). Records go in ascending sample id per
   destination; the receiver knows every length from step 1 and cuts the buffer without more
   messages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist

from seqpack.core.errors import PackingError, UsageError
from seqpack.packing.global_batch.schedule import GlobalSchedule

__all__ = ["RECORD_EXTRA", "check_same_schedule", "exchange_samples", "gather_lengths", "record_size"]

#: int64 elements a record carries besides its four per-token fields.
RECORD_EXTRA = 3


def record_size(padded_length: int) -> int:
    """int64 elements of one sample's record."""
    return 4 * int(padded_length) + RECORD_EXTRA


def gather_lengths(
    lengths: Sequence[int], rows: Sequence[int], *, failed: bool, group: Any
) -> tuple[list[list[int]], list[list[int]], list[int]]:
    """All-gather ``(lengths, rows)`` over ``group``: per-rank lists in group-rank order, and failed ranks.

    With ``failed=True`` this rank reports a failure instead of its samples. When any rank failed,
    the lists are empty and the failed ranks are returned (every rank sees the same answer).
    """
    size = dist.get_world_size(group=group)
    count = torch.tensor([-1 if failed else len(lengths)], dtype=torch.int64)
    counts_t = [torch.empty_like(count) for _ in range(size)]
    dist.all_gather(counts_t, count, group=group)
    counts = [int(c.item()) for c in counts_t]
    failed_ranks = [d for d, c in enumerate(counts) if c < 0]
    if failed_ranks:
        return [], [], failed_ranks
    width = max(counts)
    if width == 0:
        return [[] for _ in range(size)], [[] for _ in range(size)], []
    buf = torch.zeros(2 * width, dtype=torch.int64)
    n = len(lengths)
    if n:
        buf[:n] = torch.tensor([int(x) for x in lengths], dtype=torch.int64)
        buf[width : width + n] = torch.tensor([int(r) for r in rows], dtype=torch.int64)
    parts = [torch.empty_like(buf) for _ in range(size)]
    dist.all_gather(parts, buf, group=group)
    per_rank = [p[: counts[d]].tolist() for d, p in enumerate(parts)]
    rows_per_rank = [p[width : width + counts[d]].tolist() for d, p in enumerate(parts)]
    return per_rank, rows_per_rank, []


def check_same_schedule(schedule: GlobalSchedule, *, group: Any) -> None:
    """Raise PackingError unless every rank of ``group`` computed the same schedule (one small all-gather).

    Every rank schedules on its own from the gathered lengths; a difference would mean a
    non-deterministic scheduler, and would send payloads to the wrong ranks.
    """
    mine = torch.tensor([schedule.fingerprint()], dtype=torch.int64)
    parts = [torch.empty_like(mine) for _ in range(dist.get_world_size(group=group))]
    dist.all_gather(parts, mine, group=group)
    values = [int(p.item()) for p in parts]
    if len(set(values)) != 1:
        differ = [d for d, v in enumerate(values) if v != values[0]]
        raise PackingError(f"DP ranks {differ} computed a different {schedule.scheduler} schedule than DP rank 0 "
                           "from the same lengths", field="sequence_packing_scheduler")


def _encode(sample: Mapping[str, torch.Tensor]) -> torch.Tensor:
    row = sample.get("row_index")
    tail = torch.tensor(
        [int(sample["original_seq_len"][0]), int(sample["padded_seq_len"][0]), -1 if row is None else int(row[0])],
        dtype=torch.int64,
    )
    mask_bits = sample["loss_mask"].contiguous().view(torch.int32).to(torch.int64)
    return torch.cat([sample["tokens"], sample["labels"], sample["position_ids"], mask_bits, tail])


def _decode(record: torch.Tensor, padded: int) -> dict[str, torch.Tensor]:
    p = padded
    original, got_padded, row = (int(v) for v in record[4 * p :].tolist())
    if got_padded != p:
        raise UsageError(f"payload exchange out of step: expected a record of length {p}, got {got_padded}")
    out = {
        "tokens": record[:p].clone(),
        "labels": record[p : 2 * p].clone(),
        "position_ids": record[2 * p : 3 * p].clone(),
        "loss_mask": record[3 * p : 4 * p].to(torch.int32).view(torch.float32).clone(),
        "original_seq_len": torch.tensor([original], dtype=torch.int32),
        "padded_seq_len": torch.tensor([p], dtype=torch.int32),
    }
    if row >= 0:
        out["row_index"] = torch.tensor([row], dtype=torch.int64)
    return out


def exchange_samples(
    local: Sequence[Mapping[str, torch.Tensor]], schedule: GlobalSchedule, dp_rank: int, *, group: Any
) -> dict[int, dict[str, torch.Tensor]]:
    """Move payloads so this rank holds every sample of its packs: returns ``{global id: sample}``.

    ``local`` are the (checked) samples this rank loaded, in local order; ``group`` is the DP group
    (``None`` allowed only when DP = 1).
    """
    lo, hi = schedule.rank_offsets[dp_rank], schedule.rank_offsets[dp_rank + 1]
    if len(local) != hi - lo:
        raise UsageError(f"DP rank {dp_rank} passes {len(local)} samples but the schedule gives it {hi - lo}")
    dest = schedule.destinations()
    if schedule.dp_size == 1:
        return {lo + i: dict(s) for i, s in enumerate(local)}
    send_parts: list[torch.Tensor] = []
    send_splits: list[int] = []
    for d in range(schedule.dp_size):
        mine = [g for g in range(lo, hi) if dest[g] == d]
        send_parts.extend(_encode(local[g - lo]) for g in mine)
        send_splits.append(sum(record_size(schedule.lengths[g]) for g in mine))
    incoming: list[list[int]] = []
    recv_splits: list[int] = []
    for src in range(schedule.dp_size):
        gids = [g for g in range(schedule.rank_offsets[src], schedule.rank_offsets[src + 1]) if dest[g] == dp_rank]
        incoming.append(gids)
        recv_splits.append(sum(record_size(schedule.lengths[g]) for g in gids))
    send = torch.cat(send_parts) if send_parts else torch.zeros(0, dtype=torch.int64)
    recv = torch.empty(sum(recv_splits), dtype=torch.int64)
    dist.all_to_all_single(recv, send, output_split_sizes=recv_splits, input_split_sizes=send_splits, group=group)
    out: dict[int, dict[str, torch.Tensor]] = {}
    offset = 0
    for gids in incoming:
        for g in gids:
            n = record_size(schedule.lengths[g])
            out[g] = _decode(recv[offset : offset + n], schedule.lengths[g])
            offset += n
    return out
