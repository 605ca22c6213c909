"""Transformer Engine's THD context-parallel partition rule and the per-rank batch slice."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.core.alignment import derive_alignment
from seqpack.core.errors import AlignmentError, InputError, UsageError
from seqpack.training.boundaries import physical_boundaries_for_cp
from seqpack.training.context_parallel import slice_thd_batch_for_cp, thd_partition_indices
from tests.distributed.thd_helpers import make_thd_batch, random_sequences


def idx(cu: list[int], cp: int, rank: int) -> list[int]:
    out = thd_partition_indices(torch.tensor(cu, dtype=torch.int32), cp, rank)
    assert out.dtype == torch.int64
    return out.tolist()


# --- worked examples (mcore contract section 4.2, bridge contract section 3.2) ---------------


def test_worked_example_cp2() -> None:
    assert idx([0, 8, 12, 16], 2, 0) == [0, 1, 6, 7, 8, 11, 12, 15]
    assert idx([0, 8, 12, 16], 2, 1) == [2, 3, 4, 5, 9, 10, 13, 14]


def test_three_sequence_example_with_padding_mask() -> None:
    # real lengths 3, 5, 11 padded to multiples of 4: padding at 3, 9, 10, 11 and 23.
    cu = [0, 4, 12, 24]
    assert idx(cu, 2, 0) == [0, 3, 4, 5, 10, 11, 12, 13, 14, 21, 22, 23]
    assert idx(cu, 2, 1) == [1, 2, 6, 7, 8, 9, 15, 16, 17, 18, 19, 20]
    pad = torch.zeros(24, dtype=torch.bool)
    pad[[3, 9, 10, 11, 23]] = True
    assert pad[idx(cu, 2, 0)].int().tolist() == [0, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1]
    assert pad[idx(cu, 2, 1)].int().tolist() == [0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0]


def test_more_examples() -> None:
    assert idx([0, 8, 12, 24], 2, 0) == [0, 1, 6, 7, 8, 11, 12, 13, 14, 21, 22, 23]
    assert idx([0, 8, 12, 24], 2, 1) == [2, 3, 4, 5, 9, 10, 15, 16, 17, 18, 19, 20]
    expected = [[0, 7, 8, 9, 22, 23], [1, 6, 10, 11, 20, 21], [2, 5, 12, 13, 18, 19], [3, 4, 14, 15, 16, 17]]
    assert [idx([0, 8, 24], 4, r) for r in range(4)] == expected


@pytest.mark.parametrize(("length", "cp"), [(16, 2), (24, 3), (32, 4)])
def test_single_sequence_equals_zigzag(length: int, cp: int) -> None:
    chunks = torch.arange(length).view(2 * cp, length // (2 * cp))
    for r in range(cp):
        assert idx([0, length], cp, r) == torch.cat([chunks[r], chunks[2 * cp - 1 - r]]).tolist()


def test_cp1_is_identity_without_alignment() -> None:
    assert idx([0, 3, 8], 1, 0) == list(range(8))


def test_accepts_one_row_and_keeps_zero_length_sequences() -> None:
    cu = torch.tensor([[0, 4, 4, 8]], dtype=torch.int32)
    assert thd_partition_indices(cu, 2, 1).tolist() == [1, 2, 5, 6]


# --- property: a permutation, and every sequence's chunks pair up ----------------------------


@settings(max_examples=60, deadline=None)
@given(
    cp=st.integers(min_value=1, max_value=4),
    units=st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=6),
)
def test_partition_is_a_balanced_permutation(cp: int, units: list[int]) -> None:
    m = 2 * cp
    lengths = [u * m for u in units]
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    total = cu[-1]
    parts = [idx(cu, cp, r) for r in range(cp)]
    assert all(len(p) == total // cp for p in parts)
    assert sorted(i for p in parts for i in p) == list(range(total))
    for r, part in enumerate(parts):
        offset = 0
        for s, n in enumerate(lengths):
            c = n // m
            local = part[offset : offset + 2 * c]  # sequence s sits at [cu[s]/CP, cu[s+1]/CP) locally
            assert offset == cu[s] // cp
            first = [cu[s] + r * c + q for q in range(c)]
            second = [cu[s] + (m - 1 - r) * c + q for q in range(c)]
            assert local == first + second
            offset += 2 * c


# --- errors ----------------------------------------------------------------------------------


def test_misaligned_sequence_names_index_length_multiple_and_fix() -> None:
    with pytest.raises(AlignmentError) as info:
        thd_partition_indices([0, 8, 14, 16], 2, 0)
    text = str(info.value)
    assert "sequence 1 has physical length 6" in text
    assert "multiple of 2*CP=4" in text
    assert "pad_seq_to_mult" in text and "derive_alignment(cp=2)" in text
    assert info.value.fix is not None


def test_misaligned_counts_other_sequences() -> None:
    with pytest.raises(AlignmentError, match=r"sequence 0 has physical length 5.*2 more sequence"):
        thd_partition_indices([0, 5, 8, 11], 2, 0)


def test_multiple_follows_cp_size() -> None:
    thd_partition_indices([0, 6, 12], 3, 2)  # 2*CP = 6
    with pytest.raises(AlignmentError, match="multiple of 2\\*CP=8"):
        thd_partition_indices([0, 6, 12], 4, 0)


def test_total_tokens_must_match_last_boundary() -> None:
    with pytest.raises(AlignmentError, match="row has 20 tokens but its physical boundaries end at 16"):
        thd_partition_indices([0, 8, 16], 2, 0, total_tokens=20)


@pytest.mark.parametrize(("cp", "rank"), [(2, 2), (2, -1), (0, 0), (2, 1.0), (True, 0)])
def test_bad_topology(cp: object, rank: object) -> None:
    with pytest.raises(UsageError):
        thd_partition_indices([0, 8], cp, rank)  # type: ignore[arg-type]


def test_two_row_boundaries_rejected() -> None:
    with pytest.raises(InputError, match="micro-batch size 1"):
        thd_partition_indices([[0, 4, 8], [0, 4, 8]], 2, 0)


# --- slicing a batch -------------------------------------------------------------------------


def test_item79_slice_uses_padded_boundaries_and_slices_every_token_tensor() -> None:
    batch = {
        "tokens": torch.arange(8)[None] + 100,
        "labels": torch.arange(8)[None] + 200,
        "loss_mask": torch.tensor([[1.0, 1, 1, 0, 1, 1, 1, 0]]),
        "position_ids": torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3]]),
        "padding_mask": torch.tensor([[False, False, False, True, False, False, False, True]]),
        # Bridge's item uses real [0,3,8] with padded [0,4,8] (5 real tokens in 4 slots), which our
        # stricter boundary check rejects; [0,3,7] is the consistent version of the same layout.
        "cu_seqlens_q": torch.tensor([0, 3, 7], dtype=torch.int32),
        "cu_seqlens_kv": torch.tensor([0, 3, 7], dtype=torch.int32),
        "cu_seqlens_q_padded": torch.tensor([0, 4, 8], dtype=torch.int32),
        "cu_seqlens_kv_padded": torch.tensor([0, 4, 8], dtype=torch.int32),
        "max_seqlen_q": 4,
        "max_seqlen_kv": 4,
        "attention_mask": None,
        "token_count": [7],
    }
    rank0 = slice_thd_batch_for_cp(batch, 2, 0)
    # padded [0,4,8] -> chunks of 1: rank 0 takes positions 0,3 and 4,7
    assert rank0["tokens"].tolist() == [[100, 103, 104, 107]]
    assert rank0["labels"].tolist() == [[200, 203, 204, 207]]
    assert rank0["loss_mask"].tolist() == [[1.0, 0.0, 1.0, 0.0]]
    assert rank0["position_ids"].tolist() == [[0, 3, 0, 3]]
    assert rank0["padding_mask"].tolist() == [[False, True, False, True]]
    for key in ("cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded", "cu_seqlens_kv_padded"):
        assert rank0[key] is batch[key]  # boundaries stay global
    assert rank0["max_seqlen_q"] == 4 and rank0["attention_mask"] is None and rank0["token_count"] == [7]
    batch["cu_seqlens_q"] = torch.tensor([0, 3, 8], dtype=torch.int32)
    with pytest.raises(InputError, match="sequence 1 has 5 real tokens but only 4 physical slots"):
        slice_thd_batch_for_cp(batch, 2, 0)
    batch["cu_seqlens_q"] = batch["cu_seqlens_kv"]
    rank1 = slice_thd_batch_for_cp(batch, 2, 1)
    assert rank1["tokens"].tolist() == [[101, 102, 105, 106]]
    assert batch["tokens"].shape == (1, 8)  # input untouched


def test_item80_legacy_boundaries_for_cp() -> None:
    legacy = {"cu_seqlens": torch.tensor([[0, 4, 6, 8, -1, -1]], dtype=torch.int32), "tokens": torch.zeros(1, 8)}
    assert physical_boundaries_for_cp(legacy).tolist() == [0, 4, 6, 8]
    legacy["cu_seqlens"] = torch.tensor([[0, 4, 8]], dtype=torch.int32)
    assert physical_boundaries_for_cp(legacy).tolist() == [0, 4, 8]
    legacy["attention_mask"] = None
    legacy["tokens"] = torch.arange(8)[None]
    sliced = slice_thd_batch_for_cp(legacy, 2, 1)
    assert sliced["tokens"].tolist() == [[1, 2, 5, 6]]
    assert sliced["attention_mask"] is None


def test_slice_without_padded_uses_real_boundaries() -> None:
    batch = make_thd_batch(random_sequences([4, 8], seed=1), 1)
    assert "cu_seqlens_q_padded" not in batch
    assert slice_thd_batch_for_cp(batch, 2, 0)["tokens"].tolist() == [batch["tokens"][0, [0, 3, 4, 5, 10, 11]].tolist()]


def test_cp_batch_round_trip() -> None:
    batch = make_thd_batch(random_sequences([3, 9, 5], seed=2), derive_alignment(cp=2).pad_seq_to_mult, trailing_pad=4)
    cu = batch["cu_seqlens_q_padded"]
    rebuilt = torch.empty_like(batch["tokens"])
    for r in range(2):
        rebuilt[0, thd_partition_indices(cu, 2, r)] = slice_thd_batch_for_cp(batch, 2, r)["tokens"]
    assert torch.equal(rebuilt, batch["tokens"])


def test_slice_rejects_batch_aligned_for_cp1() -> None:
    batch = make_thd_batch(random_sequences([5, 7], seed=3), derive_alignment(cp=1).pad_seq_to_mult)
    with pytest.raises(AlignmentError, match="sequence 0 has physical length 5"):
        slice_thd_batch_for_cp(batch, 2, 0)


def test_slice_rejects_mbs2_boundaries() -> None:
    batch = {"tokens": torch.zeros(2, 8, dtype=torch.int64), "cu_seqlens_q": torch.tensor([[0, 4, 8], [0, 4, 8]])}
    with pytest.raises(InputError, match="micro-batch size 1"):
        slice_thd_batch_for_cp(batch, 2, 0)


def test_slice_rejects_wrong_length_token_tensor() -> None:
    batch = make_thd_batch(random_sequences([4, 4], seed=4), 4)
    batch["loss_mask"] = batch["loss_mask"][:, :6]
    with pytest.raises(InputError) as info:
        slice_thd_batch_for_cp(batch, 2, 0)
    assert info.value.field == "loss_mask"


def test_slice_rejects_tail_past_last_boundary() -> None:
    batch = make_thd_batch(random_sequences([4, 4], seed=4), 4)
    for key in ("tokens", "labels", "loss_mask", "position_ids", "padding_mask"):
        batch[key] = torch.cat([batch[key], batch[key][:, :4]], dim=1)
    with pytest.raises(AlignmentError, match="row has 12 tokens"):
        slice_thd_batch_for_cp(batch, 2, 0)


def test_cp1_slice_is_a_copy() -> None:
    batch = make_thd_batch(random_sequences([3], seed=5), 1)
    out = slice_thd_batch_for_cp(batch, 1, 0)
    assert out == batch and out is not batch


# --- Transformer Engine's dtype check and Megatron-Bridge's CP-group check -------------------------


def test_int64_boundary_tensors_are_rejected_like_transformer_engine() -> None:
    from seqpack.core.errors import InputError

    with pytest.raises(InputError, match="int32"):
        thd_partition_indices(torch.tensor([0, 4, 8], dtype=torch.int64), 2, 0)
    batch = {"tokens": torch.arange(8)[None], "cu_seqlens_q": torch.tensor([0, 4, 8])}  # int64 by default
    with pytest.raises(InputError, match="cu_seqlens_q is a torch.int64 tensor"):
        slice_thd_batch_for_cp(batch, 2, 0)
    # values given as a list are read as values (no tensor dtype to check)
    assert thd_partition_indices([0, 4, 8], 2, 0).tolist() == [0, 3, 4, 7]
    batch["cu_seqlens_q"] = batch["cu_seqlens_q"].to(torch.int32)
    assert slice_thd_batch_for_cp(batch, 2, 0)["tokens"].tolist() == [[0, 3, 4, 7]]


class _Group:
    def __init__(self, rank: int, size: int) -> None:
        self._rank, self._size = rank, size

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size


def test_cp_group_must_match_the_requested_rank_and_size() -> None:
    from seqpack.core.errors import UsageError

    batch = {"tokens": torch.arange(8)[None], "cu_seqlens_q": torch.tensor([0, 4, 8], dtype=torch.int32)}
    with pytest.raises(UsageError, match="rank 1 and size 2, but rank 0 and size 2"):
        slice_thd_batch_for_cp(batch, 2, 0, cp_group=_Group(1, 2))
    with pytest.raises(UsageError, match="size 4"):
        slice_thd_batch_for_cp(batch, 2, 1, cp_group=_Group(1, 4))
    assert slice_thd_batch_for_cp(batch, 2, 1, cp_group=_Group(1, 2))["tokens"].tolist() == [[1, 2, 5, 6]]
