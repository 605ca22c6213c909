"""Input sources of the offline pipeline: one input (JSONL, Parquet or a ``datasets`` folder:
:mod:`seqpack.data.rows`), or a weighted blend of several.

A blend manifest (JSON or YAML) is either an MLM-style alternating list of weights and paths,
``[0.7, "a.jsonl", 0.3, "b.jsonl"]``, or a mapping of split name to such a list
(``{"training": [...], "validation": [...]}``). Paths are relative to the manifest's directory.

Resolving a blend gives one weighted *row stream*: a list of ``(source, row)`` draws. With
``num_samples`` draws in total (default: the sum of the source sizes), source ``i`` gets
``round(w_i / sum(w) * num_samples)`` draws (largest remainder, so the counts add up), taken
epoch by epoch from a seeded permutation of its rows: a source smaller than its share is
repeated (up-sampled), a larger one is sub-sampled. The input files are never concatenated or
loaded; rows are read lazily by index.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from seqpack.core.arguments import positive_int
from seqpack.core.limits import MAX_BLEND_EPOCHS, MAX_BLEND_SAMPLES
from seqpack.core.errors import InputError, UsageError

#: Path suffixes read as blend manifests rather than as JSONL data.
MANIFEST_SUFFIXES = (".json", ".yaml", ".yml")


@dataclass(frozen=True)
class SourceFile:
    """One input (JSONL, Parquet or a datasets folder): path, content hash, row count and blend weight."""

    path: str
    sha256: str
    rows: int
    weight: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


@dataclass(frozen=True)
class RowStream:
    """The rows a split packs: parallel arrays of source number and row index, in draw order."""

    sources: tuple[SourceFile, ...]
    source_ids: np.ndarray
    row_ids: np.ndarray

    def __len__(self) -> int:
        return int(self.source_ids.shape[0])

    def describe(self) -> list[dict[str, Any]]:
        """Per source: file, hash, rows available, weight, rows drawn."""
        drawn = np.bincount(self.source_ids, minlength=len(self.sources))
        return [{**s.to_dict(), "drawn": int(d)} for s, d in zip(self.sources, drawn)]


def file_sha256(path: str | os.PathLike[str], chunk: int = 8 << 20) -> str:
    """SHA-256 of an input's content, streamed (a datasets folder: its Arrow files in order)."""
    from seqpack.data.rows import source_sha256

    return source_sha256(path, chunk)


def is_blend_manifest(path: str | os.PathLike[str]) -> bool:
    """True when the path names a blend manifest (by suffix) instead of a JSONL file."""
    return Path(path).suffix.lower() in MANIFEST_SUFFIXES


def parse_blend(spec: Sequence[Any], *, where: str) -> list[tuple[float, str]]:
    """Validate an alternating ``[weight, path, weight, path, ...]`` list."""
    if not isinstance(spec, (list, tuple)) or len(spec) == 0 or len(spec) % 2:
        raise InputError("a blend must be a non-empty list of alternating weights and paths", file=where)
    pairs = []
    for i in range(0, len(spec), 2):
        weight, path = spec[i], spec[i + 1]
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 < weight < float("inf"):
            hint = " (weights must be finite)" if isinstance(weight, float) and weight > 0 else ""
            if isinstance(weight, str) and _looks_numeric(weight):
                hint = " (a string; YAML reads 1e3 without a decimal point as text: write 1.0e3)"
            raise InputError(f"blend entry {i}: weight must be a positive number, got {weight!r}{hint}",
                             file=where, field=f"[{i}]")
        if not isinstance(path, str) or not path:
            raise InputError(f"blend entry {i + 1}: expected a JSONL path, got {path!r}", file=where, field=f"[{i + 1}]")
        pairs.append((float(weight), path))
    return pairs


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def read_blend_manifest(path: str | os.PathLike[str]) -> dict[str, list[tuple[float, str]]]:
    """Read a blend manifest -> ``{split: [(weight, absolute path), ...]}`` (a bare list is ``training``)."""
    from seqpack.config.yaml_bounded import load_yaml, read_text
    from seqpack.data.objects import is_uri

    path = Path(path)
    text = read_text(path, what="blend manifest", error=InputError)
    if path.suffix.lower() == ".json":  # JSON as JSON (YAML would read 1e3 as a string), bounded like rows
        from seqpack.data import jsontext

        try:
            data = jsontext.loads(text)
        except jsontext.JsonProblem as exc:
            raise InputError(exc.message, file=str(path), field=exc.field) from None
    else:
        data, _ = load_yaml(text, source=str(path), error=InputError)  # bounded like configs
    splits = {"training": data} if isinstance(data, list) else data
    if not isinstance(splits, dict) or not splits:
        raise InputError("a blend manifest is a list of weights and paths, or a mapping split -> list", file=str(path))
    out = {}
    for split, spec in splits.items():
        pairs = parse_blend(spec, where=f"{path} [{split}]")
        out[str(split)] = [(w, p if os.path.isabs(p) or is_uri(p) else str((path.parent / p).resolve())) for w, p in pairs]
    return out


