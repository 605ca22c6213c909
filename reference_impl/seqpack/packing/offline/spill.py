"""Spill files: tokenized samples on disk while a split is packed, so memory grows with samples only.

Every process that tokenizes (a worker, or a rank of a ``torchrun`` job) appends the samples it
produces to its own spill file, ``<name>.spill``: one record per sample, its unshifted token ids
in the narrowest dtype the vocabulary allows (:func:`id_dtype`, little-endian) followed by its
unshifted loss mask (``uint8``). A sample is then located by three numbers kept in memory, the
index of its file, the byte offset of its record and its length in tokens (:class:`SampleIndex`);
the bin packing only needs the lengths.

Filling packs reads records back with :meth:`SpillReader.read`, one ``pread`` per sample. The files
are never memory-mapped: the samples of a row group lie scattered over the whole spill, and the
kernel maps the neighbours of every faulted page too, so a mapped gather would pull most of the
spill into the process's resident set (measured: a 300 MB spill, 7,000 scattered samples, 286 MB
of RSS, with or without ``MADV_RANDOM``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from seqpack.data.ranges import alternating_runs
from seqpack.core.errors import PackingError

MASK_DTYPE = np.dtype(np.uint8)
SUFFIX = ".spill"


def id_dtype(vocab_size: int) -> np.dtype:
    """The narrowest dtype that holds every id below ``vocab_size``: uint16, int32, then uint32 (little-endian)."""
    if vocab_size <= 1 << 16:
        return np.dtype("<u2")
    if vocab_size <= 1 << 31:
        return np.dtype("<i4")
    if vocab_size <= 1 << 32:
        return np.dtype("<u4")
    raise PackingError(f"vocabulary of {vocab_size} ids does not fit 32 bits")


def record_sizes(lengths: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Bytes of each sample's record: its ids and its mask."""
    return np.asarray(lengths, dtype=np.int64) * (np.dtype(dtype).itemsize + MASK_DTYPE.itemsize)


def _id_bytes(lengths: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Over the concatenated records: True on id bytes, False on mask bytes."""
    n = np.asarray(lengths, dtype=np.int64)
    return alternating_runs(n * np.dtype(dtype).itemsize, n)


class SpillWriter:
    """Appends samples to one process's spill file."""

    def __init__(self, directory: str | os.PathLike[str], name: str, dtype: np.dtype) -> None:
        self.name = name
        self.dtype = np.dtype(dtype)
        self._limit = np.iinfo(self.dtype).max
        self._fh = open(Path(directory) / f"{name}{SUFFIX}", "ab")
        self.size = self._fh.tell()

    def append(self, ids: np.ndarray, mask: np.ndarray, lengths: np.ndarray) -> int:
        """Write a batch (flat ids and masks, samples of ``lengths`` tokens); returns the byte offset
        of its first record (the others follow, :func:`record_sizes`). Data is flushed to the OS."""
        lengths = np.asarray(lengths, dtype=np.int64)
        if ids.shape != mask.shape or int(lengths.sum()) != ids.size:
            raise PackingError(f"spill: {ids.size} ids, {mask.size} mask entries, {int(lengths.sum())} tokens")
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) > self._limit):
            bad = int(ids.max()) if int(ids.max()) > self._limit else int(ids.min())
            raise PackingError(f"token id {bad} is outside the tokenizer's vocabulary (spill dtype {self.dtype})")
        out = np.empty(int(record_sizes(lengths, self.dtype).sum()), dtype=np.uint8)
        is_id = _id_bytes(lengths, self.dtype)
        out[is_id] = np.ascontiguousarray(ids, dtype=self.dtype).view(np.uint8)
        out[~is_id] = np.asarray(mask, dtype=MASK_DTYPE)
        start = self.size
        self._fh.write(out.tobytes())
        self._fh.flush()
        self.size += out.size
        return start

    def close(self) -> None:
        """Close the file (safe to call twice)."""
        self._fh.close()


@dataclass(frozen=True)
class SampleIndex:
    """Where the samples of a split lie: per sample, spill file number, record byte offset and length."""

    names: tuple[str, ...]
    file: np.ndarray  # int32
    offset: np.ndarray  # int64, byte offset of the record
    length: np.ndarray  # int32, stored (unshifted) tokens

    def __len__(self) -> int:
        return int(self.length.shape[0])

    def take(self, samples: np.ndarray) -> SampleIndex:
        """The index restricted to ``samples`` (in that order)."""
        return SampleIndex(self.names, self.file[samples], self.offset[samples], self.length[samples])


class SpillReader:
    """Reads samples back from the spill files named in a :class:`SampleIndex`."""

    def __init__(self, directory: str | os.PathLike[str], dtype: np.dtype) -> None:
        self.directory = Path(directory)
        self.dtype = np.dtype(dtype)

    def read(self, index: SampleIndex) -> tuple[np.ndarray, np.ndarray]:
        """Ids (``int64``) and masks (``uint8``) of the indexed samples, concatenated in index order."""
        sizes = record_sizes(index.length, self.dtype)
        chunks: list[bytes] = [b""] * len(index)
        for f in np.unique(index.file).tolist():
            sel = np.flatnonzero(index.file == f)
            fd = os.open(self.directory / f"{index.names[f]}{SUFFIX}", os.O_RDONLY)
            try:
                for k, offset, size in zip(sel.tolist(), index.offset[sel].tolist(), sizes[sel].tolist()):
                    chunks[k] = os.pread(fd, size, offset)
            finally:
                os.close(fd)
        data = np.frombuffer(b"".join(chunks), dtype=np.uint8)
        if data.size != int(sizes.sum()):
            raise PackingError(f"spill files in {self.directory} are shorter than their index (truncated?)")
        is_id = _id_bytes(index.length, self.dtype)
        ids = data[is_id].view(self.dtype).astype(np.int64)
        return ids, data[~is_id]


__all__ = ["MASK_DTYPE", "SampleIndex", "SpillReader", "SpillWriter", "id_dtype", "record_sizes"]
