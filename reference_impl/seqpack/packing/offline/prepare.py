"""Offline packed SFT: rows -> tokenize -> align -> bin-pack -> packed Parquet + metadata + manifest.

:func:`prepare_packed_dataset` is the whole pipeline:

1. **Rows.** One input per split (JSONL, Parquet or a ``datasets`` folder: :mod:`seqpack.data.rows`),
   or a blend manifest (:mod:`seqpack.packing.offline.sources`); rows are read lazily by index, in
   jobs of consecutive rows, by worker processes (``num_workers``) that keep their tokenizer and open
   files for their whole life.
2. **Tokenize** with the schema (prompt/completion or chat, auto-detected from the first row
   when not given) and the tokenizer (the embedded byte tokenizer by default). A sample's
   *runtime* length (tokens the model sees: ids minus one) is capped at
   ``cap = floor(max_seq_length / m) * m`` with ``m = pad_seq_to_mult``; longer samples are
   truncated by the tokenization policy (and counted) or rejected (and counted). The tokenized
   samples go straight to spill files on disk (:mod:`seqpack.packing.offline.spill`; ids in the
   narrowest dtype the vocabulary allows); memory keeps three numbers per sample (file, offset,
   length), never the tokens.
3. **Align.** Every sample's runtime length is rounded up to a multiple of ``m`` (or of the
   ``pad_seq_length_to_mult`` override, a multiple of ``m``, capped at ``cap``, as Bridge's
   override does); the stored ids are right-padded with the tokenizer's end-of-document id (EOD,
   which is EOS for every tokenizer seqpack loads, as in Megatron) and the loss mask is 0 there:
   exactly the stored form Megatron-Bridge writes, so Bridge's reader and ours agree on segments.
4. **Bin-pack** the aligned lengths into packs of ``pack_size`` tokens
   (:func:`seqpack.packing.algorithms.pack_lengths`; best-fit decreasing by default), then
   shuffle the pack order with the seed (decreasing-order packers leave packs sorted by content).
   ``bridge_compat=True`` reproduces Megatron-Bridge's first-fit-shuffle strategy and its sample
   fill order bit for bit instead (no extra shuffle).
5. **Fill and write.** Packs are filled from the spill one row group at a time
   (:mod:`seqpack.packing.offline.fill`; the workers write the row groups in parallel, each as
   a Parquet part) and the parts are joined byte for byte (:mod:`seqpack.packing.offline.parquet_concat`)
   into ``<split>_<pack_size>.idx.parquet``; then the metadata JSON array
   ``<pack_size>_metadata.jsonl`` (Bridge's six keys, one entry per split) and
   ``seqpack_manifest.json`` (fingerprint, every option, input hashes, per-split accounting) go
   into ``<out_root>/<tokenizer>_pad_seq_to_mult<m>_<fingerprint12>/``. The directory is written
   under a temporary name (the spill and the parts live inside it) and renamed at the end, so a
   failure leaves nothing half-written, and the fingerprint covers everything that changes pack
   membership, so a changed option never reuses a stale pack (the same options reuse the existing
   one unless ``overwrite``). ``metadata_path`` also appends the metadata entries to a JSON array
   file of your choice, as Bridge's preparation does with its metadata file.

Under ``torchrun`` the same function runs on every rank (:mod:`seqpack.packing.offline.distributed`):
each rank tokenizes a contiguous share of the rows into its own spill files, the lengths are
all-gathered, rank 0 bin-packs and broadcasts the packs, every rank writes its share of row groups
and rank 0 joins them and writes metadata and manifest. The output is byte-identical to a
single-process run (and to any number of workers) with the same inputs and options.

Accounting: for every split, ``rows_in == packed + skipped`` (``truncated`` counts packed samples
that lost tokens); skipped rows are grouped by reason with their first file/line locations.


The steps are the stage functions of :mod:`.stages`; :func:`_prepare` runs them against an executor
(:mod:`.executors`: the worker pool on one process or on every ``torchrun`` rank), so every executor
runs the same code on the same values. Options and accounting live in :mod:`.options`, bin assignment
and the fingerprint in :mod:`.bins`.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from seqpack.core.arguments import positive_int
from seqpack.core.errors import ArtifactError, InputError, PackingError, SeqpackError, UsageError
from seqpack.core.limits import MAX_ROW_GROUP_SIZE, MAX_WORKERS
from seqpack.core.reports import PreparedPacks
from seqpack.io import atomic, ownership, reading
from seqpack.io.temporaries import remove_path
from seqpack.packing.offline import artifact
from seqpack.packing.offline.artifact import MANIFEST_NAME
from seqpack.packing.offline.bins import aligned_lengths, assign_scoped, bridge_metadata
from seqpack.packing.offline.options import SPLITS, WORK_DIR, OfflinePackOptions, check_max_gap
from seqpack.packing.offline.stages import (
    check_gap,
    detect_schema,
    gather_split,
    load_tokenizer_arg,
    manifest,
    part_jobs,
    plan_run,
    pre_pad_id,
    resolve_inputs,
    shard_of_samples,
    split_summary,
    tokenize_jobs,
)

log = logging.getLogger(__name__)

__all__ = ["SampleLengths", "append_metadata", "find_manifest", "pre_pad_id", "prepare_packed_dataset", "sample_lengths"]


# ------------------------------------------------------------------------------------------------
# The pipeline, written once against an executor (.executors)
# ------------------------------------------------------------------------------------------------


def _pack_split(
    ex: Any, split: str, stream: Any, options: OfflinePackOptions, schema: Any, tokenizer: Any, work: Path,
    target_dir: Path, row_group_size: int | None, max_gap: float | None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Tokenize (spill), pack lengths, fill and write one split; returns (Bridge metadata, summary)."""
    from seqpack.packing.offline.fill import auto_row_group_size
    from seqpack.packing.offline.jobs import TokenizeContext
    from seqpack.packing.offline.spill import id_dtype

    dtype = id_dtype(int(tokenizer.vocab_size))
    spill_dir, part_dir = work / split / "spill", work / split / "parts"
    context = TokenizeContext(schema, tokenizer, options.tokenize_budget, options.truncation, str(spill_dir),
                              dtype.str, cut_ids=options.stored_cut)
    clock = _StageClock(split)
    jobs = tokenize_jobs(stream)
    done = ex.tokenize(jobs, context)
    clock("tokenize")
    account, index = gather_split(stream, done, dtype)
    clock("gather")
    if account.packed + account.skipped_total != account.rows_in:  # pragma: no cover - invariant
        raise PackingError(f"{split}: accounting mismatch ({account.to_dict()})")
    if account.packed == 0:
        raise InputError(
            f"{split}: no usable sample ({account.skipped_total} of {account.rows_in} rows skipped: "
            f"{', '.join(account.skipped)})",
            file=stream.sources[0].path,
        )
    runtime = index.length.astype(np.int64) - 1
    aligned = aligned_lengths(runtime, options)
    if aligned.max() > options.pack_size:  # pragma: no cover - guarded by the options
        raise PackingError(f"{split}: a sample is longer than the pack size")
    shards = shard_of_samples(jobs, done, options.rows_per_shard)
    bins, bounds = ex.root(lambda: assign_scoped(options, aligned, shards))
    clock("assign")
    check_gap(split, bins, aligned, options.pack_size, max_gap)
    name = f"{split}_{options.pack_size}.idx.parquet"
    rows_per_group = row_group_size or auto_row_group_size(options.pack_size)
    parts = part_jobs(bins, aligned, index, rows_per_group, part_dir, spill_dir, dtype, pre_pad_id(tokenizer), bounds)
    clock("plan row groups")
    ex.write_parts(parts, target_dir / name)
    clock("fill, write and join")
    ex.root(lambda: remove_path(work / split))
    summary = split_summary(name, account, bins, runtime, aligned, options.pack_size, stream)
    return bridge_metadata(aligned, bins.order, bins.offsets, options.pack_size), summary