#: Split names of a ``DatasetDict.save_to_disk`` folder -> the split they are packed as.
DATASET_SPLITS = {"train": "training", "training": "training", "validation": "validation", "valid": "validation",
                  "val": "validation", "dev": "validation", "test": "test"}


def dataset_dict_inputs(path: str | os.PathLike[str]) -> dict[str, str]:
    """Split -> folder of a ``DatasetDict.save_to_disk`` folder (``train`` packs as training, ``validation``
    as validation, ``test`` as test); a split of another name, or two for one split, is refused."""
    from seqpack.data.rows import dataset_dict_splits

    out: dict[str, str] = {}
    for name, folder in dataset_dict_splits(path).items():
        split = DATASET_SPLITS.get(name.lower())
        if split is None or split in out:
            why = "is not a split seqpack packs" if split is None else f"is a second {split} split"
            raise UsageError(
                f"the DatasetDict's split {name!r} {why} (train, validation, test)", file=os.fspath(path),
                fix="give the split folders one by one (the input and --validation)",
            )
        out[split] = str(folder)
    return out


def _largest_remainder(weights: np.ndarray, total: int) -> np.ndarray:
    """``total`` draws split in proportion to ``weights`` (finite, positive), largest remainders first.

    The weights are scaled by their largest first, so weights near the float maximum (whose sum
    overflows to infinity) or subnormal ones give the same split as their ratios do.
    """
    scaled = weights / weights.max()
    share = scaled / scaled.sum() * total
    counts = np.floor(share).astype(np.int64)
    short = total - int(counts.sum())
    if short:
        order = np.argsort(-(share - counts), kind="stable")
        counts[order[:short]] += 1
    return counts


def resolve_stream(
    blend: Sequence[tuple[float, str]],
    *,
    seed: int,
    num_samples: int | None = None,
    row_counts: Mapping[str, int] | None = None,
) -> RowStream:
    """Resolve weighted JSONL sources into one deterministic row stream (see the module docstring).

    A single source with weight 1 and no ``num_samples`` is the identity stream (every row once,
    in file order), which is what plain one-file packing uses.
    """
    from seqpack.data.rows import open_rows

    if not blend:
        raise UsageError("no input sources given")
    from seqpack.data.objects import is_uri, stage_input

    sources = []
    for weight, path in blend:
        if is_uri(path):  # object storage: read from a local copy (data.objects)
            path = stage_input(path)
        n = row_counts[path] if row_counts and path in row_counts else len(open_rows(path))
        sources.append(SourceFile(path=str(path), sha256=file_sha256(path), rows=n, weight=weight))
    sizes = np.asarray([s.rows for s in sources], dtype=np.int64)
    if len(sources) == 1 and num_samples is None:
        return RowStream(tuple(sources), np.zeros(sizes[0], dtype=np.int64), np.arange(sizes[0], dtype=np.int64))
    total = int(sizes.sum()) if num_samples is None else int(num_samples)
    positive_int("num_samples", total, maximum=MAX_BLEND_SAMPLES)
    counts = _largest_remainder(np.asarray([s.weight for s in sources]), total)
    for source, count in zip(sources, counts.tolist()):
        if count > MAX_BLEND_EPOCHS * source.rows:
            raise UsageError(
                f"drawing {count} samples from {source.rows} rows would repeat every row about "
                f"{count // source.rows} times; the limit is {MAX_BLEND_EPOCHS} passes over a source",
                file=source.path, field="num_samples",
                fix="lower num_samples or that source's weight (limits live in reference_impl/seqpack/core/limits.py)",
            )
    rng = np.random.default_rng(seed)
    src_parts, row_parts = [], []
    for i, (count, size) in enumerate(zip(counts.tolist(), sizes.tolist())):
        epochs = -(-count // size) if count else 0
        rows = np.concatenate([rng.permutation(size) for _ in range(epochs)])[:count] if epochs else np.zeros(0, np.int64)
        src_parts.append(np.full(count, i, dtype=np.int64))
        row_parts.append(rows.astype(np.int64))
    return RowStream(tuple(sources), np.concatenate(src_parts), np.concatenate(row_parts))
