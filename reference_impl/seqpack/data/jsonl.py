"""Random access to the rows of a JSONL file without loading the file into memory.

A *row* is one non-blank physical line holding one JSON object. Blank lines (empty, or only
spaces, tabs and carriage returns) are **not rows**: they are skipped by the index and never
counted, so ``len(JsonlFile(p))`` is the number of JSON objects in ``p``. Every row keeps its
1-based *physical* line number, which is what error messages name. CRLF line endings are
accepted (the ``\\r`` is not part of the row), and a UTF-8 byte-order mark at the very start of
the file is ignored.

How it works:

* :func:`build_line_index` scans the file once in fixed-size chunks (memory stays bounded by the
  chunk size, whatever the file size) and records, for every row, the byte offset where it
  starts, where it ends (the offset of its ``\\n``, or the file size for a last line without
  one) and its physical line number, as three ``int64`` numpy arrays.
* :class:`JsonlFile` keeps that index in a cache file, by default
  ``<dir>/.seqpack-cache/<file name>.idx.npz`` next to the data (a folder the repository's
  ``.gitignore`` already ignores). When that folder cannot be written, or when the caller passes
  ``cache_dir``, the cache goes to that folder instead (or to ``$SEQPACK_CACHE_DIR`` /
  ``~/.cache/seqpack/jsonl-index`` as the fallback), under a name that includes a hash of the
  file's absolute path. Caches are written atomically (temporary file + rename), so concurrent
  builders never see a half-written index.
* A cache is reused only when the file is the one it was built for and unchanged since: its
  device, inode, size, ``mtime_ns`` and ``ctime_ns`` (which no ``touch`` can restore) and a hash
  of its first and last 4 KiB all match what was recorded at build time. A file modified less
  than :data:`RACY_SECONDS` before the index was built could change again within the same
  timestamp tick, so its cache also records a hash of the whole content, checked on every reuse
  (as git does for "racily clean" entries). A cache that passes is still checked against the
  file before it is trusted: the rows must lie in order, each start right after a newline and
  each end on one, with only whitespace and the recorded number of newlines between them. A
  cache that fails any of this (stale, damaged, or planted) is rebuilt and replaced, with a
  warning when it looked valid; a row that still holds a newline when it is read is refused.
* ``row(i)`` reads exactly that line with one positioned read (``os.pread``) and parses only it.
  The file is never memory-mapped: a mapped file that shrinks in place (log rotation, ``: > file``,
  a re-export) kills the reading process with SIGBUS, while a read just comes back short. After
  every read the file's size and modification time are checked against the index (one ``fstat``),
  so a file that shrinks, grows or is rewritten while a job reads it is one :class:`InputError`
  ("changed while it was being read"), never a crash and never a row of the new content read
  under the old index. A row longer than
  :data:`~seqpack.core.limits.MAX_ROW_BYTES` is refused from the index, before it is read. The
  object pickles without its open file and re-opens it lazily, so it can be handed to DataLoader
  workers.

Every problem with the data is an :class:`~seqpack.core.errors.InputError` naming the file,
the physical line and the row index: malformed JSON (with the column of the JSON error), a line
that holds something other than a JSON object, bytes that are not UTF-8 (with their byte offset
in the file), a lone surrogate escape, nesting deeper than
:data:`~seqpack.data.jsontext.MAX_JSON_DEPTH`, an integer beyond Python's digit limit (these
three name the field), and a file without any row.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from seqpack.io import atomic, confine, reading
from seqpack.data import jsontext
from seqpack.data.interrupt import checkpoint
from seqpack.data.location import RowLocation
from seqpack.core.arguments import positive_int
from seqpack.core.errors import InputError, SeqpackError
from seqpack.core.limits import MAX_ROW_BYTES

log = logging.getLogger(__name__)

INDEX_FORMAT = "seqpack-jsonl-index/2"
#: A file modified this recently before its index was built has its whole content hashed (see above).
RACY_SECONDS = 2.0
CACHE_SUBDIR = ".seqpack-cache"
CACHE_SUFFIX = ".idx.npz"
EDGE_BYTES = 4096
DEFAULT_CHUNK_SIZE = 8 << 20
#: Bytes read at once around row boundaries when a cached index is checked against its file.
PROBE_WINDOW = 1 << 16
CHANGED_WHILE_READING = "file changed while it was being read (it was truncated, rewritten or appended to)"
CHANGED_FIX = "retry once the file is stable (copy it aside first if another program keeps writing it)"

_BOM = b"\xef\xbb\xbf"
_WS = np.zeros(256, dtype=bool)
_WS[[0x09, 0x0A, 0x0D, 0x20]] = True  # JSON whitespace


@dataclass(frozen=True)
class FileFingerprint:
    """Cheap identity of a file's content: size, modification time and a hash of its two ends."""

    size: int
    mtime_ns: int
    edge_hash: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"size": self.size, "mtime_ns": self.mtime_ns, "edge_hash": self.edge_hash}


