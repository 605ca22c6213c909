"""Offline packed SFT: JSONL -> tokenize -> align -> bin-pack -> packed Parquet + metadata + manifest.

:func:`prepare_packed_dataset` is the whole pipeline:

1. **Rows.** One JSONL file per split, or a blend manifest (:mod:`reference_impl.packing.sources`);
   rows are read lazily from a newline index and tokenized in worker processes (``num_workers``).
2. **Tokenize** with the schema (prompt/completion or chat, auto-detected from the first row
   when not given) and the tokenizer (the embedded byte tokenizer by default). A sample's
   *runtime* length (tokens the model sees: ids minus one) is capped at
   ``cap = floor(max_seq_length / m) * m`` with ``m = pad_seq_to_mult``; longer samples are
   truncated by the tokenization policy (and counted) or rejected (and counted).
3. **Align.** Every sample's stored ids are right-padded with EOS so its runtime length is a
   multiple of ``m`` (the loss mask is 0 there), exactly the stored form Megatron-Bridge writes, so
   Bridge's reader and ours agree on segment lengths.
4. **Bin-pack** the runtime lengths into packs of ``pack_size`` tokens
   (:func:`reference_impl.packing.algorithms.pack_lengths`; best-fit decreasing by default), then
   shuffle the pack order with the seed (decreasing-order packers leave packs sorted by content).
   ``bridge_compat=True`` reproduces Megatron-Bridge's first-fit-shuffle strategy and its sample
   fill order bit for bit instead (no extra shuffle).
5. **Write** ``<split>_<pack_size>.idx.parquet`` per split, the metadata JSON array
   ``<pack_size>_metadata.jsonl`` (Bridge's six keys, one entry per split) and
   ``seqpack_manifest.json`` (fingerprint, every option, input hashes, per-split accounting) into
   ``<out_root>/<tokenizer>_pad_seq_to_mult<m>_<fingerprint12>/``. The directory is written under a
   temporary name and renamed at the end, so a failure leaves nothing half-written, and the
   fingerprint covers everything that changes pack membership, so a changed option never reuses a
   stale pack (the same options reuse the existing one unless ``overwrite``).

Accounting: for every split, ``rows_in == packed + skipped`` (``truncated`` counts packed samples
that lost tokens); skipped rows are grouped by reason with their first file/line locations.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np

from reference_impl import __version__
from reference_impl.arguments import positive_int
from reference_impl.limits import MAX_PACK_LEN, MAX_PAD_SEQ_TO_MULT, MAX_SEQS_PER_PACK
from reference_impl.data.artifacts import check_output_directory, check_replace_target
from reference_impl.data.atomic import atomic_directory
from reference_impl.errors import InputError, PackingError, UsageError
from reference_impl.packing import artifact
from reference_impl.packing.artifact import FORMAT, MANIFEST_NAME
from reference_impl.reports import PreparedPacks

log = logging.getLogger(__name__)
EXAMPLES_PER_REASON = 5
SPLITS = ("training", "validation", "test")


# ------------------------------------------------------------------------------------------------
# Options and results
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OfflinePackOptions:
    """Every option that changes which samples land in which pack (all are fingerprinted)."""

    pack_size: int
    pad_seq_to_mult: int = 1
    max_seq_length: int | None = None
    truncation: str = "right"
    algorithm: str = "best_fit_decreasing"
    seed: int = 1234
    max_seqs_per_pack: int | None = None
    bridge_compat: bool = False
    shuffle_packs: bool = True
    num_samples: int | None = None

    def __post_init__(self) -> None:
        positive_int("pack_size", self.pack_size, maximum=MAX_PACK_LEN)
        positive_int("pad_seq_to_mult", self.pad_seq_to_mult, maximum=MAX_PAD_SEQ_TO_MULT)
        positive_int("max_seqs_per_pack", self.max_seqs_per_pack, allow_none=True, maximum=MAX_SEQS_PER_PACK)
        if self.max_seq_length is not None and not 1 <= self.max_seq_length <= self.pack_size:
            raise UsageError(
                f"max_seq_length={self.max_seq_length} must be between 1 and pack_size={self.pack_size}",
                rule_id="PACK-OFFLINE-MAX-SINGLE-LE-PACK",
                field="max_seq_length",
                fix="lower max_seq_length (the per-sample cap) or raise pack_size",
            )
        if self.cap < 1:
            raise UsageError(
                f"max_seq_length={self.seq_cap} is smaller than pad_seq_to_mult={self.pad_seq_to_mult}",
                field="max_seq_length",
                fix="the per-sample cap must be at least the alignment multiple",
            )
        if self.pack_size % self.pad_seq_to_mult:
            raise UsageError(
                f"pack_size={self.pack_size} is not a multiple of pad_seq_to_mult={self.pad_seq_to_mult}",
                rule_id="PACK-OFFLINE-WIDTH-ALIGNED",
                field="pack_size",
                fix="use a pack size that is a multiple of the alignment",
            )
        if self.bridge_compat and self.algorithm not in ("first_fit_shuffle", "first_fit_decreasing"):
            raise UsageError(
                "bridge_compat reproduces Bridge's first_fit_shuffle or first_fit_decreasing only",
                field="algorithm",
            )

    @property
    def seq_cap(self) -> int:
        """The per-sample budget in runtime tokens before alignment (``max_seq_length`` or ``pack_size``)."""
        return self.max_seq_length or self.pack_size

    @property
    def cap(self) -> int:
        """Largest runtime length a sample may have: ``floor(seq_cap / m) * m``."""
        return (self.seq_cap // self.pad_seq_to_mult) * self.pad_seq_to_mult

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


@dataclass
class SplitAccount:
    """Where every input row of one split went."""

    rows_in: int = 0
    packed: int = 0
    truncated: int = 0
    skipped: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def skipped_total(self) -> int:
        """Rows skipped, all reasons together."""
        return sum(v["count"] for v in self.skipped.values())

    def skip(self, reason: str, where: dict[str, Any]) -> None:
        """Count one skipped row under ``reason`` (keeping the first few locations)."""
        entry = self.skipped.setdefault(reason, {"count": 0, "examples": []})
        entry["count"] += 1
        if len(entry["examples"]) < EXAMPLES_PER_REASON:
            entry["examples"].append(where)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (with the total)."""
        return {
            "rows_in": self.rows_in,
            "packed": self.packed,
            "truncated": self.truncated,
            "skipped_total": self.skipped_total,
            "skipped": self.skipped,
        }


