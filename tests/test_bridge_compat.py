"""Tests for seqpack.packing.offline.bridge_compat (Megatron-Bridge reproduction).

Exact expectations come from bridge_contracts.md section 6 (items 1, 3, 5, 13, 15, 16, 17,
18, 30). ``emulate_bridge`` below re-states Bridge's documented procedure on the *global*
legacy numpy RNG (seed, draw, restore), independently of the module under test, to check the
private-stream implementation on larger random datasets.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from seqpack.core.errors import PackingError, UsageError
from seqpack.packing.offline.bridge_compat import (
    BRIDGE_METADATA_KEYS,
    bridge_assign,
    bridge_fill_assignment,
    bridge_histogram,
    bridge_pack_metadata,
    bridge_pack_samples,
    bridge_packing_strategy,
    bridge_rng,
)


def emulate_bridge(runtime_lengths, pack_size, seed, algorithm):
    """Bridge's offline flow as documented (section 1.5-1.7), on the global legacy RNG."""
    kept = [i for i, n in enumerate(runtime_lengths) if n <= pack_size]
    saved = np.random.get_state()
    np.random.seed(seed)
    try:
        seqlens = sorted(runtime_lengths[i] for i in kept)  # expanded histogram, ascending
        if algorithm == "first_fit_shuffle":
            seqlens = seqlens[:]
            np.random.shuffle(seqlens)
        elif algorithm == "first_fit_decreasing":
            seqlens = sorted(seqlens, reverse=True)
        bins: list[list[int]] = []
        for length in seqlens:  # plain first fit, linear scan
            for b in bins:
                if pack_size - sum(b) >= length:
                    b.append(length)
                    break
            else:
                bins.append([length])
        stacks = {}
        for length in sorted({runtime_lengths[i] for i in kept}):  # the non-empty buckets, ascending
            bucket = [i for i in kept if runtime_lengths[i] == length]
            if bucket:
                perm = np.random.permutation(len(bucket))
                stacks[length] = [bucket[j] for j in perm]
        rows = [[stacks[length].pop() for length in b] for b in bins]
    finally:
        np.random.set_state(saved)
    return bins, rows


def same_global_state(a, b) -> bool:
    return a[0] == b[0] and np.array_equal(a[1], b[1]) and a[2:] == b[2:]


# ---------------------------------------------------------------------------------------------
# Exact oracle cases
# ---------------------------------------------------------------------------------------------


def test_item16_strategy_and_metadata():
    bins, meta = bridge_packing_strategy([0, 0, 0, 0, 1, 0, 1, 0, 1], 10, "first_fit_decreasing")
    assert bins == [[8], [6, 4]]
    assert meta == {
        "dataset_max_seqlen": 8,
        "max_samples_per_bin": 2,
        "packing_factor": 1.5,
        "packing_efficiency": 90.0,
        "pack_size": 10,
        "min_packed_seqlen": 8,
    }
    assert tuple(meta) == BRIDGE_METADATA_KEYS


def test_item18_first_fit_shuffle_rows():
    # TinyDataset: runtime lengths (6, 6, 4, 4), sample s has ids s*10 + t, P = S = 10, seed 777
    lengths = [6, 6, 4, 4]
    pack = bridge_pack_samples(lengths, 10, seed=777, max_seq_length=10)
    assert pack.bins == [[4, 4], [6], [6]]
    assert pack.sample_bins == [[3, 2], [1], [0]]
    assert pack.metadata == {
        "dataset_max_seqlen": 6,
        "max_samples_per_bin": 2,
        "packing_factor": 1.33,
        "packing_efficiency": 66.67,
        "pack_size": 10,
        "min_packed_seqlen": 6,
    }
    assert list(pack.metadata) == list(BRIDGE_METADATA_KEYS)
    ids = [[s * 10 + t for s in row for t in range(lengths[s] + 1)] for row in pack.sample_bins]
    assert ids[0] == [30, 31, 32, 33, 34, 20, 21, 22, 23, 24]
    assert ids[1] == list(range(10, 17)) and ids[2] == list(range(0, 7))


def test_item18_first_fit_decreasing_rows():
    pack = bridge_pack_samples([6, 6, 4, 4], 10, seed=777, algorithm="first_fit_decreasing")
    assert pack.bins == [[6, 4], [6, 4]]
    assert pack.sample_bins == [[1, 3], [0, 2]]
    assert list(pack.metadata.values()) == [6, 2, 2.0, 100.0, 10, 10]


