"""The process group offline packing runs in: one process, or the ranks of a ``torchrun`` job.

:func:`prepare_packed_dataset <seqpack.packing.offline.prepare.prepare_packed_dataset>` is written
once against :class:`Collective`; a single process is a group of one (:class:`LocalCollective`,
every operation a no-op), and under ``torchrun`` :class:`TorchCollective` uses
``torch.distributed`` (gloo works on CPU; an existing process group is reused, otherwise one is
created from torchrun's environment and kept for later calls, then destroyed at exit: under
torchrun a default group that was destroyed cannot be created again in the same process, so a
second call would hang).

Two operations carry all the coordination, and both make a failure on one rank a failure on every
rank (so no rank is left waiting in a collective that the failed rank never reaches):

* :meth:`Collective.from_root` runs a function on rank 0 and hands its result, or its error, to
  every rank;
* :meth:`Collective.everywhere` runs a function on every rank and hands the list of results (in
  rank order) to every rank; when any rank failed, every rank raises the error of the lowest
  failing rank. The ranks own contiguous blocks of the input in rank order, so that is the error a
  single process meets first.

Which mode a call uses (:func:`resolve_collective`): ``distributed=None`` detects it (an
initialised ``torch.distributed`` group with more than one rank, or ``WORLD_SIZE`` > 1 in the
environment as torchrun sets it); ``True`` requires it; ``False`` never uses it.
"""

from __future__ import annotations

import atexit
import logging
import os
import pickle
import sys
from typing import Any, Callable, Protocol, TypeVar

from seqpack.core.errors import PackingError, SeqpackError, UsageError

log = logging.getLogger(__name__)

T = TypeVar("T")


class Collective(Protocol):
    """A group of processes working on one offline preparation."""

    rank: int
    world_size: int

    def from_root(self, fn: Callable[[], T]) -> T:
        """``fn()`` on rank 0; every rank gets its result or raises its error."""
        ...

    def everywhere(self, fn: Callable[[], T]) -> list[T]:
        """``fn()`` on every rank; every rank gets all results in rank order, or raises the first error."""
        ...

    def close(self) -> None:
        """Release what the group created."""
        ...


def _captured(fn: Callable[[], Any]) -> tuple[bool, Any]:
    try:
        return True, fn()
    except SeqpackError as err:
        return False, err
    except Exception as exc:  # noqa: BLE001 - carried to every rank, then raised there
        return False, PackingError(f"{type(exc).__name__}: {exc}")


def _portable(outcome: tuple[bool, Any], rank: int) -> tuple[bool, Any]:
    """An outcome that pickles: an error that does not is replaced by a PackingError with its text."""
    ok, value = outcome
    if ok:
        return outcome
    try:
        pickle.loads(pickle.dumps(value))
    except Exception:  # noqa: BLE001
        return False, PackingError(f"rank {rank}: {value}")
    return outcome


class LocalCollective:
    """A group of one process."""

    rank = 0
    world_size = 1

    def from_root(self, fn: Callable[[], T]) -> T:
        """Just ``fn()``."""
        return fn()

    def everywhere(self, fn: Callable[[], T]) -> list[T]:
        """``[fn()]``."""
        return [fn()]

    def close(self) -> None:
        """Nothing to release."""


class TorchCollective:
    """The ranks of the default ``torch.distributed`` process group."""

    def __init__(self) -> None:
        import torch.distributed as dist

        self._dist = dist
        self.rank = int(dist.get_rank())
        self.world_size = int(dist.get_world_size())

    def from_root(self, fn: Callable[[], T]) -> T:
        """Rank 0 runs ``fn``; its result (or error) is broadcast."""
        box: list[Any] = [_portable(_captured(fn), 0) if self.rank == 0 else None]
        self._dist.broadcast_object_list(box, src=0)
        ok, value = box[0]
        if not ok:
            raise value
        return value

    def everywhere(self, fn: Callable[[], T]) -> list[T]:
        """Every rank runs ``fn``; outcomes are all-gathered."""
        outcomes: list[Any] = [None] * self.world_size
        self._dist.all_gather_object(outcomes, _portable(_captured(fn), self.rank))
        for ok, value in outcomes:
            if not ok:
                raise value
        return [value for _, value in outcomes]

    def close(self) -> None:
        """Nothing: the process group stays for later calls (see the module docstring)."""


#: What a launcher sets in every rank it starts (torchrun and torch.distributed.launch, DeepSpeed, Accelerate and
#: seqpack's own ranks set ``LOCAL_RANK``; Slurm, Open MPI and PMI set their own): ``WORLD_SIZE`` > 1 without any
#: of them is an environment left over in a shell, and waiting for the other ranks would wait for ever.
LAUNCHER_VARIABLES = ("LOCAL_RANK", "TORCHELASTIC_RUN_ID", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                      "PMIX_RANK")


def _env_world_size() -> int:
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 1


def _initialised_world() -> int:
    """World size of an already initialised torch.distributed group (0 when there is none)."""
    if "torch.distributed" not in sys.modules:  # never import torch just to ask
        return 0
    dist = sys.modules["torch.distributed"]
    if not dist.is_available() or not dist.is_initialized():
        return 0
    return int(dist.get_world_size())


def _destroy_at_exit() -> None:
    """Destroy the group seqpack created (gloo aborts the process at exit while a group is alive)."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def resolve_collective(distributed: bool | None = None) -> Collective:
    """The group to run in (see the module docstring for ``distributed``)."""
    if distributed is False:
        return LocalCollective()
    world = _initialised_world()
    if world > 1:
        return TorchCollective()
    env_world = _env_world_size()
    if env_world > 1:
        import torch.distributed as dist

        missing = [k for k in ("RANK", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
        if missing:
            raise UsageError(
                f"WORLD_SIZE={env_world} but {', '.join(missing)} not set; launch with torchrun",
                field="distributed",
            )
        if not any(k in os.environ for k in LAUNCHER_VARIABLES):  # left over in a shell: the ranks never come
            raise UsageError(
                f"WORLD_SIZE={env_world} is set but no launcher started this process (none of "
                f"{', '.join(LAUNCHER_VARIABLES)} is set), so its {env_world - 1} other rank(s) would never join",
                field="distributed",
                fix="unset WORLD_SIZE, RANK, MASTER_ADDR and MASTER_PORT to run on this machine, or launch with "
                "torchrun --nproc_per_node N ...",
            )
        dist.init_process_group(backend="gloo")
        atexit.register(_destroy_at_exit)
        log.info("offline packing on %d ranks (gloo process group created)", dist.get_world_size())
        return TorchCollective()
    if distributed and world == 0 and "WORLD_SIZE" not in os.environ:
        raise UsageError(
            "distributed packing needs torchrun (WORLD_SIZE > 1) or an initialised torch.distributed group",
            field="distributed",
            fix="launch with torchrun --nproc_per_node N ..., or drop --distributed",
        )
    return LocalCollective()


__all__ = ["Collective", "LocalCollective", "TorchCollective", "resolve_collective"]
