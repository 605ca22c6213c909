"""Tests for seqpack.packing.algorithms.

Every fast path is checked against ``slow_pack`` below: a linear scan over all open bins per
item, written to be obviously correct rather than fast.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.data.length_mixes import sample_lengths
from seqpack.core.errors import InputError, PackingError, UsageError
from seqpack.packing import fit
from seqpack.packing.algorithms import ALGORITHMS, PackResult, pack_lengths
from seqpack.packing.fit import MAX_BFD_CAPACITY, decreasing_order, first_fit_in_order


def slow_pack(lengths, capacity, algorithm, *, seed=0, max_seqs=None, oversize="error"):
    """Reference packer: bins of item indices in placement order, one linear scan per item."""
    lengths = [int(x) for x in lengths]
    n = len(lengths)
    if oversize == "report":
        items = [i for i in range(n) if lengths[i] <= capacity]
    else:
        items = list(range(n))
    size = {i: min(lengths[i], capacity) for i in items}
    if algorithm in ("best_fit_decreasing", "first_fit_decreasing"):
        items = sorted(items, key=lambda i: -size[i])  # Python's sort is stable
    elif algorithm == "first_fit_shuffle":
        perm = np.random.default_rng(seed).permutation(len(items))
        items = [items[j] for j in perm]
    bins: list[list[int]] = []
    free = np.zeros(0, dtype=np.int64)
    count = np.zeros(0, dtype=np.int64)
    for i in items:
        room = count < (max_seqs if max_seqs is not None else n + 1)
        feasible = np.flatnonzero((free >= size[i]) & room)
        if algorithm == "next_fit":
            feasible = feasible[feasible == len(bins) - 1]
        if feasible.size == 0:
            bins.append([])
            free = np.append(free, capacity)
            count = np.append(count, 0)
            b = len(bins) - 1
        elif algorithm == "best_fit_decreasing":
            b = int(feasible[np.argmin(free[feasible])])  # argmin: first, i.e. earliest opened
        else:
            b = int(feasible[0])
        bins[b].append(i)
        free[b] -= size[i]
        count[b] += 1
    return bins


@contextlib.contextmanager
def ffd_path(path: str):
    """Force first_fit_decreasing onto its vectorised or its per-item path."""
    saved = fit._FFD_ITEMS_PER_LENGTH
    fit._FFD_ITEMS_PER_LENGTH = 0 if path == "vectorised" else 10**9
    try:
        yield
    finally:
        fit._FFD_ITEMS_PER_LENGTH = saved


FFD_PATHS = ("vectorised", "per_item")


def check_invariants(res: PackResult, lengths, capacity, max_seqs=None) -> None:
    """Every item packed exactly once or reported; capacities, caps and stats consistent."""
    lengths = np.asarray(lengths, dtype=np.int64)
    n = lengths.shape[0]
    assert res.num_items == n
    eff = np.minimum(lengths, capacity) if res.oversize_policy == "truncate" else lengths
    left_out = np.flatnonzero(res.bin_ids == -1)
    if res.oversize_policy == "report":
        assert left_out.tolist() == res.oversize.tolist()
    else:
        assert left_out.size == 0
    assert res.oversize.tolist() == np.flatnonzero(lengths > capacity).tolist()
    bins = res.bins()
    placed = sorted(i for b in bins for i in b)
    assert placed == sorted(set(range(n)) - set(left_out.tolist()))
    for b, items in enumerate(bins):
        assert items, "no empty bins"
        assert all(res.bin_ids[i] == b for i in items)
        assert int(eff[items].sum()) == int(res.bin_sums[b]) <= capacity
        if max_seqs is not None:
            assert len(items) <= max_seqs
    assert res.num_bins == len(bins) == res.offsets.shape[0] - 1
    assert res.total_tokens == int(eff[res.bin_ids >= 0].sum())
    assert res.lower_bound == -(-res.total_tokens // capacity) <= res.num_bins
    if res.num_bins:
        assert res.efficiency == pytest.approx(res.total_tokens / (res.num_bins * capacity))
        assert 0.0 <= res.efficiency <= 1.0
        assert res.max_items_per_bin == max(len(b) for b in bins)
        assert res.min_bin_fill == min(int(eff[b].sum()) for b in bins)
    else:
        assert res.efficiency == 0.0 and res.max_items_per_bin == 0 and res.min_bin_fill == 0
    json.dumps(res.to_dict(include_assignment=True))


# ---------------------------------------------------------------------------------------------
# Oracle cases (bridge_contracts.md section 6.1), index level
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("algorithm", "lengths", "capacity", "expected"),
    [
        ("first_fit", [500, 600, 500, 400, 700], 1200, [[0, 1], [2, 3], [4]]),  # item 4
        ("first_fit", [5, 3, 2, 7], 10, [[0, 1, 2], [3]]),  # item 8
        ("first_fit_decreasing", [5, 3, 2, 7, 4], 10, [[3, 1], [0, 4], [2]]),  # items 11, 15
        ("first_fit_decreasing", [6, 6, 4], 10, [[0, 2], [1]]),  # item 12 (stable ties)
        ("first_fit_decreasing", [0] * 10, 100, [list(range(10))]),  # item 13
        ("first_fit_decreasing", [0, 5, 0, 95, 0, 1], 100, [[3, 1, 0, 2, 4], [5]]),  # item 13
        ("first_fit_decreasing", [50, 50, 50, 50], 100, [[0, 1], [2, 3]]),  # item 13
        ("first_fit_decreasing", [5, 3, 8], 10, [[2], [0, 1]]),  # item 15
        ("first_fit", [5, 3, 8], 10, [[0, 1], [2]]),  # item 15
        ("first_fit_decreasing", [], 100, []),  # item 13
    ],
)
def test_bridge_oracle_cases(algorithm, lengths, capacity, expected):
    for path in FFD_PATHS:
        with ffd_path(path):
            assert pack_lengths(lengths, capacity, algorithm).bins() == expected


def test_first_fit_random_lengths_respect_capacity():
    # item 2: 10 000 lengths from the legacy stream seeded with 7, randint(1, 2048)
    lengths = np.random.RandomState(7).randint(1, 2048, size=10_000)
    res = pack_lengths(lengths, 2048, "first_fit")
    assert int(res.bin_sums.max()) <= 2048
    check_invariants(res, lengths, 2048)


@pytest.mark.parametrize("seed", range(5))
def test_first_fit_matches_linear_scan(seed):
    # item 6 (5000 items upstream; 1500 here to keep the reference scan quick)
    lengths = np.random.default_rng(seed).integers(1, 2048, size=1500)
    assert pack_lengths(lengths, 2048, "first_fit").bins() == slow_pack(lengths, 2048, "first_fit")


# ---------------------------------------------------------------------------------------------
# Rules, derived by hand
# ---------------------------------------------------------------------------------------------


def test_best_fit_and_first_fit_differ_where_the_rules_differ():
    # C=7, sorted 5,3,3,1: bins {5} (2 free) and {3,3} (1 free). The 1 goes to the
    # tightest bin under best fit, to the first bin with room under first fit.
    assert pack_lengths([5, 3, 3, 1], 7, "best_fit_decreasing").bins() == [[0], [1, 2, 3]]
    assert pack_lengths([5, 3, 3, 1], 7, "first_fit_decreasing").bins() == [[0, 3], [1, 2]]


def test_best_fit_tie_goes_to_earliest_opened_bin():
    # 6 -> bin 0 (4 free), 6 -> bin 1 (4 free), 4 -> tie, bin 0 wins
    assert pack_lengths([6, 6, 4], 10, "best_fit_decreasing").bins() == [[0, 2], [1]]


def test_next_fit_only_looks_at_the_last_bin():
    # 6 | 5 (does not fit with 6) | 4 would fit in bin 0 but next fit never looks back
    assert pack_lengths([6, 5, 4, 1], 10, "next_fit").bins() == [[0], [1, 2, 3]]
    assert pack_lengths([6, 5, 4, 1], 10, "first_fit").bins() == [[0, 2], [1, 3]]


def test_max_seqs_per_pack_caps_every_algorithm():
    lengths = [1] * 7
    for algorithm in ALGORITHMS:
        res = pack_lengths(lengths, 100, algorithm, max_seqs_per_pack=3)
        assert [len(b) for b in res.bins()] == [3, 3, 1], algorithm
    zeros = pack_lengths([0, 0, 0], 5, "best_fit_decreasing", max_seqs_per_pack=1)
    assert zeros.bins() == [[0], [1], [2]]


def test_shuffle_uses_its_own_generator_and_is_deterministic():
    lengths = sample_lengths("bimodal", 500, seed=3, max_len=2048)
    state = np.random.get_state()
    a = pack_lengths(lengths, 2048, "first_fit_shuffle", seed=11)
    np.random.seed(12345)  # ambient state must not matter
    b = pack_lengths(lengths, 2048, "first_fit_shuffle", seed=11)
    np.random.set_state(state)
    assert a.bins() == b.bins()
    assert a.seed == 11 and a.algorithm == "first_fit_shuffle"
    before = np.random.get_state()
    pack_lengths(lengths, 2048, "first_fit_shuffle", seed=5)
    after = np.random.get_state()
    assert before[0] == after[0] and np.array_equal(before[1], after[1]) and before[2:] == after[2:]
    order = np.random.default_rng(11).permutation(500)
    bins, ranks, nb = first_fit_in_order(lengths[order], 2048)
    assert a.bin_ids[order].tolist() == bins.tolist()
    assert pack_lengths(lengths, 2048, "first_fit_shuffle", seed=12).bins() != a.bins()


def test_decreasing_order_is_stable_for_wide_lengths():
    lengths = np.array([70_000, 5, 70_000, 9, 5])
    assert decreasing_order(lengths).tolist() == [0, 2, 3, 1, 4]
    assert decreasing_order(np.array([3, 1, 3])).tolist() == [0, 2, 1]


# ---------------------------------------------------------------------------------------------
# Fast paths == reference on random inputs
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize(
    ("mix", "capacity", "max_seqs"),
    [
        ("lognormal", 4096, None),
        ("bimodal", 2048, 7),
        ("uniform", 1024, None),
        ("lognormal", 8192, 40),
    ],
)
def test_fast_matches_reference_on_length_mixes(algorithm, mix, capacity, max_seqs):
    lengths = sample_lengths(mix, 1200, seed=capacity, min_len=1, max_len=min(capacity, 4096))
    lengths[::17] = 0  # zero-length items go wherever the rule sends them
    expected = slow_pack(lengths, capacity, algorithm, seed=4, max_seqs=max_seqs)
    for path in FFD_PATHS:
        with ffd_path(path):
            res = pack_lengths(lengths, capacity, algorithm, seed=4, max_seqs_per_pack=max_seqs)
        assert res.bins() == expected, path
        check_invariants(res, lengths, capacity, max_seqs)


@pytest.mark.parametrize("max_seqs", [None, 3])
def test_decreasing_fits_match_reference_with_many_bins(max_seqs):
    # thousands of open bins: FFD scans many blocks (growing windows), BFD many levels
    lengths = sample_lengths("uniform", 6000, seed=9, min_len=1, max_len=4096)
    for algorithm in ("best_fit_decreasing", "first_fit_decreasing"):
        with ffd_path("vectorised"):
            res = pack_lengths(lengths, 4096, algorithm, max_seqs_per_pack=max_seqs)
        assert res.bins() == slow_pack(lengths, 4096, algorithm, max_seqs=max_seqs), algorithm


def _bins_of(bins: np.ndarray, ranks: np.ndarray, nbins: int) -> list[list[int]]:
    out: list[list[int]] = [[] for _ in range(nbins)]
    for item in np.lexsort((ranks, bins)).tolist():
        out[int(bins[item])].append(item)
    return out


@pytest.mark.parametrize("steps", [0, 1, 8])
@pytest.mark.parametrize("max_seqs", [None, 1, 3])
def test_first_fit_in_order_matches_a_linear_scan_on_both_of_its_searches(monkeypatch, steps, max_seqs):
    # steps 0: the segment tree takes over after the first repair; 8: the prefix maximum does (nearly) all
    monkeypatch.setattr(fit, "_PREFIX_STEPS_PER_ITEM", steps)
    rng = np.random.default_rng(steps * 10 + (max_seqs or 0))
    for _ in range(40):
        lengths = rng.integers(0, 65, int(rng.integers(1, 400)))
        bins, ranks, nbins = first_fit_in_order(lengths, 64, max_seqs)
        assert _bins_of(bins, ranks, nbins) == slow_pack(lengths, 64, "first_fit", max_seqs=max_seqs)


@pytest.mark.parametrize("steps", [0, 8])
def test_first_fit_bins_is_first_fit_in_order_without_ranks(monkeypatch, steps):
    # the lean loop (no per-bin limit, bins only) against the general one, oversize singletons included;
    # steps 0: the lean loop gives up at once and the general search answers
    monkeypatch.setattr(fit, "_PREFIX_STEPS_PER_ITEM", steps)
    rng = np.random.default_rng(steps)
    for _ in range(40):
        lengths = rng.integers(0, 80, int(rng.integers(0, 400)))
        bins, nbins = fit.first_fit_bins(lengths, 64, oversize_singletons=True)
        # a per-bin limit above the item count changes nothing but keeps the general loop
        expect, ranks, count = first_fit_in_order(lengths, 64, lengths.size + 1, oversize_singletons=True)
        assert nbins == count and bins.tolist() == expect.tolist()
        assert fit.ranks_in_bins(bins, nbins).tolist() == ranks.tolist()
        fitting = lengths[lengths <= 64]
        got, got_ranks, got_count = first_fit_in_order(fitting, 64)
        assert _bins_of(got, got_ranks, got_count) == slow_pack(fitting, 64, "first_fit")
    with pytest.raises(PackingError):
        fit.first_fit_bins(np.array([3, 65]), 64)


def test_first_fit_in_order_moves_to_the_tree_when_repairs_run_long(monkeypatch):
    # bins whose free space falls bin after bin, then items that each take the first of them: every
    # repair of the running maximum walks every bin, so the search must move to the tree
    capacity, m = 10_000, 2_000
    lengths = np.array([capacity - (m - i) for i in range(m)] + [m - i for i in range(m)], dtype=np.int64)
    calls = []
    tree = fit._first_fit_tree
    monkeypatch.setattr(fit, "_first_fit_tree", lambda *a: (calls.append(a[1]), tree(*a))[1])
    bins, ranks, nbins = first_fit_in_order(lengths, capacity)
    assert len(calls) == 1 and m < calls[0] < m + 20  # soon after the long repairs start
    assert _bins_of(bins, ranks, nbins) == slow_pack(lengths, capacity, "first_fit")
    calls.clear()
    first_fit_in_order(sample_lengths("lognormal", 5_000, seed=3, max_len=4096), 4096)
    assert calls == []  # a usual length mix never needs it


def test_vectorised_ffd_matches_item_by_item_first_fit_at_scale():
    lengths = sample_lengths("uniform", 40_000, seed=1, max_len=4096)
    order = decreasing_order(lengths)
    bins, _, nbins = first_fit_in_order(lengths[order], 4096, 5)
    with ffd_path("vectorised"):
        res = pack_lengths(lengths, 4096, "first_fit_decreasing", max_seqs_per_pack=5)
    assert res.num_bins == nbins
    assert res.bin_ids[order].tolist() == bins.tolist()


@pytest.mark.parametrize("algorithm", ["best_fit_decreasing", "first_fit_decreasing"])
@pytest.mark.parametrize("capacity", [100_000, 1_500_000])
def test_fast_matches_reference_with_wide_lengths(algorithm, capacity):
    # beyond 16 bits the generic stable sort is used, beyond 20 bits run-length grouping
    lengths = np.random.default_rng(2).integers(0, capacity, size=400)
    lengths[::7] = capacity // 3  # a repeated value
    expected = slow_pack(lengths, capacity, algorithm)
    for path in FFD_PATHS:
        with ffd_path(path):
            res = pack_lengths(lengths, capacity, algorithm)
        assert res.bins() == expected


@settings(max_examples=120, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 40), max_size=50),
    capacity=st.integers(1, 30),
    algorithm=st.sampled_from(ALGORITHMS),
    max_seqs=st.none() | st.integers(1, 6),
    oversize=st.sampled_from(["report", "truncate"]),
    seed=st.integers(0, 3),
)
def test_properties_and_reference_agreement(lengths, capacity, algorithm, max_seqs, oversize, seed):
    expected = slow_pack(
        lengths, capacity, algorithm, seed=seed, max_seqs=max_seqs, oversize=oversize
    )
    for path in FFD_PATHS:
        with ffd_path(path):
            res = pack_lengths(
                lengths,
                capacity,
                algorithm,
                seed=seed,
                max_seqs_per_pack=max_seqs,
                oversize=oversize,
            )
        check_invariants(res, lengths, capacity, max_seqs)
        assert res.bins() == expected


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.sampled_from([0, 1, 2, 3, 5, 8, 13, 21, 34]), min_size=1, max_size=120),
    max_seqs=st.none() | st.integers(1, 9),
)
def test_many_repeated_lengths_match_reference(lengths, max_seqs):
    # long runs of equal lengths exercise the bulk steps (one step per distinct length)
    for algorithm in ("best_fit_decreasing", "first_fit_decreasing"):
        with ffd_path("vectorised"):
            res = pack_lengths(lengths, 34, algorithm, max_seqs_per_pack=max_seqs)
        assert res.bins() == slow_pack(lengths, 34, algorithm, max_seqs=max_seqs)


def test_whole_dataset_packing_reaches_the_lower_bound_closely():
    lengths = sample_lengths("lognormal", 20_000, seed=0)
    for algorithm in ("best_fit_decreasing", "first_fit_decreasing"):
        res = pack_lengths(lengths, 4096, algorithm)
        check_invariants(res, lengths, 4096)
        assert res.num_bins - res.lower_bound <= 2
    nf = pack_lengths(lengths, 4096, "next_fit")
    assert nf.num_bins > res.num_bins  # next fit is worse, as it should be


# ---------------------------------------------------------------------------------------------
# Oversize policies and edge cases
# ---------------------------------------------------------------------------------------------


def test_oversize_error_names_first_item_length_and_count():
    with pytest.raises(PackingError) as err:
        pack_lengths([10, 300, 20, 500], 256)
    msg = str(err.value)
    assert "2 item(s)" in msg and "item 1" in msg and "length 300" in msg and "256" in msg
    assert err.value.row == 1 and err.value.field == "lengths"


def test_oversize_report_leaves_items_out_and_lists_them():
    res = pack_lengths([10, 300, 20, 500], 256, oversize="report")
    assert res.bin_ids.tolist() == [0, -1, 0, -1]
    assert res.oversize.tolist() == [1, 3] and res.truncated.tolist() == []
    assert res.bins() == [[2, 0]] and res.total_tokens == 30 and res.num_packed == 2
    assert res.to_dict()["oversize"] == [1, 3]


def test_oversize_truncate_packs_items_at_capacity():
    res = pack_lengths([10, 300, 20, 500], 256, "first_fit", oversize="truncate")
    assert res.bins() == [[0, 2], [1], [3]]
    assert res.bin_sums.tolist() == [30, 256, 256]
    assert res.truncated.tolist() == [1, 3] == res.oversize.tolist()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_edge_cases(algorithm):
    empty = pack_lengths([], 16, algorithm)
    assert empty.num_bins == 0 and empty.bins() == [] and empty.lower_bound == 0
    assert empty.stats()["efficiency"] == 0.0
    json.dumps(empty.to_dict(include_assignment=True))
    zeros = pack_lengths([0, 0, 0], 16, algorithm)
    assert len(zeros.bins()) == 1 and sorted(zeros.bins()[0]) == [0, 1, 2]  # shuffle reorders
    assert zeros.total_tokens == 0 and zeros.lower_bound == 0
    ones = pack_lengths([1, 1, 1], 1, algorithm)
    assert sorted(ones.bins()) == [[0], [1], [2]] and ones.efficiency == 1.0
    allover = pack_lengths([5, 6], 4, algorithm, oversize="report")
    assert allover.num_bins == 0 and allover.bin_ids.tolist() == [-1, -1]
    full = pack_lengths([4, 4], 4, algorithm)
    assert sorted(full.bins()) == [[0], [1]] and full.min_bin_fill == 4


def test_bad_arguments_raise_usage_errors():
    with pytest.raises(UsageError, match="capacity"):
        pack_lengths([1], 0)
    with pytest.raises(UsageError, match="capacity"):
        pack_lengths([1], True)
    with pytest.raises(UsageError, match="unknown packing algorithm"):
        pack_lengths([1], 4, "worst_fit")
    with pytest.raises(UsageError, match="max_seqs_per_pack"):
        pack_lengths([1], 4, max_seqs_per_pack=0)
    with pytest.raises(UsageError, match="oversize"):
        pack_lengths([1], 4, oversize="drop")
    with pytest.raises(InputError, match=r"lengths\[1\] is -3") as err:
        pack_lengths([1, -3], 4)
    assert err.value.row == 1 and err.value.field == "lengths"
    with pytest.raises(InputError, match="integers"):
        pack_lengths([1.5, 2.0], 4)
    with pytest.raises(UsageError, match="one-dimensional"):
        pack_lengths([[1, 2]], 4)
    with pytest.raises(UsageError, match="first_fit_decreasing"):
        pack_lengths([1], MAX_BFD_CAPACITY + 1)
    with pytest.raises(UsageError, match="seed"):
        pack_lengths([1], 4, "first_fit_shuffle", seed=-1)


def test_result_is_frozen_and_serialisable():
    # BFD on [3, 5, 2], C=8: 5 -> bin 0, 3 -> bin 0 (now full), 2 -> bin 1
    res = pack_lengths([3, 5, 2], 8)
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.capacity = 9  # type: ignore[misc]
    with pytest.raises(ValueError):
        res.bin_ids[0] = 5
    d = res.to_dict()
    assert "bin_ids" not in d and "order" not in d
    assert d["num_bins"] == 2 and d["lower_bound"] == 2 and d["max_items_per_bin"] == 2
    assert d["bins_over_lower_bound"] == 0 and d["min_bin_fill"] == 2 and d["efficiency"] == 10 / 16
    full = json.loads(json.dumps(res.to_dict(include_assignment=True)))
    assert full["order"] == [1, 0, 2] and full["bin_ids"] == [0, 0, 1]
    assert full["bin_sums"] == [8, 2]
    assert res.offsets.tolist() == [0, 2, 3] and res.bin_counts.tolist() == [2, 1]


# --- payloads with separate item lengths ---------------------------------------------------------


def test_pack_items_packs_payloads_by_their_lengths():
    from seqpack.packing.algorithms import pack_items

    # Bridge's worked example: a, b, c fit 10; d opens a new bin
    assert pack_items(["a", "b", "c", "d"], 10, "first_fit", item_lengths=[5, 3, 2, 7]) == [["a", "b", "c"], ["d"]]
    # without item_lengths the items are their own lengths, and the bins equal pack_lengths' bins
    lengths = [5, 3, 2, 7, 4]
    assert pack_items(lengths, 10, "first_fit") == [[lengths[i] for i in b] for b in pack_lengths(lengths, 10, "first_fit").bins()]
    objects = [{"id": i} for i in range(5)]
    for algorithm in ("best_fit_decreasing", "first_fit_decreasing", "first_fit_shuffle", "next_fit"):
        bins = pack_items(objects, 10, algorithm, item_lengths=lengths, seed=3)
        assert [[o["id"] for o in b] for b in bins] == pack_lengths(lengths, 10, algorithm, seed=3).bins()
    with pytest.raises(UsageError, match="same number of entries"):
        pack_items(objects, 10, item_lengths=lengths[:-1])
    with pytest.raises(UsageError, match="sequence"):
        pack_items("abc", 10)
    # oversize payloads follow the oversize policy: report leaves them out of every bin
    assert pack_items(["x", "y"], 4, "first_fit", item_lengths=[9, 3], oversize="report") == [["y"]]
