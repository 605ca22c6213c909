"""Packed Parquet writing/reading, the runtime dataset and its collates."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from seqpack.core.errors import ArtifactError, UsageError
from seqpack.packing.packed_dataset import PackedParquetDataset
from seqpack.packing.parquet import (
    PackedParquetReader,
    is_packed_parquet_file,
    resolve_parquet_paths,
    validate_stored_row,
    write_packed_parquet,
)
from seqpack.packing.thd import validate_thd_batch


def _rows(n, tokens=64, segments=2, start=0):
    rows = []
    for r in range(n):
        ids = np.arange(start + r * 1000, start + r * 1000 + tokens)
        step = tokens // segments
        rows.append({"input_ids": ids, "loss_mask": np.ones(tokens, np.int8), "seq_start_id": np.arange(0, tokens, step)})
    return rows


def test_written_types_match_bridge_reader(tmp_path):
    rows = [{"input_ids": [1, 2, 3, 4], "loss_mask": [True, False, 1, 0], "seq_start_id": [0, 2]}]
    path = write_packed_parquet(rows, tmp_path / "seqpack-types.idx.parquet")
    table = pq.read_table(path)
    assert table.schema.field("input_ids").type == pa.list_(pa.int64())
    assert table.schema.field("loss_mask").type == pa.list_(pa.int8())
    assert table.schema.field("seq_start_id").type == pa.list_(pa.int64())
    assert table.column("loss_mask").to_pylist() == [[1, 0, 1, 0]]


def test_packed_file_names():
    assert is_packed_parquet_file("data.idx.parquet") and is_packed_parquet_file("x/DATA.IDX.PARQUET")
    assert is_packed_parquet_file("shard_1.idx.pq") and not is_packed_parquet_file("data.parquet")


def test_resolve_file_glob_dir_and_errors(tmp_path):
    for i in range(3):
        write_packed_parquet(_rows(2), tmp_path / f"shard_{i}.idx.parquet")
    assert resolve_parquet_paths(tmp_path / "shard_1.idx.parquet") == [tmp_path / "shard_1.idx.parquet"]
    assert [p.name for p in resolve_parquet_paths(str(tmp_path / "shard_*.idx.parquet"))] == [
        "shard_0.idx.parquet", "shard_1.idx.parquet", "shard_2.idx.parquet"]
    assert len(resolve_parquet_paths(tmp_path)) == 3
    assert [p.name for p in resolve_parquet_paths(str(tmp_path / "shard_[01].idx.parquet"))] == [
        "shard_0.idx.parquet", "shard_1.idx.parquet"]
    with pytest.raises(ArtifactError, match="not found"):
        resolve_parquet_paths(tmp_path / "missing.idx.parquet")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ArtifactError, match="No Parquet files found"):
        resolve_parquet_paths(tmp_path / "empty")


def test_reader_locates_rows_across_shards_and_caches_groups(tmp_path):
    for i, n in enumerate((5, 10, 7)):
        write_packed_parquet(_rows(n, start=i * 100_000), tmp_path / f"s{i}.idx.parquet", row_group_size=5)
    reader = PackedParquetReader(str(tmp_path / "s*.idx.parquet"))
    assert len(reader) == 22
    assert [reader.locate(i)[0] for i in (0, 4, 5, 15)] == [0, 0, 1, 2]
    reader.row(0)
    cached = reader._cache
    reader.row(1)
    assert reader._cache is cached
    reader.row(5)
    assert reader._cache is not cached
    assert reader.row(21)["input_ids"][0] == 200_000 + 6 * 1000
    reader.close()
    reader.close()


def test_foreign_and_empty_files_are_rejected(tmp_path):
    pq.write_table(pa.table({"input_ids": [[1, 2]], "seq_start_id": [[0]]}), tmp_path / "a.idx.parquet")
    with pytest.raises(ArtifactError, match="missing required columns"):
        PackedParquetReader(tmp_path / "a.idx.parquet")
    write_packed_parquet([], tmp_path / "b.idx.parquet")
    with pytest.raises(ArtifactError, match="empty"):
        PackedParquetReader(tmp_path / "b.idx.parquet")
    (tmp_path / "c.idx.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(ArtifactError, match="not a readable Parquet file"):
        PackedParquetReader(tmp_path / "c.idx.parquet")


@pytest.mark.parametrize(
    "row, fragment",
    [
        ({"input_ids": [1, 2, 3, 4], "loss_mask": [1, 1], "seq_start_id": [0]}, "loss_mask length"),
        ({"input_ids": [1, 2, 3, 4], "loss_mask": [1] * 4, "seq_start_id": [1]}, "start with 0"),
        ({"input_ids": [1, 2, 3, 4], "loss_mask": [1] * 4, "seq_start_id": []}, "start with 0"),
        ({"input_ids": [1, 2, 3], "loss_mask": [1] * 3, "seq_start_id": [0, 5]}, ">= row length"),
        ({"input_ids": [1, 2, 3, 4], "loss_mask": [1] * 4, "seq_start_id": [0, 3, 1]}, "strictly increasing"),
    ],
)
def test_validate_stored_row(row, fragment):
    validate_stored_row(0, {"input_ids": [1, 2, 3, 4], "loss_mask": [1, 1, 0, 1], "seq_start_id": [0, 2]})
    with pytest.raises(ArtifactError, match=fragment):
        validate_stored_row(3, row)


def test_dataset_padding_rows_and_mapping(tmp_path):
    path = write_packed_parquet(_rows(10), tmp_path / "t.idx.parquet", row_group_size=5)
    ds = PackedParquetDataset(path, pack_size=64, pad_seq_to_mult=1, eos_id=0)
    assert len(ds) == 10
    item = ds[-1]
    assert item["is_padding"] and item["index"] == 9 and item["loss_mask"].sum() == 0
    assert ds[9]["loss_mask"].sum() == 64
    mapped = PackedParquetDataset(path, pack_size=64, pad_seq_to_mult=1, eos_id=0, max_num_samples=25, seed=3)
    assert len(mapped) == 25
    seen = [mapped[i]["index"] for i in range(25)]
    assert sorted(seen[:10]) == list(range(10)) and sorted(seen[10:20]) == list(range(10))
    assert mapped[-1]["loss_mask"].sum() == 0 and mapped[-1]["index"] == seen[-1]
    with pytest.raises(IndexError):
        ds[10]


def test_padding_row_contributes_no_loss_through_collate(tmp_path):
    path = write_packed_parquet(_rows(3), tmp_path / "t.idx.parquet")
    ds = PackedParquetDataset(path, pack_size=64, pad_seq_to_mult=1, eos_id=0)
    assert float(ds.collate([ds[-1]])["loss_mask"].sum()) == 0.0
    assert float(ds.collate([ds[0]])["loss_mask"].sum()) > 0


def test_collates_canonical_and_bridge(tmp_path):
    eos = 0
    row = {"input_ids": [8, 9, 10, 11, 12, 0, 0, 0, 0, 5, 6, 7, 0, 0],
           "loss_mask": [0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0, 0], "seq_start_id": [0, 9]}
    path = write_packed_parquet([row], tmp_path / "e1.idx.parquet")
    ds = PackedParquetDataset(path, pack_size=16, pad_seq_to_mult=4, eos_id=eos, pad_to_max_length=True)
    batch = ds.collate([ds[0]])
    validate_thd_batch(batch, pad_seq_to_mult=4)
    assert batch["cu_seqlens_q"].tolist() == [0, 5, 8, 8]
    assert batch["cu_seqlens_q_padded"].tolist() == [0, 8, 12, 16]
    bridge = ds.collate_bridge([ds[0]])
    assert bridge["cu_seqlens_q"].tolist() == [[0, 5, 8, 8]]
    assert bridge["tokens"].shape == torch.Size([1, 16])
    with pytest.raises(UsageError) as info:
        ds.collate([ds[0], ds[0]])
    assert info.value.rule_id == "PACK-OFFLINE-MBS1"


def test_foreign_artifact_needs_settings(tmp_path):
    path = write_packed_parquet(_rows(2), tmp_path / "t.idx.parquet")
    with pytest.raises(UsageError, match="pack_size, pad_seq_to_mult, eos_id unknown"):
        PackedParquetDataset(path)


def test_dataset_works_in_dataloader_workers(tmp_path):
    path = write_packed_parquet(_rows(8), tmp_path / "t.idx.parquet", row_group_size=3)
    ds = PackedParquetDataset(path, pack_size=64, pad_seq_to_mult=1, eos_id=0)
    loader = torch.utils.data.DataLoader(ds, batch_size=1, num_workers=2, collate_fn=ds.collate)
    assert sorted(b["row_index"] for b in loader) == list(range(8))
