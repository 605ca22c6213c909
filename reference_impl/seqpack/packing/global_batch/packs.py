"""Scheduled packs -> canonical THD micro-batches, and a one-process simulation of the DP ranks.

Every pack goes through :func:`seqpack.packing.thd.build_thd_batch`: each unpacked sample is
one row whose real length (``original_seq_len``) is its ``valid_length``, so ``cu_seqlens_q/kv``
hold the real boundaries and ``cu_seqlens_*_padded`` the physical ones (present when some sample
carries padding). Two extra keys name the samples: ``sample_ids`` (global ids of the step, in pack
order) and ``row_indices`` (dataset rows, ``-1`` when a sample did not say).

A filler pack (see :mod:`.schedule`) becomes one padding-only sequence of ``pad_seq_to_mult``
tokens: real length 0, loss mask 0, so it adds nothing to the loss or the gradients while the rank
still takes part in every collective of the micro-batch.

:func:`simulate_step` runs the whole step for all DP ranks in one process (no collectives): the
same scheduler, the same builder. The smoke test and ``seqpack batches --mode global-batch`` use it;
the multi-process path (:mod:`.wrap`) differs only in how lengths and payloads travel.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from seqpack.core.errors import UsageError
from seqpack.packing.global_batch.samples import LABEL_PAD_ID, check_unpacked_sample
from seqpack.packing.global_batch.schedule import GlobalSchedule, schedule_global_batch
from seqpack.packing.thd import build_thd_batch

__all__ = ["SimulatedStep", "build_pack_batch", "filler_batch", "rank_batches", "simulate_step"]


def build_pack_batch(
    samples: Sequence[Mapping[str, torch.Tensor]],
    *,
    pad_seq_to_mult: int,
    capacity: int,
    sample_ids: Sequence[int] = (),
    pad_token_id: int = 0,
    fold_alignment_padding: bool = False,
) -> dict[str, Any]:
    """One pack of (checked) unpacked samples as a canonical THD micro-batch of at most ``capacity`` tokens
    (``fold_alignment_padding``: each sample's padding reported as part of it, Megatron-Bridge PR #6127)."""
    if not samples:
        raise UsageError("a pack needs at least one sample; use filler_batch for an empty slot")
    rows = [
        {
            "tokens": s["tokens"],
            "labels": s["labels"],
            "loss_mask": s["loss_mask"],
            "position_ids": s["position_ids"],
            "valid_length": int(s["original_seq_len"].reshape(-1)[0]),
        }
        for s in samples
    ]
    batch = build_thd_batch(rows, pad_seq_to_mult=pad_seq_to_mult, max_length=capacity,
                            pad_token_id=pad_token_id, label_pad_id=LABEL_PAD_ID,
                            fold_alignment_padding=fold_alignment_padding)
    batch["sample_ids"] = [int(g) for g in sample_ids] if sample_ids else list(range(len(samples)))
    batch["row_indices"] = [int(s["row_index"].reshape(-1)[0]) if "row_index" in s else -1 for s in samples]
    return batch


def filler_batch(*, pad_seq_to_mult: int, pad_token_id: int = 0) -> dict[str, Any]:
    """The micro-batch a rank runs for a filler slot: one sequence of padding, nothing supervised."""
    m = int(pad_seq_to_mult)
    row = {
        "tokens": torch.full((m,), int(pad_token_id), dtype=torch.int64),
        "labels": torch.full((m,), LABEL_PAD_ID, dtype=torch.int64),
        "loss_mask": torch.zeros(m, dtype=torch.float32),
        "position_ids": torch.arange(m, dtype=torch.int64),
        "valid_length": 0,
    }
    batch = build_thd_batch([row], pad_seq_to_mult=m, pad_token_id=pad_token_id, label_pad_id=LABEL_PAD_ID)
    batch["sample_ids"] = []
    batch["row_indices"] = []
    return batch


def rank_batches(
    schedule: GlobalSchedule,
    dp_rank: int,
    samples_by_gid: Mapping[int, Mapping[str, torch.Tensor]],
    *,
    pad_seq_to_mult: int,
    pad_token_id: int = 0,
    fold_alignment_padding: bool = False,
) -> list[dict[str, Any]]:
    """The micro-batches DP rank ``dp_rank`` runs this step, in order (``samples_by_gid`` must hold its samples)."""
    out = []
    for pack in schedule.rank_packs(dp_rank):
        if not pack:
            out.append(filler_batch(pad_seq_to_mult=pad_seq_to_mult, pad_token_id=pad_token_id))
            continue
        missing = [g for g in pack if g not in samples_by_gid]
        if missing:
            raise UsageError(f"DP rank {dp_rank} lacks the payload of sample(s) {missing} of its pack")
        out.append(build_pack_batch([samples_by_gid[g] for g in pack], pad_seq_to_mult=pad_seq_to_mult,
                                    capacity=schedule.capacity, sample_ids=pack, pad_token_id=pad_token_id,
                                    fold_alignment_padding=fold_alignment_padding))
    return out


@dataclass
class SimulatedStep:
    """One step of every DP rank, computed in one process."""

    schedule: GlobalSchedule
    batches: list[list[dict[str, Any]]]  # [dp_rank][micro_batch]

    @property
    def num_micro_batches(self) -> int:
        """Micro-batches every rank runs."""
        return self.schedule.num_micro_batches

    def to_dict(self) -> dict[str, Any]:
        """JSON-able summary (the schedule; batches reduced to their widths)."""
        return {**self.schedule.to_dict(),
                "widths": [[int(b["tokens"].shape[1]) for b in rank] for rank in self.batches]}


def simulate_step(
    samples_per_rank: Sequence[Sequence[Mapping[str, Any]]],
    *,
    max_seqlen_per_dp_cp_rank: int,
    cp_size: int = 1,
    scheduler: str | None = None,
    pad_seq_to_mult: int = 1,
    pad_token_id: int = 0,
    fold_alignment_padding: bool = False,
) -> SimulatedStep:
    """Schedule and build one step for all DP ranks in this process.

    ``samples_per_rank[d]`` are the unpacked samples DP rank ``d`` loaded, in order.
    """
    checked: list[list[dict[str, torch.Tensor]]] = []
    for d, rank_samples in enumerate(samples_per_rank):
        checked.append([
            check_unpacked_sample(s, pad_seq_to_mult=pad_seq_to_mult, where=f"DP rank {d}, sample {i}")
            for i, s in enumerate(rank_samples)
        ])
    lengths = [[int(s["padded_seq_len"][0]) for s in rank] for rank in checked]
    rows = [[int(s["row_index"][0]) if "row_index" in s else -1 for s in rank] for rank in checked]
    schedule = schedule_global_batch(lengths, max_seqlen_per_dp_cp_rank=max_seqlen_per_dp_cp_rank,
                                     cp_size=cp_size, scheduler=scheduler, row_indices_per_rank=rows)
    by_gid = {g: s for g, s in enumerate(s for rank in checked for s in rank)}
    batches = [rank_batches(schedule, d, by_gid, pad_seq_to_mult=pad_seq_to_mult, pad_token_id=pad_token_id,
                            fold_alignment_padding=fold_alignment_padding)
               for d in range(schedule.dp_size)]
    return SimulatedStep(schedule, batches)