def file_fingerprint(path: str | os.PathLike[str]) -> FileFingerprint:
    """Fingerprint ``path`` from its stat and a blake2b hash of its first and last 4 KiB."""
    with reading.open_regular(path, what="JSONL file") as fh:
        return _fingerprint_of(fh.fileno())


def _fingerprint_of(fd: int) -> FileFingerprint:
    """:func:`file_fingerprint` of an open file (positioned reads: the file offset is left alone)."""
    st = os.fstat(fd)
    h = hashlib.blake2b(digest_size=16)
    h.update(str(st.st_size).encode())
    h.update(os.pread(fd, EDGE_BYTES, 0))
    if st.st_size > EDGE_BYTES:
        h.update(os.pread(fd, EDGE_BYTES, max(EDGE_BYTES, st.st_size - EDGE_BYTES)))
    return FileFingerprint(size=int(st.st_size), mtime_ns=int(st.st_mtime_ns), edge_hash=h.hexdigest())


@dataclass(frozen=True)
class LineIndex:
    """Where each row of a JSONL file lies: byte ``starts``/``ends`` and 1-based physical ``lines``."""

    starts: np.ndarray
    ends: np.ndarray
    lines: np.ndarray
    fingerprint: FileFingerprint

    def __len__(self) -> int:
        return int(self.starts.shape[0])

    def to_dict(self) -> dict[str, Any]:
        """Summary (not the arrays): row count, last line number and the file fingerprint."""
        return {
            "rows": len(self),
            "last_line": int(self.lines[-1]) if len(self) else 0,
            "fingerprint": self.fingerprint.to_dict(),
        }


class _Picked:
    """Values of an index array at some rows only, read by row number like the whole array (an int or an
    array of rows; a row outside the picked ones is an IndexError)."""

    def __init__(self, rows: np.ndarray, values: np.ndarray) -> None:
        self._rows, self._values = rows, values

    def __getitem__(self, key: Any) -> Any:
        where = np.searchsorted(self._rows, key)
        found = np.minimum(where, self._rows.shape[0] - 1)
        if np.any(self._rows[found] != key):
            raise IndexError(f"row {key} is not in this window of the line index")
        return self._values[found]


@dataclass(frozen=True)
class IndexWindow:
    """The line index of a file at some of its rows (what one tokenization job reads), with the whole file's
    row count and fingerprint: a worker reads those rows without loading, or verifying again, the index of
    every row (which grows with the file)."""

    starts: _Picked
    ends: _Picked
    lines: _Picked
    fingerprint: FileFingerprint
    rows: int

    def __len__(self) -> int:
        return self.rows


def _has_content(chunk: np.ndarray) -> bool:
    """True when ``chunk`` holds at least one byte that is not JSON whitespace."""
    return bool(chunk.size) and not bool(_WS[chunk].all())


