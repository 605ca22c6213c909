"""Micro-batch samplers: each DataLoader step receives the indices of one logical micro-batch.

Both samplers are *batch samplers* (pass them as ``DataLoader(batch_sampler=...)``): every item
they yield is the list of ``micro_batch_size`` dataset indices one data-parallel rank packs into
one THD row. They are iterated in the main process, so they work unchanged with worker processes.

A *global step* covers ``micro_batch_size * data_parallel_size`` consecutive positions of the
ordering; rank ``r`` takes positions ``[r*mbs, (r+1)*mbs)`` of it (Megatron's layout, so the DP
ranks of one step never share a sample).

* :class:`SingleMicroBatchSampler` (``dataloader_type="single"``): the dataset order, starting at
  ``consumed_samples``. Every ``iter()`` replays the same single pass from that offset (the sampler
  keeps no state), like Megatron's sequential sampler.
* :class:`CyclicMicroBatchSampler` (``dataloader_type="cyclic"``): epoch ``e`` visits a random
  permutation of the rows drawn from ``numpy.random.default_rng([seed, e])``, so the order depends
  only on ``seed`` and ``e``. One ``iter()`` runs to the end of the current epoch and advances
  ``consumed_samples`` as it hands out micro-batches; the next ``iter()`` continues with the next
  epoch. Resume by building the sampler with the trainer's own consumed-samples count (the
  sampler's counter runs ahead of training by the DataLoader's prefetch).

  Differs from Megatron's random sampler, which shuffles inside per-rank contiguous buckets of
  the dataset: here every epoch is one global permutation and the ranks take consecutive slices
  of it, so each rank sees rows from the whole file.

**Incomplete last step.** When fewer than ``mbs * dp`` positions remain:

* ``drop_last=True`` (the default, and what a training loop needs, because every DP rank must run
  the same number of steps): those positions are not yielded. They are accounted for in
  :attr:`dropped_samples` and logged. For ``cyclic`` the dropped positions fall on different rows
  every epoch, since the permutation changes.
* ``drop_last=False``: the remaining positions are dealt to the ranks in order, so a rank may get
  a short micro-batch (fewer than ``mbs`` rows, still packed into one row) or none at all. Every
  row is then seen exactly once per pass; use it for evaluation, inspection and smoke tests.

``indices`` (optional) restricts a sampler to a subset of dataset rows, e.g. the usable rows of a
:func:`seqpack.packing.sft_dataset.scan_rows` pass; positions are then mapped through it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from seqpack.core.arguments import non_negative_int, positive_int
from seqpack.core.errors import UsageError

log = logging.getLogger(__name__)

__all__ = [
    "DATALOADER_TYPES",
    "CyclicMicroBatchSampler",
    "SingleMicroBatchSampler",
    "make_micro_batch_sampler",
]

#: Dataloader types the in-batch path can run with.
DATALOADER_TYPES: tuple[str, ...] = ("single", "cyclic")


class _MicroBatchSampler:
    """Shared argument checks, the rank layout and the index mapping."""

    def __init__(
        self,
        total_samples: int | None,
        *,
        micro_batch_size: int,
        consumed_samples: int = 0,
        data_parallel_rank: int = 0,
        data_parallel_size: int = 1,
        drop_last: bool = True,
        indices: Sequence[int] | np.ndarray | None = None,
    ) -> None:
        if indices is not None:
            arr = np.asarray(indices)
            if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
                raise UsageError("indices must be a 1-D sequence of integers", field="indices")
            if total_samples is not None and int(total_samples) != arr.size:
                raise UsageError(
                    f"total_samples={total_samples} disagrees with len(indices)={arr.size}",
                    field="total_samples",
                )
            self.indices: np.ndarray | None = arr.astype(np.int64, copy=False)
            total_samples = int(arr.size)
        else:
            self.indices = None
        self.total_samples = positive_int("total_samples", total_samples)
        self.micro_batch_size = positive_int("micro_batch_size", micro_batch_size)
        self.data_parallel_size = positive_int("data_parallel_size", data_parallel_size)
        self.data_parallel_rank = non_negative_int("data_parallel_rank", data_parallel_rank)
        if self.data_parallel_rank >= self.data_parallel_size:
            raise UsageError(
                f"data_parallel_rank={data_parallel_rank} must be below "
                f"data_parallel_size={data_parallel_size}",
                field="data_parallel_rank",
            )
        self.consumed_samples = non_negative_int("consumed_samples", consumed_samples)
        if not isinstance(drop_last, bool):
            raise UsageError(f"drop_last must be true or false, got {drop_last!r}", field="drop_last")
        self.drop_last = drop_last

    @property
    def step_size(self) -> int:
        """Positions one global step covers: ``micro_batch_size * data_parallel_size``."""
        return self.micro_batch_size * self.data_parallel_size

    def _rank_share(self, chunk: np.ndarray) -> list[int]:
        lo = self.data_parallel_rank * self.micro_batch_size
        mine = chunk[lo : lo + self.micro_batch_size]
        if self.indices is not None:
            mine = self.indices[mine]
        return [int(i) for i in mine]

    def _steps(self, positions: int) -> int:
        """Micro-batches this rank yields from ``positions`` remaining positions."""
        full, tail = divmod(positions, self.step_size)
        if tail and not self.drop_last and tail > self.data_parallel_rank * self.micro_batch_size:
            full += 1
        return full

    def to_dict(self) -> dict[str, Any]:
        """The sampler's settings (JSON-able)."""
        return {
            "type": type(self).__name__,
            "total_samples": self.total_samples,
            "consumed_samples": self.consumed_samples,
            "micro_batch_size": self.micro_batch_size,
            "data_parallel_rank": self.data_parallel_rank,
            "data_parallel_size": self.data_parallel_size,
            "drop_last": self.drop_last,
            "restricted_to_indices": self.indices is not None,
        }


