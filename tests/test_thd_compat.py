"""Tests of the THD compatibility adapters (reference_impl/seqpack/packing/thd_compat.py and thd_collate.py).

Expected values are Bridge's worked examples E1-E5 (bridge_contracts.md section 1.12), the packed
collate items 42-46 and the legacy-key items 72-76 (section 6), the in-batch items 48, 52, 53,
58-60, 62 (section 6.5) and item 30's stored row (quirk Q3); the rest are hand layouts.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.core.errors import AlignmentError, ArtifactError, PackingError, UsageError
from seqpack.packing.thd import build_thd_batch, validate_thd_batch
from seqpack.packing import thd_collate, thd_compat
from seqpack.packing.thd_compat import from_bridge_offline_batch, from_legacy_batch, to_legacy_batch
from seqpack.packing.thd_collate import collate_stored_row_canonical, right_padded_to_thd, static_shape_from_metadata, stored_row_segments

F, T = False, True


def collate_stored_rows(rows, **kwargs):
    """The worked examples keep the ``padding_mask`` key of Bridge main's batch form (read at 067f987);
    megatron-bridge 0.6.2's has none, which is the default (``test_default_bridge_form_is_the_releases``)."""
    return thd_collate.collate_stored_rows(rows, emit_padding_mask=True, **kwargs)


def to_bridge_offline_batch(batches, **kwargs):
    """Bridge main's form, with ``padding_mask`` (see :func:`collate_stored_rows`)."""
    return thd_compat.to_bridge_offline_batch(batches, emit_padding_mask=True, **kwargs)

# E1 / E2 stored row and metadata
E1_ROW = {
    "input_ids": [8, 9, 10, 11, 12, 0, 0, 0, 0, 5, 6, 7, 0, 0],
    "seq_start_id": [0, 9],
    "loss_mask": [0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0, 0],
}
METADATA = [
    {"max_samples_per_bin": 3, "dataset_max_seqlen": 8, "min_packed_seqlen": 12},
    {"max_samples_per_bin": 2, "dataset_max_seqlen": 6, "min_packed_seqlen": 4},
]
E3_ROW = {
    "input_ids": list(range(10, 17)) + list(range(30, 35)),
    "seq_start_id": [0, 7],
    "loss_mask": [1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 0],
}