def build_line_index(path: str | os.PathLike[str], *, chunk_size: int = DEFAULT_CHUNK_SIZE) -> LineIndex:
    """Scan ``path`` once, in ``chunk_size`` pieces, and return the offsets of its non-blank lines.

    Raises :class:`InputError` if the file changes while it is being scanned.
    """
    positive_int("chunk_size", chunk_size)
    before = file_fingerprint(path)
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    lines: list[np.ndarray] = []
    line_start = 0  # absolute offset where the current (unfinished) line starts
    line_has_content = False
    newlines = 0  # newlines seen so far; the current line's number is newlines + 1
    pos = 0  # absolute offset of the current chunk
    buf = bytearray(chunk_size)
    with reading.open_regular(path, what="JSONL file") as fh:
        while True:
            n = fh.readinto(buf)
            if not n:
                break
            a = np.frombuffer(buf, dtype=np.uint8, count=n)
            nl = np.flatnonzero(a == 0x0A)
            if nl.size == 0:
                line_has_content = line_has_content or _has_content(a)
                pos += n
                continue
            # segments in this chunk: [0, nl0], [nl0+1, nl1], ...; segment 0 continues the open line
            seg_starts = np.empty(nl.size, dtype=np.int64)
            seg_starts[0] = 0
            seg_starts[1:] = nl[:-1] + 1
            content = ~_WS[a[seg_starts]]  # first byte is not whitespace -> surely a row
            content[0] = line_has_content or _has_content(a[: nl[0]])
            for j in np.flatnonzero(~content[1:]) + 1:  # rare: lines that start with whitespace
                content[j] = _has_content(a[seg_starts[j] : nl[j]])
            abs_starts = seg_starts + pos
            abs_starts[0] = line_start
            keep = np.flatnonzero(content)
            starts.append(abs_starts[keep])
            ends.append(nl[keep].astype(np.int64) + pos)
            lines.append(keep.astype(np.int64) + newlines + 1)
            newlines += int(nl.size)
            line_start = pos + int(nl[-1]) + 1
            tail = a[int(nl[-1]) + 1 :]
            line_has_content = bool(tail.size) and (not _WS[tail[0]] or _has_content(tail))
            pos += n
    if line_has_content:
        starts.append(np.array([line_start], dtype=np.int64))
        ends.append(np.array([pos], dtype=np.int64))
        lines.append(np.array([newlines + 1], dtype=np.int64))
    after = file_fingerprint(path)
    if after != before or pos != before.size:
        raise InputError("file changed while it was being indexed; retry once it is stable", file=str(path))

    def cat(parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(parts).astype(np.int64, copy=False) if parts else np.zeros(0, np.int64)

    return LineIndex(starts=cat(starts), ends=cat(ends), lines=cat(lines), fingerprint=before)


def _user_cache_dir() -> Path:
    env = os.environ.get("SEQPACK_CACHE_DIR")
    if env:
        return Path(env) / "jsonl-index"
    return Path.home() / ".cache" / "seqpack" / "jsonl-index"


def cache_paths(path: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None) -> list[Path]:
    """Where the index of ``path`` may be cached, in the order they are tried.

    With ``cache_dir``: only that folder. Otherwise ``<dir>/.seqpack-cache/`` next to the file,
    then the user cache folder (``$SEQPACK_CACHE_DIR/jsonl-index`` or ``~/.cache/seqpack/jsonl-index``).
    """
    p = Path(path).resolve()
    keyed = f"{p.name}-{hashlib.blake2b(str(p).encode(), digest_size=8).hexdigest()}{CACHE_SUFFIX}"
    if cache_dir is not None:
        return [Path(cache_dir) / keyed]
    return [p.parent / CACHE_SUBDIR / f"{p.name}{CACHE_SUFFIX}", _user_cache_dir() / keyed]


def _identity(path: str | os.PathLike[str]) -> dict[str, int]:
    """Which file ``path`` is and its state: device, inode, size, mtime and ctime (ns)."""
    st = os.stat(path)
    return {"dev": int(st.st_dev), "ino": int(st.st_ino), "size": int(st.st_size),
            "mtime_ns": int(st.st_mtime_ns), "ctime_ns": int(st.st_ctime_ns)}


def _racy(identity: dict[str, int], built_ns: int) -> bool:
    """True when the file changed so shortly before ``built_ns`` that a later edit could keep its timestamps."""
    return built_ns - max(identity["mtime_ns"], identity["ctime_ns"]) < RACY_SECONDS * 1e9


def _content_hash(path: str | os.PathLike[str]) -> str:
    h = hashlib.blake2b(digest_size=16)
    with reading.open_regular(path, what="JSONL file") as fh:
        while block := fh.read(DEFAULT_CHUNK_SIZE):
            h.update(block)
    return h.hexdigest()


def _save_index(index: LineIndex, target: Path, path: Path, identity: dict[str, int]) -> None:
    """Write ``index`` to ``target`` atomically (temporary file in the same folder, then rename)."""
    built = time.time_ns()
    meta: dict[str, Any] = {"format": INDEX_FORMAT, "fingerprint": index.fingerprint.to_dict(), "identity": identity,
                            "built_ns": built}
    if _racy(identity, built):
        meta["content"] = _content_hash(path)
    with atomic.atomic_output(target, what="the line index cache") as fh:
        np.savez(fh, starts=index.starts, ends=index.ends, lines=index.lines, meta=np.array(json.dumps(meta)))


def _load_index(target: Path, path: Path, expected: FileFingerprint, identity: dict[str, int]) -> LineIndex | None:
    """Read a cached index; ``None`` when absent, unreadable, of another format, or stale (module docstring)."""
    if not reading.is_regular_file(target):
        return None
    try:
        with reading.open_regular(target, what="the line index cache") as fh, np.load(fh, allow_pickle=False) as npz:
            meta = json.loads(str(npz["meta"]))
            if meta.get("format") != INDEX_FORMAT:
                return None
            fp = FileFingerprint(**meta["fingerprint"])
            if fp != expected or meta.get("identity") != identity:
                log.info("index cache %s is stale (file changed); rebuilding", target)
                return None
            if "content" in meta and meta["content"] != _content_hash(path):
                log.info("index cache %s is stale (content changed within one timestamp tick); rebuilding", target)
                return None
            index = LineIndex(
                starts=npz["starts"].astype(np.int64, copy=False),
                ends=npz["ends"].astype(np.int64, copy=False),
                lines=npz["lines"].astype(np.int64, copy=False),
                fingerprint=fp,
            )
    except (OSError, ValueError, KeyError, TypeError, SeqpackError) as exc:
        log.warning("ignoring unreadable index cache %s (%s); rebuilding", target, exc)
        return None
    if "content" in meta and not _racy(identity, time.time_ns()):  # settled now: later reuses skip the full hash
        try:
            _save_index(index, target, path, identity)
        except (OSError, SeqpackError):
            pass
    return index


def _whitespace_only(data: np.ndarray) -> bool:
    return bool(_WS[data].all()) if data.size else True


def index_matches(index: LineIndex, path: str | os.PathLike[str]) -> bool:
    """True when ``index`` describes ``path``'s rows (module docstring: order, newlines, gaps and line numbers).

    Reads the bytes around every row boundary (in :data:`PROBE_WINDOW` pieces), not the rows themselves.
    """
    n = len(index)
    starts, ends, lines = index.starts, index.ends, index.lines
    if not (starts.shape == ends.shape == lines.shape) or n == 0:
        return False
    with reading.open_regular(path, what="JSONL file") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0 or size != index.fingerprint.size:
            return False
        return _boundaries_ok(_Probe(fh.fileno(), size), starts, ends, lines, size)


class _Probe:
    """Bytes of an open file at given offsets or in given ranges, read with ``os.pread`` (no mapping)."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd, self.size = fd, size

    def at(self, positions: np.ndarray) -> np.ndarray | None:
        """The byte at each of ``positions`` (all inside the file), or None when the file came up short."""
        out = np.empty(positions.size, dtype=np.uint8)
        if not positions.size:
            return out
        order = np.argsort(positions, kind="stable")
        ordered = positions[order]
        windows = ordered // PROBE_WINDOW
        cuts = np.flatnonzero(np.diff(windows)) + 1
        for lo, hi in zip(np.concatenate([[0], cuts]).tolist(), np.concatenate([cuts, [ordered.size]]).tolist()):
            base = int(windows[lo]) * PROBE_WINDOW
            want = min(PROBE_WINDOW, self.size - base)
            block = os.pread(self.fd, want, base)
            if len(block) != want:
                return None
            out[order[lo:hi]] = np.frombuffer(block, dtype=np.uint8)[ordered[lo:hi] - base]
        return out

    def whitespace(self, start: int, end: int) -> tuple[bool, int]:
        """Whether ``[start, end)`` holds only JSON whitespace, and how many newlines it holds."""
        newlines, pos = 0, start
        while pos < end:
            block = os.pread(self.fd, min(DEFAULT_CHUNK_SIZE, end - pos), pos)
            if not block:
                return False, newlines
            a = np.frombuffer(block, dtype=np.uint8)
            if not _whitespace_only(a):
                return False, newlines
            newlines += int(np.count_nonzero(a == 0x0A))
            pos += len(block)
        return True, newlines


def _boundaries_ok(probe: _Probe, starts: np.ndarray, ends: np.ndarray, lines: np.ndarray, size: int) -> bool:
    if starts[0] < 0 or ends[-1] > size or np.any(ends <= starts) or np.any(starts[1:] <= ends[:-1]):
        return False
    if np.any(np.diff(lines) <= 0) or lines[0] < 1:
        return False
    inner = starts[starts > 0]
    newline_at = np.concatenate([ends[:-1], ends[-1:] if ends[-1] != size else ends[:0], inner - 1])
    found = probe.at(newline_at)
    if found is None or np.any(found != 0x0A):
        return False
    blank, newlines = probe.whitespace(0, int(starts[0]))
    if not blank or int(lines[0]) != 1 + newlines:
        return False
    if not probe.whitespace(int(ends[-1]), size)[0]:
        return False
    gaps = starts[1:] - ends[:-1]  # 1: just the newline ending the row before
    steps = np.diff(lines)
    if np.any(steps[gaps == 1] != 1):
        return False
    for k in np.flatnonzero(gaps > 1).tolist():  # blank lines between rows: rare
        blank, newlines = probe.whitespace(int(ends[k]), int(starts[k + 1]))
        if not blank or int(steps[k]) != newlines:
            return False
    return True


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return "number"


def _parse_row(data: bytes, start: int, loc: dict[str, Any]) -> dict[str, Any]:
    """The JSON object of one row's bytes (``start``: their offset in the file, for the UTF-8 error)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"invalid UTF-8 byte 0x{data[exc.start]:02x} at byte offset {start + exc.start} of the file "
            f"(byte {exc.start + 1} of the line)",
            fix="re-encode the file as UTF-8",
            **loc,
        ) from None
    try:
        value = jsontext.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed JSON at column {exc.colno}: {exc.msg}", **loc) from None
    except jsontext.JsonProblem as exc:
        raise InputError(exc.message, field=exc.field, **loc) from None
    if not isinstance(value, dict):
        raise InputError(f"expected one JSON object per line, got a JSON {_json_type(value)}", **loc)
    return value


