"""The result every global-batch scheduler returns, the capacity check, and the scheduler registry.

Vocabulary:

* *global sample id* (gid): DP rank ``d`` loaded the samples ``rank_offsets[d] ..
  rank_offsets[d+1]-1`` of the step, numbered in its local order (Megatron-Core's numbering);
* *length*: a sample's padded length ``P`` (what the scheduler packs; already a multiple of the
  context-parallel alignment);
* *capacity* ``C = max_seqlen_per_dp_cp_rank * CP``: the most tokens one pack may hold;
* *slot* ``p`` of :attr:`GlobalSchedule.packs`: micro-batch ``p // DP`` on DP rank ``p % DP``; every
  CP rank of that DP replica runs the whole pack (the CP split happens per pack, later);
* *filler pack*: an empty slot ``()``. The rank runs it as one padding-only sequence with no
  supervised token, so every rank still runs the same number of micro-batches (used only where
  Megatron-Core would stop on an assertion; see ``docs/compatibility.md``).

Pure Python and numpy: no torch, no I/O.
"""

from __future__ import annotations

import hashlib
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from seqpack.core.arguments import positive_int
from seqpack.core.errors import PackingError, UsageError

__all__ = [
    "GlobalSchedule",
    "Scheduler",
    "check_capacity",
    "get_scheduler",
    "register_scheduler",
    "schedule_global_batch",
    "scheduler_names",
]

_SHOWN = 8  # samples quoted in an error message


