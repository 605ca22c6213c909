"""Row sources: the rows of a JSONL file, a Parquet file or a ``datasets.save_to_disk`` folder, by index.

Every reader of training rows (offline packing, ``plan``, ``batches``) opens its input with
:func:`open_rows` and sees the same interface (:class:`RowSource`): ``len``, ``row(i)``,
``rows(indices)`` (many at once, the form offline packing reads), ``location(i)`` for error
messages, ``close()``. Which reader a path gets (:func:`input_kind`):

* a directory with ``state.json`` is a Hugging Face ``datasets`` folder written by
  ``Dataset.save_to_disk`` (:class:`ArrowRows`): its Arrow stream files, in the order ``state.json``
  lists them, are memory-mapped (nothing is decoded until a row is asked for; after every batch of
  rows the pages are released, so the resident set does not grow with the file). A directory with
  ``dataset_dict.json`` (``DatasetDict.save_to_disk``) holds one such folder per split
  (:func:`dataset_dict_splits`). The ``datasets`` package is not needed to read them;
* a file ending in ``.parquet`` (or starting with Parquet's magic bytes) is read with pyarrow
  (:class:`ParquetRows`), streaming one row group at a time;
* anything else is JSONL (:class:`seqpack.data.jsonl.JsonlFile`).

A row is the dict ``json.loads`` would give for the same row written as JSON: column values become
Python values (``to_pylist``). Arrow gives every struct every field of its type, so a field that is
null inside a nested struct (a message's ``reasoning_content``, a key of a tool schema) is read as
absent, as it was in the JSON the dataset was most likely made from; a null top-level column stays
``None``. Rows of Parquet and Arrow inputs have no line number: errors name the file and the 0-based
row (``file row N``), otherwise exactly as for JSONL.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from seqpack.core.errors import InputError
from seqpack.data.location import RowLocation

__all__ = [
    "ArrowRows",
    "ParquetRows",
    "RowSource",
    "dataset_dict_splits",
    "input_kind",
    "open_rows",
    "source_sha256",
]

PARQUET_MAGIC = b"PAR1"
DATASET_STATE = "state.json"
DATASET_DICT = "dataset_dict.json"
#: Rows decoded at a time from a Parquet row group (streamed, so a large group never sits in memory whole).
PARQUET_BATCH_ROWS = 1024
#: Bytes a Parquet column chunk is read in (0 would read whole column chunks).
PARQUET_BUFFER = 1 << 22


class RowSource(Protocol):
    """The rows of one input, by 0-based index."""

    path: Path
    kind: str

    def __len__(self) -> int: ...

    def row(self, i: int) -> dict[str, Any]:
        """Row ``i`` as a dict; :class:`InputError` (file, line or row) when it is not one."""
        ...

    def rows(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """Rows ``indices`` (any order, repeats allowed), in that order."""
        ...

    def location(self, i: int) -> RowLocation:
        """File, line (None where rows have none) and row index of row ``i``."""
        ...

    def line_number(self, i: int) -> int | None:
        """1-based physical line of row ``i`` (None for Parquet and Arrow rows)."""
        ...

    def identity(self) -> dict[str, Any]:
        """Cheap identity of the files behind the rows (sizes, mtimes, edge hashes)."""
        ...

    def release(self) -> None:
        """Drop what the last reads made resident (mapped pages), keeping read positions."""
        ...

    def close(self) -> None:
        """Release mapped or open files (they are re-opened on the next read)."""
        ...


def input_kind(path: str | os.PathLike[str]) -> str:
    """``"dataset"``, ``"dataset_dict"``, ``"parquet"`` or ``"jsonl"`` (module docstring)."""
    p = Path(path)
    if p.is_dir():
        if (p / DATASET_DICT).is_file():
            return "dataset_dict"
        if (p / DATASET_STATE).is_file():
            return "dataset"
        raise InputError(
            "a directory is read only as a Hugging Face datasets folder (state.json or dataset_dict.json from "
            "save_to_disk), and this one is neither", file=str(p),
            fix="give a JSONL or Parquet file, or the folder Dataset.save_to_disk wrote",
        )
    if p.suffix.lower() == ".parquet":
        return "parquet"
    try:
        if not stat.S_ISREG(p.stat().st_mode):  # a FIFO or device is never opened here (it could block):
            return "jsonl"  # the JSONL reader refuses it in one line
        with open(p, "rb") as fh:
            if fh.read(4) == PARQUET_MAGIC:
                return "parquet"
    except OSError:
        pass  # the reader says what is wrong with the path
    return "jsonl"


def open_rows(
    path: str | os.PathLike[str], *, cache_dir: str | os.PathLike[str] | None = None, use_cache: bool = True
) -> RowSource:
    """The row source for ``path`` (module docstring); ``cache_dir``/``use_cache`` apply to JSONL's line index."""
    kind = input_kind(path)
    if kind == "dataset":
        return ArrowRows(path)
    if kind == "dataset_dict":
        splits = ", ".join(dataset_dict_splits(path))
        raise InputError(
            f"a DatasetDict folder holds several splits ({splits}); give one split's folder", file=os.fspath(path),
            fix="pass <folder>/<split>, or give the whole folder to `seqpack pack` (it packs train/validation/test)",
        )
    if kind == "parquet":
        return ParquetRows(path)
    from seqpack.data.jsonl import JsonlFile

    return JsonlFile(path, cache_dir=cache_dir, use_cache=use_cache)