# ------------------------------------------------------------------------------------------------
# Tokenization (workers)
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _TokenizeJob:
    path: str
    rows: np.ndarray
    schema: Any
    tokenizer: Any
    max_ids: int
    truncation: str


@dataclass(frozen=True)
class _Tokenized:
    """Tokenized rows of one job: flat ids/masks with offsets, plus rejections."""

    ids: np.ndarray
    masks: np.ndarray
    offsets: np.ndarray
    truncated: np.ndarray
    ok_positions: np.ndarray
    rejected: list[tuple[int, str, dict[str, Any]]]


def _run_job(job: _TokenizeJob) -> _Tokenized:
    from reference_impl.data.jsonl import JsonlFile
    from reference_impl.data.tokenize import tokenize_batch

    jf = JsonlFile(job.path)
    try:
        rows = job.rows.tolist()
        batch = tokenize_batch(
            [jf.row(r) for r in rows], job.schema, job.tokenizer, max_length=job.max_ids, truncation=job.truncation,
            locations=[jf.location(r) for r in rows],
        )
        rejected = [
            (pos, err.reason, {"file": job.path, "line": jf.line_number(rows[pos]), "row": rows[pos]})
            for pos, err in batch.rejected
        ]
    finally:
        jf.close()
    return _Tokenized(
        ids=batch.ids.astype(np.int64),
        masks=batch.loss_mask.astype(np.int8),
        offsets=batch.offsets,
        truncated=batch.truncated,
        ok_positions=batch.positions,
        rejected=rejected,
    )


