"""Offline packed SFT: JSONL -> tokenize -> align -> bin-pack -> packed Parquet + metadata + manifest.

:func:`prepare_packed_dataset` is the whole pipeline:

1. **Rows.** One JSONL file per split, or a blend manifest (:mod:`seqpack.packing.offline.sources`);
   rows are read lazily from a newline index, in jobs of consecutive rows, by worker processes
   (``num_workers``) that keep their tokenizer and open files for their whole life.
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


Options and accounting live in :mod:`.options`, bin assignment and the fingerprint in :mod:`.bins`.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from seqpack import __version__
from seqpack.core.arguments import positive_int
from seqpack.core.errors import ArtifactError, InputError, PackingError, UsageError
from seqpack.core.limits import MAX_ROW_GROUP_SIZE, MAX_WORKERS
from seqpack.core.reports import PreparedPacks
from seqpack.data.ranges import offsets_of
from seqpack.io import atomic, ownership, reading
from seqpack.io.temporaries import remove_path
from seqpack.packing.offline import artifact
from seqpack.packing.offline.artifact import FORMAT, MANIFEST_NAME
from seqpack.packing.offline.bins import (
    _assign,
    _Bins,
    _tokenizer_dir_name,
    aligned_lengths,
    bridge_metadata,
    fingerprint,
)
from seqpack.packing.offline.options import PROBE_NAME, SPLITS, WORK_DIR, OfflinePackOptions, SplitAccount

log = logging.getLogger(__name__)

__all__ = ["SampleLengths", "append_metadata", "find_manifest", "pre_pad_id", "prepare_packed_dataset", "sample_lengths"]


# ------------------------------------------------------------------------------------------------
# Tokenization into the spill
# ------------------------------------------------------------------------------------------------


def _progress(total: int, desc: str, unit: str = "row") -> Any:
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm comes with megatron-energon
        return None
    # the bar's own carriage returns go to the terminal as they are (the CLI escapes what it prints)
    return tqdm(total=total, desc=desc, unit=unit, leave=False, file=getattr(sys.stderr, "raw", sys.stderr))


def _block(n: int, rank: int, world: int) -> tuple[int, int]:
    """Rank ``rank``'s contiguous share ``[lo, hi)`` of ``n`` items (ranks in order cover them in order)."""
    return n * rank // world, n * (rank + 1) // world


def _tokenize(
    comm: Any, stream: Any, context: Any, num_workers: int, progress: bool
) -> list[Any]:
    """Tokenize a split's rows, each rank its contiguous block of jobs; every rank gets every job's result."""
    from seqpack.packing.offline.jobs import map_jobs, run_tokenize_job, tokenize_jobs

    jobs = tokenize_jobs(stream)
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


def _account(stream: Any, done: list[Any], dtype: np.dtype) -> tuple[SplitAccount, Any]:
    """Accounting of a split's rows and the index of its spilled samples, in draw order."""
    from seqpack.packing.offline.spill import SampleIndex, record_sizes

    account = SplitAccount(rows_in=len(stream))
    names: dict[str, int] = {}
    files, offsets, lengths = [], [], []
    for job in done:
        account.truncated += job.truncated
        for reason, where in job.rejected:
            account.skip(reason, where)
        if job.spill is not None and job.lengths.size:
            number = names.setdefault(job.spill, len(names))
            files.append(np.full(job.lengths.size, number, dtype=np.int32))
            offsets.append(job.start + offsets_of(record_sizes(job.lengths, dtype))[:-1])
        lengths.append(job.lengths)

    def cat(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
        return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)

    length = cat(lengths, np.int32)
    file = cat(files, np.int32) if files else np.zeros(length.size, np.int32)
    offset = cat(offsets, np.int64) if offsets else np.zeros(length.size, np.int64)
    account.packed = int(length.size)
    return account, SampleIndex(tuple(names), file, offset, length)

# ------------------------------------------------------------------------------------------------
# Filling and writing (one part per row group)
# ------------------------------------------------------------------------------------------------


