"""Once per step: pull the samples, all-gather lengths, schedule, move payloads, build the packs.

:class:`GlobalBatchPacker` is built once from a config (the registry rules run then) and a
:class:`ParallelLayout` (Megatron-Core's ``parallel_state`` groups by default). Its
:meth:`~GlobalBatchPacker.wrap` is the per-step entry point, the counterpart of Megatron-Core's
``wrap_data_iterator``; :func:`wrap_data_iterator` is the one-call form with upstream's argument
order. A step:

1. calls ``next(data_iterator)`` ``num_microbatches`` times (GBS / DP with MBS = 1); each call
   yields one unpacked sample or a list of them; every sample is checked against the contract;
2. all-gathers the padded lengths over the DP group (a rank whose samples were bad reports a
   failure instead, and every rank raises; nobody is left waiting in a collective);
3. schedules the global batch (identically on every rank, confirmed by a fingerprint all-gather;
   an oversize sample raises PACK-GLOBAL-CAPACITY on every rank);
4. moves each sample to the DP rank that runs it (one all-to-all);
5. builds this rank's packs with :func:`seqpack.packing.thd.build_thd_batch`.

The result carries the packed micro-batches (full packs; the CP split happens per pack in the
training step), the number of micro-batches every rank runs this step, and the exact FLOPs inputs
(sum of padded lengths and of their squares over the global batch, Python ints, as upstream
computes them from padded lengths).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from seqpack.config import TrainingConfig
from seqpack.core.arguments import positive_int
from seqpack.core.errors import InputError, PackingError, SeqpackError, UsageError
from seqpack.packing.global_batch.dataset import GlobalBatchSettings, settings_from_config
from seqpack.packing.global_batch.exchange import check_same_schedule, exchange_samples, gather_lengths
from seqpack.packing.global_batch.packs import rank_batches
from seqpack.packing.global_batch.samples import check_unpacked_sample
from seqpack.packing.global_batch.schedule import GlobalSchedule, schedule_global_batch

log = logging.getLogger(__name__)

__all__ = ["GlobalBatchPacker", "GlobalBatchStep", "ParallelLayout", "wrap_data_iterator"]


@dataclass(frozen=True)
class ParallelLayout:
    """This process's place in the DP x CP grid and the process groups the path uses.

    ``dp_group`` is the data-parallel group *without* CP (one per CP lane); ``dp_cp_group`` spans
    both (gradients and loss counts are reduced over it). Megatron's default rank order puts
    ``dcp_rank = dp_rank * CP + cp_rank``.
    """

    dp_rank: int = 0
    dp_size: int = 1
    cp_rank: int = 0
    cp_size: int = 1
    dp_group: Any = field(default=None, compare=False)
    cp_group: Any = field(default=None, compare=False)
    dp_cp_group: Any = field(default=None, compare=False)

    @property
    def dcp_rank(self) -> int:
        """Rank inside the DP x CP group."""
        return self.dp_rank * self.cp_size + self.cp_rank

    @classmethod
    def from_megatron(cls) -> ParallelLayout:
        """Read Megatron-Core's ``parallel_state`` (initialised by the caller)."""
        from megatron.core import parallel_state as ps

        if not ps.model_parallel_is_initialized():
            raise UsageError("Megatron-Core's parallel state is not initialised",
                             fix="call parallel_state.initialize_model_parallel(...) after init_process_group")
        return cls(
            dp_rank=ps.get_data_parallel_rank(),
            dp_size=ps.get_data_parallel_world_size(),
            cp_rank=ps.get_context_parallel_rank(),
            cp_size=ps.get_context_parallel_world_size(),
            dp_group=ps.get_data_parallel_group(),
            cp_group=ps.get_context_parallel_group(),
            dp_cp_group=ps.get_data_parallel_group(with_context_parallel=True),
        )

    def to_dict(self) -> dict[str, int]:
        """JSON-able form (ranks and sizes)."""
        return {"dp_rank": self.dp_rank, "dp_size": self.dp_size, "cp_rank": self.cp_rank,
                "cp_size": self.cp_size, "dcp_rank": self.dcp_rank}