@dataclass(frozen=True)
class SampleLengths:
    """Runtime lengths (ids minus one, before alignment) of every usable sample of one input."""

    lengths: np.ndarray
    truncated: int
    account: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able summary (without the per-sample array)."""
        lengths = self.lengths
        return {
            "samples": int(lengths.size),
            "tokens": int(lengths.sum()),
            "mean": float(lengths.mean()) if lengths.size else 0.0,
            "max": int(lengths.max()) if lengths.size else 0,
            "truncated": self.truncated,
            "accounting": self.account,
        }


def sample_lengths(
    inputs: str | os.PathLike[str],
    *,
    max_seq_length: int,
    schema: Any = None,
    tokenizer: Any = None,
    truncation: str = "right",
    num_workers: int = 1,
) -> SampleLengths:
    """Tokenize a JSONL file (or blend) with the offline pipeline's rules and return runtime lengths.

    Used to plan pack lengths from real data without writing packs; rejected rows are counted in
    ``account`` exactly as the pipeline would count them. Nothing is spilled.
    """
    from seqpack.packing.offline.distributed import LocalCollective
    from seqpack.packing.offline.executors import PoolExecutor
    from seqpack.packing.offline.jobs import TokenizeContext

    from seqpack.data.objects import staging

    tok = load_tokenizer_arg(tokenizer)
    with staging():  # an object-storage input is read from a local copy
        streams = resolve_inputs(inputs, 0, None)
        stream = streams.get("training") or next(iter(streams.values()))
        if schema is None:
            schema = detect_schema(stream)
        context = TokenizeContext(schema, tok, max_seq_length + 1, truncation)
        done = PoolExecutor(LocalCollective(), num_workers).tokenize(tokenize_jobs(stream), context)
        account, index = gather_split(stream, done, np.dtype(context.id_dtype))
    return SampleLengths(lengths=index.length.astype(np.int64) - 1, truncated=account.truncated,
                         account=account.to_dict())


def prepare_packed_dataset(
    inputs: str | os.PathLike[str] | Mapping[str, Any],
    out_root: str | os.PathLike[str],
    *,
    pack_size: int,
    pad_seq_to_mult: int = 1,
    max_seq_length: int | None = None,
    schema: Any = None,
    tokenizer: Any = None,
    truncation: str = "right",
    algorithm: str = "best_fit_decreasing",
    seed: int = 1234,
    max_seqs_per_pack: int | None = None,
    bridge_compat: bool = False,
    shuffle_packs: bool = True,
    num_samples: int | None = None,
    pad_seq_length_to_mult: int | None = None,
    bin_scope: str = "global",
    shard_rows: int | None = None,
    max_gap: float | None = None,
    num_workers: int = 1,
    row_group_size: int | None = None,
    metadata_path: str | os.PathLike[str] | None = None,
    distributed: bool | None = None,
    engine: str = "local",
    work_dir: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    progress: bool = False,
) -> PreparedPacks:
    """Pack rows (or a blend) into packed Parquet; see the module docstring for every step.

    ``bin_scope="shard"`` assigns bins within shards of ``shard_rows`` consecutive rows (approximate,
    opt-in); every split's summary records the certificate ``gap`` (:func:`.bins.packing_gap`), and
    ``max_gap`` fails a run whose gap is above it before anything is written. ``metadata_path``: also append this run's metadata entries to that JSON array file (created
    when absent), as Megatron-Bridge's preparation does. ``distributed``: run on the ranks of a
    ``torchrun`` job (``None`` detects it; see :mod:`seqpack.packing.offline.distributed`).
    ``engine="ray"`` runs the stages as Ray tasks (:mod:`.ray_engine`; ``RAY_ADDRESS`` or a local cluster
    of ``num_workers`` CPUs) and writes the same bytes. Inputs and ``out_root`` may be object storage URIs
    (``s3://...``, :mod:`seqpack.data.objects`): inputs are staged into ``work_dir`` (default: the system's
    temporary directory), a remote output is written there and then published (:mod:`.remote`).
    """
    options = OfflinePackOptions(
        pack_size=pack_size,
        pad_seq_to_mult=pad_seq_to_mult,
        max_seq_length=max_seq_length,
        truncation=truncation,
        algorithm=algorithm,
        seed=seed,
        max_seqs_per_pack=max_seqs_per_pack,
        bridge_compat=bridge_compat,
        shuffle_packs=shuffle_packs and not bridge_compat,
        num_samples=num_samples,
        pad_seq_length_to_mult=pad_seq_length_to_mult,
        bin_scope=bin_scope,
        shard_rows=shard_rows,
    )
    check_max_gap(max_gap)
    positive_int("num_workers", num_workers, maximum=MAX_WORKERS)
    positive_int("row_group_size", row_group_size, allow_none=True, maximum=MAX_ROW_GROUP_SIZE)
    from seqpack.data.objects import is_uri, staged_as, staging

    ex = _executor(engine, distributed, num_workers, progress)
    remote = str(out_root) if is_uri(out_root) else None
    try:
        with staging(work_dir) as staged, _working_root(remote, work_dir) as local_root:
            try:
                return _prepare(ex, inputs, local_root or out_root, options, schema, tokenizer, row_group_size,
                                None if metadata_path is None else Path(metadata_path), overwrite, max_gap, remote)
            except SeqpackError as err:  # name the object a staged copy came from, not the copy
                if err.file is not None and str(err.file) in staged:
                    err.file = staged_as(str(err.file))
                raise
    finally:
        ex.close()


class _StageClock:
    """Logs (INFO) the seconds each stage of a split took, for benchmarks and the scaling model."""

    def __init__(self, split: str) -> None:
        import time

        self.split, self._now = split, time.perf_counter
        self._last = self._now()

    def __call__(self, stage: str) -> None:
        now = self._now()
        log.info("stage %s %s: %.3f s", self.split, stage, now - self._last)
        self._last = now


def _executor(engine: str, distributed: bool | None, num_workers: int, progress: bool) -> Any:
    """Who runs the stages: the worker pool (one process or torchrun ranks), or Ray tasks."""
    from seqpack.core.choices import ENGINES

    if engine not in ENGINES:
        raise UsageError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}", field="engine")
    if engine == "ray":
        if distributed:
            raise UsageError("--engine ray and --distributed (torchrun) are two ways to spread the work; pick one",
                             field="engine")
        from seqpack.packing.offline.ray_engine import RayExecutor

        return RayExecutor(num_workers if num_workers > 1 else None, progress=progress)
    from seqpack.packing.offline.distributed import resolve_collective
    from seqpack.packing.offline.executors import PoolExecutor

    return PoolExecutor(resolve_collective(distributed), num_workers, progress)


@contextmanager
def _working_root(remote: str | None, work_dir: Any) -> Iterator[Path | None]:
    """A local directory the packs for a remote output root are written into first (None for a local root)."""
    if remote is None:
        yield None
        return
    import tempfile

    local = Path(tempfile.mkdtemp(prefix=".seqpack-out-", dir=None if work_dir is None else str(work_dir)))
    try:
        yield local
    finally:
        remove_path(local)


def _prepare(
    ex: Any, inputs: Any, out_root: Any, options: OfflinePackOptions, schema: Any, tokenizer: Any,
    row_group_size: int | None, metadata_path: Path | None, overwrite: bool, max_gap: float | None = None,
    remote: str | None = None,
) -> PreparedPacks:
    tok = load_tokenizer_arg(tokenizer)
    plan = ex.root(lambda: plan_run(inputs, out_root, options, schema, tok, overwrite))
    root, fp, streams = plan.root, plan.fingerprint, plan.streams
    target = None if remote is None else remote.rstrip("/") + "/" + root.name
    if target is not None and not overwrite:
        from seqpack.packing.offline.remote import result_at, reusable

        found = ex.root(lambda: reusable(target, fp))
        if found is not None:
            _check_reused_gap(found, options.pack_size, max_gap)
            return result_at(target, found, reused=True)
    if plan.reusable is not None:
        log.info("reusing packs in %s (same fingerprint, every file as recorded)", root)
        _check_reused_gap(plan.reusable, options.pack_size, max_gap)
        return _prepared(root, plan.reusable, reused=True)
    if metadata_path is not None:
        ex.root(lambda: atomic.check_write_target(metadata_path, what="the metadata path", field="metadata_path"))
    metadata_name = f"{options.pack_size}_metadata.jsonl"
    rows = {split: len(stream) for split, stream in streams.items()}
    sources = [src.path for stream in streams.values() for src in stream.sources]

    def enter() -> str:
        # ``root`` carries this run's fingerprint in its name; it is replaced only when seqpack wrote it
        # (refused now, before any work, when it holds anything else), and a concurrent run that wrote
        # the same packs first wins when they verify
        directory = ownership.output_directory(root, artifact.PACK_OWNER, inputs=sources, replace_own=True,
                                           keep_existing=lambda path: artifact.examine(path, fp, rows).reusable)
        tmp = stack.enter_context(directory)
        if plan.rebuilt is not None:
            log.warning("rebuilding %s: %s", root, plan.rebuilt)
        return str(tmp)

    stack = ExitStack()  # rank 0's temporary directory; the other ranks' stack stays empty
    try:
        tmp = Path(ex.root(enter))
        work = tmp / WORK_DIR
        ex.prepare_work(work)
        metadata, splits = [], {}
        for split in SPLITS:
            if split not in streams:
                continue
            meta, summary = _pack_split(ex, split, streams[split], options, plan.schema, tok, work, tmp,
                                        row_group_size, max_gap)
            metadata.append(meta)
            splits[split] = summary
        record = _displayed(manifest(fp, options, plan.schema, tok, metadata_name, splits))

        def finish() -> None:
            remove_path(work)
            (tmp / metadata_name).write_text(json.dumps(metadata, indent=2) + "\n")
            artifact.record_pack_files(tmp, record)  # size and SHA-256 of every file: reuse verifies them
            (tmp / MANIFEST_NAME).write_text(json.dumps(record, indent=2) + "\n")

        ex.root(finish)
    except BaseException as exc:
        stack.__exit__(type(exc), exc, exc.__traceback__)  # rank 0 removes the temporary directory
        raise
    ex.root(stack.close)  # rank 0 renames it into place; a failure there reaches every rank
    if metadata_path is not None:
        ex.root(lambda: append_metadata(metadata_path, metadata))
    if target is not None:
        from seqpack.packing.offline.remote import publish, result_at

        ex.root(lambda: publish(root, target, record))
        return result_at(target, record, reused=False, rebuilt=plan.rebuilt)
    return _prepared(root, record, reused=False, rebuilt=plan.rebuilt)


def _displayed(value: Any) -> Any:
    """``value`` (a manifest) with every staged local path replaced by the URI it was copied from."""
    from seqpack.data.objects import staged_as

    if isinstance(value, dict):
        return {k: _displayed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_displayed(v) for v in value]
    return staged_as(value) if isinstance(value, str) else value


def _check_reused_gap(record: dict[str, Any], pack_size: int, max_gap: float | None) -> None:
    """``max_gap`` holds for reused packs too (their manifest's packs and aligned tokens)."""
    from seqpack.packing.offline.bins import packing_gap

    for split, info in record["splits"].items():
        cert = packing_gap(int(info["packs"]), int(info["aligned_tokens"]), pack_size)
        if max_gap is not None and cert["gap"] > max_gap:
            raise PackingError(f"{split}: the reused packs are {cert['gap']:.4%} above the lower bound, more than "
                               f"max_gap={max_gap:g} allows", field="max_gap", fix="pack with --bin-scope global")


def _prepared(root: Path, manifest: Any, *, reused: bool, rebuilt: str | None = None) -> PreparedPacks:
    files = {s: root / v["file"] for s, v in manifest["splits"].items()}
    return PreparedPacks.from_manifest(root, files, root / manifest["metadata_file"], root / MANIFEST_NAME,
                                       manifest, reused=reused, rebuilt=rebuilt)


def append_metadata(path: str | os.PathLike[str], entries: list[dict[str, Any]]) -> Path:
    """Append metadata entries to the JSON array in ``path`` (created when absent), atomically.

    Megatron-Bridge appends every preparation's entry to one metadata file the same way. An existing
    file must hold a JSON array of objects; anything else is refused and left untouched.
    """
    from seqpack.packing.parquet import read_metadata

    target = atomic.check_write_target(path, what="the metadata path", field="metadata_path")
    raw = reading.read_text(target, what="the metadata file", error=ArtifactError).strip() if target.exists() else ""
    if raw and not raw.startswith("["):
        raise ArtifactError("the metadata file to append to is not a JSON array", file=str(target))
    existing = read_metadata(target) if raw else []
    atomic.write_text(target, json.dumps(existing + list(entries)), what="the metadata path", field="metadata_path")
    return target


def find_manifest(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The seqpack manifest next to a packed file (or inside a pack directory), if any.

    A manifest that is there but unreadable or of another format raises
    :class:`~seqpack.core.errors.ArtifactError`.
    """
    p = Path(path)
    directory = p if p.is_dir() else p.parent
    return artifact.read_manifest(directory / MANIFEST_NAME)