class JsonlFile:
    """Lazily read rows of one JSONL file by index (see the module docstring for blank lines).

    ``index_source`` tells where the index came from: ``"cache"`` (reused), ``"built"`` (built now
    and cached), or ``"memory"`` (built now, caching disabled or impossible); ``cache_path`` is
    the cache file used, if any.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        cache_dir: str | os.PathLike[str] | None = None,
        use_cache: bool = True,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> None:
        self.path = reading.regular_file(path, what="JSONL file")
        self.cache_path: Path | None = None
        self.index_source = "memory"
        self._index = self._obtain_index(cache_dir, use_cache, chunk_size)
        if len(self._index) == 0:
            raise InputError("file has no rows (it is empty or only blank lines)", file=str(self.path))
        self._fh: BinaryIO | None = None

    # ----------------------------------------------------------------- index
    def _obtain_index(self, cache_dir: Any, use_cache: bool, chunk_size: int) -> LineIndex:
        if not use_cache:
            return build_line_index(self.path, chunk_size=chunk_size)
        identity = _identity(self.path)
        fp = file_fingerprint(self.path)
        targets = cache_paths(self.path, cache_dir)
        for target in targets:
            try:
                confine.confine(target, what="the line index cache")
            except SeqpackError:
                continue  # outside the allowed roots: neither read nor written
            found = _load_index(target, self.path, fp, identity)
            if found is None:
                continue
            if not index_matches(found, self.path):
                log.warning("ignoring the line index cache %s: it does not match %s (damaged or planted); rebuilding",
                            target, self.path)
                continue
            self.cache_path, self.index_source = target, "cache"
            return found
        index = build_line_index(self.path, chunk_size=chunk_size)
        if _identity(self.path) != identity:
            raise InputError("file changed while it was being indexed; retry once it is stable", file=str(self.path))
        for target in targets:
            try:
                _save_index(index, target, self.path, identity)
            except (OSError, SeqpackError) as exc:
                log.info("cannot write index cache %s (%s); trying the next place", target, exc)
                continue
            self.cache_path, self.index_source = target, "built"
            return index
        log.warning("could not cache the line index of %s anywhere; keeping it in memory", self.path)
        return index

    @property
    def index(self) -> LineIndex:
        """The line index (offsets, physical line numbers, fingerprint)."""
        return self._index

    def window(self, rows: np.ndarray) -> JsonlFile:
        """A reader of ``rows`` only (any order, repeats allowed) that carries just their part of the line index:
        what is sent to a worker. It reads and checks like this one (the file's fingerprint, edge hash included,
        when it opens the file; size and modification time after every read) and names rows and lines the same."""
        picked = np.unique(np.asarray(rows, dtype=np.int64))
        if picked.size and (picked[0] < 0 or picked[-1] >= len(self._index)):
            raise IndexError(f"rows out of range for {self.path} with {len(self._index)} rows")
        index = self._index
        part = IndexWindow(_Picked(picked, index.starts[picked]), _Picked(picked, index.ends[picked]),
                           _Picked(picked, index.lines[picked]), index.fingerprint, len(index))
        reader = object.__new__(JsonlFile)
        reader.path, reader.cache_path, reader.index_source = self.path, None, "window"
        reader._index, reader._fh = part, None  # noqa: SLF001 - a reader of this class
        return reader

    # ----------------------------------------------------------------- access
    def __len__(self) -> int:
        return len(self._index)

    def _checked(self, i: int) -> int:
        n = len(self._index)
        if not isinstance(i, (int, np.integer)) or isinstance(i, bool):
            raise TypeError(f"row index must be an integer, got {type(i).__name__}")
        j = int(i) + n if i < 0 else int(i)
        if not 0 <= j < n:
            raise IndexError(f"row {i} out of range for {self.path} with {n} rows")
        return j

    def _file(self) -> BinaryIO:
        """The open file (opened on first use: a fresh object, or a pickled copy in a worker)."""
        if self._fh is None:
            fh = reading.open_regular(self.path, what="JSONL file")
            try:
                if _fingerprint_of(fh.fileno()) != self._index.fingerprint:
                    # indexed, then changed before this reader opened it: for a job reading the file, the same
                    # change as one seen between two reads
                    raise InputError(CHANGED_WHILE_READING, file=str(self.path),
                                     fix=f"{CHANGED_FIX}; a reader opened again re-indexes the file")
            except BaseException:
                fh.close()
                raise
            self._fh = fh
        return self._fh

    def line_number(self, i: int) -> int:
        """1-based physical line number of row ``i``."""
        return int(self._index.lines[self._checked(i)])

    def location(self, i: int) -> RowLocation:
        """File, physical line and row index of row ``i`` (for error messages)."""
        j = self._checked(i)
        return RowLocation(file=str(self.path), line=int(self._index.lines[j]), row=j)

    def _read(self, j: int) -> tuple[bytes, int]:
        """Row ``j``'s bytes (BOM and CR removed) and the file offset of their first byte.

        One ``os.pread``; a row over :data:`~seqpack.core.limits.MAX_ROW_BYTES` is refused before it is read,
        and a read that comes back short, or a file whose size or modification time moved since it was
        indexed, is "changed while it was being read" (module docstring).
        """
        start, end = int(self._index.starts[j]), int(self._index.ends[j])
        loc = {"file": str(self.path), "line": int(self._index.lines[j]), "row": j}
        if end - start > MAX_ROW_BYTES:
            raise InputError(
                f"the row is {end - start} bytes, over the limit of {MAX_ROW_BYTES} bytes per row; it is refused "
                "unread", fix="split or shorten the row (limits live in reference_impl/seqpack/core/limits.py)", **loc)
        data = os.pread(self._file().fileno(), end - start, start)
        if len(data) != end - start:
            raise InputError(CHANGED_WHILE_READING, fix=CHANGED_FIX, **loc)
        self._unchanged(loc)  # after the read: what was read is what the index describes
        if start == 0 and data[:3] == _BOM:
            data, start = data[3:], 3
        if data[-1:] == b"\r":
            data = data[:-1]
        if b"\n" in data:
            raise InputError(
                "the line index does not match the file (a row spans a newline); remove the .seqpack-cache index "
                "of this file", **loc,
            )
        return data, start

    def _unchanged(self, loc: dict[str, Any]) -> None:
        """Raise "changed while it was being read" when the open file's size or modification time moved."""
        st = os.fstat(self._file().fileno())
        fp = self._index.fingerprint
        if st.st_size != fp.size or st.st_mtime_ns != fp.mtime_ns:
            raise InputError(CHANGED_WHILE_READING, fix=CHANGED_FIX, **loc)

    def raw(self, i: int) -> bytes:
        """The bytes of row ``i`` without its line terminator (only that line is read)."""
        return self._read(self._checked(i))[0]

    def row(self, i: int) -> dict[str, Any]:
        """Parse row ``i`` as a JSON object; :class:`InputError` (file, line, row) when it is not one."""
        checkpoint()  # a cancelled MCP job stops here
        j = self._checked(i)
        data, start = self._read(j)
        loc = {"file": str(self.path), "line": int(self._index.lines[j]), "row": j}
        try:
            return _parse_row(data, start, loc)
        except MemoryError:
            raise InputError(f"ran out of memory reading this row ({len(data)} bytes)",
                             fix="free memory, or split or shorten the row", **loc) from None

    __getitem__ = row

    #: What :func:`seqpack.data.rows.input_kind` calls this input.
    kind = "jsonl"

    def rows(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """Rows ``indices`` (any order) parsed, in that order: exactly what :meth:`row` gives for each.

        With ``orjson`` installed (a core dependency) a row is parsed by it when nothing in its bytes
        could make the two parsers disagree (a newline, deep nesting, an integer of 19 or more
        digits); a row it refuses, or that is not an object, goes through :meth:`row`, so every error
        is the same one-line error.
        """
        loads = jsontext.fast_loads()
        if loads is None:
            return [self.row(i) for i in indices]
        checkpoint()  # a cancelled MCP job stops here
        n = len(self._index)
        js = np.asarray(indices, dtype=np.int64).reshape(-1)
        if js.size and (js.min() < -n or js.max() >= n):
            return [self.row(i) for i in indices]  # the first bad index raises as row() does
        js = np.where(js < 0, js + n, js)
        starts, ends = self._index.starts[js], self._index.ends[js]
        if js.size and int((ends - starts).max()) > MAX_ROW_BYTES:
            return [self.row(i) for i in indices]  # the first row over the limit is refused unread, as row() does
        fd = self._file().fileno()
        lo, hi = (int(starts.min()), int(ends.max())) if js.size else (0, 0)
        if hi - lo > 2 * int((ends - starts).sum()) + (1 << 20):  # scattered rows: read and checked one by one
            chunks = [os.pread(fd, e - s, s) for s, e in zip(starts.tolist(), ends.tolist())]
            if any(len(c) != e - s for c, s, e in zip(chunks, starts.tolist(), ends.tolist())):
                return [self.row(i) for i in indices]  # came up short: row() names the change
            risky = np.concatenate([jsontext.needs_stdlib(c, [0], [len(c)]) for c in chunks]
                                   ) if js.size else np.zeros(0, bool)
        else:  # a job's rows lie together: one positioned read and one pass over the bytes they span
            span = os.pread(fd, hi - lo, lo)
            if len(span) != hi - lo:
                return [self.row(i) for i in indices]  # came up short: row() names the change
            chunks = [span[s - lo:e - lo] for s, e in zip(starts.tolist(), ends.tolist())]
            risky = jsontext.needs_stdlib(span, starts - lo, ends - lo)
        if js.size:  # after the reads: what was read is what the index describes
            first = int(js[0])
            self._unchanged({"file": str(self.path), "line": int(self._index.lines[first]), "row": first})
        out = []
        slow = self.row
        for j, start, data, odd in zip(js.tolist(), starts.tolist(), chunks, risky.tolist()):
            if odd or start == 0 and data[:3] == _BOM or data[-1:] == b"\r":
                out.append(slow(j))
                continue
            try:
                value = loads(data)
            except ValueError:
                value = None
            out.append(value if type(value) is dict else slow(j))
        return out

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for j in range(len(self)):
            yield self.row(j)

    def close(self) -> None:
        """Close the file (it is re-opened on the next read)."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def identity(self) -> dict[str, Any]:
        """The file's fingerprint (size, mtime, edge hash) as recorded in its index."""
        return self._index.fingerprint.to_dict()

    release = close  # what a batch of reads left resident goes (RowSource.release)

    def __enter__(self) -> JsonlFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- pickling
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_fh"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return f"JsonlFile({str(self.path)!r}, rows={len(self)}, index={self.index_source})"
