"""Packed Parquet artifacts: path resolution, atomic writing and lazy, row-group-wise reading.

The on-disk format is the one Megatron-Bridge's packed Parquet reader accepts: one row per pack,
columns ``input_ids`` ``list<int64>`` (the packed, *unshifted* token ids), ``loss_mask``
``list<int8>`` (rolled: entry ``i`` says whether the label at position ``i``, i.e. token ``i+1``,
is trained) and ``seq_start_id`` ``list<int64>`` (start offset of every segment, first 0).
A file is "packed Parquet" when its name ends in ``.idx.parquet`` or ``.idx.pq`` (any case); a
directory resolves to every ``*.parquet`` / ``*.pq`` file in it, sorted.
"""

from __future__ import annotations

import glob
import logging
import os
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from seqpack.io import reading
from seqpack.core.arguments import positive_int
from seqpack.data.interrupt import checkpoint
from seqpack.core.errors import ArtifactError
from seqpack.core.limits import MAX_PACK_LEN

log = logging.getLogger(__name__)

REQUIRED_COLUMNS: tuple[str, ...] = ("input_ids", "loss_mask", "seq_start_id")
DEFAULT_ROW_GROUP_SIZE = 500


def is_packed_parquet_file(path: str | os.PathLike[str]) -> bool:
    """True for names ending in ``.idx.parquet`` or ``.idx.pq`` (case-insensitive)."""
    name = Path(path).name.lower()
    return name.endswith(".idx.parquet") or name.endswith(".idx.pq")


def resolve_parquet_paths(spec: str | os.PathLike[str]) -> list[Path]:
    """A Parquet file, a glob, or a directory -> the sorted list of files it names.

    An existing file wins over a glob reading of the same string (a file literally named
    ``shard_[01].idx.parquet`` resolves to itself).
    """
    text = os.fspath(spec)
    path = Path(text)
    if os.path.lexists(path) and not path.is_dir():
        return [reading.regular_file(path, what="packed Parquet file", error=ArtifactError)]
    if path.is_dir():
        found = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in (".parquet", ".pq"))
        if not found:
            return _in_pack_folder(path, text)
        return found
    if glob.has_magic(text):
        found = sorted(Path(p) for p in glob.glob(text) if Path(p).is_file())
        if not found:
            raise ArtifactError("the glob matched no files", file=text)
        return found
    raise ArtifactError("packed data path not found", file=text)


def pack_folders(root: str | os.PathLike[str]) -> list[Path]:
    """The pack folders ``seqpack pack`` wrote into the output root ``root`` (each a fingerprinted folder
    holding a seqpack manifest), sorted by name."""
    from seqpack.packing.offline.artifact import MANIFEST_NAME

    base = Path(root)
    return sorted(p for p in base.iterdir() if p.is_dir() and not p.is_symlink() and (p / MANIFEST_NAME).is_file())


def _in_pack_folder(path: Path, text: str) -> list[Path]:
    """The Parquet files of the one pack folder inside an output root (``pack --out``), or an error that
    lists the folders to choose from."""
    folders = pack_folders(path)
    if len(folders) == 1:
        return resolve_parquet_paths(folders[0])
    if folders:
        raise ArtifactError(
            f"No Parquet files in the directory; it is an output root holding {len(folders)} pack folders "
            f"({', '.join(f.name for f in folders)})", file=text,
            fix=f"pass one of them, e.g. {folders[-1]}")
    raise ArtifactError("No Parquet files found in the directory (and no pack folder seqpack wrote inside it)",
                        file=text, fix="pass the folder `seqpack pack` printed (wrote ...), or its pack_dir")


def rows_to_table(rows: Sequence[Mapping[str, Any]]) -> Any:
    """Build the pyarrow table of packed rows (int64 ids and starts, int8 loss mask)."""
    ids = [np.asarray(r["input_ids"], dtype=np.int64) for r in rows]
    masks = [np.asarray(r["loss_mask"], dtype=np.int8) for r in rows]
    starts = [np.asarray(r["seq_start_id"], dtype=np.int64) for r in rows]

    def flat(arrays: list[np.ndarray], dtype: Any) -> tuple[np.ndarray, np.ndarray]:
        lengths = np.fromiter((a.size for a in arrays), dtype=np.int64, count=len(arrays))
        offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return (np.concatenate(arrays) if arrays else np.zeros(0, dtype=dtype)), offsets

    ids_flat, row_offsets = flat(ids, np.int64)
    masks_flat, _ = flat([np.where(m != 0, 1, 0).astype(np.int8) for m in masks], np.int8)
    starts_flat, start_offsets = flat(starts, np.int64)
    return flat_table(ids_flat, masks_flat, row_offsets, starts_flat, start_offsets)