def assert_same_batch(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert list(a.keys()) == list(b.keys())
    for key, value in a.items():
        other = b[key]
        if isinstance(value, torch.Tensor):
            assert isinstance(other, torch.Tensor), key
            assert value.dtype == other.dtype, key
            assert value.shape == other.shape, key
            assert torch.equal(value, other), key
        else:
            assert type(value) is type(other) and value == other, key


def L(t: torch.Tensor) -> list:
    return t.tolist()


# ----------------------------------------------------------------------------------------------
# Bridge's packed collate: worked examples E1-E5 (item 47)


def test_e1_alignment_four_fixed_width():
    b = collate_stored_rows([E1_ROW], pack_size=16, pad_seq_to_mult=4, eos_id=0, pad_to_max_length=True)
    assert L(b["tokens"]) == [[8, 9, 10, 11, 12, 0, 0, 0, 5, 6, 7, 0, 0, 0, 0, 0]]
    assert L(b["labels"]) == [[9, 10, 11, 12, 0, 0, 0, 0, 6, 7, 0, 0, 0, 0, 0, 0]]
    assert L(b["loss_mask"]) == [[0, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0]]
    assert L(b["position_ids"]) == [[0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 0, 0, 0, 0]]
    assert b["token_count"] == [12]
    assert L(b["cu_seqlens_q"]) == [[0, 5, 8, 8]]
    assert L(b["cu_seqlens_q_padded"]) == [[0, 8, 12, 16]]
    assert L(b["max_seqlen_q"]) == [[8]]
    pad = [i in (5, 6, 7, 11, 12, 13, 14, 15) for i in range(16)]
    assert L(b["padding_mask"]) == [pad]
    assert b["attention_mask"] is None
    # dtypes and shared objects of the Bridge form
    assert b["tokens"].dtype == b["labels"].dtype == b["loss_mask"].dtype == torch.int64
    assert b["position_ids"].dtype == torch.int64 and b["padding_mask"].dtype == torch.bool
    assert b["cu_seqlens_q"].dtype == torch.int32 and b["max_seqlen_q"].dtype == torch.int32
    assert b["cu_seqlens_kv"] is b["cu_seqlens_q"]
    assert b["cu_seqlens_kv_padded"] is b["cu_seqlens_q_padded"]
    assert b["max_seqlen_kv"] is b["max_seqlen_q"]


def test_e2_pad_cu_seqlens():
    b = collate_stored_rows(
        [E1_ROW], pack_size=16, pad_seq_to_mult=4, eos_id=0, pad_to_max_length=True,
        pad_cu_seqlens=True, pack_metadata=METADATA,
    )
    assert L(b["cu_seqlens_q"]) == [[0, 5, 8, 8, 8]]
    assert L(b["cu_seqlens_q_padded"]) == [[0, 8, 12, 16, 16]]
    assert L(b["max_seqlen_q"]) == [12]
    assert b["max_seqlen_q"].shape == (1,)
    assert L(b["tokens"]) == [[8, 9, 10, 11, 12, 0, 0, 0, 5, 6, 7, 0, 0, 0, 0, 0]]


def test_e3_no_alignment_pad_cu_seqlens():
    b = collate_stored_rows(
        [E3_ROW], pack_size=16, pad_seq_to_mult=1, eos_id=0, pad_to_max_length=True,
        pad_cu_seqlens=True, pack_metadata=METADATA,
    )
    assert L(b["tokens"]) == [[10, 11, 12, 13, 14, 15, 30, 31, 32, 33] + [0] * 6]
    assert L(b["labels"]) == [[11, 12, 13, 14, 15, 16, 31, 32, 33, 34] + [0] * 6]
    assert L(b["loss_mask"]) == [[1] * 10 + [0] * 6]
    assert L(b["cu_seqlens_q"]) == [[0, 6, 10, 16, 16]]
    assert "cu_seqlens_q_padded" not in b and "cu_seqlens_kv_padded" not in b
    assert L(b["max_seqlen_q"]) == [12]
    assert L(b["padding_mask"]) == [[F] * 10 + [T] * 6]


def test_e4_defaults_exact_fit():
    b = collate_stored_rows([E3_ROW], pack_size=10, pad_seq_to_mult=1, eos_id=0, pad_to_max_length=False)
    assert L(b["tokens"]) == [[10, 11, 12, 13, 14, 15, 30, 31, 32, 33]]
    assert L(b["labels"]) == [[11, 12, 13, 14, 15, 16, 31, 32, 33, 34]]
    assert L(b["loss_mask"]) == [[1] * 10]
    assert L(b["position_ids"]) == [[0, 1, 2, 3, 4, 5, 0, 1, 2, 3]]
    assert L(b["cu_seqlens_q"]) == [[0, 6, 10]]
    assert L(b["max_seqlen_q"]) == [[6]]
    assert L(b["padding_mask"]) == [[F] * 10]
    assert b["token_count"] == [10]


def test_e5_full_loss_masks_eos_inputs():
    row = {"input_ids": [5, 0, 7, 8, 0, 9, 0], "seq_start_id": [0, 5], "loss_mask": [0] * 7}
    b = collate_stored_rows(
        [row], pack_size=10, pad_seq_to_mult=1, eos_id=0, pad_to_max_length=False,
        answer_only_loss=False,
    )
    assert L(b["tokens"]) == [[5, 0, 7, 8, 9, 0, 0, 0, 0, 0]]
    assert L(b["labels"]) == [[0, 7, 8, 0, 0, 0, 0, 0, 0, 0]]
    assert L(b["loss_mask"]) == [[1, 0, 1, 1, 1, 0, 0, 0, 0, 0]]  # quirk Q5: input == eos -> 0
    assert L(b["cu_seqlens_q"]) == [[0, 4, 5, 10]]
    assert L(b["max_seqlen_q"]) == [[5]]


# ----------------------------------------------------------------------------------------------
# packed collate items 42-46


def test_item42_two_rows_equalized():
    rows = [
        {"input_ids": [10, 11, 12, 13, 20, 21, 22, 23], "seq_boundaries": [0, 4, 8], "loss_mask": [1] * 8},
        {"input_ids": list(range(30, 38)), "seq_boundaries": [0, 8], "loss_mask": [1] * 8},
    ]
    b = collate_stored_rows(
        rows, pack_size=8, pad_seq_to_mult=1, eos_id=2, pad_to_max_length=False,
        pad_seq_length_to_mult=1,
    )
    assert L(b["cu_seqlens_q"]) == [[0, 3, 6, 7], [0, 7, 7, 7]]
    assert L(b["cu_seqlens_kv"]) == [[0, 3, 6, 7], [0, 7, 7, 7]]
    assert L(b["max_seqlen_q"]) == [[3], [7]] and L(b["max_seqlen_kv"]) == [[3], [7]]
    assert L(b["padding_mask"]) == [[F] * 6 + [T], [F] * 7]
    assert L(b["tokens"]) == [[10, 11, 12, 20, 21, 22, 2], list(range(30, 37))]
    assert L(b["labels"]) == [[11, 12, 13, 21, 22, 23, 2], list(range(31, 38))]
    assert L(b["loss_mask"]) == [[1] * 6 + [0], [1] * 7]
    assert L(b["position_ids"]) == [[0, 1, 2, 0, 1, 2, 0], list(range(7))]
    assert b["token_count"] == [6, 7]


def test_item43_alignment_with_eos_tail():
    row = {"input_ids": [10, 11, 12, 2, 2, 20, 21, 2, 2, 2], "seq_boundaries": [0, 5, 10], "loss_mask": [1] * 10}
    b = collate_stored_rows([row], pack_size=8, pad_seq_to_mult=4, eos_id=2, pad_to_max_length=False)
    assert L(b["tokens"]) == [[10, 11, 12, 2, 20, 21, 2, 2]]
    assert L(b["cu_seqlens_q"]) == [[0, 3, 5]]
    assert L(b["cu_seqlens_q_padded"]) == [[0, 4, 8]]
    assert L(b["padding_mask"]) == [[F, F, F, T, F, F, T, T]]
    assert L(b["max_seqlen_q"]) == [[4]]
    assert L(b["position_ids"]) == [[0, 1, 2, 3, 0, 1, 2, 3]]


def test_item44_fixed_width_single_segment():
    row = {"input_ids": [10, 11, 12, 2], "seq_boundaries": [0, 4], "loss_mask": [1, 1, 1, 0]}
    b = collate_stored_rows([row], pack_size=8, pad_seq_to_mult=1, eos_id=2, pad_to_max_length=True)
    assert L(b["tokens"]) == [[10, 11, 12, 2, 2, 2, 2, 2]]
    assert L(b["cu_seqlens_q"]) == [[0, 3, 8]]
    assert "cu_seqlens_q_padded" not in b
    assert L(b["padding_mask"]) == [[F, F, F, T, T, T, T, T]]
    assert L(b["max_seqlen_q"]) == [[5]]
    assert b["token_count"] == [3]


def test_item45_padding_mask_always_present():
    partial = {"input_ids": [10, 11, 12, 2], "seq_boundaries": [0, 4], "loss_mask": [1] * 4}
    full = {"input_ids": list(range(10, 19)), "seq_boundaries": [0, 9], "loss_mask": [1] * 9}
    kwargs = dict(pack_size=8, pad_seq_to_mult=1, eos_id=2, pad_to_max_length=True)
    first = collate_stored_rows([partial], **kwargs)["padding_mask"]
    second = collate_stored_rows([full], **kwargs)["padding_mask"]
    assert first.shape == second.shape == (1, 8)
    assert first.any() and not second.any()


def test_item46_padding_row_contributes_no_loss():
    real = {"input_ids": [10, 11, 12, 13, 20, 21, 22, 23], "seq_start_id": [0, 4], "loss_mask": [1] * 8}
    padding_row = dict(real, loss_mask=[0] * 8)  # what the dataset returns for index -1
    b = collate_stored_rows(
        [real, padding_row], pack_size=8, pad_seq_to_mult=1, eos_id=2, pad_to_max_length=True
    )
    assert int(b["loss_mask"][0].sum()) == 6
    assert int(b["loss_mask"][1].sum()) == 0
    assert torch.equal(b["tokens"][0], b["tokens"][1])


def test_item30_legacy_template_loss_on_alignment_padding_is_dropped_with_the_eos_inputs():
    # quirk Q3: the stored loss mask is True on pre-padding positions. Bridge main at 067f987 kept it as
    # stored; megatron-bridge 0.6.2's collate (and seqpack's) zeroes the loss wherever the input token is
    # EOS, which the pre-padding is (tests/upstream/test_diff_readers.py checks it on Bridge's own pack)
    row = {
        "input_ids": [11, 12, 13, 14, 0, 21, 22, 23, 0, 0, 31, 32, 33, 34, 35, 36, 0, 0, 0],
        "seq_start_id": [0, 5, 10],
        "loss_mask": [F, T, T, T, T, T, T, T, T, T, F, F, T, T, T, T, T, T, T],
    }
    b = collate_stored_rows([row], pack_size=16, pad_seq_to_mult=4, eos_id=0, pad_to_max_length=True)
    assert L(b["tokens"]) == [[11, 12, 13, 14, 21, 22, 23, 0, 31, 32, 33, 34, 35, 36, 0, 0]]
    assert L(b["labels"]) == [[12, 13, 14, 0, 22, 23, 0, 0, 32, 33, 34, 35, 36, 0, 0, 0]]
    assert L(b["loss_mask"]) == [[0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 0, 0]]
    assert L(b["cu_seqlens_q"]) == [[0, 4, 7, 13]]
    assert L(b["cu_seqlens_q_padded"]) == [[0, 4, 8, 16]]
    pad = b["padding_mask"][0]
    assert L(pad.nonzero().flatten()) == [7, 14, 15]
    assert L(b["loss_mask"][0][pad]) == [0, 0, 0]


def test_q2_stored_row_longer_than_the_pack_fits_by_runtime_tokens():
    # 18 stored tokens in 2 segments -> 16 runtime tokens: exactly one pack of 16
    row = {"input_ids": list(range(1, 10)) + list(range(11, 20)), "seq_start_id": [0, 9],
           "loss_mask": [1] * 18}
    b = collate_stored_rows([row], pack_size=16, pad_seq_to_mult=1, eos_id=0, pad_to_max_length=True)
    assert L(b["tokens"]) == [list(range(1, 9)) + list(range(11, 19))]
    assert L(b["cu_seqlens_q"]) == [[0, 8, 16]] and not b["padding_mask"].any()


def test_q4_content_ending_in_eos_shortens_the_logical_length():
    # the third input token 0 may be a real end-of-turn id equal to eos: it counts as padding, and (as in
    # megatron-bridge 0.6.2's collate) an input equal to eos trains nothing
    row = {"input_ids": [5, 6, 0, 0, 0], "seq_start_id": [0], "loss_mask": [1, 1, 1, 0, 0]}
    canonical = collate_stored_row_canonical(row, pack_size=4, pad_seq_to_mult=2, eos_id=0, pad_to_max_length=True)
    assert L(canonical["cu_seqlens_q"]) == [0, 2]
    assert L(canonical["cu_seqlens_q_padded"]) == [0, 4]
    assert L(canonical["loss_mask"]) == [[1, 1, 0, 0]]


def test_width_rounds_to_pad_seq_length_to_mult_and_caps_at_pack_size():
    row = {"input_ids": list(range(1, 8)), "seq_start_id": [0], "loss_mask": [1] * 7}
    b = collate_stored_rows([row], pack_size=32, pad_seq_to_mult=1, eos_id=0, pad_to_max_length=False)
    assert b["tokens"].shape == (1, 16)
    assert L(b["cu_seqlens_q"]) == [[0, 6, 16]]
    b = collate_stored_rows([row], pack_size=10, pad_seq_to_mult=1, eos_id=0, pad_to_max_length=False)
    assert b["tokens"].shape == (1, 10)


def test_unaligned_stored_segment_is_aligned_by_the_builder():
    # a pack written with m=1 read with m=4: Bridge would leave [0,5,...]; we align (documented)
    row = {"input_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9], "seq_start_id": [0, 6], "loss_mask": [1] * 9}
    b = collate_stored_rows([row], pack_size=16, pad_seq_to_mult=4, eos_id=0, pad_to_max_length=True)
    assert L(b["cu_seqlens_q_padded"]) == [[0, 8, 12, 16]]
    assert L(b["cu_seqlens_q"]) == [[0, 5, 7, 7]]
    assert L(b["tokens"]) == [[1, 2, 3, 4, 5, 0, 0, 0, 7, 8, 0, 0, 0, 0, 0, 0]]
    assert b["token_count"] == [12]


def test_canonical_variant_e1_e3_e4():
    e1 = collate_stored_row_canonical(E1_ROW, pack_size=16, pad_seq_to_mult=4, eos_id=0, pad_to_max_length=True)
    validate_thd_batch(e1, pad_seq_to_mult=4)
    assert L(e1["cu_seqlens_q"]) == [0, 5, 8, 8]
    assert L(e1["cu_seqlens_q_padded"]) == [0, 8, 12, 16]
    assert e1["max_seqlen_q"] == 8
    assert e1["loss_mask"].dtype == torch.float32
    assert L(e1["tokens"]) == [[8, 9, 10, 11, 12, 0, 0, 0, 5, 6, 7, 0, 0, 0, 0, 0]]
    # m == 1: the width padding has logical length 0 (Bridge would call it a sequence)
    e3 = collate_stored_row_canonical(
        E3_ROW, pack_size=16, pad_seq_to_mult=1, eos_id=0, pad_to_max_length=True,
        pad_cu_seqlens=True, pack_metadata=METADATA,
    )
    assert L(e3["cu_seqlens_q"]) == [0, 6, 10, 10, 10]
    assert L(e3["cu_seqlens_q_padded"]) == [0, 6, 10, 16, 16]
    assert e3["max_seqlen_q"] == 12
    e4 = collate_stored_row_canonical(E3_ROW, pack_size=10, pad_seq_to_mult=1, eos_id=0, pad_to_max_length=False)
    assert L(e4["cu_seqlens_q"]) == [0, 6, 10] and "cu_seqlens_q_padded" not in e4
    # the Bridge form built from the canonical row is Bridge's collate output
    assert_same_batch(
        to_bridge_offline_batch([e1], emit_padded_keys=True),
        collate_stored_rows([E1_ROW], pack_size=16, pad_seq_to_mult=4, eos_id=0, pad_to_max_length=True),
    )


def test_canonical_variant_width_follows_its_own_row():
    short = {"input_ids": [1, 2, 3], "seq_start_id": [0], "loss_mask": [1] * 3}
    c = collate_stored_row_canonical(short, pack_size=64, pad_seq_to_mult=1, eos_id=0,
                                     pad_to_max_length=False, pad_seq_length_to_mult=4)
    assert c["tokens"].shape == (1, 4)
    assert L(c["cu_seqlens_q"]) == [0, 2, 2] and L(c["cu_seqlens_q_padded"]) == [0, 2, 4]


def test_stored_row_segments_split_inputs_and_labels():
    segments = stored_row_segments(E1_ROW, eos_id=0, pad_seq_to_mult=4)
    assert [s["tokens"].tolist() for s in segments] == [[8, 9, 10, 11, 12, 0, 0, 0], [5, 6, 7, 0]]
    assert [s["labels"].tolist() for s in segments] == [[9, 10, 11, 12, 0, 0, 0, 0], [6, 7, 0, 0]]
    assert [s["valid_length"] for s in segments] == [5, 3]
    assert "valid_length" not in stored_row_segments(E1_ROW, eos_id=0, pad_seq_to_mult=1)[0]


def test_static_shape_from_metadata():
    assert static_shape_from_metadata(METADATA, 16) == (4, 12)
    assert static_shape_from_metadata(METADATA[0], 16) == (4, 8)
    with pytest.raises(ArtifactError, match="lacks a non-negative integer 'min_packed_seqlen'"):
        static_shape_from_metadata([{"max_samples_per_bin": 2, "dataset_max_seqlen": 3}], 8)
    with pytest.raises(ArtifactError, match="empty list"):
        static_shape_from_metadata([], 8)


# ----------------------------------------------------------------------------------------------
# collate errors


BASE = dict(pack_size=16, pad_seq_to_mult=4, eos_id=0, pad_to_max_length=True)


@pytest.mark.parametrize(
    ("row", "pattern"),
    [
        (dict(E1_ROW, loss_mask=[1] * 13), "row 0, field 'loss_mask': loss_mask has 13 entries but input_ids 14"),
        (dict(E1_ROW, seq_start_id=[1, 9]), "seq_start_id must start with 0"),
        (dict(E1_ROW, seq_start_id=[0, 13]), "segment 1 has 1 stored tokens"),
        (dict(E1_ROW, seq_start_id=[0, 9, 9]), "segment 1 has 0 stored tokens"),
        (dict(E1_ROW, seq_start_id=[0, 20]), "segment 0 has 20 stored tokens|segment 1 has -6"),
        ({"input_ids": [1, 2, 3], "loss_mask": [1, 1, 1], "seq_boundaries": [0, 2]}, "must end at the row length 3"),
        ({"input_ids": [1, 2, 3], "loss_mask": [1, 1, 1]}, "stored row has no 'seq_start_id'"),
        ({"input_ids": [1.5, 2.0], "loss_mask": [1, 1], "seq_start_id": [0]}, "expected integers"),
    ],
)
def test_bad_stored_rows(row, pattern):
    with pytest.raises(ArtifactError, match=pattern):
        collate_stored_rows([row], **BASE)


def test_stored_row_errors_name_the_row():
    with pytest.raises(ArtifactError) as err:
        collate_stored_rows([E1_ROW, dict(E1_ROW, seq_start_id=[0, 13])], **BASE)
    assert err.value.row == 1 and err.value.field == "seq_start_id"


def test_collate_argument_errors():
    with pytest.raises(UsageError, match="pad_cu_seqlens=True requires pad_to_max_length=True"):
        collate_stored_rows([E1_ROW], **dict(BASE, pad_to_max_length=False), pad_cu_seqlens=True,
                            pack_metadata=METADATA)
    with pytest.raises(UsageError, match="needs the pack metadata"):
        collate_stored_rows([E1_ROW], **BASE, pad_cu_seqlens=True)
    with pytest.raises(UsageError, match="pad_seq_to_mult=None"):
        collate_stored_rows([E1_ROW], **dict(BASE, pad_seq_to_mult=None))
    with pytest.raises(UsageError, match="pack_size must be a positive integer"):
        collate_stored_rows([E1_ROW], **dict(BASE, pack_size=0))
    with pytest.raises(UsageError, match="non-empty sequence"):
        collate_stored_rows([], **BASE)


def test_collate_content_errors_name_row_and_segment():
    with pytest.raises(PackingError, match="stored row 0: packed length 12 exceeds max_length 8"):
        collate_stored_rows([E1_ROW], **dict(BASE, pack_size=8))
    with pytest.raises(AlignmentError, match="max_length=18 is not a multiple of pad_seq_to_mult=4"):
        collate_stored_rows([E1_ROW], **dict(BASE, pack_size=18))
    # stale metadata: more segments than max_samples_per_bin allows (Bridge leaves it, quirk Q14)
    small = [{"max_samples_per_bin": 1, "dataset_max_seqlen": 8, "min_packed_seqlen": 12}]
    with pytest.raises(PackingError, match="3 sequences .*static_num_seqs is 2"):
        collate_stored_rows([E1_ROW], **BASE, pad_cu_seqlens=True, pack_metadata=small)
    tight = [{"max_samples_per_bin": 3, "dataset_max_seqlen": 4, "min_packed_seqlen": 12}]
    with pytest.raises(PackingError, match="longest physical sequence is 8 but static_max_seqlen is 4"):
        collate_stored_rows([E1_ROW], **BASE, pad_cu_seqlens=True, pack_metadata=tight)


# ----------------------------------------------------------------------------------------------
# Bridge form adapter


def _canonical(*rows, **kwargs):
    return build_thd_batch(
        [{"tokens": r, "labels": [t + 1 for t in r], "loss_mask": [1] * len(r)} for r in rows], **kwargs
    )


def test_to_bridge_physical_only_keeps_gaps_in_padding_mask():
    c = _canonical([1, 2, 3], [4, 5], pad_seq_to_mult=4)
    b = to_bridge_offline_batch([c], emit_padded_keys=False)
    assert L(b["cu_seqlens_q"]) == [[0, 4, 8]]
    assert "cu_seqlens_q_padded" not in b
    assert L(b["padding_mask"]) == [[F, F, F, T, F, F, T, T]]
    assert b["token_count"] == [8]
    assert_same_batch(from_bridge_offline_batch(b)[0], c)


def test_to_bridge_emits_a_copy_when_a_row_has_no_padded_variant():
    c = _canonical([1, 2], [3, 4])
    b = to_bridge_offline_batch([c], emit_padded_keys=True)
    assert L(b["cu_seqlens_q"]) == L(b["cu_seqlens_q_padded"]) == [[0, 2, 4]]
    assert_same_batch(from_bridge_offline_batch(b)[0], c)


def test_to_bridge_default_token_count_ignores_the_padding_sequence():
    c = _canonical([1, 2, 3], pad_seq_to_mult=2, max_length=10, pad_to_max_length=True, slack="pad_sequence")
    assert to_bridge_offline_batch([c], emit_padded_keys=True)["token_count"] == [4]
    assert to_bridge_offline_batch([c], emit_padded_keys=True, token_counts=[3])["token_count"] == [3]


def test_to_bridge_equalizes_and_from_bridge_can_trim():
    a = _canonical([1, 2], [3], [4], max_length=6, pad_to_max_length=True, slack="pad_sequence")
    b = _canonical([5, 6, 7, 8, 9, 10])
    bridge = to_bridge_offline_batch([a, b], emit_padded_keys=True)
    assert L(bridge["cu_seqlens_q"]) == [[0, 2, 3, 4, 4], [0, 6, 6, 6, 6]]
    assert L(bridge["cu_seqlens_q_padded"]) == [[0, 2, 3, 4, 6], [0, 6, 6, 6, 6]]
    back = from_bridge_offline_batch(bridge, trim_trailing_empty=True)
    assert_same_batch(back[0], a)
    assert_same_batch(back[1], b)
    untrimmed = from_bridge_offline_batch(bridge)
    assert L(untrimmed[1]["cu_seqlens_q"]) == [0, 6, 6, 6, 6]


def test_to_bridge_carries_extra_keys():
    c = build_thd_batch(
        [{"tokens": [1, 2], "labels": [2, 3], "loss_mask": [1, 1], "seg": [4, 4]}],
        pad_seq_to_mult=4, extra_pad_values={"seg": -1},
    )
    b = to_bridge_offline_batch([c], emit_padded_keys=True)
    assert L(b["seg"]) == [[4, 4, -1, -1]]
    assert_same_batch(from_bridge_offline_batch(b)[0], c)


def test_to_bridge_errors():
    c = _canonical([1, 2, 3])
    with pytest.raises(UsageError, match="one width"):
        to_bridge_offline_batch([c, _canonical([1, 2])], emit_padded_keys=False)
    frac = dict(c, loss_mask=torch.tensor([[0.5, 1.0, 1.0]]))
    with pytest.raises(UsageError, match="fractional"):
        to_bridge_offline_batch([frac], emit_padded_keys=False)
    with pytest.raises(UsageError, match="token_counts has 2 entries for 1 batches"):
        to_bridge_offline_batch([c], emit_padded_keys=False, token_counts=[1, 2])
    with pytest.raises(UsageError, match="non-empty"):
        to_bridge_offline_batch([], emit_padded_keys=False)


def test_from_bridge_errors():
    b = collate_stored_rows([E1_ROW], **BASE)
    with pytest.raises(UsageError, match="attention_mask=None"):
        from_bridge_offline_batch(dict(b, attention_mask=torch.ones(1, 1, 16, 16, dtype=torch.bool)))
    no_cu = {k: v for k, v in b.items() if not k.startswith("cu_seqlens")}
    with pytest.raises(UsageError, match="return_cu_seqlen=True"):
        from_bridge_offline_batch(no_cu)
    physical_only = {k: v for k, v in b.items() if not k.endswith("_padded")}
    physical_only["cu_seqlens_q"] = physical_only["cu_seqlens_kv"] = torch.tensor([[0, 8, 12, 16]], dtype=torch.int32)
    holes = b["padding_mask"].clone()
    holes[0, 2] = True  # a hole inside the real prefix of sequence 0
    with pytest.raises(UsageError, match="real tokens first, padding after"):
        from_bridge_offline_batch(dict(physical_only, padding_mask=holes))
    with pytest.raises(UsageError, match="unexpected key 'metadata'"):
        from_bridge_offline_batch(dict(b, metadata=[{}]))
    short = dict(b, cu_seqlens_q_padded=torch.tensor([[0, 8, 12, 12]], dtype=torch.int32))
    with pytest.raises(UsageError, match="must rise from 0 to 16"):
        from_bridge_offline_batch(short)


# ----------------------------------------------------------------------------------------------
# legacy names (items 72-76)


def _legacy(width: int, **keys):
    batch = {
        "tokens": torch.arange(width, dtype=torch.int64).unsqueeze(0),
        "labels": torch.arange(1, width + 1, dtype=torch.int64).unsqueeze(0),
        "loss_mask": torch.ones(1, width),
        "position_ids": torch.zeros(1, width, dtype=torch.int64),
    }
    batch.update(keys)
    return batch


def test_item72_legacy_with_argmin():
    c = from_legacy_batch(_legacy(
        384, cu_seqlens=torch.tensor([0, 128, 256, 384, -1, -1], dtype=torch.int32),
        cu_seqlens_argmin=torch.tensor(4), max_seqlen=torch.tensor(128, dtype=torch.int32),
    ))
    assert L(c["cu_seqlens_q"]) == L(c["cu_seqlens_kv"]) == [0, 128, 256, 384]
    assert "cu_seqlens_q_padded" not in c
    assert c["max_seqlen_q"] == c["max_seqlen_kv"] == 128
    assert not c["padding_mask"].any()


def test_item73_legacy_with_unpadded():
    c = from_legacy_batch(_legacy(
        384, cu_seqlens=torch.tensor([0, 128, 256, 384, -1, -1], dtype=torch.int32),
        cu_seqlens_argmin=torch.tensor(4), max_seqlen=torch.tensor(128),
        cu_seqlens_unpadded=torch.tensor([0, 120, 245, 370, -1, -1], dtype=torch.int32),
    ))
    assert L(c["cu_seqlens_q"]) == L(c["cu_seqlens_kv"]) == [0, 120, 245, 370]
    assert L(c["cu_seqlens_q_padded"]) == L(c["cu_seqlens_kv_padded"]) == [0, 128, 256, 384]
    assert int(c["padding_mask"].sum()) == 384 - 370
    assert L(c["padding_mask"][0, 118:130]) == [F, F, T, T, T, T, T, T, T, T, F, F]


def test_item74_legacy_without_argmin_cuts_at_the_first_sentinel():
    c = from_legacy_batch(_legacy(
        256, cu_seqlens=torch.tensor([0, 128, 256, -1, -1], dtype=torch.int32),
        cu_seqlens_unpadded=torch.tensor([0, 100, 200, -1, -1], dtype=torch.int32),
    ))
    assert L(c["cu_seqlens_q_padded"]) == [0, 128, 256]
    assert L(c["cu_seqlens_q"]) == [0, 100, 200]


def test_item75_legacy_with_batch_dims_and_missing_max():
    keys = dict(cu_seqlens=torch.tensor([[0, 64, 128, -1]], dtype=torch.int32),
                cu_seqlens_argmin=torch.tensor([[3]]))
    c = from_legacy_batch(_legacy(128, max_seqlen=torch.tensor([[64]]), **keys))
    assert L(c["cu_seqlens_q"]) == [0, 64, 128] and c["max_seqlen_q"] == 64
    # Bridge maps a missing max_seqlen to None; the canonical batch needs an int, so we compute it
    assert from_legacy_batch(_legacy(128, **keys))["max_seqlen_q"] == 64


def test_item76_legacy_single_sequence():
    c = from_legacy_batch(_legacy(512, cu_seqlens=torch.tensor([0, 512, -1], dtype=torch.int32)))
    assert L(c["cu_seqlens_q"]) == [0, 512] and "cu_seqlens_q_padded" not in c
    assert c["max_seqlen_q"] == 512


def test_legacy_without_sentinel_is_kept_whole():
    c = from_legacy_batch(_legacy(8, cu_seqlens=torch.tensor([[0, 4, 8]], dtype=torch.int32)))
    assert L(c["cu_seqlens_q"]) == [0, 4, 8]


def test_legacy_without_unpadded_uses_the_padding_mask():
    mask = torch.tensor([[F, F, T, T, F, F, F, T]])
    c = from_legacy_batch(_legacy(8, cu_seqlens=torch.tensor([0, 4, 8], dtype=torch.int32), padding_mask=mask))
    assert L(c["cu_seqlens_q"]) == [0, 2, 5] and L(c["cu_seqlens_q_padded"]) == [0, 4, 8]


def test_to_legacy_sentinels():
    c = collate_stored_row_canonical(E1_ROW, **BASE)
    legacy = to_legacy_batch(c, capacity=6)
    assert L(legacy["cu_seqlens"]) == [[0, 8, 12, 16, -1, -1]]
    assert L(legacy["cu_seqlens_argmin"]) == [[4]]
    assert L(legacy["cu_seqlens_unpadded"]) == [[0, 5, 8, 8, -1, -1]]
    assert L(legacy["cu_seqlens_unpadded_argmin"]) == [[4]]
    assert L(legacy["max_seqlen"]) == [[8]]
    assert legacy["cu_seqlens"].dtype == torch.int32 and legacy["max_seqlen"].dtype == torch.int32
    assert_same_batch(from_legacy_batch(legacy), c)
    plain = to_legacy_batch(_canonical([1, 2], [3]))
    assert L(plain["cu_seqlens"]) == [[0, 2, 3]] and "cu_seqlens_unpadded" not in plain
    assert L(plain["cu_seqlens_argmin"]) == [[3]]


def test_legacy_errors():
    c = _canonical([1, 2], [3])
    with pytest.raises(UsageError, match="capacity 2 is below the 3 boundary entries"):
        to_legacy_batch(c, capacity=2)
    with pytest.raises(UsageError, match="micro-batch size 1"):
        from_legacy_batch(_legacy(4, cu_seqlens=torch.tensor([[0, 4], [0, 4]], dtype=torch.int32)))
    with pytest.raises(UsageError, match="argmin 9 outside 1..3"):
        from_legacy_batch(_legacy(4, cu_seqlens=torch.tensor([0, 4, -1]), cu_seqlens_argmin=9))
    with pytest.raises(UsageError, match="no usable boundaries"):
        from_legacy_batch(_legacy(4, cu_seqlens=torch.tensor([0, -1, 4]), cu_seqlens_argmin=3))
    with pytest.raises(UsageError, match="must rise from 0 to the width 4"):
        from_legacy_batch(_legacy(4, cu_seqlens=torch.tensor([0, 3, -1])))
    with pytest.raises(UsageError, match="no 'cu_seqlens'"):
        from_legacy_batch(_legacy(4))


# ----------------------------------------------------------------------------------------------
# right-padded batch -> canonical (items 48, 52, 53, 58-60, 62)


def _right_padded(tokens, **keys):
    t = torch.tensor(tokens)
    batch = {"tokens": t, "labels": t + 100, "loss_mask": (t != 0).float()}
    batch.update(keys)
    return batch


def test_item48_lengths_from_the_pad_id():
    c = right_padded_to_thd(_right_padded([[1, 2, 3, 0, 0, 0, 0, 0], [4, 5, 6, 7, 0, 0, 0, 0]]))
    assert c["tokens"].shape == (1, 7)
    assert L(c["tokens"]) == [[1, 2, 3, 4, 5, 6, 7]]
    assert L(c["cu_seqlens_q"]) == [0, 3, 7]
    assert c["max_seqlen_q"] == 4
    assert c.get("attention_mask") is None


def test_item52_attention_mask_and_alignment():
    batch = _right_padded(
        [[1, 2, 3, 9, 9], [4, 5, 9, 9, 9]],
        attention_mask=torch.tensor([[1, 1, 1, 0, 0], [1, 1, 0, 0, 0]]),
    )
    c = right_padded_to_thd(batch, pad_seq_to_mult=4)
    assert L(c["padding_mask"]) == [[F, F, F, T, F, F, T, T]]
    assert c["padding_mask"].dtype == torch.bool
    assert L(c["cu_seqlens_q"]) == [0, 3, 5]
    assert L(c["cu_seqlens_q_padded"]) == [0, 4, 8]
    assert L(c["tokens"]) == [[1, 2, 3, 0, 4, 5, 0, 0]]


def test_item53_stale_padding_mask_is_not_copied():
    stale = torch.ones(2, 5, dtype=torch.bool)
    batch = _right_padded([[1, 2, 3, 0, 0], [4, 5, 0, 0, 0]], padding_mask=stale)
    c = right_padded_to_thd(batch)
    assert c["tokens"].shape == (1, 5)
    assert not c["padding_mask"].any()
    assert batch["padding_mask"] is stale  # input untouched


def test_item58_given_position_ids_are_sliced():
    batch = _right_padded([[1, 2, 0, 0], [3, 4, 5, 0]], position_ids=torch.tensor([[0, 1, 2, 3], [0, 1, 2, 3]]))
    assert L(right_padded_to_thd(batch)["position_ids"]) == [[0, 1, 0, 1, 2]]


def test_item59_empty_row():
    with pytest.raises(PackingError, match="Cannot pack a batch containing an empty sequence row"):
        right_padded_to_thd(_right_padded([[1, 2, 0], [0, 0, 0]]))


def test_item60_dtypes():
    batch = _right_padded([[1, 2, 0], [3, 0, 0]])
    batch["labels"] = batch["labels"].to(torch.int32)
    c = right_padded_to_thd(batch)
    assert c["tokens"].dtype == c["labels"].dtype == c["position_ids"].dtype == torch.int64
    assert c["loss_mask"].dtype == torch.float32 and c["cu_seqlens_q"].dtype == torch.int32


def test_item62_labels_are_required_and_positions_restart():
    batch = _right_padded([[1, 2, 3, 0], [4, 5, 6, 7]])
    with pytest.raises(UsageError, match="'labels' is required"):
        right_padded_to_thd(dict(batch, labels=None))
    c = right_padded_to_thd(batch)
    assert L(c["tokens"]) == [[1, 2, 3, 4, 5, 6, 7]]
    assert L(c["position_ids"]) == [[0, 1, 2, 0, 1, 2, 3]]
    assert L(c["cu_seqlens_q"]) == [0, 3, 7] and c["max_seqlen_q"] == 4


def test_right_padded_input_ids_key_and_extras():
    t = torch.tensor([[5, 6, 0], [7, 0, 0]])
    batch = {"input_ids": t, "labels": t, "loss_mask": torch.ones(2, 3), "vision": torch.tensor([[1, 1, 0], [2, 0, 0]])}
    c = right_padded_to_thd(batch, pad_seq_to_mult=2, extra_pad_values={"vision": -5})
    assert L(c["tokens"]) == [[5, 6, 7, 0]]
    assert L(c["vision"]) == [[1, 1, 2, -5]]


def test_right_padded_rejects_holes():
    with pytest.raises(PackingError, match="requires right-padded input rows.*row 0"):
        right_padded_to_thd(_right_padded([[1, 0, 3], [4, 5, 0]]))
    with pytest.raises(UsageError, match="shape \\(2, 3\\)"):
        right_padded_to_thd(dict(_right_padded([[1, 2, 3], [4, 5, 0]]), loss_mask=torch.ones(2, 2)))


# ----------------------------------------------------------------------------------------------
# round-trip properties


@st.composite
def canonical_batches(draw, width=None):
    m = draw(st.sampled_from([1, 2, 4]))
    n = draw(st.integers(1, 5))
    lengths = draw(st.lists(st.integers(1, 12), min_size=n, max_size=n))
    rows = []
    for u in lengths:
        tokens = draw(st.lists(st.integers(1, 1000), min_size=u, max_size=u))
        r = {"tokens": tokens, "labels": [t + 1 for t in tokens],
             "loss_mask": draw(st.lists(st.integers(0, 1), min_size=u, max_size=u))}
        if draw(st.booleans()):
            r["valid_length"] = draw(st.integers(0, u))
        rows.append(r)
    content = sum(-(-u // m) * m for u in lengths)
    kwargs: dict[str, Any] = {"pad_seq_to_mult": m}
    fixed_width = width if width is not None else (content + m * draw(st.integers(0, 2)) if draw(st.booleans()) else None)
    if fixed_width is not None:
        fixed_width = max(fixed_width, -(-content // 4) * 4)
        kwargs.update(max_length=fixed_width, pad_to_max_length=True,
                      slack=draw(st.sampled_from(["last_segment", "pad_sequence"])))
    if draw(st.booleans()):
        kwargs["static_num_seqs"] = n + 1 + draw(st.integers(0, 3))
    return build_thd_batch(rows, **kwargs)


@settings(max_examples=80, deadline=None)
@given(canonical_batches(), st.booleans(), st.booleans())
def test_round_trip_bridge_form(batch, emit_padded, pad_cu_seqlens):
    bridge = to_bridge_offline_batch([batch], emit_padded_keys=emit_padded, pad_cu_seqlens=pad_cu_seqlens)
    assert bridge["cu_seqlens_q"].shape[0] == 1
    assert_same_batch(from_bridge_offline_batch(bridge)[0], batch)


@settings(max_examples=40, deadline=None)
@given(st.lists(canonical_batches(width=64), min_size=2, max_size=4), st.booleans())
def test_round_trip_bridge_form_several_rows(batches, emit_padded):
    bridge = to_bridge_offline_batch(batches, emit_padded_keys=emit_padded)
    sizes = {b["cu_seqlens_q"].numel() for b in batches}
    back = from_bridge_offline_batch(bridge)
    if len(sizes) == 1:
        for original, restored in zip(batches, back):
            assert_same_batch(restored, original)
    # with trimming, rows come back up to their trailing zero-length sequences
    trimmed = from_bridge_offline_batch(bridge, trim_trailing_empty=True)
    for original, restored in zip(batches, trimmed):
        n = restored["cu_seqlens_q"].numel()
        assert L(original["cu_seqlens_q"])[:n] == L(restored["cu_seqlens_q"])
        assert set(L(original["cu_seqlens_q"])[n - 1 :]) == {L(restored["cu_seqlens_q"])[-1]}
        for key in ("tokens", "labels", "loss_mask", "position_ids", "padding_mask"):
            assert torch.equal(original[key], restored[key])


@settings(max_examples=80, deadline=None)
@given(canonical_batches(), st.integers(0, 4))
def test_round_trip_legacy(batch, spare):
    capacity = batch["cu_seqlens_q"].numel() + spare
    legacy = to_legacy_batch(batch, capacity=capacity)
    assert legacy["cu_seqlens"].shape == (1, capacity)
    assert_same_batch(from_legacy_batch(legacy), batch)


# --- Bridge's collate options: ceil_to_power_2 and return_cu_seqlen=False ---------------------------


def test_ceil_to_power_2_rounds_a_free_width_to_the_next_power_of_two():
    # E3's row holds 10 runtime tokens: the default rounding (16) and the power of two (16) agree...
    b = collate_stored_rows([E3_ROW], pack_size=64, pad_seq_to_mult=1, eos_id=0, pad_to_max_length=False,
                            pad_seq_length_to_mult=5, ceil_to_power_2=True)
    assert b["tokens"].shape == (1, 16) and L(b["cu_seqlens_q"]) == [[0, 6, 10, 16]]
    # ...and without the option the multiple of 5 wins (10 is one already)
    b = collate_stored_rows([E3_ROW], pack_size=64, pad_seq_to_mult=1, eos_id=0, pad_to_max_length=False,
                            pad_seq_length_to_mult=5)
    assert b["tokens"].shape == (1, 10)
    # capped at the pack size, and ignored under a fixed width
    capped = collate_stored_rows([E3_ROW], pack_size=12, pad_seq_to_mult=1, eos_id=0, pad_to_max_length=False,
                                 ceil_to_power_2=True)
    assert capped["tokens"].shape == (1, 12)
    fixed = collate_stored_rows([E3_ROW], pack_size=12, pad_seq_to_mult=1, eos_id=0, pad_to_max_length=True,
                                ceil_to_power_2=True)
    assert fixed["tokens"].shape == (1, 12)


def test_return_cu_seqlen_false_gives_bridges_causal_mask_and_no_boundaries():
    b = collate_stored_rows([E1_ROW], pack_size=16, pad_seq_to_mult=4, eos_id=0, pad_to_max_length=True,
                            return_cu_seqlen=False)
    assert not any(k.startswith(("cu_seqlens", "max_seqlen")) for k in b)
    mask = b["attention_mask"]
    assert mask.dtype == torch.bool and mask.shape == (1, 1, 16, 16)
    # Bridge: tril(ones) < 0.5, i.e. True (masked) strictly above the diagonal, over the whole row
    expected = torch.tril(torch.ones(16, 16)).unsqueeze(0) < 0.5
    assert torch.equal(mask[0], expected)
    with_cu = collate_stored_rows([E1_ROW], pack_size=16, pad_seq_to_mult=4, eos_id=0, pad_to_max_length=True)
    for key in ("tokens", "labels", "loss_mask", "position_ids", "padding_mask"):
        assert torch.equal(b[key], with_cu[key])
    assert with_cu["attention_mask"] is None


def test_default_bridge_form_is_the_releases_without_padding_mask():
    """megatron-bridge 0.6.2's collate has no padding_mask (tests/upstream/test_diff_readers.py compares the
    whole batch with it); the canonical batch comes back from that form when the padded keys are there."""
    release = thd_collate.collate_stored_rows([E1_ROW], pack_size=16, pad_seq_to_mult=4, eos_id=0,
                                             pad_to_max_length=True)
    main = collate_stored_rows([E1_ROW], pack_size=16, pad_seq_to_mult=4, eos_id=0, pad_to_max_length=True)
    assert "padding_mask" not in release and "padding_mask" in main
    assert {k for k in main if k != "padding_mask"} == set(release)
    assert_same_batch(from_bridge_offline_batch(release)[0], from_bridge_offline_batch(main)[0])

