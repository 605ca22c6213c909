"""Joining Parquet parts byte for byte: the result must be the file one writer produces."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from seqpack.core.errors import ArtifactError
from seqpack.packing.offline import parquet_concat
from seqpack.packing.parquet import rows_to_table
from seqpack.packing.offline.parquet_concat import (
    concat_parquet,
    concat_parquet_files,
    decode_struct,
    encode_struct,
    read_footer,
)


def _rows(rng: np.random.Generator, n: int, vocab: int) -> list[dict[str, np.ndarray]]:
    rows = []
    for _ in range(n):
        width = int(rng.integers(2, 400))
        starts = np.sort(rng.choice(width, int(rng.integers(1, min(6, width))), replace=False))
        starts[0] = 0
        rows.append({"input_ids": rng.integers(0, vocab, width), "loss_mask": rng.integers(0, 2, width),
                     "seq_start_id": np.unique(starts)})
    return rows


def _parts(tmp_path, rows, per_part):
    paths = []
    for k, first in enumerate(range(0, len(rows), per_part)):
        path = tmp_path / f"part-{k:04d}.parquet"
        pq.write_table(rows_to_table(rows[first : first + per_part]), path, row_group_size=per_part)
        paths.append(path)
    return paths


@pytest.mark.parametrize("seed, n, per_part, vocab", [(0, 1, 500, 264), (1, 37, 5, 264), (2, 900, 128, 200_000),
                                                      (3, 64, 1, 50_000)])
def test_joined_parts_equal_one_writer_byte_for_byte(tmp_path, seed, n, per_part, vocab):
    rows = _rows(np.random.default_rng(seed), n, vocab)
    single = tmp_path / "single.parquet"
    pq.write_table(rows_to_table(rows), single, row_group_size=per_part)
    joined = concat_parquet_files(_parts(tmp_path, rows, per_part), tmp_path / "joined.parquet")
    assert joined.read_bytes() == single.read_bytes()
    meta = pq.ParquetFile(joined).metadata
    assert meta.num_rows == n and meta.num_row_groups == -(-n // per_part)
    assert pq.read_table(joined).equals(rows_to_table(rows))


def test_footer_codec_round_trips(tmp_path):
    path = tmp_path / "f.parquet"
    pq.write_table(rows_to_table(_rows(np.random.default_rng(5), 20, 1000)), path, row_group_size=7)
    start, meta = read_footer(path)
    data = path.read_bytes()
    assert encode_struct(meta) == data[start:-8]
    assert decode_struct(encode_struct(meta)) == meta


def test_negative_control_without_offset_shift_the_file_is_wrong(tmp_path, monkeypatch):
    rows = _rows(np.random.default_rng(7), 30, 264)
    parts = _parts(tmp_path, rows, 10)
    monkeypatch.setattr(parquet_concat, "_shift", lambda fields, names, delta: None)
    buf = io.BytesIO()
    concat_parquet(parts, buf)
    single = io.BytesIO()
    pq.write_table(rows_to_table(rows), single, row_group_size=10)
    assert buf.getvalue() != single.getvalue()
    try:  # the second and third row groups point into the wrong bytes
        table = pq.read_table(io.BytesIO(buf.getvalue()))
    except Exception:  # noqa: BLE001 - any failure to read is the expected outcome
        return
    assert not table.equals(rows_to_table(rows))


def test_parts_with_another_schema_are_refused(tmp_path):
    rows = _rows(np.random.default_rng(8), 4, 264)
    good = _parts(tmp_path, rows, 4)[0]
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"input_ids": pa.array([[1, 2]])}), other)
    with pytest.raises(ArtifactError, match="differ in schema"):
        concat_parquet([good, other], io.BytesIO())


def test_not_parquet_and_nothing_to_join(tmp_path):
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 this is not a footer")
    with pytest.raises(ArtifactError, match="not a Parquet file"):
        read_footer(bad)
    with pytest.raises(ArtifactError, match="nothing to join"):
        concat_parquet([], io.BytesIO())