def flat_table(
    ids: np.ndarray, loss_mask: np.ndarray, row_offsets: np.ndarray, starts: np.ndarray, start_offsets: np.ndarray
) -> Any:
    """The pyarrow table of packed rows given as flat arrays: row ``i`` is ``ids[row_offsets[i]:row_offsets[i+1]]``
    (and the same slice of ``loss_mask``, already 0/1), its segment starts ``starts[start_offsets[i]:...]``."""
    import pyarrow as pa

    def numeric(values: np.ndarray, dtype: Any, value_type: Any) -> Any:
        # straight from the numpy buffer: pa.array() would import pandas (about a second) where it is installed
        data = np.ascontiguousarray(values, dtype=dtype)
        return pa.Array.from_buffers(value_type, int(data.size), [None, pa.py_buffer(data)])

    def column(values: np.ndarray, offsets: np.ndarray, dtype: Any, value_type: Any) -> Any:
        items = numeric(values, dtype, value_type)
        if int(offsets[-1]) < 2**31:
            return pa.ListArray.from_arrays(numeric(offsets, np.int32, pa.int32()), items)
        return pa.LargeListArray.from_arrays(numeric(offsets, np.int64, pa.int64()), items).cast(pa.list_(value_type))

    return pa.Table.from_arrays(
        [column(ids, row_offsets, np.int64, pa.int64()), column(loss_mask, row_offsets, np.int8, pa.int8()),
         column(starts, start_offsets, np.int64, pa.int64())],
        names=["input_ids", "loss_mask", "seq_start_id"],
    )


def write_packed_parquet(
    rows: Sequence[Mapping[str, Any]], path: str | os.PathLike[str], *, row_group_size: int = DEFAULT_ROW_GROUP_SIZE
) -> Path:
    """Write packed rows to ``path`` atomically (temporary file in the same directory, then rename)."""
    import pyarrow.parquet as pq

    from seqpack.io.atomic import atomic_output

    positive_int("row_group_size", row_group_size)
    target = Path(path)
    table = rows_to_table(rows)
    with atomic_output(target) as fh:
        pq.write_table(table, fh, row_group_size=row_group_size)
    return target


