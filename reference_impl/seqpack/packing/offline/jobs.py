"""Work units of offline packing and the process pool that runs them.

Tokenization is cut into *jobs* of consecutive draws from one source file (:func:`tokenize_jobs`).
A worker process keeps its tokenizer, schema and input files (:mod:`seqpack.data.rows`: a JSONL file's line
index, a Parquet file's footer) for its whole life (they are handed over once, by the pool initializer, not
with every job; a file is open for one job at a time), tokenizes a job with
:func:`seqpack.data.tokenize.tokenize_batch` and appends the samples to its own spill files
(:mod:`seqpack.packing.offline.spill`); only lengths, counts and rejections travel back. Filling
and writing packs is the other kind of job (:func:`seqpack.packing.offline.fill.write_part`).

:func:`map_jobs` runs jobs in order, in this process (``workers <= 1``) or in a pool, and yields
results in job order, so the output never depends on the number of workers.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
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
    """Rows ``rows`` of the input ``path`` (JSONL, Parquet or a datasets folder), the ``index``-th job of the split;
    ``expected`` is a JSONL file's fingerprint when the jobs were cut (a worker that opens another file under that
    name refuses it). ``source`` is the JSONL reader the jobs were cut from: used as it is in the process that
    cut them, and sent to a worker as a window of its line index over the job's rows (so no worker loads the
    index of the whole file, which grows with it)."""

    index: int
    path: str
    rows: np.ndarray
    expected: Any = None
    source: Any = field(default=None, compare=False, repr=False)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        window = self.source.window(self.rows) if self.source is not None else None
        return (TokenizeJob, (self.index, self.path, self.rows, self.expected, window))


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
    from seqpack.data.jsonl import file_fingerprint
    from seqpack.data.rows import input_kind, open_rows

    jobs = []
    readers: dict[str, Any] = {}
    src, rows = stream.source_ids, stream.row_ids
    start, n = 0, len(stream)
    prints: dict[str, Any] = {}
    while start < n:
        end = min(n, start + rows_per_job)
        other = np.flatnonzero(src[start:end] != src[start])
        if other.size:
            end = start + int(other[0])
        path = stream.sources[int(src[start])].path
        if path not in prints:  # a JSONL file can change in place; Parquet and datasets folders are read whole
            jsonl = input_kind(path) == "jsonl"
            prints[path] = file_fingerprint(path) if jsonl else None
            readers[path] = open_rows(path) if jsonl else None
        jobs.append(TokenizeJob(len(jobs), path, rows[start:end], prints[path], readers[path]))
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
    source = job.source if job.source is not None else _rows(job.path)
    return tokenize_job(job, ctx, source, _spill_writer(ctx) if ctx.spill_dir is not None else None)


def tokenize_job(job: TokenizeJob, ctx: TokenizeContext, source: Any, writer: Any = None) -> TokenizedJob:
    """Stage S1 for one job: read its rows from ``source`` (a :mod:`seqpack.data.rows` source), tokenize
    them and append the samples to ``writer`` (a :class:`~seqpack.packing.offline.spill.SpillWriter`;
    None: lengths only). The result names the spill file and the offset of the job's first record."""
    from seqpack.data.tokenize import tokenize_batch

    if job.expected is not None and source.index.fingerprint != job.expected:  # replaced since the jobs were cut
        from seqpack.core.errors import InputError
        from seqpack.data.jsonl import CHANGED_FIX, CHANGED_WHILE_READING

        raise InputError(CHANGED_WHILE_READING, file=job.path, fix=CHANGED_FIX)
    rows = job.rows.tolist()
    batch = tokenize_batch(
        source.rows(rows), ctx.schema, ctx.tokenizer, max_length=ctx.max_ids, truncation=ctx.truncation,
        locations=_Locations(source, rows),
    )
    rejected = [
        (err.reason, {"file": job.path, "line": source.line_number(rows[pos]), "row": rows[pos],
                      **({"completion_nonempty": True} if getattr(err, "completion_nonempty", False) else {})})
        for pos, err in batch.rejected
    ]
    source.release()  # one open file per job, not one per file the worker ever read
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
    yield from _pooled(fn, jobs, min(workers, len(jobs)), context, progress)


#: Seconds between two stop checks while a pool job is awaited.
_WAIT_STEP_S = 0.1


def _pooled(fn: Callable[[Any], Any], jobs: Sequence[Any], workers: int, context: TokenizeContext | None,
            progress: Callable[[Any], None] | None) -> Iterator[Any]:
    """:func:`map_jobs` on a process pool: results in job order, at most two jobs per worker in flight.

    A worker that dies (killed by the OOM killer, a signal, a crash in native code) breaks the pool: the run
    stops with one :class:`~seqpack.core.errors.ResourceError` naming the signal, instead of waiting for ever
    for a result that never comes. The stop check runs while a job is awaited, so a cancelled MCP job stops
    mid-job; the workers are killed on the way out.
    """
    import collections
    import concurrent.futures as cf
    import multiprocessing as mp
    from concurrent.futures.process import BrokenProcessPool

    from seqpack.data.interrupt import checkpoint

    pool = cf.ProcessPoolExecutor(workers, mp_context=mp.get_context(_start_method()), initializer=_init_worker,
                                  initargs=(context,))
    shielded, pending, queue = _Shielded(fn), iter(jobs), collections.deque()
    try:
        for job in itertools.islice(pending, 2 * workers):
            queue.append((job, pool.submit(shielded, job)))
        while queue:
            job, future = queue.popleft()
            while True:
                checkpoint()  # a cancelled MCP job stops here (the workers are killed on the way out)
                try:
                    out = future.result(timeout=_WAIT_STEP_S)
                    break
                except cf.TimeoutError:
                    continue
            for more in itertools.islice(pending, 1):
                queue.append((more, pool.submit(shielded, more)))
            if progress is not None:
                progress(job)
            yield out
    except BrokenProcessPool:
        raise _worker_died(pool) from None
    finally:
        _stop_pool(pool)


def _worker_died(pool: Any) -> Exception:
    """The error of a pool one of whose workers died, naming how it died when that can be seen."""
    import signal

    from seqpack.core.errors import ResourceError

    processes = list((getattr(pool, "_processes", None) or {}).values())  # private; only for the message
    pool.shutdown(wait=True)  # every worker reaped: their exit codes are final
    how = "ended abruptly"
    codes = [code for proc in processes if isinstance(code := getattr(proc, "exitcode", None), int) and code]
    if codes:  # the pool sends SIGTERM to the others once one died: name another ending when there is one
        code = sorted(codes, key=lambda c: c == -signal.SIGTERM)[0]
        if code > 0:
            how = f"exited with code {code}"
        else:
            try:
                how = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"was killed by signal {-code}"
    hint = " (SIGKILL is what the kernel's out-of-memory killer sends)" if "SIGKILL" in how else ""
    return ResourceError(f"a worker process {how}{hint}; the run stopped and wrote nothing",
                         fix="run again with fewer --workers or more free memory")


def _stop_pool(pool: Any) -> None:
    """Shut ``pool`` down without waiting for jobs still running: its workers are killed."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in processes:
        if proc.is_alive():
            proc.kill()
    for proc in processes:
        proc.join(timeout=5)


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