def _part_jobs(
    bins: _Bins, aligned: np.ndarray, index: Any, rows_per_group: int, part_dir: Path, spill_dir: Path,
    dtype: np.dtype, pad_id: int,
) -> list[Any]:
    from seqpack.packing.offline.fill import PartJob

    jobs = []
    sizes = bins.sizes
    for g, first in enumerate(range(0, bins.count, rows_per_group)):
        last = min(bins.count, first + rows_per_group)
        samples = bins.order[bins.offsets[first] : bins.offsets[last]]
        jobs.append(PartJob(
            path=str(part_dir / f"part-{g:06d}.parquet"), spill_dir=str(spill_dir), id_dtype=dtype.str,
            pad_id=pad_id, counts=sizes[first:last], aligned=aligned[samples], samples=index.take(samples),
        ))
    return jobs


def _write_split(
    comm: Any, jobs: list[Any], target: Path, num_workers: int, progress: bool
) -> None:
    """Every rank writes the parts ``g`` with ``g % world_size == rank``; rank 0 joins them into ``target``."""
    from seqpack.packing.offline.fill import write_part
    from seqpack.packing.offline.jobs import map_jobs
    from seqpack.packing.offline.parquet_concat import concat_parquet_files

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
        concat_parquet_files([job.path for job in jobs], target)

    comm.from_root(join)

# ------------------------------------------------------------------------------------------------
# The pipeline
# ------------------------------------------------------------------------------------------------


def _resolve_inputs(inputs: Any, seed: int, num_samples: int | None) -> dict[str, Any]:
    from seqpack.packing.offline.sources import is_blend_manifest, read_blend_manifest, resolve_stream

    if isinstance(inputs, (str, os.PathLike)):
        if is_blend_manifest(inputs):
            blends = read_blend_manifest(inputs)
        else:
            blends = {"training": [(1.0, str(inputs))]}
    elif isinstance(inputs, Mapping):
        blends = {}
        for split, spec in inputs.items():
            if isinstance(spec, (str, os.PathLike)):
                blends[str(split)] = [(1.0, str(spec))]
            else:
                from seqpack.packing.offline.sources import parse_blend

                blends[str(split)] = parse_blend(list(spec), where=f"inputs[{split}]")
    else:
        raise UsageError("inputs must be a JSONL path, a blend manifest path, or a mapping split -> path/blend")
    for split in blends:
        if split not in SPLITS:
            raise UsageError(f"unknown split {split!r}; use {', '.join(SPLITS)}", field="inputs")
    streams = {split: resolve_stream(blend, seed=seed, num_samples=num_samples) for split, blend in blends.items()}
    _check_distinct_splits(streams)
    return streams


def _check_distinct_splits(streams: Mapping[str, Any]) -> None:
    """Refuse a source whose content another split reads too (a validation split equal to training data
    measures nothing)."""
    seen: dict[str, tuple[str, str]] = {}
    for split, stream in streams.items():
        for src in stream.sources:
            first = seen.setdefault(src.sha256, (split, src.path))
            if first[0] != split:
                raise UsageError(
                    f"the {split} split reads the same data as the {first[0]} split ({first[1]})", file=src.path,
                    field=split, fix="give each split its own rows (for example a held-out validation file)",
                )


def _detect(stream: Any, schema: Any = None) -> Any:
    """The schema of the stream's first row (``schema`` None), or ``schema`` checked against it: a
    configured prompt/completion column must be in the first row (no silent fallback to another)."""
    from seqpack.data.jsonl import JsonlFile
    from seqpack.data.schemas import default_schema, detect_schema

    first = stream.sources[int(stream.source_ids[0])].path
    jf = JsonlFile(first)
    try:
        row = jf.row(int(stream.row_ids[0]))
    finally:
        jf.close()
    try:
        if schema is None:
            return default_schema(detect_schema(row))
        if hasattr(schema, "require_columns"):
            schema.require_columns(row)
        return schema
    except InputError as err:
        line = jf.line_number(int(stream.row_ids[0]))
        raise InputError(err.message, file=first, line=line, field=err.field, fix=err.fix) from None


