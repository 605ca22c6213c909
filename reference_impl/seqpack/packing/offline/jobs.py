"""Work units of offline packing and the process pool that runs them.

Tokenization is cut into *jobs* of consecutive draws from one source file (:func:`tokenize_jobs`).
A worker process keeps its tokenizer, schema and input files (:mod:`seqpack.data.rows`) for its whole
life (they are handed over once, by the pool initializer, not with every job; a file is mapped
for one job at a time so its pages do not pile up in the worker's memory), tokenizes a job with
:func:`seqpack.data.tokenize.tokenize_batch` and appends the samples to its own spill files
(:mod:`seqpack.packing.offline.spill`); only lengths, counts and rejections travel back. Filling
and writing packs is the other kind of job (:func:`seqpack.packing.offline.fill.write_part`).

:func:`map_jobs` runs jobs in order, in this process (``workers <= 1``) or in a pool, and yields
results in job order, so the output never depends on the number of workers.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Rows per tokenization job.
JOB_ROWS = 1024


@dataclass(frozen=True)
class TokenizeContext:
    """What every tokenization job of one split shares (handed to each worker once)."""

    schema: Any
    tokenizer: Any
    max_ids: int
    truncation: str
    spill_dir: str | None = None  # None: only lengths are wanted (no spill)
    id_dtype: str = "<u2"
    spill_prefix: str = "w"
    cut_ids: int | None = None  # cut every sample to this many stored ids after tokenization (head kept)


@dataclass(frozen=True)
class TokenizeJob:
    """Rows ``rows`` of the input ``path`` (JSONL, Parquet or a datasets folder), the ``index``-th job of the split."""

    index: int
    path: str
    rows: np.ndarray


@dataclass(frozen=True)
class TokenizedJob:
    """What a tokenization job sends back: per-sample stored lengths and where they were spilled."""

    index: int
    lengths: np.ndarray  # int32, stored (unshifted) tokens per kept sample, in draw order
    truncated: int
    rejected: list[tuple[str, dict[str, Any]]]  # (reason, {"file", "line", "row"}) in draw order
    spill: str | None
    start: int
    rows: np.ndarray | None = None  # the source row of every kept sample (lengths-only jobs; None when spilled)


def tokenize_jobs(stream: Any, rows_per_job: int = JOB_ROWS) -> list[TokenizeJob]:
    """Consecutive draws from one source form a job; jobs stay in stream order."""
    jobs = []
    src, rows = stream.source_ids, stream.row_ids
    start, n = 0, len(stream)
    while start < n:
        end = min(n, start + rows_per_job)
        other = np.flatnonzero(src[start:end] != src[start])
        if other.size:
            end = start + int(other[0])
        jobs.append(TokenizeJob(len(jobs), stream.sources[int(src[start])].path, rows[start:end]))
        start = end
    return jobs


# ------------------------------------------------------------------------------------------------
# Worker state (one per worker process, and one per thread of the parent: the MCP server runs
# concurrent jobs serially on their own threads, and they must share no writer)
# ------------------------------------------------------------------------------------------------


class _WorkerState(threading.local):
    context: TokenizeContext | None = None
    spill: Any = None

    def __init__(self) -> None:
        self.files: dict[str, Any] = {}


_STATE = _WorkerState()


def _init_worker(context: TokenizeContext | None) -> None:
    _STATE.context = context
    _STATE.files.clear()
    _STATE.spill = None


def _release_worker() -> None:
    for jf in _STATE.files.values():
        jf.close()
    _STATE.files.clear()
    if _STATE.spill is not None:
        _STATE.spill.close()
        _STATE.spill = None


def _rows(path: str) -> Any:
    jf = _STATE.files.get(path)
    if jf is None:
        from seqpack.data.rows import open_rows

        jf = _STATE.files[path] = open_rows(path)
    return jf


def _spill_writer(ctx: TokenizeContext) -> Any:
    if _STATE.spill is None:
        from seqpack.packing.offline.spill import SpillWriter

        name = f"{ctx.spill_prefix}-{os.getpid()}-{threading.get_ident()}"
        _STATE.spill = SpillWriter(ctx.spill_dir, name, np.dtype(ctx.id_dtype))
    return _STATE.spill


class _Locations(Sequence):
    """Row locations computed only when an error asks for one."""

    def __init__(self, jf: Any, rows: list[int]) -> None:
        self._jf, self._rows = jf, rows

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, i: Any) -> Any:
        return self._jf.location(self._rows[i])


def run_tokenize_job(job: TokenizeJob) -> TokenizedJob:
    """Tokenize one job with this process's context and spill writer (:func:`tokenize_job`)."""
    ctx = _STATE.context
    if ctx is None:  # pragma: no cover - map_jobs always initialises
        raise RuntimeError("tokenization worker used without a context")
    return tokenize_job(job, ctx, _rows(job.path), _spill_writer(ctx) if ctx.spill_dir is not None else None)