def dataset_dict_splits(path: str | os.PathLike[str]) -> dict[str, Path]:
    """Split name -> folder of a ``DatasetDict.save_to_disk`` folder, in the order it lists them."""
    from seqpack.io import reading

    root = Path(path)
    data = reading.read_json(root / DATASET_DICT, what="dataset_dict.json", error=InputError)
    names = data.get("splits") if isinstance(data, dict) else None
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        raise InputError("dataset_dict.json lists no splits", file=str(root / DATASET_DICT), field="splits")
    out = {}
    for name in names:
        if "/" in name or name in (".", ".."):
            raise InputError(f"split name {name!r} is not a folder name", file=str(root / DATASET_DICT), field="splits")
        out[name] = root / name
    return out


def _data_files(root: Path) -> list[Path]:
    """The Arrow files of a ``save_to_disk`` folder, in the order ``state.json`` lists them."""
    from seqpack.io import reading

    state = reading.read_json(root / DATASET_STATE, what="state.json", error=InputError)
    files = state.get("_data_files") if isinstance(state, dict) else None
    if not isinstance(files, list) or not files:
        raise InputError("state.json lists no data files", file=str(root / DATASET_STATE), field="_data_files")
    out = []
    for k, entry in enumerate(files):
        name = entry.get("filename") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
            raise InputError(f"data file entry {k} has no plain file name", file=str(root / DATASET_STATE),
                             field=f"_data_files[{k}]")
        out.append(reading.regular_file(root / name, what="Arrow data file"))
    return out


def _member_files(path: str | os.PathLike[str]) -> list[Path]:
    p = Path(path)
    return _data_files(p) if p.is_dir() else [p]


def source_sha256(path: str | os.PathLike[str], chunk: int = 8 << 20) -> str:
    """SHA-256 of an input's content: the file's bytes, or a ``datasets`` folder's Arrow files in order."""
    from seqpack.io import reading

    h = hashlib.sha256()
    for member in _member_files(path):
        with reading.open_regular(member, what="input file") as fh:
            while block := fh.read(chunk):
                h.update(block)
    return h.hexdigest()


def _strip_nulls(value: Any) -> Any:
    """Nested struct fields that are null dropped (Arrow gives every struct every field of its type)."""
    if isinstance(value, dict):
        return {k: _strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_strip_nulls(v) for v in value]
    return value


def _as_row(row: dict[str, Any]) -> dict[str, Any]:
    for key, value in row.items():
        if isinstance(value, (dict, list)):
            row[key] = _strip_nulls(value)
    return row


