"""``dp_balanced``: Megatron-Core's global-batch scheduler, reproduced, minus its crashes.

The scheduler is Megatron-LM main's (``DpBalancedScheduler`` in Megatron-Core's
``datasets/data_schedule.py`` at commit ``d98e8a64ddf3``, 2026-08-22); no Megatron-Core release has
it (megatron-core 0.19.2 does not, checked in the upstream lane), so nothing released can be run
against this module. What it does, as specified in the project's contract notes:

1. **Form packs by next fit in global-id order.** Samples are taken in (DP rank, local index)
   order; a sample joins the open pack while the pack's total stays ``<= C`` (inclusive), otherwise
   the open pack is closed and the sample starts a new one. No sorting, no back-filling. This is
   :func:`seqpack.packing.algorithms.pack_lengths` with ``next_fit``.
2. **Make the pack count a multiple of DP.** While packs are missing, a cursor walks from the last
   original pack towards the first; a pack with more than one sample gives up its *last* sample,
   which becomes a new single-sample pack appended at the end (so several pops from one pack appear
   in reverse id order); a single-sample pack moves the cursor one pack down. Packs are never merged.
3. **Assign**: pack ``p`` runs as micro-batch ``p // DP`` on DP rank ``p % DP``; every rank runs
   ``len(packs) / DP`` micro-batches. The scheduler balances micro-batch *counts*, not tokens.

Where Megatron-Core stops on an assertion, this module keeps going (each case is also written to
the schedule's ``adjustments`` and documented in ``docs/compatibility.md``):

* the cursor reaching pack 0 while packs are still missing (main asserts ``i > 0``): pack 0 may give
  up samples as well, which is what Megatron-Core's ``dev`` branch does;
* every pack down to pack 0 holding one sample and packs still missing (both branches assert "Not
  enough samples to move"): the missing slots become filler packs (one padding-only sequence, no
  supervised token), so every rank runs the same number of micro-batches;
* a sample longer than ``C`` (upstream emits an over-capacity pack, or an empty first pack that
  crashes later): rejected before scheduling by PACK-GLOBAL-CAPACITY (see :mod:`.schedule`).

Whenever Megatron-Core finishes without an assertion, the packs and their order are identical.
"""

from __future__ import annotations

from collections.abc import Sequence

from seqpack.packing.algorithms import pack_lengths
from seqpack.packing.global_batch.schedule import Scheduler, register_scheduler

__all__ = ["DpBalancedScheduler", "dp_balanced_packs"]


def dp_balanced_packs(
    lengths: Sequence[int], *, dp_size: int, capacity: int
) -> tuple[list[tuple[int, ...]], list[str]]:
    """Packs in slot order and the adjustments made (empty when Megatron-Core would agree exactly)."""
    if not lengths:
        return [], []
    packs = [list(b) for b in pack_lengths(list(lengths), capacity, "next_fit").bins()]
    notes: list[str] = []
    original = len(packs)
    need = (-original) % dp_size
    cursor = original - 1
    donated_by_first = 0
    while need and cursor >= 0:
        if len(packs[cursor]) > 1:
            packs.append([packs[cursor].pop()])
            need -= 1
            if cursor == 0:
                donated_by_first += 1
        else:
            cursor -= 1
    if donated_by_first:
        notes.append(
            f"pack 0 gave up {donated_by_first} sample(s) to reach a multiple of DP={dp_size} packs "
            "(Megatron-Core main asserts 'Not enough samples to move' here; its dev branch does the same split)"
        )
    if need:
        notes.append(
            f"{len(lengths)} sample(s) make only {len(packs)} single-sample pack(s); added {need} filler "
            f"pack(s) so each of the {dp_size} DP ranks runs {(len(packs) + need) // dp_size} micro-batch(es) "
            "(Megatron-Core asserts 'Not enough samples to move' here)"
        )
        packs.extend([] for _ in range(need))
    return [tuple(p) for p in packs], notes


class DpBalancedScheduler(Scheduler):
    """Megatron-Core's ``dp_balanced`` (see the module docstring)."""

    name = "dp_balanced"
    origin = "Megatron-Core"

    def make_packs(
        self, lengths: Sequence[int], *, dp_size: int, capacity: int
    ) -> tuple[list[tuple[int, ...]], list[str]]:
        """See :func:`dp_balanced_packs`."""
        return dp_balanced_packs(lengths, dp_size=dp_size, capacity=capacity)


register_scheduler(DpBalancedScheduler())