def _jobs(stream: Any, schema: Any, tokenizer: Any, max_ids: int, truncation: str, chunk: int) -> list[_TokenizeJob]:
    """Consecutive draws from one source form a job; jobs stay in stream order."""
    jobs = []
    src, rows = stream.source_ids, stream.row_ids
    start = 0
    n = len(stream)
    while start < n:
        end = min(n, start + chunk)
        same = np.flatnonzero(src[start:end] != src[start])
        if same.size:
            end = start + int(same[0])
        jobs.append(_TokenizeJob(stream.sources[int(src[start])].path, rows[start:end], schema, tokenizer, max_ids, truncation))
        start = end
    return jobs


def _tokenize_stream(
    stream: Any, schema: Any, tokenizer: Any, max_ids: int, truncation: str, num_workers: int, progress: bool
) -> Iterator[_Tokenized]:
    chunk = 512
    jobs = _jobs(stream, schema, tokenizer, max_ids, truncation, chunk)
    bar = _progress(len(stream), "tokenize") if progress else None
    try:
        if num_workers <= 1 or len(jobs) <= 1:
            for job in jobs:
                out = _run_job(job)
                if bar is not None:
                    bar.update(len(job.rows))
                yield out
            return
        import multiprocessing as mp

        with mp.get_context("fork").Pool(num_workers) as pool:
            for job, out in zip(jobs, pool.imap(_run_job, jobs, chunksize=1)):
                if bar is not None:
                    bar.update(len(job.rows))
                yield out
    finally:
        if bar is not None:
            bar.close()


def _progress(total: int, desc: str) -> Any:
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm comes with megatron-energon
        return None
    return tqdm(total=total, desc=desc, unit="row", leave=False)


# ------------------------------------------------------------------------------------------------
# Alignment, packing and rows
# ------------------------------------------------------------------------------------------------


@dataclass
class _Samples:
    """All packed-to-be samples of a split, already aligned: stored ids/masks (rolled) with offsets."""

    ids: np.ndarray
    rolled: np.ndarray
    offsets: np.ndarray
    runtime: np.ndarray  # aligned runtime lengths (stored length - 1)


