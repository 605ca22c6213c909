"""seqpack's Bridge-compatible packing against Megatron-Bridge's own code, loaded from the snapshot.

Bridge's ``data/packing/algorithms.py`` and its packed readers' sample mapping are read from the
snapshot with ``git show`` and run here on the same inputs (nothing is committed); the tests skip,
with the reason, when the snapshot is not on this machine. The last tests need no snapshot.
"""

from __future__ import annotations

import ast
import types

import numpy as np
import pytest
from upstream_snapshots import BRIDGE, BRIDGE_COMMIT, git_show, load_bridge_packing_algorithms, mirror, skip_reason

from reference_impl.packing.bridge_compat import (
    bridge_assign,
    bridge_pack_items,
    bridge_pack_samples,
    bridge_packing_strategy,
)
from reference_impl.packing.packed_dataset import PackedParquetDataset

COMMIT = BRIDGE_COMMIT


@pytest.fixture(scope="module")
def bridge():
    if mirror(BRIDGE) is None:
        pytest.skip(skip_reason(BRIDGE))
    return load_bridge_packing_algorithms()


def _cases(seed: int, n: int, top: int) -> list[int]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, top, size=n).tolist()
    lengths[::7] = [0] * len(lengths[::7])  # zero-length items
    return lengths


@pytest.mark.parametrize("algorithm", ["first_fit", "first_fit_decreasing"])
@pytest.mark.parametrize("pack_size", [0, 1, 7, 64])
def test_assignments_equal_bridges_including_zero_and_oversize(bridge, algorithm, pack_size):
    for seed in range(4):
        lengths = _cases(seed, 60, 80)  # many items longer than the pack
        theirs = getattr(bridge, algorithm)(lengths, pack_size)
        ours = [[lengths[i] for i in b] for b in bridge_assign(lengths, pack_size, algorithm)]
        assert ours == theirs, (seed, pack_size)


@pytest.mark.parametrize("algorithm", ["first_fit", "first_fit_decreasing"])
def test_payload_packing_with_item_lengths_equals_bridges(bridge, algorithm):
    lengths = _cases(5, 200, 40)
    items = [{"id": i} for i in range(len(lengths))]
    theirs = getattr(bridge, algorithm)(items, 50, item_lengths=lengths)
    assert bridge_pack_items(items, 50, algorithm, item_lengths=lengths) == theirs
    with pytest.raises(ValueError, match="same number of entries"):
        getattr(bridge, algorithm)(items, 50, item_lengths=lengths[:-1])
    from reference_impl.errors import UsageError

    with pytest.raises(UsageError, match="same number of entries"):
        bridge_pack_items(items, 50, algorithm, item_lengths=lengths[:-1])


def test_strategy_default_algorithm_is_bridges(bridge):
    histogram = np.bincount(_cases(9, 300, 33), minlength=33).tolist()
    theirs = bridge.create_packing_strategy(histogram, 40)
    assert bridge_packing_strategy(histogram, 40) == theirs


def test_pack_size_zero_fails_bridges_strategy_and_ours_refuses_it(bridge):
    with pytest.raises(ZeroDivisionError):
        bridge.create_packing_strategy([0, 2, 1], 0)
    from reference_impl.errors import UsageError

    with pytest.raises(UsageError, match="pack_size"):
        bridge_packing_strategy([0, 2, 1], 0)


@pytest.mark.parametrize("algorithm", ["first_fit_shuffle", "first_fit_decreasing"])
def test_offline_pack_of_samples_equals_bridges_histogram_strategy_and_fill(bridge, algorithm):
    lengths = [int(x) for x in np.random.default_rng(3).integers(1, 30, size=120)]
    dataset = [{"input_ids": [i] * (n + 1), "loss_mask": [True] * (n + 1)} for i, n in enumerate(lengths)]
    state = np.random.get_state()
    np.random.seed(777)
    try:
        sequences, histogram = bridge.create_hist(dataset, 32)
        assignments, metadata = bridge.create_packing_strategy(histogram, 32, algorithm)
        rows = bridge.fill_packing_strategy(assignments, sequences, 32, 0)
    finally:
        np.random.set_state(state)
    theirs = [[row["input_ids"][s] for s in row["seq_start_id"]] for row in rows]
    ours = bridge_pack_samples(lengths, 32, seed=777, algorithm=algorithm)
    assert ours.sample_bins == theirs
    assert ours.metadata == metadata


def _bridge_samples_mapping():
    if mirror(BRIDGE) is None:
        pytest.skip(skip_reason(BRIDGE))
    source = git_show(BRIDGE, COMMIT, "src/megatron/bridge/data/packing/parquet.py")
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "GPTSFTPackedParquetDataset")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "_build_samples_mapping")
    namespace = {"np": np}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), "bridge:parquet.py", "exec"), namespace)  # noqa: S102
    return namespace["_build_samples_mapping"]


@pytest.mark.parametrize("n, max_num_samples", [(10, 25), (7, 7), (5, 3), (13, 40)])
def test_bridge_compat_sample_mapping_is_bridges_data_order(n, max_num_samples):
    build = _bridge_samples_mapping()
    fake = types.SimpleNamespace(max_num_samples=max_num_samples, _num_rows=n)
    state = np.random.get_state()
    np.random.seed(1234)  # Bridge's packed dataset seeds the global RNG with the dataset seed first
    try:
        build(fake)
    finally:
        np.random.set_state(state)
    ours = PackedParquetDataset._mapping(n, max_num_samples, 1234, bridge_compat=True)
    assert ours.tolist() == np.asarray(fake.samples_mapping).reshape(-1).tolist()
    # seqpack's own mapping is a different (documented) order for the same seed
    assert PackedParquetDataset._mapping(n, max_num_samples, 1234).tolist() != ours.tolist() or n * max_num_samples < 8


def test_bridge_compat_mapping_matches_numpys_legacy_global_stream_without_a_snapshot():
    state = np.random.get_state()
    np.random.seed(42)
    try:
        rows = np.arange(9)[None, :].repeat(3, axis=0)
        for row in rows:
            np.random.shuffle(row)
    finally:
        np.random.set_state(state)
    assert PackedParquetDataset._mapping(9, 20, 42, bridge_compat=True).tolist() == rows.reshape(-1)[:20].tolist()