def test_item17_independent_of_ambient_rng_and_leaves_it_untouched():
    results = []
    for ambient in (0, 4):
        np.random.seed(ambient)
        before = np.random.get_state()
        results.append(bridge_pack_samples([6, 6, 4, 4], 10, seed=777).sample_bins)
        assert same_global_state(before, np.random.get_state())
    assert results[0] == results[1]


def test_item30_legacy_template_bin():
    # stored lengths 5, 5, 9 after pre-padding to m=4 -> runtime 4, 4, 8; P=16, seed 1234
    pack = bridge_pack_samples([4, 4, 8], 16, seed=1234)
    assert pack.bins == [[4, 4, 8]]
    assert pack.sample_bins == [[0, 1, 2]]


@pytest.mark.parametrize(
    ("algorithm", "lengths", "pack_size", "expected"),
    [
        ("first_fit_decreasing", [1111, 8192, 4096, 1000], 2048, [[1], [2], [0], [3]]),  # item 1
        ("first_fit", [4096, 3000, 5000], 2048, [[0], [1], [2]]),  # item 5
        ("first_fit_decreasing", [500], 100, [[0]]),  # item 13
        ("first_fit_decreasing", [500, 600, 700], 100, [[2], [1], [0]]),  # item 13
        ("first_fit_decreasing", [0, 5, 0, 95, 0, 1], 100, [[3, 1, 0, 2, 4], [5]]),  # item 13
        ("first_fit_decreasing", [], 100, []),  # item 13
        ("first_fit_decreasing", [5, 3, 8], 10, [[2], [0, 1]]),  # item 15
        ("first_fit", [5, 3, 8], 10, [[0, 1], [2]]),  # item 15
        ("first_fit_decreasing", [5, 3, 2, 7, 4], 10, [[3, 1], [0, 4], [2]]),  # item 15
        ("first_fit", [200, 0], 100, [[0], [1]]),  # a zero never joins an overfull bin
    ],
)
def test_bridge_assign_oracle_cases(algorithm, lengths, pack_size, expected):
    assert bridge_assign(lengths, pack_size, algorithm) == expected


def test_item3_histogram_skips_long_samples():
    # ids of length 4 and 5 -> runtime 3 and 4; cut-off 3
    hist = bridge_histogram([3, 4], 3)
    assert hist.histogram == [0, 0, 0, 1]
    assert hist.buckets == {3: [0]}
    assert hist.skipped == [1]
    json.dumps(hist.to_dict())


# ---------------------------------------------------------------------------------------------
# Agreement with the global-RNG emulation on random data
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["first_fit_shuffle", "first_fit_decreasing", "first_fit"])
@pytest.mark.parametrize("seed", [0, 1234, 5678])
@pytest.mark.parametrize("scale", [1, 400])  # 400: pack size 102,400, slots past the fill's table of lengths
def test_matches_global_rng_emulation(algorithm, seed, scale):
    rng = np.random.default_rng(seed)
    lengths = (np.minimum(rng.lognormal(np.log(60), 0.9, size=300).astype(np.int64), 400) * scale).tolist()
    pack_size = 256 * scale
    exp_bins, exp_rows = emulate_bridge(lengths, pack_size, seed, algorithm)
    pack = bridge_pack_samples(
        lengths, pack_size, seed=seed, algorithm=algorithm, max_seq_length=pack_size
    )
    assert pack.bins == exp_bins
    assert pack.sample_bins == exp_rows
    assert pack.skipped == [i for i, n in enumerate(lengths) if n > pack_size]
    placed = sorted(i for row in pack.sample_bins for i in row)
    assert placed == [i for i, n in enumerate(lengths) if n <= pack_size]
    assert all(sum(row) <= pack_size for row in pack.bins)


def test_strategy_and_fill_share_one_stream():
    lengths = [3, 7, 3, 5, 7, 2, 9, 3]
    hist = bridge_histogram(lengths, 10)
    rs = bridge_rng(42)
    bins, _ = bridge_packing_strategy(hist.histogram, 10, "first_fit_shuffle", rng=rs)
    rows = bridge_fill_assignment(lengths, bins, rs)
    assert rows == bridge_pack_samples(lengths, 10, seed=42).sample_bins
    _, exp_rows = emulate_bridge(lengths, 10, 42, "first_fit_shuffle")
    assert rows == exp_rows
    # for first_fit_decreasing the strategy draws nothing, so a seed is enough for the fill
    bins_d, _ = bridge_packing_strategy(hist.histogram, 10, "first_fit_decreasing")
    _, exp_rows_d = emulate_bridge(lengths, 10, 42, "first_fit_decreasing")
    assert bridge_fill_assignment(lengths, bins_d, 42) == exp_rows_d


