"""The Ray executor of offline packing: the stages of :mod:`.stages` as Ray tasks (``pack --engine ray``).

The driver (the process that calls :func:`~seqpack.packing.offline.prepare.prepare_packed_dataset`)
plans the inputs, gathers the lengths, assigns the bins, joins the parts and writes the metadata and
the manifest, exactly as one process does; two kinds of Ray task do the rest:

* **tokenize** (S1): a *shard*, a run of consecutive tokenization jobs, read, tokenized and spilled by
  one task into one spill file named after the shard (written under a temporary name and renamed when
  the shard is done, so a retried task writes the same file again and a half-written one is never
  read);
* **write** (S4): one row group filled from the spill and written as a Parquet part named after the
  row group.

Nothing depends on the order Ray returns work in: every tokenized job carries its index (the global
key of its samples) and the driver sorts by it (:func:`.stages.gather_split`); parts are joined in row
group order. The output is byte for byte what the local worker pool writes.

Retries: a task whose worker process dies (killed, out of memory, node lost) is run again by Ray
(``max_retries``) and writes the same files. An error in the data (a bad row) is not retried: the
driver raises the first one in input order, naming the file and row, and the run leaves nothing
behind. A task that still fails after its retries is reported with the rows of its shard (or its row
group). Every task returns the versions of seqpack, pyarrow and the tokenizer library it ran with; a
worker whose versions differ from the driver's is refused (its tokens could differ).

Cluster: ``ray.init()`` connects to ``RAY_ADDRESS`` when it is set, otherwise it starts a local cluster
with ``num_cpus`` CPUs (and shuts it down at the end). The spill and the parts live in the output's
temporary directory, which every worker must see (a local cluster always does; a multi-node cluster
needs a shared filesystem, checked before any tokenization). Needs the ``ray`` extra.
"""

from __future__ import annotations

import logging
import os
import secrets
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, TypeVar

from seqpack.core.errors import PackingError, SeqpackError, UsageError
from seqpack.packing.offline.options import PROBE_NAME

log = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = ["DEFAULT_MAX_RETRIES", "RayExecutor", "shard_jobs"]

#: Retries of a task whose worker died (Ray's own default for tasks).
DEFAULT_MAX_RETRIES = 3
#: Rows per tokenization task (about 10-20 s of one CPU with a real tokenizer).
SHARD_ROWS = 16_384
_SPILL_PREFIX = "shard-"


def shard_jobs(jobs: list[Any], rows: int = SHARD_ROWS) -> list[list[Any]]:
    """Consecutive jobs grouped into shards of about ``rows`` rows (a job is never split)."""
    shards: list[list[Any]] = []
    current: list[Any] = []
    count = 0
    for job in jobs:
        current.append(job)
        count += len(job.rows)
        if count >= rows:
            shards.append(current)
            current, count = [], 0
    if current:
        shards.append(current)
    return shards


def _versions() -> dict[str, str | None]:
    """The versions a tokenized sample depends on."""
    import pyarrow

    from seqpack import __version__

    try:
        import tokenizers

        tok_version: str | None = tokenizers.__version__
    except ImportError:
        tok_version = None
    return {"seqpack": __version__, "pyarrow": pyarrow.__version__, "tokenizers": tok_version}


# ------------------------------------------------------------------------------------------------
# Task bodies (run in Ray worker processes; plain functions, wrapped with ray.remote by the executor)
# ------------------------------------------------------------------------------------------------

_CONTEXTS: dict[str, Any] = {}  # per worker process: the tokenization context of a split, by object id


def _context(boxed: list[Any]) -> Any:
    """The context behind a boxed object reference, deserialized once per worker process."""
    import ray

    ref = boxed[0]
    key = ref.hex()
    ctx = _CONTEXTS.get(key)
    if ctx is None:
        _CONTEXTS.clear()  # one split at a time
        ctx = _CONTEXTS[key] = ray.get(ref)
    return ctx