class SingleMicroBatchSampler(_MicroBatchSampler):
    """Sequential micro-batches from ``consumed_samples`` on (``dataloader_type="single"``)."""

    def __init__(self, total_samples: int | None = None, **kwargs: Any) -> None:
        super().__init__(total_samples, **kwargs)
        if self.consumed_samples >= self.total_samples:
            raise UsageError(
                f"consumed_samples={self.consumed_samples} leaves nothing of the "
                f"{self.total_samples} samples to read",
                field="consumed_samples",
            )

    @property
    def dropped_samples(self) -> int:
        """Positions of the final incomplete step that one pass leaves out (0 unless ``drop_last``)."""
        if not self.drop_last:
            return 0
        return (self.total_samples - self.consumed_samples) % self.step_size

    def __len__(self) -> int:
        return self._steps(self.total_samples - self.consumed_samples)

    def __iter__(self) -> Iterator[list[int]]:
        n, step = self.total_samples, self.step_size
        start = self.consumed_samples
        full_end = start + (n - start) // step * step
        for s in range(start, full_end, step):
            yield self._rank_share(np.arange(s, s + step))
        if full_end < n:
            if self.drop_last:
                log.info(
                    "single sampler: dropping the last %d position(s) [%d, %d), fewer than one step "
                    "of %d (drop_last=True)", n - full_end, full_end, n, step,
                )
            else:
                share = self._rank_share(np.arange(full_end, n))
                if share:
                    yield share