class PackedParquetReader:
    """Lazy reader over one or more packed Parquet shards.

    Opening reads only the footers (row counts per row group) and checks the required columns on
    every shard. Rows are read one row group at a time and the last group is cached, so sequential
    access decodes each group once. Picklable: file handles reopen in the worker that uses them.
    """

    def __init__(self, spec: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> None:
        import pyarrow.parquet as pq

        if isinstance(spec, (str, os.PathLike)):
            self.paths = resolve_parquet_paths(spec)
        else:
            self.paths = [p for s in spec for p in resolve_parquet_paths(s)]
        group_rows: list[int] = []
        group_file: list[int] = []
        group_index: list[int] = []
        for f, path in enumerate(self.paths):
            reading.regular_file(path, what="packed Parquet file", error=ArtifactError)
            try:
                pf = pq.ParquetFile(path)
                meta = pf.metadata
            except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for foreign files
                raise ArtifactError(f"not a readable Parquet file ({type(exc).__name__}: {exc})", file=str(path)) from None
            all_names = list(pf.schema_arrow.names)
            names = set(all_names)
            missing = [c for c in REQUIRED_COLUMNS if c not in names]
            if missing:
                raise ArtifactError(
                    f"missing required columns {missing} (has {sorted(names)}); not a packed Parquet file",
                    file=str(path),
                )
            twice = [c for c in REQUIRED_COLUMNS if all_names.count(c) > 1]
            if twice:
                raise ArtifactError(f"column {twice[0]!r} appears {all_names.count(twice[0])} times; a packed "
                                    "Parquet file has each column once", file=str(path), field=twice[0])
            for c in REQUIRED_COLUMNS:
                _check_column_type(pf.schema_arrow.field(c), path)
            for g in range(meta.num_row_groups):
                group_rows.append(meta.row_group(g).num_rows)
                group_file.append(f)
                group_index.append(g)
        self._group_start = np.zeros(len(group_rows) + 1, dtype=np.int64)
        np.cumsum(np.asarray(group_rows, dtype=np.int64), out=self._group_start[1:])
        self._group_file = np.asarray(group_file, dtype=np.int64)
        self._group_index = np.asarray(group_index, dtype=np.int64)
        if self._group_start[-1] == 0:
            raise ArtifactError("the packed dataset is empty (0 rows)", file=str(self.paths[0]))
        self._files: dict[int, Any] = {}
        self._cache_group = -1
        self._cache: dict[str, tuple[np.ndarray, np.ndarray]] | None = None

    def __len__(self) -> int:
        return int(self._group_start[-1])

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_files"] = {}
        state["_cache_group"] = -1
        state["_cache"] = None
        return state

    def locate(self, index: int) -> tuple[int, int, int]:
        """Row -> (file number, row group within the file, row within the group)."""
        if not 0 <= index < len(self):
            raise IndexError(f"row {index} out of range for {len(self)} rows")
        group = int(np.searchsorted(self._group_start, index, side="right") - 1)
        return int(self._group_file[group]), int(self._group_index[group]), int(index - self._group_start[group])

    def _load_group(self, group: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        import pyarrow.parquet as pq

        if group != self._cache_group:
            checkpoint()  # a cancelled MCP job stops here
            f = int(self._group_file[group])
            if f not in self._files:
                reading.regular_file(self.paths[f], what="packed Parquet file", error=ArtifactError)
            try:
                if f not in self._files:
                    self._files[f] = pq.ParquetFile(self.paths[f])
                _check_expansion(self._files[f].metadata, int(self._group_index[group]), self.paths[f])
                table = self._files[f].read_row_group(int(self._group_index[group]), columns=list(REQUIRED_COLUMNS))
                cache: dict[str, tuple[np.ndarray, np.ndarray]] = {}
                for c in REQUIRED_COLUMNS:
                    col = table.column(c).combine_chunks()
                    offsets = np.asarray(col.offsets, dtype=np.int64)
                    values = col.values.to_numpy(zero_copy_only=False)
                    cache[c] = (offsets, values)
            except ArtifactError:
                raise
            except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for damaged data
                raise _unreadable_group(exc, self._files.get(f), int(self._group_index[group]), self.paths[f]) from None
            self._cache = cache
            self._cache_group = group
        assert self._cache is not None
        return self._cache

    def row(self, index: int) -> dict[str, np.ndarray]:
        """Stored row ``index``: ``input_ids``, ``loss_mask``, ``seq_start_id`` as numpy arrays."""
        if not 0 <= index < len(self):
            raise IndexError(f"row {index} out of range for {len(self)} rows")
        group = int(np.searchsorted(self._group_start, index, side="right") - 1)
        cache = self._load_group(group)
        j = int(index - self._group_start[group])
        out = {}
        for c, dtype in (("input_ids", np.int64), ("loss_mask", np.int8), ("seq_start_id", np.int64)):
            offsets, values = cache[c]
            size = int(offsets[j + 1] - offsets[j])
            if size > MAX_PACK_LEN:  # no pack is that long: refused before it is copied
                f = self.locate(index)[0]
                raise ArtifactError(f"{c} holds {size} values, more than the longest pack ({MAX_PACK_LEN})",
                                    file=str(self.paths[f]), row=index, field=c)
            out[c] = np.array(values[offsets[j] : offsets[j + 1]], dtype=dtype)
        return out

    def iter_rows(self) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        """Every row in order, decoding each row group once."""
        for i in range(len(self)):
            yield i, self.row(i)

    def close(self) -> None:
        """Drop open files and the cached row group (safe to call twice)."""
        self._files = {}
        self._cache = None
        self._cache_group = -1


#: Bytes per value of each Parquet physical type once decoded (the footer counts values, not decoded bytes: a
#: run-length encoded column of zeros is a few bytes "uncompressed").
_VALUE_BYTES = {"BOOLEAN": 1, "INT32": 4, "FLOAT": 4, "INT64": 8, "DOUBLE": 8, "INT96": 12}


def _group_bytes(meta: Any, group: int) -> tuple[int, int]:
    """Bytes on disk, and bytes once decoded, of the packed columns of row group ``group`` (from the footer)."""
    rg = meta.row_group(group)
    on_disk = decoded = 0
    for c in range(rg.num_columns):
        column = rg.column(c)
        if column.path_in_schema.split(".")[0] in REQUIRED_COLUMNS:
            on_disk += int(column.total_compressed_size)
            decoded += int(column.num_values) * _VALUE_BYTES.get(str(column.physical_type), 8)
    return on_disk, decoded


def _check_expansion(meta: Any, group: int, path: Any) -> None:
    """Refuse a decompression bomb before it is read: a row group that decodes to more than
    :data:`~seqpack.core.limits.MAX_INFLATED_ROW_GROUP_BYTES` and to at least
    :data:`~seqpack.core.limits.PARQUET_BOMB_RATIO` times its size on disk."""
    from seqpack.core.limits import MAX_INFLATED_ROW_GROUP_BYTES, PARQUET_BOMB_RATIO

    on_disk, decoded = _group_bytes(meta, group)
    if decoded > MAX_INFLATED_ROW_GROUP_BYTES and decoded >= PARQUET_BOMB_RATIO * max(on_disk, 1):
        raise ArtifactError(f"row group {group} is a decompression bomb: {on_disk} bytes on disk decode to {decoded} "
                            f"({decoded // max(on_disk, 1)} times as many); refused unread", file=str(path),
                            fix="packed token ids never shrink like this: regenerate the file")


def _unreadable_group(exc: Exception, pf: Any, group: int, path: Any) -> ArtifactError:
    """The error of a row group pyarrow could not read: out of memory is said as such (a decompression bomb when the
    group decodes to far more than its size on disk); anything else is damage."""
    from seqpack.core.limits import PARQUET_BOMB_RATIO

    text = str(exc).splitlines()[0] if str(exc) else ""
    if isinstance(exc, MemoryError) or "out of memory" in text.lower():
        on_disk, decoded = _group_bytes(pf.metadata, group) if pf is not None else (0, 0)
        if on_disk and decoded >= PARQUET_BOMB_RATIO * on_disk:
            return ArtifactError(f"row group {group} is a decompression bomb: {on_disk} bytes on disk decode to "
                                 f"{decoded}; ran out of memory decoding it", file=str(path))
        return ArtifactError(f"ran out of memory reading row group {group} ({decoded or 'an unknown number of'} "
                             f"bytes once decoded; {type(exc).__name__}: {text})", file=str(path),
                             fix="free memory, or write the packs with smaller row groups")
    return ArtifactError(f"row group {group} cannot be read ({type(exc).__name__}: {text}); the file is damaged",
                         file=str(path))


def _check_column_type(field: Any, path: Any) -> None:
    """A required column must be a list of integers (any width), else the file is not packed Parquet."""
    import pyarrow as pa

    kind = field.type
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)) or not pa.types.is_integer(kind.value_type):
        raise ArtifactError(f"column {field.name!r} has type {kind}, expected a list of integers; not a packed "
                            "Parquet file", file=str(path), field=field.name)