def _pack_split(
    comm: Any, split: str, stream: Any, options: OfflinePackOptions, schema: Any, tokenizer: Any, work: Path,
    target_dir: Path, num_workers: int, row_group_size: int | None, progress: bool,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Tokenize (spill), pack lengths, fill and write one split; returns (Bridge metadata, summary)."""
    from seqpack.packing.offline.fill import auto_row_group_size
    from seqpack.packing.offline.jobs import TokenizeContext
    from seqpack.packing.offline.spill import id_dtype

    dtype = id_dtype(int(tokenizer.vocab_size))
    spill_dir, part_dir = work / split / "spill", work / split / "parts"
    context = TokenizeContext(schema, tokenizer, options.tokenize_budget, options.truncation, str(spill_dir),
                              dtype.str, f"rank{comm.rank}", cut_ids=options.stored_cut)
    account, index = _account(stream, _tokenize(comm, stream, context, num_workers, progress), dtype)
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
    bins = comm.from_root(lambda: _assign(options, aligned))
    name = f"{split}_{options.pack_size}.idx.parquet"
    rows_per_group = row_group_size or auto_row_group_size(options.pack_size)
    jobs = _part_jobs(bins, aligned, index, rows_per_group, part_dir, spill_dir, dtype, pre_pad_id(tokenizer))
    _write_split(comm, jobs, target_dir / name, num_workers, progress)
    comm.from_root(lambda: remove_path(work / split))
    summary = {
        "file": name,
        "accounting": account.to_dict(),
        "packs": bins.count,
        "real_tokens": int(runtime.sum()),
        "aligned_tokens": int(aligned.sum()),
        "token_slots": bins.count * options.pack_size,
        "packing": bins.stats,
        "sources": stream.describe(),
    }
    return bridge_metadata(aligned, bins.order, bins.offsets, options.pack_size), summary


def pre_pad_id(tokenizer: Any) -> int:
    """The id samples are pre-padded with: the tokenizer's end of document (``eod_id``) when it has
    one, else its EOS, which is what Megatron's tokenizers return as EOD (see docs/compatibility.md)."""
    eod = getattr(tokenizer, "eod_id", None)
    value = eod if eod is not None else tokenizer.eos_id
    if value is None:
        raise UsageError(f"tokenizer {getattr(tokenizer, 'name', '?')} has neither an EOD nor an EOS id to pad with")
    return int(value)


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
    from seqpack.packing.offline.jobs import TokenizeContext

    tok = _tokenizer(tokenizer)
    streams = _resolve_inputs(inputs, 0, None)
    stream = streams.get("training") or next(iter(streams.values()))
    if schema is None:
        schema = _detect(stream)
    context = TokenizeContext(schema, tok, max_seq_length + 1, truncation)
    account, index = _account(stream, _tokenize(LocalCollective(), stream, context, num_workers, False),
                              np.dtype(context.id_dtype))
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
    num_workers: int = 1,
    row_group_size: int | None = None,
    metadata_path: str | os.PathLike[str] | None = None,
    distributed: bool | None = None,
    overwrite: bool = False,
    progress: bool = False,
) -> PreparedPacks:
    """Pack JSONL (or a blend) into packed Parquet; see the module docstring for every step.

    ``metadata_path``: also append this run's metadata entries to that JSON array file (created
    when absent), as Megatron-Bridge's preparation does. ``distributed``: run on the ranks of a
    ``torchrun`` job (``None`` detects it; see :mod:`seqpack.packing.offline.distributed`).
    """
    from seqpack.packing.offline.distributed import resolve_collective

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
    )
    positive_int("num_workers", num_workers, maximum=MAX_WORKERS)
    positive_int("row_group_size", row_group_size, allow_none=True, maximum=MAX_ROW_GROUP_SIZE)
    comm = resolve_collective(distributed)
    try:
        return _prepare(comm, inputs, out_root, options, schema, tokenizer, num_workers, row_group_size,
                        None if metadata_path is None else Path(metadata_path), overwrite, progress)
    finally:
        comm.close()


@dataclass(frozen=True)
class _Plan:
    """What rank 0 decides before any tokenization (and hands to every rank)."""

    streams: dict[str, Any]
    schema: Any
    fingerprint: str
    root: Path
    reusable: dict[str, Any] | None  # the manifest of packs to reuse as they are
    rebuilt: str | None  # why an own, damaged pack directory is rebuilt


def _plan(inputs: Any, out_root: Any, options: OfflinePackOptions, schema: Any, tok: Any, overwrite: bool) -> _Plan:
    streams = _resolve_inputs(inputs, options.seed, options.num_samples)
    schema = _detect(next(iter(streams.values())), schema)
    fp = fingerprint(streams, options, schema, tok)
    root = ownership.check_output_root(out_root, owner="seqpack pack") / (
        f"{_tokenizer_dir_name(tok)}_pad_seq_to_mult{options.pad_seq_to_mult}_{fp[:12]}")
    rows = {split: len(stream) for split, stream in streams.items()}
    rebuilt = None
    if root.is_dir() and not root.is_symlink() and any(root.iterdir()):
        state = artifact.examine(root, fp, rows)
        if state.reusable and not overwrite:
            return _Plan(streams, schema, fp, root, state.manifest, None)
        if state.owned and state.problems:
            rebuilt = "; ".join(state.problems[:5])
    return _Plan(streams, schema, fp, root, None, rebuilt)


