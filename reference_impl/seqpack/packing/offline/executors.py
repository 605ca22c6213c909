"""Executors of offline packing: who runs the stages of :mod:`.stages`.

:class:`PoolExecutor` is the process group of :mod:`.distributed` (one process, or the ranks of a
``torchrun`` job), each member with its pool of worker processes (:func:`.jobs.map_jobs`):

* tokenization: rank ``r`` of ``R`` tokenizes the ``r``-th contiguous block of a split's jobs, its
  workers one job at a time, each worker appending to its own spill file; every rank gets every
  job's result (all-gathered);
* writing: every rank writes the parts ``g`` with ``g % R == r``, its workers in parallel; rank 0
  joins them;
* driver steps (``root``) run on rank 0 and their result (or error) reaches every rank.

The Ray engine (:mod:`.ray_engine`) offers the same four methods. A driver step that raises stops the
run on every rank with the same error: the first one in input order.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, TypeVar

from seqpack.core.errors import UsageError
from seqpack.packing.offline.options import PROBE_NAME

T = TypeVar("T")

__all__ = ["PoolExecutor"]


def _progress(total: int, desc: str, unit: str = "row") -> Any:
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm comes with megatron-energon
        return None
    return tqdm(total=total, desc=desc, unit=unit, leave=False)


def _block(n: int, rank: int, world: int) -> tuple[int, int]:
    """Rank ``rank``'s contiguous share ``[lo, hi)`` of ``n`` items (ranks in order cover them in order)."""
    return n * rank // world, n * (rank + 1) // world


class PoolExecutor:
    """The ranks of a collective (:mod:`.distributed`), each with ``workers`` worker processes."""

    def __init__(self, comm: Any, workers: int = 1, progress: bool = False) -> None:
        self.comm, self.workers, self.progress = comm, workers, progress

    @property
    def rank(self) -> int:
        """This process's rank (0 in one process)."""
        return int(self.comm.rank)

    def root(self, fn: Callable[[], T]) -> T:
        """``fn()`` on rank 0; every rank gets its result or raises its error."""
        return self.comm.from_root(fn)

    def close(self) -> None:
        """Release the process group seqpack created (see :mod:`.distributed`)."""
        self.comm.close()

    def tokenize(self, jobs: list[Any], context: Any) -> list[Any]:
        """Tokenize the jobs, each rank its contiguous block; every rank gets every job's result, in job order."""
        from seqpack.packing.offline.jobs import map_jobs, run_tokenize_job

        comm, num_workers, progress = self.comm, self.workers, self.progress
        context = replace(context, spill_prefix=f"rank{comm.rank}")
        lo, hi = _block(len(jobs), comm.rank, comm.world_size)
        mine = jobs[lo:hi]

        def work() -> list[Any]:
            if context.spill_dir is not None:
                Path(context.spill_dir).mkdir(parents=True, exist_ok=True)
            bar = _progress(int(sum(len(j.rows) for j in mine)), "tokenize") if progress and comm.rank == 0 else None
            try:
                update = (lambda job: bar.update(len(job.rows))) if bar is not None else None
                return list(map_jobs(run_tokenize_job, mine, workers=num_workers, context=context, progress=update))
            finally:
                if bar is not None:
                    bar.close()

        return [done for per_rank in comm.everywhere(work) for done in per_rank]

    def write_parts(self, jobs: list[Any], target: Path) -> None:
        """Every rank writes the parts ``g`` with ``g % world_size == rank``; rank 0 joins them into ``target``."""
        from seqpack.packing.offline.fill import write_part
        from seqpack.packing.offline.jobs import map_jobs
        from seqpack.packing.offline.parquet_concat import concat_parquet_files

        comm, num_workers, progress = self.comm, self.workers, self.progress
        mine = jobs[comm.rank :: comm.world_size]

        def work() -> int:
            if mine:
                Path(mine[0].path).parent.mkdir(parents=True, exist_ok=True)
            bar = _progress(len(mine), "write", unit="part") if progress and comm.rank == 0 else None
            try:
                update = (lambda job: bar.update(1)) if bar is not None else None
                return sum(size for _, size in map_jobs(write_part, mine, workers=num_workers, progress=update))
            finally:
                if bar is not None:
                    bar.close()

        comm.everywhere(work)

        def join() -> None:
            from seqpack.packing.offline.stages import part_paths

            concat_parquet_files(part_paths(jobs), target)

        comm.from_root(join)

    def prepare_work(self, work: Path) -> None:
        """Create the work directory; every rank must see the one rank 0 created (the spill and the parts
        live there)."""
        comm = self.comm
        if comm.world_size == 1:
            work.mkdir()
            return
        import secrets

        token = comm.from_root(lambda: _probe(work, secrets.token_hex(16)))

        def check() -> None:
            probe = work / PROBE_NAME
            if not probe.is_file() or probe.read_text() != token:
                raise UsageError(
                    f"rank {comm.rank} does not see the output directory rank 0 created ({work.parent}); distributed "
                    "packing needs an output root on a filesystem every rank shares",
                    field="out_root",
                )

        comm.everywhere(check)


def _probe(work: Path, token: str) -> str:
    work.mkdir()
    (work / PROBE_NAME).write_text(token)
    return token