def validate_stored_row(index: int, row: Mapping[str, Any], *, file: str | None = None) -> None:
    """Structural checks of one stored row (lengths equal, starts from 0, increasing, in range)."""
    ids, mask, starts = (np.asarray(row[c]) for c in REQUIRED_COLUMNS)
    where = {"file": file, "row": index}
    if mask.size != ids.size:
        raise ArtifactError(f"loss_mask length {mask.size} != input_ids length {ids.size}", field="loss_mask", **where)
    if starts.size == 0 or starts[0] != 0:
        raise ArtifactError("seq_start_id must start with 0", field="seq_start_id", **where)
    if starts.size and starts[-1] >= ids.size:
        raise ArtifactError(f"seq_start_id {int(starts[-1])} >= row length {ids.size}", field="seq_start_id", **where)
    if np.any(np.diff(starts) <= 0):
        raise ArtifactError("seq_start_id is not strictly increasing", field="seq_start_id", **where)
    if mask.size and np.any((mask != 0) & (mask != 1)):
        raise ArtifactError("loss_mask holds values other than 0/1", field="loss_mask", **where)


def read_metadata(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The pack metadata file: a JSON array of per-split dicts (despite the ``.jsonl`` name)."""
    if not os.path.lexists(path):
        raise ArtifactError("pack metadata file not found", file=str(path))
    data = reading.read_json(path, what="pack metadata", error=ArtifactError)
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise ArtifactError("pack metadata must be a JSON array of objects", file=str(path))
    return data
