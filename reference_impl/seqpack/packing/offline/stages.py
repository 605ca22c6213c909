"""The stages of offline packing as functions of plain values, whatever runs them.

Every executor (:mod:`.executors`: the local worker pool, the ranks of a ``torchrun`` job; :mod:`.ray_engine`:
Ray tasks) runs the same stages on the same values, so the output never depends on which one ran, in
which order work came back, or how many workers there were:

====  =======================================  =============================================================
S0    :func:`plan_run`                         inputs -> row streams, schema, fingerprint, pack directory
                                               (driver / rank 0)
S1    :func:`tokenize_jobs` +                  a split's rows in jobs of consecutive draws -> lengths and
      :func:`.jobs.tokenize_job`               a spill of the samples (any process)
S1'   :func:`gather_split`                     the jobs' results, **in job order** (the global key: a job's
                                               index, then the position in it) -> accounting, sample index
S2    :func:`.bins.assign`                     aligned lengths -> packs (driver / rank 0)
S3    :func:`part_jobs`                        packs -> one fill job per row group
S4    :func:`.fill.write_part`                 a row group filled from the spill and written as a Parquet
                                               part (any process)
S5    :func:`split_summary`, :func:`manifest`  parts joined byte for byte, metadata, manifest (driver)
====  =======================================  =============================================================
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from seqpack import __version__
from seqpack.core.errors import InputError, PackingError, UsageError
from seqpack.data.ranges import offsets_of
from seqpack.io import ownership
from seqpack.packing.offline import artifact
from seqpack.packing.offline.artifact import FORMAT
from seqpack.packing.offline.bins import Bins, _tokenizer_dir_name, fingerprint
from seqpack.packing.offline.jobs import tokenize_jobs
from seqpack.packing.offline.options import SPLITS, OfflinePackOptions, SplitAccount

log = logging.getLogger(__name__)

__all__ = [
    "RunPlan",
    "check_distinct_splits",
    "check_gap",
    "detect_schema",
    "gather_split",
    "load_tokenizer_arg",
    "manifest",
    "part_jobs",
    "part_paths",
    "plan_run",
    "pre_pad_id",
    "resolve_inputs",
    "shard_of_samples",
    "split_summary",
    "tokenize_jobs",
]


# ------------------------------------------------------------------------------------------------
# S0: inputs, schema, fingerprint, pack directory
# ------------------------------------------------------------------------------------------------


def resolve_inputs(inputs: Any, seed: int, num_samples: int | None) -> dict[str, Any]:
    from seqpack.data.rows import input_kind
    from seqpack.data.objects import is_uri, stage_input
    from seqpack.packing.offline.sources import (
        dataset_dict_inputs,
        is_blend_manifest,
        read_blend_manifest,
        resolve_stream,
    )

    if is_uri(inputs):  # object storage: a local copy is read (data.objects)
        inputs = stage_input(inputs)
    elif isinstance(inputs, Mapping):
        inputs = {split: stage_input(spec) if is_uri(spec) else spec for split, spec in inputs.items()}
    if isinstance(inputs, (str, os.PathLike)):
        if is_blend_manifest(inputs):
            blends = read_blend_manifest(inputs)
        elif os.path.isdir(inputs) and input_kind(inputs) == "dataset_dict":
            blends = {split: [(1.0, str(folder))] for split, folder in dataset_dict_inputs(inputs).items()}
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
    check_distinct_splits(streams)
    return streams


def check_distinct_splits(streams: Mapping[str, Any]) -> None:
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


def detect_schema(stream: Any, schema: Any = None) -> Any:
    """The schema of the stream's first row (``schema`` None), or ``schema`` checked against it: a
    configured prompt/completion column must be in the first row (no silent fallback to another)."""
    from seqpack.data.rows import open_rows
    from seqpack.data.schemas import default_schema, detect_schema

    first = stream.sources[int(stream.source_ids[0])].path
    jf = open_rows(first)
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


def load_tokenizer_arg(tokenizer: Any) -> Any:
    """A tokenizer object as given, or the one a path or name (None: the byte tokenizer) loads."""
    from seqpack.data.tokenizers import load_tokenizer

    if tokenizer is not None and not isinstance(tokenizer, (str, os.PathLike)):
        return tokenizer
    return load_tokenizer(tokenizer)


def pre_pad_id(tokenizer: Any) -> int:
    """The id samples are pre-padded with: the tokenizer's end of document (``eod_id``) when it has
    one, else its EOS, which is what Megatron's tokenizers return as EOD (see docs/compatibility.md)."""
    eod = getattr(tokenizer, "eod_id", None)
    value = eod if eod is not None else tokenizer.eos_id
    if value is None:
        raise UsageError(f"tokenizer {getattr(tokenizer, 'name', '?')} has neither an EOD nor an EOS id to pad with")
    return int(value)