@dataclass(frozen=True)
class GlobalSchedule:
    """Which samples form which pack, and which DP rank runs it in which micro-batch.

    ``packs[p]`` holds global sample ids (ascending within a pack for ``dp_balanced``, as upstream);
    ``()`` is a filler pack. ``adjustments`` lists, in words, every place where the schedule departs
    from what the scheduler does in the common case (splits, filler packs).
    """

    scheduler: str
    dp_size: int
    cp_size: int
    capacity: int
    lengths: tuple[int, ...]
    rank_offsets: tuple[int, ...]
    packs: tuple[tuple[int, ...], ...]
    adjustments: tuple[str, ...] = ()

    # -- sizes -----------------------------------------------------------------------------------
    @property
    def num_samples(self) -> int:
        """Samples in the global batch (all DP ranks)."""
        return len(self.lengths)

    @property
    def num_micro_batches(self) -> int:
        """Micro-batches every DP rank runs this step."""
        return len(self.packs) // self.dp_size

    @property
    def num_filler_packs(self) -> int:
        """Slots with no sample."""
        return sum(1 for p in self.packs if not p)

    # -- lookups ---------------------------------------------------------------------------------
    def pack(self, micro_batch: int, dp_rank: int) -> tuple[int, ...]:
        """Global sample ids DP rank ``dp_rank`` runs as micro-batch ``micro_batch``."""
        if not 0 <= dp_rank < self.dp_size or not 0 <= micro_batch < self.num_micro_batches:
            raise UsageError(
                f"micro-batch {micro_batch} / DP rank {dp_rank} is outside the schedule "
                f"({self.num_micro_batches} micro-batches x {self.dp_size} ranks)"
            )
        return self.packs[micro_batch * self.dp_size + dp_rank]

    def rank_packs(self, dp_rank: int) -> list[tuple[int, ...]]:
        """The packs of DP rank ``dp_rank`` in micro-batch order."""
        return [self.pack(k, dp_rank) for k in range(self.num_micro_batches)]

    def source_rank(self, gid: int) -> int:
        """The DP rank that loaded sample ``gid``."""
        if not 0 <= gid < self.num_samples:
            raise UsageError(f"sample id {gid} is outside [0, {self.num_samples})")
        lo, hi = 0, self.dp_size
        while hi - lo > 1:  # last offset <= gid
            mid = (lo + hi) // 2
            if self.rank_offsets[mid] <= gid:
                lo = mid
            else:
                hi = mid
        return lo

    def destinations(self) -> list[int]:
        """DP rank that runs each sample (index: global sample id)."""
        dest = [-1] * self.num_samples
        for p, pack in enumerate(self.packs):
            for gid in pack:
                dest[gid] = p % self.dp_size
        return dest

    def dcp_groups(self) -> list[list[list[int]]]:
        """Megatron-Core's ``sample_id_groups[k][j]``: micro-batch ``k``, DP x CP rank ``j = dp * CP + cp``."""
        return [
            [list(self.pack(k, j // self.cp_size)) for j in range(self.dp_size * self.cp_size)]
            for k in range(self.num_micro_batches)
        ]

    # -- statistics ------------------------------------------------------------------------------
    def pack_tokens(self, pack: Sequence[int]) -> int:
        """Padded tokens of a pack."""
        return sum(self.lengths[g] for g in pack)

    def pack_attention(self, pack: Sequence[int]) -> int:
        """Attention-cost proxy of a pack: the sum of ``P**2`` over its samples."""
        return sum(self.lengths[g] ** 2 for g in pack)

    @property
    def seqlen_sum(self) -> int:
        """Sum of padded lengths over the whole global batch (Megatron-Core's FLOPs input, exact)."""
        return sum(self.lengths)

    @property
    def seqlen_squared_sum(self) -> int:
        """Sum of squared padded lengths over the whole global batch (exact Python int)."""
        return sum(x * x for x in self.lengths)

    def micro_batch_loads(self) -> list[list[tuple[int, int]]]:
        """``[k][d] = (tokens, sum P**2)`` of micro-batch ``k`` on DP rank ``d``."""
        dp = self.dp_size
        return [
            [(self.pack_tokens(p), self.pack_attention(p)) for p in self.packs[k * dp : (k + 1) * dp]]
            for k in range(self.num_micro_batches)
        ]

    def rank_loads(self) -> tuple[list[int], list[int]]:
        """Per DP rank over the step: (tokens, sum P**2)."""
        tokens = [0] * self.dp_size
        attention = [0] * self.dp_size
        for p, pack in enumerate(self.packs):
            tokens[p % self.dp_size] += self.pack_tokens(pack)
            attention[p % self.dp_size] += self.pack_attention(pack)
        return tokens, attention

    def imbalance(self) -> dict[str, float]:
        """max / mean rank load over the step, for tokens and for the attention proxy (1.0 = perfect)."""
        tokens, attention = self.rank_loads()
        return {"tokens": _max_over_mean(tokens), "attention": _max_over_mean(attention)}

    # -- checks and output -----------------------------------------------------------------------
    def fingerprint(self) -> int:
        """A 63-bit digest of the packs and lengths (ranks compare it to confirm they agree)."""
        text = repr((self.scheduler, self.capacity, self.lengths, self.packs)).encode()
        return int.from_bytes(hashlib.sha256(text).digest()[:8], "big") >> 1

    def validate(self) -> None:
        """Raise PackingError unless: every sample in exactly one pack, a whole number of packs per
        rank, and no pack above the capacity."""
        if len(self.packs) % self.dp_size:
            raise PackingError(f"{len(self.packs)} packs do not split evenly over {self.dp_size} DP ranks")
        n = self.num_samples
        flat = sorted(g for pack in self.packs for g in pack)
        if flat != list(range(n)):
            seen = [0] * n
            for gid in flat:
                if not 0 <= gid < n:
                    raise PackingError(f"pack holds unknown sample id {gid}")
                seen[gid] += 1
            bad = next(g for g, k in enumerate(seen) if k != 1)
            raise PackingError(f"sample {bad} appears {seen[bad]} times in the schedule (must be once)")
        lengths = self.lengths
        for p, pack in enumerate(self.packs):
            tokens = sum([lengths[g] for g in pack])
            if tokens > self.capacity:
                raise PackingError(f"pack {p} holds {tokens} tokens, above the capacity {self.capacity}")

    def to_dict(self, *, include_packs: bool = True) -> dict[str, Any]:
        """JSON-able form: settings, counts, FLOPs sums, loads and (optionally) the packs."""
        tokens, attention = self.rank_loads()
        out: dict[str, Any] = {
            "scheduler": self.scheduler,
            "dp_size": self.dp_size,
            "cp_size": self.cp_size,
            "capacity": self.capacity,
            "num_samples": self.num_samples,
            "num_micro_batches": self.num_micro_batches,
            "num_filler_packs": self.num_filler_packs,
            "seqlen_sum": self.seqlen_sum,
            "seqlen_squared_sum": self.seqlen_squared_sum,
            "rank_tokens": tokens,
            "rank_attention": attention,
            "imbalance": self.imbalance(),
            "adjustments": list(self.adjustments),
        }
        if include_packs:
            out["rank_offsets"] = list(self.rank_offsets)
            out["lengths"] = list(self.lengths)
            out["packs"] = [list(p) for p in self.packs]
        return out


def _max_over_mean(values: Sequence[int]) -> float:
    total = sum(values)
    return max(values) * len(values) / total if total else 1.0


# ------------------------------------------------------------------------------------------------
# Capacity
# ------------------------------------------------------------------------------------------------


def check_capacity(
    lengths: Sequence[int],
    *,
    capacity: int,
    cp_size: int,
    rank_offsets: Sequence[int],
    row_indices: Sequence[int] | None = None,
) -> None:
    """Raise PACK-GLOBAL-CAPACITY when a sample is longer than one pack may be.

    The message names the first such sample (global id, loading DP rank and local index, dataset
    row when known), its padded length and the capacity, and says how many more there are.
    """
    if not lengths or max(lengths) <= capacity:
        return
    over = [g for g, n in enumerate(lengths) if n > capacity]
    gid = over[0]
    rank = max(d for d in range(len(rank_offsets) - 1) if rank_offsets[d] <= gid)
    row = None if row_indices is None or row_indices[gid] < 0 else int(row_indices[gid])
    where = f"sample {gid} (DP rank {rank}, local index {gid - rank_offsets[rank]}"
    where += f", dataset row {row})" if row is not None else ")"
    more = ""
    if len(over) > 1:
        shown = ", ".join(f"{g}:{lengths[g]}" for g in over[1:_SHOWN])
        tail = ", ..." if len(over) > _SHOWN else ""
        more = f"; {len(over) - 1} more sample(s) are too long too (id:length {shown}{tail})"
    longest = max(lengths[g] for g in over)
    need = math.ceil(longest / cp_size)
    raise PackingError(
        f"{where} has padded length {lengths[gid]}, above the pack capacity "
        f"max_seqlen_per_dp_cp_rank*CP = {capacity // cp_size}*{cp_size} = {capacity}{more}",
        rule_id="PACK-GLOBAL-CAPACITY",
        row=row,
        field="padded_seq_len",
        fix=f"raise model.max_seqlen_per_dp_cp_rank to at least ceil({longest}/{cp_size}) = {need}, or lower "
        f"seq_length to at most {capacity} so tokenization truncates every sample to fit",
    )


# ------------------------------------------------------------------------------------------------
# Scheduler interface and registry
# ------------------------------------------------------------------------------------------------


class Scheduler(ABC):
    """A way to turn the global batch's lengths into packs assigned to (micro-batch, DP rank) slots."""

    #: Registry name (``model.sequence_packing_scheduler``).
    name: str = ""
    #: Where the scheduler comes from: ``Megatron-Core`` for one Megatron-Core has, ``seqpack`` for seqpack's own.
    origin: str = "seqpack"

    @abstractmethod
    def make_packs(
        self, lengths: Sequence[int], *, dp_size: int, capacity: int
    ) -> tuple[list[tuple[int, ...]], list[str]]:
        """Packs in slot order (a multiple of ``dp_size`` of them) and the adjustments made, in words.

        Every length is at most ``capacity`` (checked before this is called).
        """


_REGISTRY: dict[str, Scheduler] = {}


def register_scheduler(scheduler: Scheduler) -> Scheduler:
    """Make ``scheduler`` selectable by its name."""
    if not scheduler.name:
        raise UsageError("a scheduler needs a name")
    _REGISTRY[scheduler.name] = scheduler
    return scheduler


def scheduler_names() -> tuple[str, ...]:
    """Names of the registered schedulers."""
    _load_builtin()
    return tuple(_REGISTRY)


def get_scheduler(name: str | None) -> Scheduler:
    """The scheduler registered as ``name`` (``None`` means Megatron-Core's default, ``dp_balanced``)."""
    _load_builtin()
    key = "dp_balanced" if name is None else str(name).strip().lower()
    if key not in _REGISTRY:
        raise UsageError(
            f"unknown sequence_packing_scheduler {name!r}; choose one of {', '.join(_REGISTRY)}",
            rule_id="PACK-GLOBAL-SCHEDULER",
            field="model.sequence_packing_scheduler",
        )
    return _REGISTRY[key]


def _load_builtin() -> None:
    # importing the modules registers them (they import this module, so do it lazily)
    from seqpack.packing.global_batch import balanced, dp_balanced  # noqa: F401


def _positive_lengths(rank: int, rank_lengths: Sequence[Any]) -> list[int]:
    """DP rank ``rank``'s lengths as Python ints; UsageError naming the first one that is not a positive integer."""
    values = rank_lengths.tolist() if hasattr(rank_lengths, "tolist") else list(rank_lengths)
    if set(map(type, values)) <= {int} and (not values or min(values) >= 1):
        return values  # the common case, checked in one pass
    for i, n in enumerate(rank_lengths):
        if isinstance(n, bool) or not hasattr(n, "__index__") or int(n) < 1:
            raise UsageError(f"DP rank {rank}, sample {i}: length must be a positive integer, got {n!r}",
                             row=i, field="padded_seq_len")
    return [int(n) for n in rank_lengths]


def schedule_global_batch(
    lengths_per_rank: Sequence[Sequence[int]],
    *,
    max_seqlen_per_dp_cp_rank: int,
    cp_size: int = 1,
    scheduler: str | Scheduler | None = None,
    row_indices_per_rank: Sequence[Sequence[int]] | None = None,
) -> GlobalSchedule:
    """Schedule one step: ``lengths_per_rank[d]`` are the padded lengths DP rank ``d`` loaded, in order.

    Samples longer than ``max_seqlen_per_dp_cp_rank * cp_size`` raise PACK-GLOBAL-CAPACITY
    (``row_indices_per_rank``, when given, lets the message name the dataset row). The result is
    identical on every rank given identical input; it is validated before it is returned.
    """
    cap_rank = positive_int("max_seqlen_per_dp_cp_rank", max_seqlen_per_dp_cp_rank)
    cp = positive_int("cp_size", cp_size)
    if isinstance(lengths_per_rank, (str, bytes)) or not isinstance(lengths_per_rank, Sequence) or not lengths_per_rank:
        raise UsageError("lengths_per_rank must be a non-empty list (one list of lengths per DP rank)")
    sched = scheduler if isinstance(scheduler, Scheduler) else get_scheduler(scheduler)
    dp = len(lengths_per_rank)
    lengths: list[int] = []
    offsets = [0]
    for d, rank_lengths in enumerate(lengths_per_rank):
        lengths.extend(_positive_lengths(d, rank_lengths))
        offsets.append(len(lengths))
    rows = None
    if row_indices_per_rank is not None:
        rows = [int(r) for rank_rows in row_indices_per_rank for r in rank_rows]
        if len(rows) != len(lengths):
            raise UsageError(f"row_indices_per_rank has {len(rows)} entries for {len(lengths)} samples")
    capacity = cap_rank * cp
    check_capacity(lengths, capacity=capacity, cp_size=cp, rank_offsets=offsets, row_indices=rows)
    packs, notes = sched.make_packs(lengths, dp_size=dp, capacity=capacity)
    schedule = GlobalSchedule(
        scheduler=sched.name,
        dp_size=dp,
        cp_size=cp,
        capacity=capacity,
        lengths=tuple(lengths),
        rank_offsets=tuple(offsets),
        packs=tuple(tuple(map(int, p)) for p in packs),
        adjustments=tuple(notes),
    )
    schedule.validate()
    return schedule