# ---------------------------------------------------------------------------------------------
# Metadata and errors
# ---------------------------------------------------------------------------------------------


def test_metadata_arithmetic_and_rounding():
    meta = bridge_pack_metadata(np.array([8, 6, 6]), [2, 1, 1], 10, 6)
    assert meta == {
        "dataset_max_seqlen": 6,
        "max_samples_per_bin": 2,
        "packing_factor": 1.33,
        "packing_efficiency": 66.67,
        "pack_size": 10,
        "min_packed_seqlen": 6,
    }
    # 2 samples in 3 bins: 0.666... -> 0.67; sums 1+1+2 over 3 bins of 3 -> 44.44
    meta = bridge_pack_metadata([1, 1, 2], [1, 1, 0], 3, 2)
    assert meta["packing_factor"] == 0.67 and meta["packing_efficiency"] == 44.44
    assert all(type(v) in (int, float) for v in meta.values())
    with pytest.raises(PackingError, match="no bins"):
        bridge_pack_metadata([], [], 10, 0)
    with pytest.raises(UsageError, match="differ in length"):
        bridge_pack_metadata([1, 2], [1], 10, 2)


def test_fill_rejects_mismatched_bins_and_samples():
    with pytest.raises(PackingError, match="no sample of that length is left") as err:
        bridge_fill_assignment([4, 4], [[4, 4, 4]], 0)
    assert err.value.row == 0
    with pytest.raises(PackingError, match="no slot") as err:
        bridge_fill_assignment([4, 4, 6], [[4, 4]], 0)
    assert err.value.row == 2


def test_oversize_lengths_get_own_bins_but_cannot_be_filled_within_pack_size():
    # lengths 2 and 5, pack size 3: Bridge's strategy gives 5 a bin of its own ...
    bins, meta = bridge_packing_strategy([0, 0, 1, 0, 0, 1], 3, "first_fit_decreasing")
    assert bins == [[5], [2]] and meta["dataset_max_seqlen"] == 5
    # ... and its fill step cannot place it (Bridge fails there with a KeyError)
    with pytest.raises(PackingError, match="longer than the pack size 3") as err:
        bridge_fill_assignment([2, 5], bins, 0, pack_size=3)
    assert err.value.row == 0
    assert bridge_fill_assignment([2, 5], bins, 0) == [[1], [0]]


def test_samples_over_pack_size_are_reported_or_rejected():
    with pytest.raises(PackingError, match="sample 1 with length 12"):
        bridge_pack_samples([4, 12, 3], 10, seed=0, max_seq_length=16)
    pack = bridge_pack_samples([4, 12, 3], 10, seed=0, max_seq_length=10)
    assert pack.skipped == [1]
    assert sorted(i for row in pack.sample_bins for i in row) == [0, 2]
    d = pack.to_dict(include_bins=True)
    assert json.loads(json.dumps(d))["skipped"] == [1] and d["num_samples"] == 2


def test_usage_errors():
    with pytest.raises(UsageError, match="needs rng"):
        bridge_assign([1, 2], 10, "first_fit_shuffle")
    with pytest.raises(UsageError, match="unknown Bridge packing algorithm"):
        bridge_assign([1, 2], 10, "best_fit_decreasing")
    with pytest.raises(UsageError, match="seed"):
        bridge_rng(-1)
    with pytest.raises(PackingError, match="empty"):
        bridge_packing_strategy([0, 0, 0], 10, "first_fit_decreasing")


def test_packs_written_with_bridge_compat_are_read_in_bridges_epoch_order(tmp_path):
    from seqpack.data.demo import demo_path
    from seqpack.packing.offline.prepare import prepare_packed_dataset
    from seqpack.packing.packed_dataset import PackedParquetDataset

    res = prepare_packed_dataset(demo_path("prompt_completion"), tmp_path / "out", pack_size=2048,
                                 bridge_compat=True, algorithm="first_fit_shuffle", seed=5678)
    n = len(PackedParquetDataset(res.files["training"]))
    ds = PackedParquetDataset(res.files["training"], max_num_samples=3 * n, seed=5678)
    assert ds.bridge_compat  # read from the manifest
    rs = np.random.RandomState(5678)
    expected = []
    for _ in range(3):
        row = np.arange(n)
        rs.shuffle(row)
        expected += row.tolist()
    assert ds.mapping.tolist() == expected
    # explicitly off: seqpack's own per-epoch generators (a different, documented order)
    own = PackedParquetDataset(res.files["training"], max_num_samples=3 * n, seed=5678, bridge_compat=False)
    assert sorted(own.mapping.tolist()) == sorted(expected) and not own.bridge_compat