def _prepare(
    comm: Any, inputs: Any, out_root: Any, options: OfflinePackOptions, schema: Any, tokenizer: Any,
    num_workers: int, row_group_size: int | None, metadata_path: Path | None, overwrite: bool, progress: bool,
) -> PreparedPacks:
    tok = _tokenizer(tokenizer)
    plan = comm.from_root(lambda: _plan(inputs, out_root, options, schema, tok, overwrite))
    root, fp, streams = plan.root, plan.fingerprint, plan.streams
    if plan.reusable is not None:
        log.info("reusing packs in %s (same fingerprint, every file as recorded)", root)
        return _prepared(root, plan.reusable, reused=True)
    if metadata_path is not None:
        comm.from_root(lambda: atomic.check_write_target(metadata_path, what="the metadata path", field="metadata_path"))
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
        tmp = Path(comm.from_root(enter))
        work = tmp / WORK_DIR
        _check_shared(comm, work)
        metadata, splits = [], {}
        for split in SPLITS:
            if split not in streams:
                continue
            meta, summary = _pack_split(comm, split, streams[split], options, plan.schema, tok, work, tmp,
                                        num_workers, row_group_size, progress)
            metadata.append(meta)
            splits[split] = summary
        manifest = _manifest(fp, options, plan.schema, tok, metadata_name, splits)

        def finish() -> None:
            remove_path(work)
            (tmp / metadata_name).write_text(json.dumps(metadata, indent=2) + "\n")
            artifact.record_pack_files(tmp, manifest)  # size and SHA-256 of every file: reuse verifies them
            (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")

        comm.from_root(finish)
    except BaseException as exc:
        stack.__exit__(type(exc), exc, exc.__traceback__)  # rank 0 removes the temporary directory
        raise
    comm.from_root(stack.close)  # rank 0 renames it into place; a failure there reaches every rank
    if metadata_path is not None:
        comm.from_root(lambda: append_metadata(metadata_path, metadata))
    return _prepared(root, manifest, reused=False, rebuilt=plan.rebuilt)


def _prepared(root: Path, manifest: Any, *, reused: bool, rebuilt: str | None = None) -> PreparedPacks:
    files = {s: root / v["file"] for s, v in manifest["splits"].items()}
    return PreparedPacks.from_manifest(root, files, root / manifest["metadata_file"], root / MANIFEST_NAME,
                                       manifest, reused=reused, rebuilt=rebuilt)


def _tokenizer(tokenizer: Any) -> Any:
    """A tokenizer object as given, or the one a path or name (None: the byte tokenizer) loads."""
    from seqpack.data.tokenizers import load_tokenizer

    if tokenizer is not None and not isinstance(tokenizer, (str, os.PathLike)):
        return tokenizer
    return load_tokenizer(tokenizer)


def _check_shared(comm: Any, work: Path) -> None:
    """Every rank must see the directory rank 0 created (the spill and the parts live there)."""
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


def _manifest(
    fp: str, options: OfflinePackOptions, schema: Any, tok: Any, metadata_name: str, splits: dict[str, Any]
) -> dict[str, Any]:
    tokenizer = {
        "name": getattr(tok, "name", type(tok).__name__),
        "fingerprint": tok.fingerprint(),
        "eos_id": tok.eos_id,
        "vocab_size": getattr(tok, "vocab_size", None),
        "pad_id": getattr(tok, "pad_id", None),
    }
    if pre_pad_id(tok) != tok.eos_id:
        tokenizer["eod_id"] = pre_pad_id(tok)
    return {
        "format": FORMAT,
        "fingerprint": fp,
        "created_by": f"seqpack {__version__}",
        "options": options.to_dict(),
        "schema": {"type": type(schema).__name__, **schema.to_dict()},
        "tokenizer": tokenizer,
        "metadata_file": metadata_name,
        "splits": splits,
    }


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