class _Columnar:
    """What the Parquet and Arrow readers share: locations, bounds, single rows."""

    path: Path
    kind: str
    _rows: int

    def __len__(self) -> int:
        return self._rows

    def _checked(self, i: Any) -> int:
        if isinstance(i, bool) or not hasattr(i, "__index__"):
            raise TypeError(f"row index must be an integer, got {type(i).__name__}")
        j = int(i) + self._rows if int(i) < 0 else int(i)
        if not 0 <= j < self._rows:
            raise IndexError(f"row {i} out of range for {self.path} with {self._rows} rows")
        return j

    def location(self, i: int) -> RowLocation:
        """File and row index of row ``i`` (no line)."""
        return RowLocation(file=str(self.path), line=None, row=self._checked(i))

    def line_number(self, i: int) -> int | None:
        """None: columnar rows have no line."""
        self._checked(i)
        return None

    def row(self, i: int) -> dict[str, Any]:
        """Row ``i`` as a dict."""
        return self.rows([i])[0]

    @property
    def columns(self) -> list[str]:
        """The top-level column names."""
        return list(self._schema().names)

    def identity(self) -> dict[str, Any]:
        """Size, mtime and edge hash of every file the rows come from (what a cached scan must match)."""
        from seqpack.data.jsonl import file_fingerprint

        return {"files": [file_fingerprint(m).to_dict() for m in _member_files(self.path)]}

    def _empty(self) -> InputError:
        return InputError(f"{self.kind} input has no rows", file=str(self.path))

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r}, rows={self._rows})"


def _group_runs(indices: Sequence[int], bounds: Sequence[int]) -> list[tuple[int, list[int], list[int]]]:
    """``indices`` split by the block (``bounds``: cumulative first rows) they fall in:
    ``(block, positions in indices, rows within the block)``, blocks in first-use order."""
    import bisect

    blocks: dict[int, tuple[list[int], list[int]]] = {}
    for pos, i in enumerate(indices):
        b = bisect.bisect_right(bounds, i) - 1
        entry = blocks.setdefault(b, ([], []))
        entry[0].append(pos)
        entry[1].append(i - bounds[b])
    return [(b, p, r) for b, (p, r) in blocks.items()]


