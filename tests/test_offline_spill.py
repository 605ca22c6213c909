"""Offline packing through the spill: ranges, spill files, pack filling, and the pipeline against an oracle."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.data import ByteTokenizer, PromptCompletionSchema, tokenize_row
from seqpack.data.ranges import alternating_runs, concat_ranges, offsets_of
from seqpack.core.errors import PackingError
from seqpack.packing import algorithms
from seqpack.packing.offline.options import WORK_DIR
from seqpack.packing.offline.prepare import prepare_packed_dataset
from seqpack.packing.offline.fill import PartJob, auto_row_group_size, fill_group
from seqpack.packing.parquet import PackedParquetReader
from seqpack.packing.offline.spill import SampleIndex, SpillReader, SpillWriter, id_dtype, record_sizes


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 20)), max_size=30))
def test_concat_ranges_equals_a_loop(pieces):
    starts = np.array([s for s, _ in pieces], dtype=np.int64)
    lengths = np.array([n for _, n in pieces], dtype=np.int64)
    expected = [s + k for s, n in pieces for k in range(n)]
    assert concat_ranges(starts, lengths).tolist() == expected
    assert offsets_of(lengths).tolist() == [0, *np.cumsum(lengths).tolist()]
    gaps = lengths[::-1]
    assert alternating_runs(lengths, gaps).tolist() == [b for n, g in zip(lengths, gaps) for b in [True] * n + [False] * g]


def test_id_dtype_is_the_narrowest_that_holds_the_vocabulary():
    assert id_dtype(264) == np.uint16 and id_dtype(65536) == np.uint16
    assert id_dtype(65537) == np.int32 and id_dtype(151_936) == np.int32
    assert id_dtype(2**31 + 1) == np.uint32
    with pytest.raises(PackingError):
        id_dtype(2**32 + 1)


def _index(names, records):
    file, offset, length = zip(*records)
    return SampleIndex(tuple(names), np.array(file, np.int32), np.array(offset, np.int64), np.array(length, np.int32))


def test_spill_round_trip_across_files_in_any_order(tmp_path):
    a = SpillWriter(tmp_path, "a", id_dtype(264))
    b = SpillWriter(tmp_path, "b", id_dtype(264))
    s0 = a.append(np.array([1, 2, 3, 65535, 4], np.int32), np.array([0, 1, 1, 1, 1], np.uint8), np.array([3, 2]))
    s1 = b.append(np.array([7, 8], np.int32), np.array([1, 0], np.uint8), np.array([2]))
    a.close()
    b.close()
    assert (s0, s1) == (0, 0)
    assert (tmp_path / "a.spill").stat().st_size == 5 * 3  # uint16 ids + uint8 mask per token
    second = int(record_sizes(np.array([3]), id_dtype(264))[0])
    index = _index(["a", "b"], [(0, second, 2), (1, 0, 2), (0, 0, 3)])
    ids, mask = SpillReader(tmp_path, id_dtype(264)).read(index)
    assert ids.tolist() == [65535, 4, 7, 8, 1, 2, 3] and ids.dtype == np.int64
    assert mask.tolist() == [1, 1, 1, 0, 0, 1, 1]
    assert SpillReader(tmp_path, id_dtype(264)).read(index.take(np.array([1])))[0].tolist() == [7, 8]


def test_spill_refuses_ids_outside_its_dtype_and_a_truncated_file(tmp_path):
    writer = SpillWriter(tmp_path, "w", id_dtype(264))
    with pytest.raises(PackingError, match="outside the tokenizer's vocabulary"):
        writer.append(np.array([70000], np.int32), np.array([1], np.uint8), np.array([1]))
    writer.append(np.array([5, 6], np.int32), np.array([1, 1], np.uint8), np.array([2]))
    writer.close()
    with open(tmp_path / "w.spill", "r+b") as fh:
        fh.truncate(4)
    with pytest.raises(PackingError, match="shorter than their index"):
        SpillReader(tmp_path, id_dtype(264)).read(_index(["w"], [(0, 0, 2)]))


def test_reading_back_keeps_the_spill_out_of_the_resident_set(tmp_path):
    """A gather of scattered samples from a large spill must not map the spill (file pages count as RSS)."""
    dtype = id_dtype(264)
    writer = SpillWriter(tmp_path, "big", dtype)
    lengths = np.full(20_000, 1000)  # 20 M tokens: a 60 MB spill
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 264, int(lengths.sum())).astype(np.int32)
    start = writer.append(ids, np.ones(ids.size, np.uint8), lengths)
    writer.close()
    offsets = start + offsets_of(record_sizes(lengths, dtype))[:-1]
    pick = np.sort(rng.choice(lengths.size, 2000, replace=False))

    def rss_file_mb() -> float:
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("RssFile")) / 1024

    before = rss_file_mb()
    got, _ = SpillReader(tmp_path, dtype).read(_index(["big"], [(0, int(offsets[k]), 1000) for k in pick]))
    assert rss_file_mb() - before < 10  # the spill is 60 MB; a mapped gather would bring most of it in
    assert got[:1000].tolist() == ids[pick[0] * 1000 : pick[0] * 1000 + 1000].tolist()


def _naive_fill(samples, aligned, counts, pad_id):
    """Per-sample loop: ids padded to aligned + 1, mask rolled left by one."""
    rows, k = [], 0
    for c in counts:
        ids, mask, starts = [], [], []
        for _ in range(c):
            sid, smask = samples[k]
            slot = aligned[k] + 1
            starts.append(len(ids))
            ids += list(sid) + [pad_id] * (slot - len(sid))
            rolled = list(smask[1:]) + [0]
            mask += rolled + [0] * (slot - len(sid))
            k += 1
        rows.append((ids, mask, starts))
    return rows


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_fill_group_equals_a_per_sample_loop(tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("fill")
    rng = np.random.default_rng(data.draw(st.integers(0, 10_000)))
    n = data.draw(st.integers(1, 12))
    m = data.draw(st.sampled_from([1, 2, 4, 8]))
    lengths = rng.integers(2, 40, n)
    samples = [(rng.integers(0, 300, L), rng.integers(0, 2, L).astype(np.uint8)) for L in lengths]
    writer = SpillWriter(tmp, "w", id_dtype(264))
    starts = [writer.append(ids, mask, np.array([ids.size])) for ids, mask in samples]
    writer.close()
    aligned = -(-(lengths - 1) // m) * m
    cuts = sorted(set(data.draw(st.lists(st.integers(1, n - 1), max_size=4)) if n > 1 else []))
    counts = np.diff([0, *cuts, n]).astype(np.int64)
    job = PartJob(path=str(tmp / "p.parquet"), spill_dir=str(tmp), id_dtype="uint16", pad_id=257, counts=counts,
                  aligned=aligned, samples=_index(["w"], [(0, s, L) for s, L in zip(starts, lengths)]))
    ids, mask, row_offsets, seq_starts, start_offsets = fill_group(job)
    for p, (e_ids, e_mask, e_starts) in enumerate(_naive_fill(samples, aligned, counts, 257)):
        assert ids[row_offsets[p] : row_offsets[p + 1]].tolist() == e_ids
        assert mask[row_offsets[p] : row_offsets[p + 1]].tolist() == e_mask
        assert seq_starts[start_offsets[p] : start_offsets[p + 1]].tolist() == e_starts


def test_auto_row_group_size_bounds_tokens_per_group():
    assert auto_row_group_size(1024) == 500 and auto_row_group_size(8192) == 500
    assert auto_row_group_size(131072) == 32 and auto_row_group_size(1 << 22) == 1


def _rows(n, seed=0):
    rng = np.random.default_rng(seed)
    return [{"prompt": "p" * int(rng.integers(1, 60)), "completion": "c" * int(rng.integers(1, 90))} for _ in range(n)]


def _oracle(rows, pack_size, m, seed):
    """The packs built in memory from tokenize_row, the way the pipeline is specified."""
    tok, schema = ByteTokenizer(), PromptCompletionSchema()
    cap = (pack_size // m) * m
    samples = [tokenize_row(r, schema, tok, max_length=cap + 1) for r in rows]
    runtime = np.array([s.num_tokens - 1 for s in samples])
    aligned = -(-runtime // m) * m
    res = algorithms.pack_lengths(aligned, pack_size, "best_fit_decreasing", seed=seed, oversize="error")
    bins = [res.order[res.offsets[b] : res.offsets[b + 1]] for b in range(res.num_bins)]
    bins = [bins[i] for i in np.random.default_rng(seed).permutation(len(bins))]
    out = []
    for b in bins:
        pieces = [(samples[i].input_ids, samples[i].loss_mask) for i in b]
        filled = _naive_fill(pieces, aligned[b], [len(b)], tok.eos_id)
        out.append(filled[0])
    return out


@pytest.mark.parametrize("workers, row_group_size", [(1, None), (2, 3)])
def test_pipeline_equals_the_in_memory_oracle(write_jsonl, tmp_path, workers, row_group_size):
    rows = _rows(300)
    path = write_jsonl(rows)
    res = prepare_packed_dataset(path, tmp_path / "out", pack_size=256, pad_seq_to_mult=4, seed=11,
                                 num_workers=workers, row_group_size=row_group_size)
    reader = PackedParquetReader(res.files["training"])
    expected = _oracle(rows, 256, 4, 11)
    assert len(reader) == len(expected)
    for i, (ids, mask, starts) in enumerate(expected):
        got = reader.row(i)
        assert got["input_ids"].tolist() == ids and got["loss_mask"].tolist() == mask
        assert got["seq_start_id"].tolist() == starts
    assert not (res.root / WORK_DIR).exists() and sorted(p.name for p in res.root.iterdir()) == [
        "256_metadata.jsonl", "seqpack_manifest.json", "training_256.idx.parquet"]


def test_row_groups_written_in_parallel_are_byte_identical(write_jsonl, tmp_path):
    path = write_jsonl(_rows(400, seed=3))
    one = prepare_packed_dataset(path, tmp_path / "a", pack_size=128, row_group_size=4)
    two = prepare_packed_dataset(path, tmp_path / "b", pack_size=128, row_group_size=4, num_workers=2)
    assert one.files["training"].read_bytes() == two.files["training"].read_bytes()
    import pyarrow.parquet as pq

    assert pq.ParquetFile(one.files["training"]).metadata.num_row_groups == -(-one.splits["training"]["packs"] // 4)
    assert json.loads(one.metadata_path.read_text()) == json.loads(two.metadata_path.read_text())