def _align_samples(parts: list[_Tokenized], m: int, eos_id: int) -> _Samples:
    """Pad every sample with EOS so ``stored_len - 1`` is a multiple of ``m``; roll the loss mask."""
    lengths = np.concatenate([np.diff(p.offsets) for p in parts]) if parts else np.zeros(0, np.int64)
    runtime = lengths - 1
    aligned = -(-runtime // m) * m
    stored = aligned + 1
    offsets = np.zeros(stored.size + 1, dtype=np.int64)
    np.cumsum(stored, out=offsets[1:])
    ids = np.full(int(offsets[-1]), eos_id, dtype=np.int64)
    rolled = np.zeros(int(offsets[-1]), dtype=np.int8)
    k = 0
    for p in parts:
        n = p.offsets.size - 1
        if n == 0:
            continue
        src_len = np.diff(p.offsets)
        # destination index of every source token: its sample's stored start + its position in the sample
        dest_start = offsets[k : k + n]
        pos = np.arange(p.offsets[-1]) - np.repeat(p.offsets[:-1], src_len)
        dest = np.repeat(dest_start, src_len) + pos
        ids[dest] = p.ids
        # rolled mask: entry i is the (unshifted) mask of token i+1 -> take mask[1:] of each sample
        keep = pos > 0
        rolled[dest[keep] - 1] = p.masks[keep]
        k += n
    return _Samples(ids=ids, rolled=rolled, offsets=offsets, runtime=aligned)


def _assign(options: OfflinePackOptions, runtime: np.ndarray) -> tuple[list[np.ndarray], dict[str, Any]]:
    """Bins of sample indices (in placement order) and the packing stats."""
    from reference_impl.packing import algorithms

    if options.bridge_compat:
        from reference_impl.packing.bridge_compat import bridge_pack_samples

        pack = bridge_pack_samples(runtime, options.pack_size, seed=options.seed, algorithm=options.algorithm)
        arrays = [np.asarray(b, dtype=np.int64) for b in pack.sample_bins]
        sums = np.asarray([int(runtime[b].sum()) for b in arrays], dtype=np.int64)
        stats = {
            "algorithm": options.algorithm,
            "bridge_compat": True,
            "num_bins": len(arrays),
            "lower_bound": int(-(-int(runtime.sum()) // options.pack_size)),
            "efficiency": float(sums.sum() / (len(arrays) * options.pack_size)),
            "max_items_per_bin": max(b.size for b in arrays),
            "min_bin_fill": int(sums.min()),
        }
        return arrays, stats
    result = algorithms.pack_lengths(
        runtime,
        options.pack_size,
        options.algorithm,
        seed=options.seed,
        max_seqs_per_pack=options.max_seqs_per_pack,
        oversize="error",
    )
    arrays = [result.order[result.offsets[b] : result.offsets[b + 1]] for b in range(result.num_bins)]
    if options.shuffle_packs and arrays:
        perm = np.random.default_rng(options.seed).permutation(len(arrays))
        arrays = [arrays[i] for i in perm]
    return arrays, result.stats()


def _pack_rows(samples: _Samples, bins: list[np.ndarray]) -> list[dict[str, np.ndarray]]:
    rows = []
    starts, ends = samples.offsets[:-1], samples.offsets[1:]
    for b in bins:
        lens = ends[b] - starts[b]
        index = np.concatenate([np.arange(s, e) for s, e in zip(starts[b].tolist(), ends[b].tolist())])
        seq_start = np.zeros(b.size, dtype=np.int64)
        np.cumsum(lens[:-1], out=seq_start[1:])
        rows.append({"input_ids": samples.ids[index], "loss_mask": samples.rolled[index], "seq_start_id": seq_start})
    return rows


def bridge_metadata(runtime: np.ndarray, bins: list[np.ndarray], pack_size: int) -> dict[str, Any]:
    """Megatron-Bridge's pack metadata for one split (six keys, its order and rounding)."""
    from reference_impl.packing.bridge_compat import bridge_pack_metadata

    sums = [int(runtime[b].sum()) for b in bins]
    counts = [int(b.size) for b in bins]
    return bridge_pack_metadata(sums, counts, pack_size, int(runtime.max()) if runtime.size else 0)


# ------------------------------------------------------------------------------------------------
# Fingerprint and layout
# ------------------------------------------------------------------------------------------------


def _canonical_json(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)


def _tokenizer_dir_name(tokenizer: Any) -> str:
    name = getattr(tokenizer, "name", None) or type(tokenizer).__name__
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", str(name)).strip("-") or "tokenizer"


def fingerprint(
    streams: Mapping[str, Any], options: OfflinePackOptions, schema: Any, tokenizer: Any
) -> str:
    """SHA-256 over everything that changes pack membership (inputs by content, not by path)."""
    payload = {
        "format": FORMAT,
        "inputs": {
            split: {
                "sources": [{"sha256": s.sha256, "weight": s.weight, "rows": s.rows} for s in stream.sources],
                "draws": hashlib.sha256(stream.source_ids.tobytes() + stream.row_ids.tobytes()).hexdigest(),
            }
            for split, stream in streams.items()
        },
        "options": options.to_dict(),
        "schema": {"type": type(schema).__name__, **schema.to_dict()},
        "tokenizer": tokenizer.fingerprint(),
    }
    return hashlib.sha256(_canonical_json(payload).encode()).hexdigest()


# ------------------------------------------------------------------------------------------------
# The pipeline
# ------------------------------------------------------------------------------------------------


def _resolve_inputs(inputs: Any, seed: int, num_samples: int | None) -> dict[str, Any]:
    from reference_impl.packing.sources import is_blend_manifest, read_blend_manifest, resolve_stream

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
                from reference_impl.packing.sources import parse_blend

                blends[str(split)] = parse_blend(list(spec), where=f"inputs[{split}]")
    else:
        raise UsageError("inputs must be a JSONL path, a blend manifest path, or a mapping split -> path/blend")
    for split in blends:
        if split not in SPLITS:
            raise UsageError(f"unknown split {split!r}; use {', '.join(SPLITS)}", field="inputs")
    return {split: resolve_stream(blend, seed=seed, num_samples=num_samples) for split, blend in blends.items()}


def _detect(stream: Any, schema: Any = None) -> Any:
    """The schema of the stream's first row (``schema`` None), or ``schema`` checked against it: a
    configured prompt/completion column must be in the first row (no silent fallback to another)."""
    from reference_impl.data.jsonl import JsonlFile
    from reference_impl.data.schemas import default_schema, detect_schema

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
        raise InputError(err.message, file=first, line=jf.line_number(int(stream.row_ids[0])), field=err.field,
                         fix=err.fix) from None


def _pack_split(
    split: str, stream: Any, options: OfflinePackOptions, schema: Any, tokenizer: Any, num_workers: int, progress: bool
) -> tuple[list[dict[str, np.ndarray]], dict[str, Any], dict[str, Any]]:
    account = SplitAccount(rows_in=len(stream))
    parts: list[_Tokenized] = []
    for part in _tokenize_stream(stream, schema, tokenizer, options.cap + 1, options.truncation, num_workers, progress):
        parts.append(part)
        account.truncated += int(part.truncated.sum())
        for _, reason, where in part.rejected:
            account.skip(reason, where)
    samples = _align_samples(parts, options.pad_seq_to_mult, tokenizer.eos_id)
    account.packed = int(samples.runtime.size)
    if account.packed + account.skipped_total != account.rows_in:  # pragma: no cover - invariant
        raise PackingError(f"{split}: accounting mismatch ({account.to_dict()})")
    if account.packed == 0:
        raise InputError(
            f"{split}: no usable sample ({account.skipped_total} of {account.rows_in} rows skipped: "
            f"{', '.join(account.skipped)})",
            file=stream.sources[0].path,
        )
    if samples.runtime.max() > options.pack_size:  # pragma: no cover - guarded by the options
        raise PackingError(f"{split}: a sample is longer than the pack size")
    bins, stats = _assign(options, samples.runtime)
    rows = _pack_rows(samples, bins)
    meta = bridge_metadata(samples.runtime, bins, options.pack_size)
    tokens_real = int(sum(np.diff(p.offsets).sum() - (p.offsets.size - 1) for p in parts))
    summary = {
        "file": f"{split}_{options.pack_size}.idx.parquet",
        "accounting": account.to_dict(),
        "packs": len(rows),
        "real_tokens": tokens_real,
        "aligned_tokens": int(samples.runtime.sum()),
        "token_slots": len(rows) * options.pack_size,
        "packing": stats,
        "sources": stream.describe(),
    }
    return rows, meta, summary


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
    ``account`` exactly as the pipeline would count them.
    """
    from reference_impl.data.tokenizers import load_tokenizer

    tok = tokenizer if tokenizer is not None and not isinstance(tokenizer, (str, os.PathLike)) else load_tokenizer(tokenizer)
    streams = _resolve_inputs(inputs, 0, None)
    stream = streams.get("training") or next(iter(streams.values()))
    if schema is None:
        schema = _detect(stream)
    account = SplitAccount(rows_in=len(stream))
    parts = []
    for part in _tokenize_stream(stream, schema, tok, max_seq_length + 1, truncation, num_workers, False):
        parts.append(np.diff(part.offsets) - 1)
        account.truncated += int(part.truncated.sum())
        for _, reason, where in part.rejected:
            account.skip(reason, where)
    lengths = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    account.packed = int(lengths.size)
    return SampleLengths(lengths=lengths, truncated=account.truncated, account=account.to_dict())


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
    num_workers: int = 1,
    row_group_size: int = 500,
    overwrite: bool = False,
    progress: bool = False,
) -> PreparedPacks:
    """Pack JSONL (or a blend) into packed Parquet; see the module docstring for every step."""
    from reference_impl.data.tokenizers import load_tokenizer
    from reference_impl.packing.parquet import write_packed_parquet

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
    )
    tok = tokenizer if tokenizer is not None and not isinstance(tokenizer, (str, os.PathLike)) else load_tokenizer(tokenizer)
    streams = _resolve_inputs(inputs, seed, num_samples)
    schema = _detect(next(iter(streams.values())), schema)
    fp = fingerprint(streams, options, schema, tok)
    out_root = check_output_directory(out_root)
    root = out_root / f"{_tokenizer_dir_name(tok)}_pad_seq_to_mult{options.pad_seq_to_mult}_{fp[:12]}"
    metadata_name = f"{options.pack_size}_metadata.jsonl"
    inputs = [src.path for stream in streams.values() for src in stream.sources]
    rebuilt = None
    if root.exists() or root.is_symlink():
        state = artifact.examine(root, fp)
        if state.reusable and not overwrite:
            log.info("reusing packs in %s (same fingerprint, every file as recorded)", root)
            return _prepared(root, state.manifest, reused=True)
        artifact.require_replaceable(root, fp)  # refuses a directory holding anything seqpack did not write
        check_replace_target(root, inputs=inputs, owner="seqpack pack")
        if not state.reusable:
            rebuilt = "; ".join(state.problems[:5])
            log.warning("rebuilding %s: %s", root, rebuilt)

    # ``root`` carries this run's fingerprint in its name; it is replaced only when seqpack wrote it,
    # and a concurrent run that wrote the same packs first wins when they verify
    replace = rebuilt is not None or overwrite
    with atomic_directory(root, replace=replace, check_replace=lambda path: artifact.require_replaceable(path, fp),
                          keep_existing=lambda path: artifact.examine(path, fp).reusable) as tmp:
        metadata, splits = [], {}
        for split in SPLITS:
            if split not in streams:
                continue
            rows, meta, summary = _pack_split(split, streams[split], options, schema, tok, num_workers, progress)
            write_packed_parquet(rows, tmp / summary["file"], row_group_size=row_group_size)
            metadata.append(meta)
            splits[split] = summary
        (tmp / metadata_name).write_text(json.dumps(metadata, indent=2) + "\n")
        manifest = {
            "format": FORMAT,
            "fingerprint": fp,
            "created_by": f"seqpack {__version__}",
            "options": options.to_dict(),
            "schema": {"type": type(schema).__name__, **schema.to_dict()},
            "tokenizer": {
                "name": getattr(tok, "name", type(tok).__name__),
                "fingerprint": tok.fingerprint(),
                "eos_id": tok.eos_id,
                "vocab_size": getattr(tok, "vocab_size", None),
                "pad_id": getattr(tok, "pad_id", None),
            },
            "metadata_file": metadata_name,
            "splits": splits,
        }
        artifact.record_pack_files(tmp, manifest)  # size and SHA-256 of every file: reuse verifies them
        (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
    return _prepared(root, manifest, reused=False, rebuilt=rebuilt)


def _prepared(root: Path, manifest: Any, *, reused: bool, rebuilt: str | None = None) -> PreparedPacks:
    files = {s: root / v["file"] for s, v in manifest["splits"].items()}
    return PreparedPacks.from_manifest(root, files, root / manifest["metadata_file"], root / MANIFEST_NAME,
                                       manifest, reused=reused, rebuilt=rebuilt)


def find_manifest(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The seqpack manifest next to a packed file (or inside a pack directory), if any.

    A manifest that is there but unreadable or of another format raises
    :class:`~reference_impl.errors.ArtifactError`.
    """
    p = Path(path)
    directory = p if p.is_dir() else p.parent
    return artifact.read_manifest(directory / MANIFEST_NAME)


__all__ = [
    "MANIFEST_NAME",
    "OfflinePackOptions",
    "PreparedPacks",
    "SplitAccount",
    "bridge_metadata",
    "find_manifest",
    "fingerprint",
    "SampleLengths",
    "prepare_packed_dataset",
    "sample_lengths",
]