def tokenize_shard(boxed_context: list[Any], jobs: list[Any], shard: int) -> tuple[list[Any], dict[str, Any]]:
    """Stage S1 for one shard: its jobs tokenized into the spill file ``shard-<shard>.spill``."""
    import numpy as np

    from seqpack.data.rows import open_rows
    from seqpack.packing.offline.jobs import tokenize_job
    from seqpack.packing.offline.spill import SUFFIX, SpillWriter

    ctx = _context(boxed_context)
    name = f"{_SPILL_PREFIX}{shard:06d}"
    tmp = f"{name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    writer = SpillWriter(ctx.spill_dir, tmp, np.dtype(ctx.id_dtype))
    sources: dict[str, Any] = {}
    try:
        done = []
        for job in jobs:
            source = job.source if job.source is not None else (
                sources.get(job.path) or sources.setdefault(job.path, open_rows(job.path)))
            done.append(replace(tokenize_job(job, ctx, source, writer), spill=name))
        writer.close()
        os.replace(Path(ctx.spill_dir) / f"{tmp}{SUFFIX}", Path(ctx.spill_dir) / f"{name}{SUFFIX}")
    except BaseException:
        writer.close()
        Path(ctx.spill_dir, f"{tmp}{SUFFIX}").unlink(missing_ok=True)
        raise
    finally:
        for source in sources.values():
            source.close()
    return done, _versions()