class CyclicMicroBatchSampler(_MicroBatchSampler):
    """Epoch-seeded random micro-batches (``dataloader_type="cyclic"``); see the module docstring."""

    def __init__(self, total_samples: int | None = None, *, seed: int, **kwargs: Any) -> None:
        super().__init__(total_samples, **kwargs)
        self.seed = non_negative_int("seed", seed)
        if self.epoch_length == 0:
            raise UsageError(
                f"{self.total_samples} sample(s) do not fill one step of "
                f"micro_batch_size*data_parallel_size = {self.step_size} with drop_last=True",
                field="micro_batch_size",
                fix="use fewer ranks or a smaller micro-batch, or drop_last=False",
            )

    @property
    def epoch_length(self) -> int:
        """Positions an epoch hands out: all rows, minus the incomplete step when ``drop_last``."""
        n = self.total_samples
        return n - n % self.step_size if self.drop_last else n

    @property
    def epoch(self) -> int:
        """The epoch the next micro-batch belongs to."""
        return self.consumed_samples // self.epoch_length

    @property
    def dropped_samples(self) -> int:
        """Rows each epoch leaves out (different rows each epoch); 0 unless ``drop_last``."""
        return self.total_samples - self.epoch_length

    def permutation(self, epoch: int) -> np.ndarray:
        """The order of epoch ``epoch``: a permutation of ``0..total_samples-1`` from ``[seed, epoch]``."""
        epoch = non_negative_int("epoch", epoch)
        return np.random.default_rng([self.seed, epoch]).permutation(self.total_samples)

    def __len__(self) -> int:
        return self._steps(self.epoch_length - self.consumed_samples % self.epoch_length)

    def __iter__(self) -> Iterator[list[int]]:
        epoch, offset = divmod(self.consumed_samples, self.epoch_length)
        order = self.permutation(epoch)
        if self.dropped_samples and offset == 0:
            log.info(
                "cyclic sampler: epoch %d leaves out %d row(s) that do not fill a step of %d "
                "(drop_last=True)", epoch, self.dropped_samples, self.step_size,
            )
        for s in range(offset, self.epoch_length, self.step_size):
            chunk = order[s : min(s + self.step_size, self.epoch_length)]
            self.consumed_samples += int(chunk.size)
            share = self._rank_share(chunk)
            if share:
                yield share

    def to_dict(self) -> dict[str, Any]:
        """The sampler's settings (JSON-able)."""
        return {**super().to_dict(), "seed": self.seed, "epoch": self.epoch}


def make_micro_batch_sampler(
    dataloader_type: str,
    total_samples: int | None = None,
    *,
    micro_batch_size: int,
    consumed_samples: int = 0,
    data_parallel_rank: int = 0,
    data_parallel_size: int = 1,
    drop_last: bool = True,
    seed: int | None = None,
    indices: Sequence[int] | np.ndarray | None = None,
) -> SingleMicroBatchSampler | CyclicMicroBatchSampler:
    """The sampler for ``dataloader_type`` (``single`` or ``cyclic``; ``cyclic`` needs ``seed``).

    ``batch`` is refused with the rule registry's ``PACK-IN-BATCH-DATALOADER`` violation (a
    :class:`~seqpack.core.errors.ConfigViolationError`); other types are a UsageError.
    """
    common: dict[str, Any] = dict(
        micro_batch_size=micro_batch_size,
        consumed_samples=consumed_samples,
        data_parallel_rank=data_parallel_rank,
        data_parallel_size=data_parallel_size,
        drop_last=drop_last,
        indices=indices,
    )
    if dataloader_type == "single":
        return SingleMicroBatchSampler(total_samples, **common)
    if dataloader_type == "cyclic":
        if seed is None:
            raise UsageError("the cyclic sampler needs an explicit seed", field="seed")
        return CyclicMicroBatchSampler(total_samples, seed=seed, **common)
    if dataloader_type == "batch":
        from seqpack.config.validate import check_rules

        mbs = micro_batch_size if isinstance(micro_batch_size, int) and micro_batch_size > 1 else 2
        check_rules(
            {
                "dataset": {"enable_in_batch_packing": True, "dataloader_type": "batch"},
                "train": {"micro_batch_size": mbs},
            },
            ["PACK-IN-BATCH-DATALOADER"],
        )
    raise UsageError(
        f"dataloader_type {dataloader_type!r} cannot feed in-batch packing; "
        f"choose one of {', '.join(DATALOADER_TYPES)}",
        field="dataset.dataloader_type",
    )