@dataclass
class GlobalBatchStep:
    """What one step of global-batch packing hands the training loop on this rank."""

    batches: list[dict[str, Any]]
    num_micro_batches: int
    seqlen_sum: int
    seqlen_squared_sum: int
    schedule: GlobalSchedule
    layout: ParallelLayout

    @property
    def data_iterator(self) -> Iterator[dict[str, Any]]:
        """A fresh iterator over this rank's packed micro-batches (``num_micro_batches`` items)."""
        return iter(self.batches)

    def as_tuple(self) -> tuple[Iterator[dict[str, Any]], int, int, int]:
        """Megatron-Core's return shape: (iterator, micro-batch count, sum L, sum L**2)."""
        return self.data_iterator, self.num_micro_batches, self.seqlen_sum, self.seqlen_squared_sum

    def to_dict(self) -> dict[str, Any]:
        """JSON-able summary: counts, FLOPs sums, this rank's pack widths and the schedule."""
        return {
            "layout": self.layout.to_dict(),
            "num_micro_batches": self.num_micro_batches,
            "seqlen_sum": self.seqlen_sum,
            "seqlen_squared_sum": self.seqlen_squared_sum,
            "widths": [int(b["tokens"].shape[1]) for b in self.batches],
            "sample_ids": [list(b["sample_ids"]) for b in self.batches],
            "schedule": self.schedule.to_dict(),
        }


def _default_layout(settings: GlobalBatchSettings) -> ParallelLayout:
    if dist.is_available() and dist.is_initialized():
        try:
            from megatron.core import parallel_state as ps

            if ps.model_parallel_is_initialized():
                return ParallelLayout.from_megatron()
        except ImportError:  # pragma: no cover - megatron-core is a dependency
            pass
    if settings.dp_size != 1:
        raise UsageError(
            f"the config has DP={settings.dp_size} but no process group was given and Megatron-Core's parallel "
            "state is not initialised", fix="initialise torch.distributed and parallel_state, or pass layout=",
        )
    return ParallelLayout(cp_size=settings.cp_size)