def write_part_task(job: Any) -> tuple[tuple[str, int], dict[str, Any]]:
    """Stage S4 for one row group (:func:`.fill.write_part`), written under a temporary name then renamed."""
    from seqpack.packing.offline.fill import write_part

    final = Path(job.path)
    tmp = final.with_name(f"{final.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        _, size = write_part(replace(job, path=str(tmp)))
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return (str(final), size), _versions()


def check_probe(work: str, token: str) -> bool:
    """Whether this worker sees the probe the driver wrote in the work directory."""
    probe = Path(work) / PROBE_NAME
    return probe.is_file() and probe.read_text() == token


# ------------------------------------------------------------------------------------------------
# The executor
# ------------------------------------------------------------------------------------------------


def _cause(exc: BaseException) -> BaseException:
    """The exception a Ray task raised (Ray wraps it in a ``RayTaskError``)."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


def _rows_of(jobs: list[Any]) -> str:
    first, last = jobs[0], jobs[-1]
    return f"rows {int(first.rows[0])}-{int(last.rows[-1])} of {first.path}" + (
        "" if first.path == last.path else f" to {last.path}")


class RayExecutor:
    """Runs the stages on a Ray cluster (module docstring); the driver steps run in this process."""

    rank = 0

    def __init__(self, num_cpus: int | None = None, *, max_retries: int = DEFAULT_MAX_RETRIES,
                 shard_rows: int | None = None, progress: bool = False) -> None:
        from seqpack.core.extras import require_extra

        require_extra("ray")
        import ray

        self._ray = ray
        self._started = False
        if not ray.is_initialized():
            address = os.environ.get("RAY_ADDRESS") or None
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                      "configure_logging": False}
            if address is None:
                kwargs["num_cpus"] = num_cpus
            try:
                ray.init(address=address, **kwargs)
            except Exception as exc:  # noqa: BLE001 - connection and start failures come in many types
                raise UsageError(f"cannot start or reach a Ray cluster ({type(exc).__name__}: {exc})",
                                 field="engine", fix="set RAY_ADDRESS to a running cluster, or unset it to start a "
                                 "local one") from None
            self._started = True
        self.max_retries, self.shard_rows, self.progress = max_retries, shard_rows or SHARD_ROWS, progress
        self._tokenize = ray.remote(num_cpus=1, max_retries=max_retries)(tokenize_shard)
        self._write = ray.remote(num_cpus=1, max_retries=max_retries)(write_part_task)
        self._probe = ray.remote(num_cpus=0)(check_probe)
        self._driver_versions = _versions()

    def root(self, fn: Callable[[], T]) -> T:
        """Driver steps run here."""
        return fn()

    def prepare_work(self, work: Path) -> None:
        """Create the work directory and check that the workers see it (they write the spill and the parts)."""
        work.mkdir()
        token = secrets.token_hex(16)
        (work / PROBE_NAME).write_text(token)
        nodes = [n for n in self._ray.nodes() if n.get("Alive")]
        refs = [self._probe.options(resources={f"node:{n['NodeManagerAddress']}": 0.001}).remote(str(work), token)
                for n in nodes] or [self._probe.remote(str(work), token)]
        if not all(self._ray.get(refs)):
            raise UsageError(
                f"a Ray worker does not see the output directory the driver created ({work.parent}); --engine ray "
                "with a local output needs an output root on a filesystem every node shares", field="out_root",
            )

    def _run(self, submit: Callable[[int], Any], count: int, what: Callable[[int], str],
             window: int | None = None) -> list[Any]:
        """Results of tasks ``submit(0) .. submit(count - 1)`` in that order, at most ``window`` in flight (the
        next is submitted as one finishes); the first failure in that order is raised, later tasks cancelled."""
        ray = self._ray
        window = count if window is None else max(1, window)
        pending: dict[Any, int] = {}
        submitted = 0
        results: dict[int, Any] = {}
        failures: dict[int, BaseException] = {}
        bar = _bar(count) if self.progress else None
        try:
            while submitted < count or pending:
                while submitted < count and len(pending) < window:
                    pending[submit(submitted)] = submitted
                    submitted += 1
                ready, _ = ray.wait(list(pending), num_returns=1)
                k = pending.pop(ready[0])
                try:
                    results[k] = ray.get(ready[0])
                except Exception as exc:  # noqa: BLE001 - sorted out below, in input order
                    failures[k] = exc
                if bar is not None:
                    bar.update(1)
                first = min(failures, default=None)
                if first is not None and all(j in results or j in failures for j in range(first)):
                    for ref in pending:
                        ray.cancel(ref, force=True)
                    raise self._error(failures[first], what(first))
        finally:
            if bar is not None:
                bar.close()
        out = []
        for k in range(count):
            value, versions = results[k]
            if versions != self._driver_versions:
                raise UsageError(f"a Ray worker runs {versions}, the driver {self._driver_versions}: tokens could "
                                 "differ", field="engine", fix="install the same versions on every node")
            out.append(value)
        return out

    def _error(self, exc: BaseException, what: str) -> BaseException:
        cause = _cause(exc)
        if isinstance(cause, SeqpackError):
            return cause
        retries = f" after {self.max_retries} retries" if self.max_retries else ""
        return PackingError(f"the Ray task for {what} failed{retries}: {type(cause).__name__}: {cause}")

    def tokenize(self, jobs: list[Any], context: Any) -> list[Any]:
        """Stage S1 as one Ray task per shard; every job's result (in job order)."""
        if context.spill_dir is not None:
            Path(context.spill_dir).mkdir(parents=True, exist_ok=True)
        shards = shard_jobs(jobs, self.shard_rows)
        boxed = [self._ray.put(context)]
        done = self._run(lambda k: self._tokenize.remote(boxed, shards[k], k), len(shards),
                         lambda k: f"tokenizing {_rows_of(shards[k])} (shard {k})")
        return [job for per_shard in done for job in per_shard]

    def write_parts(self, jobs: list[Any], target: Path) -> None:
        """Stage S4 as one Ray task per row group; the driver joins the parts into ``target``."""
        from seqpack.packing.offline.parquet_concat import concat_parquet_files

        from seqpack.packing.offline.stages import part_paths

        paths = part_paths(jobs)
        if paths:
            Path(paths[0]).parent.mkdir(parents=True, exist_ok=True)
        # a window of tasks in flight: a job (its samples' spill locations) is built when it is submitted
        self._run(lambda k: self._write.remote(jobs[k]), len(paths),
                  lambda k: f"writing row group {k} ({Path(paths[k]).name})", window=self._window())
        concat_parquet_files(paths, target)

    def _window(self) -> int:
        """Tasks kept in flight: four per CPU of the cluster."""
        return 4 * max(1, int(self._ray.cluster_resources().get("CPU", 1)))

    def close(self) -> None:
        """Shut down the local cluster this executor started (a cluster it connected to stays up)."""
        if self._started and self._ray.is_initialized():
            self._ray.shutdown()
        self._started = False


def _bar(total: int) -> Any:
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm comes with megatron-energon
        return None
    # the bar's own carriage returns go to the terminal as they are (the CLI escapes what it prints)
    return tqdm(total=total, desc="ray tasks", unit="task", leave=False, file=getattr(sys.stderr, "raw", sys.stderr))
