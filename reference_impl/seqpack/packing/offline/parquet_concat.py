"""Join Parquet files written separately into one file, byte for byte, without decoding any page.

A Parquet file is ``PAR1``, the column chunks of its row groups, a footer (``FileMetaData`` in the
Thrift compact protocol), the footer's length and ``PAR1`` again. Every position in the footer is
an absolute file offset. Joining *parts* that share one schema therefore needs no re-encoding:
copy each part's body (everything between the leading magic and its footer) one after the other,
and write one footer whose row groups are those of the parts, with every offset shifted by where
the part's body now starts, ``num_rows`` summed and the row-group ordinals renumbered.

This is what lets several processes (worker processes, or ranks of a ``torchrun`` job) encode the
row groups of one packed file in parallel: the joined file has exactly the bytes a single writer
produces for the same rows, so the output never depends on how many processes wrote it.

The codec below reads and writes the Thrift compact protocol generically (a struct is a list of
``[field id, type, value]`` in wire order), so unknown or future footer fields survive a round trip
unchanged; only the fields named in :data:`_OFFSET_FIELDS` are touched.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

from seqpack.core.errors import ArtifactError

MAGIC = b"PAR1"

# Thrift compact protocol type codes.
_BOOL_TRUE, _BOOL_FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)

# parquet.thrift field ids.
_FMD_NUM_ROWS, _FMD_ROW_GROUPS = 3, 4
_RG_COLUMNS, _RG_FILE_OFFSET, _RG_ORDINAL = 1, 5, 7
_CC_FILE_OFFSET, _CC_META, _CC_OFFSET_INDEX, _CC_COLUMN_INDEX = 2, 3, 4, 6
_CMD_DATA_PAGE, _CMD_INDEX_PAGE, _CMD_DICT_PAGE, _CMD_BLOOM = 9, 10, 11, 14
#: Absolute file offsets, per struct: RowGroup, ColumnChunk, ColumnMetaData.
_OFFSET_FIELDS = {
    "row_group": (_RG_FILE_OFFSET,),
    "column_chunk": (_CC_FILE_OFFSET, _CC_OFFSET_INDEX, _CC_COLUMN_INDEX),
    "column_meta": (_CMD_DATA_PAGE, _CMD_INDEX_PAGE, _CMD_DICT_PAGE, _CMD_BLOOM),
}


# ------------------------------------------------------------------------------------------------
# Thrift compact protocol
# ------------------------------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise ValueError("footer ends early")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError("footer ends early")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def value(self, ttype: int) -> Any:
        if ttype in (_BOOL_TRUE, _BOOL_FALSE):  # inside a list: one byte
            return self.byte()
        if ttype == _BYTE:
            return self.byte()
        if ttype in (_I16, _I32, _I64):
            return self.zigzag()
        if ttype == _DOUBLE:
            return self.take(8)
        if ttype == _BINARY:
            return self.take(self.varint())
        if ttype in (_LIST, _SET):
            head = self.byte()
            size, etype = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            return (etype, [self.value(etype) for _ in range(size)])
        if ttype == _MAP:
            size = self.varint()
            if size == 0:
                return (0, 0, [])
            kinds = self.byte()
            ktype, vtype = kinds >> 4, kinds & 0x0F
            return (ktype, vtype, [(self.value(ktype), self.value(vtype)) for _ in range(size)])
        if ttype == _STRUCT:
            return self.struct()
        raise ValueError(f"unknown Thrift compact type {ttype}")

    def struct(self) -> list[list[Any]]:
        fields: list[list[Any]] = []
        last = 0
        while True:
            head = self.byte()
            if head == 0:
                return fields
            delta, ttype = head >> 4, head & 0x0F
            fid = last + delta if delta else self.zigzag()
            if ttype in (_BOOL_TRUE, _BOOL_FALSE):
                fields.append([fid, ttype, ttype == _BOOL_TRUE])
            else:
                fields.append([fid, ttype, self.value(ttype)])
            last = fid


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def varint(self, n: int) -> None:
        while True:
            b = n & 0x7F
            n >>= 7
            if n:
                self.out.append(b | 0x80)
            else:
                self.out.append(b)
                return

    def zigzag(self, n: int) -> None:
        self.varint((n << 1) ^ (n >> 63))

    def value(self, ttype: int, value: Any) -> None:
        if ttype in (_BOOL_TRUE, _BOOL_FALSE, _BYTE):
            self.out.append(value)
        elif ttype in (_I16, _I32, _I64):
            self.zigzag(value)
        elif ttype == _DOUBLE:
            self.out += value
        elif ttype == _BINARY:
            self.varint(len(value))
            self.out += value
        elif ttype in (_LIST, _SET):
            etype, items = value
            if len(items) < 15:
                self.out.append((len(items) << 4) | etype)
            else:
                self.out.append(0xF0 | etype)
                self.varint(len(items))
            for item in items:
                self.value(etype, item)
        elif ttype == _MAP:
            ktype, vtype, items = value
            self.varint(len(items))
            if items:
                self.out.append((ktype << 4) | vtype)
                for k, v in items:
                    self.value(ktype, k)
                    self.value(vtype, v)
        elif ttype == _STRUCT:
            self.struct(value)
        else:
            raise ValueError(f"unknown Thrift compact type {ttype}")

    def struct(self, fields: list[list[Any]]) -> None:
        last = 0
        for fid, ttype, value in fields:
            wire = (_BOOL_TRUE if value else _BOOL_FALSE) if ttype in (_BOOL_TRUE, _BOOL_FALSE) else ttype
            delta = fid - last
            if 0 < delta <= 15:
                self.out.append((delta << 4) | wire)
            else:
                self.out.append(wire)
                self.zigzag(fid)
            if ttype not in (_BOOL_TRUE, _BOOL_FALSE):
                self.value(ttype, value)
            last = fid
        self.out.append(0)


def decode_struct(data: bytes) -> list[list[Any]]:
    """A Thrift compact struct -> ``[[field id, type, value], ...]`` (the whole input must be used)."""
    reader = _Reader(data)
    fields = reader.struct()
    if reader.pos != len(data):
        raise ValueError(f"{len(data) - reader.pos} trailing bytes after the struct")
    return fields


def encode_struct(fields: list[list[Any]]) -> bytes:
    """Inverse of :func:`decode_struct`."""
    writer = _Writer()
    writer.struct(fields)
    return bytes(writer.out)


def _field(fields: list[list[Any]], fid: int) -> list[Any] | None:
    return next((f for f in fields if f[0] == fid), None)


# ------------------------------------------------------------------------------------------------
# Parquet files
# ------------------------------------------------------------------------------------------------


def read_footer(path: str | os.PathLike[str]) -> tuple[int, list[list[Any]]]:
    """``(footer start offset, decoded FileMetaData)`` of a Parquet file."""
    p = Path(path)
    with open(p, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size < 12 or fh.read(4) != MAGIC:
            raise ArtifactError("not a Parquet file (no PAR1 magic at the start)", file=str(p))
        fh.seek(size - 8)
        tail = fh.read(8)
        if tail[4:] != MAGIC:
            raise ArtifactError("not a Parquet file (no PAR1 magic at the end)", file=str(p))
        length = struct.unpack("<I", tail[:4])[0]
        start = size - 8 - length
        if start < 4:
            raise ArtifactError("Parquet footer length is larger than the file", file=str(p))
        fh.seek(start)
        footer = fh.read(length)
    try:
        return start, decode_struct(footer)
    except ValueError as exc:
        raise ArtifactError(f"unreadable Parquet footer ({exc})", file=str(p)) from None


def _shift(fields: list[list[Any]], names: tuple[int, ...], delta: int) -> None:
    for f in fields:
        if f[0] in names and f[2]:  # 0 marks an unset offset (Arrow writes ColumnChunk.file_offset = 0)
            f[2] += delta


def _shift_row_group(row_group: list[list[Any]], delta: int, ordinal: int) -> None:
    _shift(row_group, _OFFSET_FIELDS["row_group"], delta)
    columns = _field(row_group, _RG_COLUMNS)
    for chunk in columns[2][1] if columns else []:
        _shift(chunk, _OFFSET_FIELDS["column_chunk"], delta)
        meta = _field(chunk, _CC_META)
        if meta is not None:
            _shift(meta[2], _OFFSET_FIELDS["column_meta"], delta)
    ordinal_field = _field(row_group, _RG_ORDINAL)
    if ordinal_field is not None:
        if ordinal >= 1 << 15:
            raise ArtifactError(f"a Parquet file holds at most {1 << 15} row groups with ordinals; this needs more")
        ordinal_field[2] = ordinal


def _without(fields: list[list[Any]], fids: tuple[int, ...]) -> list[list[Any]]:
    return [f for f in fields if f[0] not in fids]


def concat_parquet(parts: Sequence[str | os.PathLike[str]], out: BinaryIO) -> int:
    """Write the row groups of ``parts`` (in order) to ``out`` as one Parquet file; returns rows written.

    Every part must have the same schema and file-level metadata (as parts written by one writer
    configuration do); the first part's footer is the template of the joined one.
    """
    if not parts:
        raise ArtifactError("nothing to join: no Parquet parts")
    template: list[list[Any]] | None = None
    row_groups: list[list[list[Any]]] = []
    num_rows = 0
    out.write(MAGIC)
    position = len(MAGIC)
    for part in parts:
        start, meta = read_footer(part)
        groups = _field(meta, _FMD_ROW_GROUPS)
        rest = _without(meta, (_FMD_NUM_ROWS, _FMD_ROW_GROUPS))
        if template is None:
            template = meta
        elif rest != _without(template, (_FMD_NUM_ROWS, _FMD_ROW_GROUPS)):
            raise ArtifactError("Parquet parts differ in schema or file metadata; they cannot be joined",
                                file=str(part))
        delta = position - len(MAGIC)
        for group in groups[2][1] if groups else []:
            _shift_row_group(group, delta, len(row_groups))
            row_groups.append(group)
        rows = _field(meta, _FMD_NUM_ROWS)
        num_rows += rows[2] if rows else 0
        with open(part, "rb") as fh:
            fh.seek(len(MAGIC))
            remaining = start - len(MAGIC)
            while remaining:
                block = fh.read(min(remaining, 8 << 20))
                if not block:
                    raise ArtifactError("Parquet part changed while it was being joined", file=str(part))
                out.write(block)
                remaining -= len(block)
        position += start - len(MAGIC)
    assert template is not None
    footer_fields = []
    for f in template:
        if f[0] == _FMD_NUM_ROWS:
            footer_fields.append([f[0], f[1], num_rows])
        elif f[0] == _FMD_ROW_GROUPS:
            footer_fields.append([f[0], f[1], (f[2][0], row_groups)])
        else:
            footer_fields.append(f)
    footer = encode_struct(footer_fields)
    out.write(footer)
    out.write(struct.pack("<I", len(footer)))
    out.write(MAGIC)
    return num_rows


def concat_parquet_files(parts: Sequence[str | os.PathLike[str]], target: str | os.PathLike[str]) -> Path:
    """:func:`concat_parquet` into ``target``, written atomically."""
    from seqpack.io.atomic import atomic_output

    path = Path(target)
    with atomic_output(path) as fh:
        concat_parquet(parts, fh)
    return path


__all__ = ["concat_parquet", "concat_parquet_files", "decode_struct", "encode_struct", "read_footer"]