class ParquetRows(_Columnar):
    """The rows of one Parquet file; row groups are streamed in batches of :data:`PARQUET_BATCH_ROWS`.

    Reading rows in increasing order (what offline packing does with one input) decodes each batch
    once per process; a row before the current position of its row group restarts that group.
    """

    kind = "parquet"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        from seqpack.io import reading

        self.path = reading.regular_file(path, what="Parquet file")
        meta = self._open().metadata
        self._bounds = [0]
        for g in range(meta.num_row_groups):
            self._bounds.append(self._bounds[-1] + meta.row_group(g).num_rows)
        self._rows = self._bounds[-1]
        self.close()
        if self._rows == 0:
            raise self._empty()

    def _open(self) -> Any:
        import pyarrow.parquet as pq

        from seqpack.io import reading

        if getattr(self, "_file", None) is None:
            fh = reading.open_regular(self.path, what="Parquet file")
            try:
                self._file = pq.ParquetFile(fh, buffer_size=PARQUET_BUFFER)
            except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a damaged file
                fh.close()
                raise InputError(f"not a readable Parquet file ({type(exc).__name__}: {exc})",
                                 file=str(self.path)) from None
            self._fh = fh
            self._cursor: dict[int, Any] = {}
        return self._file

    def _schema(self) -> Any:
        return self._open().schema_arrow

    def _batches_from(self, group: int, start: int) -> Any:
        """The cursor of ``group`` positioned at or before ``start``: (first row of its batch, batch, iterator)."""
        cur = self._cursor.get(group)
        if cur is None or cur[0] > start:
            self._cursor.clear()  # one open row group at a time
            it = self._file.iter_batches(batch_size=PARQUET_BATCH_ROWS, row_groups=[group], use_threads=False)
            cur = [0, None, it]
            self._cursor[group] = cur
        return cur

    def _take(self, group: int, rows: list[int]) -> dict[int, dict[str, Any]]:
        """Rows (within ``group``) -> dict; ``rows`` in increasing order."""
        out: dict[int, dict[str, Any]] = {}
        k = 0
        while k < len(rows):
            cur = self._batches_from(group, rows[k])
            while cur[1] is None or cur[0] + cur[1].num_rows <= rows[k]:
                if cur[1] is not None:
                    cur[0] += cur[1].num_rows
                cur[1] = next(cur[2])
            first, batch = cur[0], cur[1]
            end = first + batch.num_rows
            stop = k
            while stop < len(rows) and rows[stop] < end:
                stop += 1
            local = [r - first for r in rows[k:stop]]
            for r, value in zip(rows[k:stop], batch.take(local).to_pylist()):
                out[r] = _as_row(value)
            k = stop
        return out

    def rows(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """Rows ``indices`` in that order (see the class docstring for the cost of going backwards)."""
        checked = [self._checked(i) for i in indices]
        self._open()
        result: list[Any] = [None] * len(checked)
        try:
            for group, positions, local in _group_runs(checked, self._bounds):
                wanted = sorted(set(local))
                got = self._take(group, wanted)
                for pos, r in zip(positions, local):
                    result[pos] = got[r]
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001 - a damaged page or an unreadable type
            raise InputError(f"cannot read rows of the Parquet file ({type(exc).__name__}: {exc})",
                             file=str(self.path)) from None
        return result

    def release(self) -> None:
        """Nothing: the current batch is all a Parquet read holds (the position is kept for the next rows)."""

    def close(self) -> None:
        """Close the file (re-opened on the next read)."""
        if getattr(self, "_file", None) is not None:
            self._cursor = {}
            self._file = None
            self._fh.close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for key in ("_file", "_fh", "_cursor"):
            state.pop(key, None)
        return state


class ArrowRows(_Columnar):
    """The rows of a ``Dataset.save_to_disk`` folder: its Arrow stream files, memory-mapped.

    The record batches are located once per process (their headers only); a read takes the rows it
    needs straight from the mapping, then asks the kernel to drop the mapped pages from the process
    (``MADV_DONTNEED``: they stay in the page cache), so reading a large dataset does not grow the
    resident set.
    """

    kind = "arrow"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._files = _data_files(self.path)
        self._maps: list[mmap.mmap] = []
        self._batches: list[Any] = []
        self._bounds = self._index()
        self._rows = self._bounds[-1]
        if self._rows == 0:
            raise self._empty()

    def _index(self) -> list[int]:
        import pyarrow as pa

        from seqpack.io import reading

        self.close()
        bounds = [0]
        for member in self._files:
            with reading.open_regular(member, what="Arrow data file") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size == 0:
                    raise InputError("the Arrow data file is empty", file=str(member))
                mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            self._maps.append(mm)
            try:
                reader = pa.ipc.open_stream(pa.py_buffer(mm))
                for batch in reader:
                    self._batches.append(batch)
                    bounds.append(bounds[-1] + batch.num_rows)
            except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a damaged stream
                raise InputError(f"not a readable Arrow stream ({type(exc).__name__}: {exc})",
                                 file=str(member)) from None
        self._release()
        return bounds

    def _schema(self) -> Any:
        if not self._batches:
            self._bounds = self._index()
        return self._batches[0].schema

    def _release(self) -> None:
        for mm in self._maps:
            try:
                mm.madvise(mmap.MADV_DONTNEED)
            except (OSError, ValueError, AttributeError):  # pragma: no cover - platform without madvise
                pass

    def rows(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """Rows ``indices`` in that order."""
        checked = [self._checked(i) for i in indices]
        if not self._batches:
            self._bounds = self._index()
        result: list[Any] = [None] * len(checked)
        try:
            for block, positions, local in _group_runs(checked, self._bounds):
                values = self._batches[block].take(local).to_pylist()
                for pos, value in zip(positions, values):
                    result[pos] = _as_row(value)
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001 - an unreadable type
            raise InputError(f"cannot read rows of the Arrow data ({type(exc).__name__}: {exc})",
                             file=str(self.path)) from None
        finally:
            self._release()
        return result

    release = _release

    def close(self) -> None:
        """Drop the mappings (re-made on the next read)."""
        self._batches = []
        for mm in getattr(self, "_maps", []):
            try:
                mm.close()
            except BufferError:  # a batch still references it: released with the last reference
                pass
        self._maps = []

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_maps"], state["_batches"] = [], []
        return state