class GlobalBatchPacker:
    """Per-step global-batch packing for one rank (see the module docstring).

    ``config``: a TrainingConfig (or anything ``load_config`` reads) with global-batch packing on;
    the registry rules run here. ``layout``: default Megatron-Core's parallel state (or DP = 1 in a
    single process). ``pad_token_id``: the value of filler-pack tokens.
    """

    def __init__(
        self,
        config: TrainingConfig | Mapping[str, Any] | str | os.PathLike[str],
        *,
        layout: ParallelLayout | None = None,
        pad_token_id: int = 0,
    ) -> None:
        self.settings = settings_from_config(config)
        self.layout = layout if layout is not None else _default_layout(self.settings)
        s, lay = self.settings, self.layout
        if (lay.dp_size, lay.cp_size) != (s.dp_size, s.cp_size):
            raise UsageError(
                f"the process groups have DP={lay.dp_size}, CP={lay.cp_size} but the config resolves to "
                f"DP={s.dp_size}, CP={s.cp_size}", field="dist.world_size",
                fix="set dist.world_size and model.context_parallel_size to the launched topology",
            )
        if lay.dp_size > 1 and lay.dp_group is None:
            raise UsageError("DP > 1 needs the data-parallel process group (layout.dp_group)")
        self.pad_token_id = int(pad_token_id)

    def _pull(self, data_iterator: Iterator[Any], num_microbatches: int) -> list[dict[str, torch.Tensor]]:
        dp = self.layout.dp_rank
        samples: list[dict[str, torch.Tensor]] = []
        for call in range(num_microbatches):
            try:
                item = next(data_iterator)
            except StopIteration:
                raise InputError(
                    f"DP rank {dp}: the data iterator ran out after {call} of {num_microbatches} next() calls "
                    "of this step", field="data_iterator",
                    fix="give every rank global_batch_size / DP samples per step (drop_last, enough rows)",
                ) from None
            items = [item] if isinstance(item, Mapping) else item
            if not isinstance(items, (list, tuple)):
                raise InputError(
                    f"DP rank {dp}, next() call {call}: expected a sample dict or a list of them, "
                    f"got {type(item).__name__}", field="data_iterator",
                )
            for j, sample in enumerate(items):
                samples.append(check_unpacked_sample(
                    sample, pad_seq_to_mult=self.settings.pad_seq_to_mult,
                    where=f"DP rank {dp}, next() call {call}, sample {j}",
                ))
        return samples

    def wrap(self, data_iterator: Iterator[Any], num_microbatches: int | None = None) -> GlobalBatchStep:
        """Run one step (collective: every rank of the DP group must call it)."""
        n = self.settings.micro_batches_per_rank if num_microbatches is None else num_microbatches
        n = positive_int("num_microbatches", n)
        if not isinstance(data_iterator, Iterator):
            raise UsageError(
                f"data_iterator must be an iterator, got {type(data_iterator).__name__}",
                field="data_iterator", fix="pass iter(loader) once and keep passing the same iterator every step",
            )
        lay = self.layout
        error: SeqpackError | None = None
        try:
            local = self._pull(data_iterator, n)
        except SeqpackError as exc:
            error, local = exc, []
        lengths = [int(s["padded_seq_len"][0]) for s in local]
        rows = [int(s["row_index"][0]) if "row_index" in s else -1 for s in local]
        if lay.dp_size > 1:
            per_rank, rows_per_rank, failed = gather_lengths(lengths, rows, failed=error is not None,
                                                             group=lay.dp_group)
        else:
            per_rank, rows_per_rank, failed = [lengths], [rows], []
        if error is not None:
            raise error
        if failed:
            raise PackingError(
                f"DP rank(s) {failed} could not produce their samples for this step (their own error says why); "
                "every rank stops here", field="data_iterator",
            )
        if not any(per_rank):
            raise InputError("the global batch of this step holds no sample", field="data_iterator")
        schedule = schedule_global_batch(
            per_rank, max_seqlen_per_dp_cp_rank=self.settings.max_seqlen_per_dp_cp_rank, cp_size=lay.cp_size,
            scheduler=self.settings.scheduler, row_indices_per_rank=rows_per_rank,
        )
        if lay.dp_size > 1:
            check_same_schedule(schedule, group=lay.dp_group)
        by_gid = exchange_samples(local, schedule, lay.dp_rank, group=lay.dp_group)
        batches = rank_batches(schedule, lay.dp_rank, by_gid, pad_seq_to_mult=self.settings.pad_seq_to_mult,
                               pad_token_id=self.pad_token_id,
                               fold_alignment_padding=self.settings.fold_alignment_padding)
        for note in schedule.adjustments:
            log.info("global-batch schedule: %s", note)
        return GlobalBatchStep(
            batches=batches,
            num_micro_batches=schedule.num_micro_batches,
            seqlen_sum=schedule.seqlen_sum,
            seqlen_squared_sum=schedule.seqlen_squared_sum,
            schedule=schedule,
            layout=lay,
        )


def wrap_data_iterator(
    data_iterator: Iterator[Any],
    config: TrainingConfig | Mapping[str, Any] | str | os.PathLike[str],
    num_microbatches: int,
    *,
    layout: ParallelLayout | None = None,
    pad_token_id: int = 0,
) -> GlobalBatchStep:
    """One step of global-batch packing; ``.as_tuple()`` gives Megatron-Core's 4-tuple.

    Builds a :class:`GlobalBatchPacker` per call (the rules run each time); keep a packer for a
    training loop.
    """
    return GlobalBatchPacker(config, layout=layout, pad_token_id=pad_token_id).wrap(data_iterator, num_microbatches)
