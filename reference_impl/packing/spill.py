"""Spill files: tokenized samples on disk while a split is packed, so memory grows with samples only.

Every process that tokenizes (a worker, or a rank of a ``torchrun`` job) appends the samples it
produces to its own pair of files in a spill directory: ``<name>.ids`` (the unshifted token ids in
the narrowest dtype the vocabulary allows, :func:`id_dtype`) and ``<name>.mask`` (the unshifted
loss mask, ``uint8``). A sample is then located by three numbers kept in memory, the index of its
file, its element offset in that file and its length (:class:`SampleIndex`); the bin packing only
needs the lengths.

Filling packs reads samples back with :meth:`SpillReader.gather_into` (one slice copy per
sample): the files are memory-mapped for one gather and unmapped right after, so the pages of a
spill never accumulate in a process's resident set (file-backed pages count there while mapped).
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
import numpy as np

from reference_impl.data.ranges import offsets_of
from reference_impl.errors import PackingError

MASK_DTYPE = np.dtype(np.uint8)


def id_dtype(vocab_size: int) -> np.dtype:
    """The narrowest dtype that holds every id below ``vocab_size``: uint16, int32, then uint32."""
    if vocab_size <= 1 << 16:
        return np.dtype(np.uint16)
    if vocab_size <= 1 << 31:
        return np.dtype(np.int32)
    if vocab_size <= 1 << 32:
        return np.dtype(np.uint32)
    raise PackingError(f"vocabulary of {vocab_size} ids does not fit 32 bits")


def _paths(directory: Path, name: str) -> tuple[Path, Path]:
    return directory / f"{name}.ids", directory / f"{name}.mask"


class SpillWriter:
    """Appends samples (flat ids and masks of a batch) to one process's pair of spill files."""

    def __init__(self, directory: str | os.PathLike[str], name: str, dtype: np.dtype) -> None:
        self.name = name
        self.dtype = np.dtype(dtype)
        self._limit = np.iinfo(self.dtype).max
        ids_path, mask_path = _paths(Path(directory), name)
        self._ids = open(ids_path, "ab")
        self._mask = open(mask_path, "ab")
        self.size = self._ids.tell() // self.dtype.itemsize

    def append(self, ids: np.ndarray, mask: np.ndarray) -> int:
        """Write one batch; returns the element offset where it starts. Data is flushed to the OS."""
        if ids.shape != mask.shape:
            raise PackingError(f"spill: {ids.size} ids but {mask.size} mask entries")
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) > self._limit):
            raise PackingError(
                f"token id {int(ids.max()) if int(ids.max()) > self._limit else int(ids.min())} is outside "
                f"the tokenizer's vocabulary (spill dtype {self.dtype})"
            )
        start = self.size
        self._ids.write(np.ascontiguousarray(ids, dtype=self.dtype).tobytes())
        self._mask.write(np.ascontiguousarray(mask, dtype=MASK_DTYPE).tobytes())
        self._ids.flush()
        self._mask.flush()
        self.size += int(ids.size)
        return start

    def close(self) -> None:
        """Close both files (safe to call twice)."""
        self._ids.close()
        self._mask.close()


@dataclass(frozen=True)
class SampleIndex:
    """Where the samples of a split lie: per sample, spill file number, element offset and length."""

    names: tuple[str, ...]
    file: np.ndarray  # int32
    offset: np.ndarray  # int64
    length: np.ndarray  # int32, stored (unshifted) tokens

    def __len__(self) -> int:
        return int(self.length.shape[0])

    def take(self, samples: np.ndarray) -> SampleIndex:
        """The index restricted to ``samples`` (in that order)."""
        return SampleIndex(self.names, self.file[samples], self.offset[samples], self.length[samples])

    @property
    def nbytes(self) -> int:
        """Memory held by the per-sample arrays."""
        return int(self.file.nbytes + self.offset.nbytes + self.length.nbytes)


class SpillReader:
    """Reads samples back from the spill files named in a :class:`SampleIndex`."""

    def __init__(self, directory: str | os.PathLike[str], dtype: np.dtype) -> None:
        self.directory = Path(directory)
        self.dtype = np.dtype(dtype)

    @staticmethod
    def _copy(path: Path, dtype: np.dtype, out: np.ndarray, pieces: Iterator[tuple[int, int, int]], skip: int) -> None:
        """For each ``(source offset, length, destination)``: ``out[dst:dst+n-skip] = file[src+skip:src+n]``.

        The file is memory-mapped for this call only, so its pages leave the resident set after it.
        """
        with open(path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size == 0:
                return
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            source = np.frombuffer(mm, dtype=dtype)
            for src, n, dst in pieces:
                out[dst : dst + n - skip] = source[src + skip : src + n]
            del source
        finally:
            mm.close()

    def gather_into(
        self, index: SampleIndex, ids: np.ndarray, ids_at: np.ndarray, mask: np.ndarray, mask_at: np.ndarray,
        *, mask_skip: int = 0,
    ) -> None:
        """Copy every indexed sample's ids to ``ids[ids_at[i]:...]`` and its mask, without its first
        ``mask_skip`` entries, to ``mask[mask_at[i]:...]`` (one slice copy per sample, no index arrays)."""
        for f in np.unique(index.file).tolist():
            sel = np.flatnonzero(index.file == f)
            starts, lengths = index.offset[sel].tolist(), index.length[sel].tolist()
            ids_path, mask_path = _paths(self.directory, index.names[f])
            self._copy(ids_path, self.dtype, ids, zip(starts, lengths, ids_at[sel].tolist()), 0)
            self._copy(mask_path, MASK_DTYPE, mask, zip(starts, lengths, mask_at[sel].tolist()), mask_skip)

    def gather(self, index: SampleIndex) -> tuple[np.ndarray, np.ndarray]:
        """Ids (``int64``) and masks (``uint8``) of the indexed samples, concatenated in index order."""
        starts = offsets_of(index.length)
        ids = np.empty(int(starts[-1]), dtype=np.int64)
        mask = np.empty(int(starts[-1]), dtype=MASK_DTYPE)
        self.gather_into(index, ids, starts[:-1], mask, starts[:-1])
        return ids, mask


__all__ = ["MASK_DTYPE", "SampleIndex", "SpillReader", "SpillWriter", "id_dtype"]