@dataclass(frozen=True)
class RunPlan:
    """What rank 0 decides before any tokenization (and hands to every rank)."""

    streams: dict[str, Any]
    schema: Any
    fingerprint: str
    root: Path
    reusable: dict[str, Any] | None  # the manifest of packs to reuse as they are
    rebuilt: str | None  # why an own, damaged pack directory is rebuilt


def plan_run(inputs: Any, out_root: Any, options: OfflinePackOptions, schema: Any, tok: Any, overwrite: bool) -> RunPlan:
    streams = resolve_inputs(inputs, options.seed, options.num_samples)
    schema = detect_schema(next(iter(streams.values())), schema)
    fp = fingerprint(streams, options, schema, tok)
    root = ownership.check_output_root(out_root, owner="seqpack pack") / (
        f"{_tokenizer_dir_name(tok)}_pad_seq_to_mult{options.pad_seq_to_mult}_{fp[:12]}")
    rows = {split: len(stream) for split, stream in streams.items()}
    rebuilt = None
    if root.is_dir() and not root.is_symlink() and any(root.iterdir()):
        state = artifact.examine(root, fp, rows)
        if state.reusable and not overwrite:
            return RunPlan(streams, schema, fp, root, state.manifest, None)
        if state.owned and state.problems:
            rebuilt = "; ".join(state.problems[:5])
    return RunPlan(streams, schema, fp, root, None, rebuilt)


# ------------------------------------------------------------------------------------------------
# S1', S3: gather the tokenized jobs, cut the packs into row groups
# ------------------------------------------------------------------------------------------------


def gather_split(stream: Any, done: list[Any], dtype: np.dtype) -> tuple[SplitAccount, Any]:
    """Accounting of a split's rows and the index of its spilled samples, in draw order (jobs sorted by
    their index, so the order results arrived in never matters)."""
    from seqpack.packing.offline.spill import SampleIndex, record_sizes

    account = SplitAccount(rows_in=len(stream))
    names: dict[str, int] = {}
    files, offsets, lengths = [], [], []
    for job in sorted(done, key=lambda j: j.index):  # the global key: whatever order the jobs came back in
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


def group_starts(bounds: list[int], rows_per_group: int) -> list[int]:
    """First pack of every row group: ``rows_per_group`` packs each, restarting at every bound (a shard's
    packs never share a row group with another's); the last entry is the pack count."""
    starts = [first for a, b in zip(bounds, bounds[1:]) for first in range(a, b, rows_per_group)]
    return starts + [bounds[-1]]


class PartJobs(Sequence):
    """Stage S3: one fill job per row group, built when asked for (so the jobs of a large split never sit
    in memory together); job ``g`` writes ``part_dir/part-<g>.parquet``."""

    def __init__(self, bins: Bins, aligned: np.ndarray, index: Any, starts: list[int], part_dir: Path,
                 spill_dir: Path, dtype: np.dtype, pad_id: int) -> None:
        self._bins, self._aligned, self._index, self._starts = bins, aligned, index, starts
        self._part_dir, self._spill_dir, self._dtype, self._pad_id = part_dir, spill_dir, dtype, pad_id

    def __len__(self) -> int:
        return len(self._starts) - 1

    def path(self, g: int) -> str:
        """Where part ``g`` goes (without building its job)."""
        return str(self._part_dir / f"part-{g:06d}.parquet")

    @property
    def paths(self) -> list[str]:
        """Every part's path, in row group order (what the join reads)."""
        return [self.path(g) for g in range(len(self))]

    def __getitem__(self, g: Any) -> Any:
        if isinstance(g, slice):
            return _Every(self, range(*g.indices(len(self))))
        from seqpack.packing.offline.fill import PartJob

        if not -len(self) <= g < len(self):
            raise IndexError(g)
        g %= len(self)
        first, last = self._starts[g], self._starts[g + 1]
        bins = self._bins
        samples = bins.order[bins.offsets[first] : bins.offsets[last]]
        return PartJob(
            path=self.path(g), spill_dir=str(self._spill_dir),
            id_dtype=self._dtype.str, pad_id=self._pad_id, counts=np.diff(bins.offsets[first : last + 1]),
            aligned=self._aligned[samples], samples=self._index.take(samples),
        )