def tokenize_job(job: TokenizeJob, ctx: TokenizeContext, source: Any, writer: Any = None) -> TokenizedJob:
    """Stage S1 for one job: read its rows from ``source`` (a :mod:`seqpack.data.rows` source), tokenize
    them and append the samples to ``writer`` (a :class:`~seqpack.packing.offline.spill.SpillWriter`;
    None: lengths only). The result names the spill file and the offset of the job's first record."""
    from seqpack.data.tokenize import tokenize_batch

    rows = job.rows.tolist()
    batch = tokenize_batch(
        source.rows(rows), ctx.schema, ctx.tokenizer, max_length=ctx.max_ids, truncation=ctx.truncation,
        locations=_Locations(source, rows),
    )
    rejected = [
        (err.reason, {"file": job.path, "line": source.line_number(rows[pos]), "row": rows[pos]})
        for pos, err in batch.rejected
    ]
    source.release()  # unmap the file: its pages would otherwise stay in this process's resident set
    if ctx.cut_ids is not None:
        batch = cut_batch(batch, ctx.cut_ids)
    spill, start = None, 0
    if writer is not None:
        spill, start = writer.name, writer.append(batch.ids, batch.loss_mask, np.diff(batch.offsets))
    return TokenizedJob(
        index=job.index,
        lengths=np.diff(batch.offsets).astype(np.int32),
        truncated=int(np.count_nonzero(batch.truncated)),
        rejected=rejected,
        spill=spill,
        start=start,
        rows=job.rows[batch.positions] if ctx.spill_dir is None else None,
    )


def cut_batch(batch: Any, keep: int) -> Any:
    """``batch`` with every sample cut to its first ``keep`` stored ids (and mask), flagged truncated.

    Megatron-Bridge's pre-padding step does this after tokenizing with a budget above the runtime cap
    (``--bridge-compat``, :attr:`seqpack.packing.offline.options.OfflinePackOptions.stored_cut`).
    """
    from dataclasses import replace

    from seqpack.data.ranges import concat_ranges, offsets_of

    sizes = np.diff(batch.offsets)
    kept = np.minimum(sizes, keep)
    if np.array_equal(kept, sizes):
        return batch
    take = concat_ranges(batch.offsets[:-1], kept)
    return replace(batch, ids=batch.ids[take], loss_mask=batch.loss_mask[take], offsets=offsets_of(kept),
                   prompt_lengths=np.minimum(batch.prompt_lengths, kept), truncated=batch.truncated | (kept < sizes))


# ------------------------------------------------------------------------------------------------
# Running jobs
# ------------------------------------------------------------------------------------------------


class _Shielded:
    """``fn`` for a pool worker: a Rust panic (a ``BaseException`` the pool does not catch, so the worker
    would die and its job never return) comes back as an ordinary exception naming it."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def __call__(self, job: Any) -> Any:
        from seqpack.core.errors import is_foreign_panic

        try:
            return self.fn(job)
        except Exception:
            raise
        except BaseException as exc:
            if not is_foreign_panic(exc):
                raise
            raise RuntimeError(f"{type(exc).__name__}: {exc}") from None


def _start_method() -> str:
    """``fork`` (cheap, shares the parent's imports) unless a torch.distributed group is alive: its
    communication threads make forking unsafe, so workers are spawned (the launching script needs the
    usual ``if __name__ == "__main__":`` guard then)."""
    dist = sys.modules.get("torch.distributed")
    return "spawn" if dist is not None and dist.is_available() and dist.is_initialized() else "fork"


@contextmanager
def _serial(context: TokenizeContext | None) -> Iterator[None]:
    _init_worker(context)
    try:
        yield
    finally:
        _release_worker()
        _init_worker(None)


def map_jobs(
    fn: Callable[[Any], Any],
    jobs: Sequence[Any],
    *,
    workers: int = 1,
    context: TokenizeContext | None = None,
    progress: Callable[[Any], None] | None = None,
) -> Iterator[Any]:
    """``fn(job)`` for every job, results in job order; ``workers > 1`` runs them in a process pool.

    ``context`` is installed in every worker before its first job (the tokenization state);
    ``progress(job)`` is called as each result arrives. Each job passes
    :func:`seqpack.data.interrupt.checkpoint`, so a cancelled MCP job stops between jobs.
    """
    from seqpack.data.interrupt import checkpoint

    if workers <= 1 or len(jobs) <= 1:
        with _serial(context):
            for job in jobs:
                checkpoint()  # a cancelled MCP job stops here
                out = fn(job)
                if progress is not None:
                    progress(job)
                yield out
        return
    import multiprocessing as mp

    pool = mp.get_context(_start_method()).Pool(min(workers, len(jobs)), initializer=_init_worker, initargs=(context,))
    try:
        for job, out in zip(jobs, pool.imap(_Shielded(fn), jobs, chunksize=1)):
            checkpoint()  # a cancelled MCP job stops here (the pool is terminated on the way out)
            if progress is not None:
                progress(job)
            yield out
        pool.close()
        pool.join()
    finally:
        pool.terminate()


__all__ = [
    "JOB_ROWS",
    "TokenizeContext",
    "TokenizeJob",
    "TokenizedJob",
    "cut_batch",
    "map_jobs",
    "run_tokenize_job",
    "tokenize_job",
    "tokenize_jobs",
]