class _Every(Sequence):
    """A lazy selection of part jobs (a rank's share under torchrun)."""

    def __init__(self, jobs: PartJobs, picks: range) -> None:
        self._jobs, self._picks = jobs, picks

    def __len__(self) -> int:
        return len(self._picks)

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            return _Every(self._jobs, self._picks[k])
        return self._jobs[self._picks[k]]


def part_paths(jobs: Sequence[Any]) -> list[str]:
    """The parts' paths of a sequence of part jobs, without building the jobs when it can."""
    return list(jobs.paths) if isinstance(jobs, PartJobs) else [job.path for job in jobs]


def part_jobs(
    bins: Bins, aligned: np.ndarray, index: Any, rows_per_group: int, part_dir: Path, spill_dir: Path,
    dtype: np.dtype, pad_id: int, bounds: list[int] | None = None,
) -> PartJobs:
    """Stage S3: one fill job per row group (``bounds``: pack ranges no group may cross, see
    :func:`group_starts`), as a sequence that builds each job when it is read."""
    return PartJobs(bins, aligned, index, group_starts(bounds or [0, bins.count], rows_per_group), part_dir,
                    spill_dir, dtype, pad_id)


def shard_of_samples(jobs: list[Any], done: list[Any], shard_rows: int | None) -> np.ndarray | None:
    """The shard of every kept sample, in input order (shard ``k``: the jobs whose first draw lies in
    ``[k * shard_rows, (k + 1) * shard_rows)``); None without shards."""
    if shard_rows is None:
        return None
    first = offsets_of(np.asarray([len(j.rows) for j in jobs], dtype=np.int64))[:-1]
    kept = {d.index: int(d.lengths.size) for d in done}
    return np.repeat(first // int(shard_rows), [kept[j.index] for j in jobs])


def split_summary(
    name: str, account: SplitAccount, bins: Bins, runtime: np.ndarray, aligned: np.ndarray, pack_size: int,
    stream: Any,
) -> dict[str, Any]:
    """What the manifest records of one split (``gap``: :func:`.bins.packing_gap`)."""
    from seqpack.packing.offline.bins import packing_gap

    return {
        "file": name,
        "accounting": account.to_dict(),
        "packs": bins.count,
        "real_tokens": int(runtime.sum()),
        "aligned_tokens": int(aligned.sum()),
        "token_slots": bins.count * pack_size,
        "gap": packing_gap(bins.count, int(aligned.sum()), pack_size),
        "packing": bins.stats,
        "sources": stream.describe(),
    }


def check_gap(split: str, bins: Bins, aligned: np.ndarray, pack_size: int, max_gap: float | None) -> None:
    """Refuse a packing whose certificate is above ``max_gap`` (before anything is written)."""
    from seqpack.packing.offline.bins import packing_gap

    if max_gap is None:
        return
    cert = packing_gap(bins.count, int(aligned.sum()), pack_size)
    if cert["gap"] > max_gap:
        scope = bins.stats.get("bin_scope", "global")
        raise PackingError(
            f"{split}: {cert['packs']} packs are {cert['gap']:.4%} above the lower bound {cert['lower_bound']}, more "
            f"than max_gap={max_gap:g} allows (bin scope {scope})", field="max_gap",
            fix="pack with --bin-scope global, or larger --shard-rows" if scope == "shard" else
            "raise --max-gap (a packing cannot beat the lower bound; try another --algorithm)",
        )


# ------------------------------------------------------------------------------------------------
# S5: the manifest
# ------------------------------------------------------------------------------------------------


def manifest(
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
