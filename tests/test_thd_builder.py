"""Tests of the canonical THD builder (reference_impl/seqpack/packing/thd.py).

Expected values come from bridge_contracts.md section 6.5 (items 49-51, 54-58, 60, 61, 63, 64),
section 2.2 (validation cases) and from hand layouts written next to each test.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.core.errors import AlignmentError, PackingError, UsageError
from seqpack.packing.thd import (
    THDOptions,
    build_thd_batch,
    padding_mask_from_lengths,
    place_rows,
    plan_layout,
    read_rows,
    segment_lengths,
    to_tensors,
    validate_thd_batch,
)


def row(tokens, labels=None, loss=None, **extra):
    """A builder row; labels default to tokens + 100 and loss to ones, so placement is visible."""
    tokens = list(tokens)
    out = {
        "tokens": tokens,
        "labels": [t + 100 for t in tokens] if labels is None else list(labels),
        "loss_mask": [1] * len(tokens) if loss is None else list(loss),
    }
    out.update(extra)
    return out


def as_list(t: torch.Tensor) -> list:
    return t.tolist()


# ----------------------------------------------------------------------------------------------
# Bridge in-batch packer behaviours (section 6.5)


def test_item49_fixed_width_slack_goes_into_last_segment():
    batch = build_thd_batch(
        [row([1, 2, 3], [2, 3, -100], [1, 1, 0]), row([4, 5], [5, -100], [1, 0])],
        max_length=8, pad_to_max_length=True,
    )
    assert as_list(batch["tokens"]) == [[1, 2, 3, 4, 5, 0, 0, 0]]
    assert as_list(batch["labels"]) == [[2, 3, -100, 5, -100, -100, -100, -100]]
    assert as_list(batch["loss_mask"]) == [[1, 1, 0, 1, 0, 0, 0, 0]]
    assert as_list(batch["cu_seqlens_q"]) == [0, 3, 5]
    assert as_list(batch["cu_seqlens_kv"]) == [0, 3, 5]
    assert as_list(batch["cu_seqlens_q_padded"]) == [0, 3, 8]
    assert as_list(batch["cu_seqlens_kv_padded"]) == [0, 3, 8]
    assert batch["max_seqlen_q"] == 5 and batch["max_seqlen_kv"] == 5
    assert batch["tokens"].shape[1] == 8  # Bridge's total_tokens
    # slack belongs to the last segment: its positions keep counting (quirk Q18)
    assert as_list(batch["position_ids"]) == [[0, 1, 2, 0, 1, 2, 3, 4]]
    assert as_list(batch["padding_mask"]) == [[False] * 5 + [True] * 3]


def test_item50_sum_above_max_length_names_the_lengths():
    with pytest.raises(PackingError) as err:
        build_thd_batch([row(range(5)), row(range(4))], max_length=8, pad_to_max_length=True)
    text = str(err.value)
    assert "packed length 9 exceeds max_length 8" in text
    assert "[5, 4]" in text


def test_max_length_bounds_the_sum_without_fixed_width_too():
    with pytest.raises(PackingError, match="packed length 12 exceeds max_length 10"):
        build_thd_batch([row(range(3)), row(range(5))], pad_seq_to_mult=4, max_length=10)


def test_item51_alignment_two():
    batch = build_thd_batch([row(range(3)), row(range(5))], pad_seq_to_mult=2)
    assert batch["tokens"].shape == (1, 10)
    assert as_list(batch["cu_seqlens_q_padded"]) == [0, 4, 10]
    assert as_list(batch["cu_seqlens_q"]) == [0, 3, 8]
    assert batch["max_seqlen_q"] == 6


def test_item54_alignment_four():
    batch = build_thd_batch([row(range(2)), row(range(3))], pad_seq_to_mult=4)
    assert batch["tokens"].shape == (1, 8)
    assert as_list(batch["cu_seqlens_q_padded"]) == [0, 4, 8]
    assert batch["max_seqlen_q"] == 4


def test_item55_single_row_has_no_padded_keys():
    batch = build_thd_batch([row([7, 8, 9, 10, 11])])
    assert batch["tokens"].shape == (1, 5)
    assert as_list(batch["cu_seqlens_q"]) == [0, 5]
    assert "cu_seqlens_q_padded" not in batch and "cu_seqlens_kv_padded" not in batch
    assert batch["max_seqlen_q"] == 5
    assert not batch["padding_mask"].any()


def test_item56_full_rows():
    batch = build_thd_batch([row([1, 2, 3, 4]), row([5, 6, 7, 8])], pad_seq_to_mult=4)
    assert batch["tokens"].shape == (1, 8)
    assert as_list(batch["cu_seqlens_q"]) == [0, 4, 8]
    assert "cu_seqlens_q_padded" not in batch


def test_item57_loss_mask_zeros_inside_a_row_are_kept():
    batch = build_thd_batch([row([1, 2, 3], loss=[1, 0, 1])])
    assert as_list(batch["loss_mask"]) == [[1.0, 0.0, 1.0]]


def test_item58_given_position_ids_are_used():
    batch = build_thd_batch(
        [row([1, 2], position_ids=[0, 1]), row([3, 4, 5], position_ids=[0, 1, 2])]
    )
    assert as_list(batch["position_ids"]) == [[0, 1, 0, 1, 2]]


def test_given_position_ids_keep_counting_through_the_gap():
    batch = build_thd_batch(
        [row([1, 2, 3], position_ids=[5, 6, 7]), row([4], position_ids=[9])], pad_seq_to_mult=4
    )
    assert as_list(batch["position_ids"]) == [[5, 6, 7, 8, 9, 10, 11, 12]]


def test_item60_dtypes():
    batch = build_thd_batch(
        [
            {
                "tokens": torch.tensor([1, 2, 3], dtype=torch.int32),
                "labels": np.array([2, 3, 4], dtype=np.int16),
                "loss_mask": [True, True, False],
            }
        ],
        pad_seq_to_mult=4,
    )
    assert batch["tokens"].dtype == torch.int64
    assert batch["labels"].dtype == torch.int64
    assert batch["position_ids"].dtype == torch.int64
    assert batch["loss_mask"].dtype == torch.float32
    assert batch["padding_mask"].dtype == torch.bool
    for key in ("cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded", "cu_seqlens_kv_padded"):
        assert batch[key].dtype == torch.int32 and batch[key].dim() == 1
    assert type(batch["max_seqlen_q"]) is int and type(batch["max_seqlen_kv"]) is int


def test_item61_gap_positions_continue():
    batch = build_thd_batch([row([1, 2, 3])], pad_seq_to_mult=4)
    assert as_list(batch["position_ids"]) == [[0, 1, 2, 3]]
    assert as_list(batch["tokens"]) == [[1, 2, 3, 0]]
    assert as_list(batch["labels"]) == [[101, 102, 103, -100]]
    assert as_list(batch["loss_mask"]) == [[1, 1, 1, 0]]
    assert as_list(batch["padding_mask"]) == [[False, False, False, True]]


def test_item63_alignment_four_lengths_3_5():
    batch = build_thd_batch([row(range(1, 4)), row(range(4, 9))], pad_seq_to_mult=4)
    assert batch["tokens"].shape == (1, 12)
    assert as_list(batch["cu_seqlens_q_padded"]) == [0, 4, 12]
    assert as_list(batch["cu_seqlens_q"]) == [0, 3, 8]
    assert batch["max_seqlen_q"] == 8
    assert as_list(batch["position_ids"]) == [[0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7]]


def test_pad_values_are_configurable():
    batch = build_thd_batch([row([1, 2, 3])], pad_seq_to_mult=4, pad_token_id=7, label_pad_id=-1)
    assert as_list(batch["tokens"]) == [[1, 2, 3, 7]]
    assert as_list(batch["labels"]) == [[101, 102, 103, -1]]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_item64_cuda_inputs_give_cuda_outputs():
    cuda_row = {k: torch.tensor(v, device="cuda") for k, v in row([1, 2, 3]).items()}
    batch = build_thd_batch([cuda_row, cuda_row], pad_seq_to_mult=4)
    for key in ("tokens", "labels", "loss_mask", "position_ids", "padding_mask",
                "cu_seqlens_q", "cu_seqlens_q_padded"):
        assert batch[key].is_cuda, key
    assert batch["cu_seqlens_q_padded"].cpu().tolist() == [0, 4, 8]


def test_explicit_device_argument():
    batch = build_thd_batch([row([1, 2])], device="cpu")
    assert batch["tokens"].device.type == "cpu"


# ----------------------------------------------------------------------------------------------
# pad_sequence slack, valid_length, static shapes, extra keys


def test_pad_sequence_slack_is_a_logical_length_zero_sequence():
    batch = build_thd_batch(
        [row([1, 2, 3]), row([4, 5])], pad_seq_to_mult=2, max_length=10,
        pad_to_max_length=True, slack="pad_sequence",
    )
    assert as_list(batch["tokens"]) == [[1, 2, 3, 0, 4, 5, 0, 0, 0, 0]]
    assert as_list(batch["cu_seqlens_q"]) == [0, 3, 5, 5]
    assert as_list(batch["cu_seqlens_q_padded"]) == [0, 4, 6, 10]
    # the padding sequence has position ids 0, like Bridge's offline tail
    assert as_list(batch["position_ids"]) == [[0, 1, 2, 3, 0, 1, 0, 0, 0, 0]]
    assert batch["max_seqlen_q"] == 4
    assert as_list(batch["padding_mask"]) == [[False] * 3 + [True] + [False] * 2 + [True] * 4]


def test_pad_sequence_counts_toward_max_seqlen():
    batch = build_thd_batch(
        [row([1, 2])], max_length=9, pad_to_max_length=True, slack="pad_sequence"
    )
    assert as_list(batch["cu_seqlens_q_padded"]) == [0, 2, 9]
    assert batch["max_seqlen_q"] == 7


def test_exact_fit_adds_no_padding_sequence():
    batch = build_thd_batch(
        [row([1, 2, 3]), row([4])], max_length=4, pad_to_max_length=True, slack="pad_sequence"
    )
    assert as_list(batch["cu_seqlens_q"]) == [0, 3, 4]
    assert "cu_seqlens_q_padded" not in batch


def test_valid_length_marks_materialised_padding():
    # second row already carries two alignment pads (tokens 0, loss 1 as quirk Q3 allows)
    batch = build_thd_batch(
        [row([1, 2, 3, 4]), row([5, 6, 0, 0], loss=[1, 1, 1, 1], valid_length=2)],
        pad_seq_to_mult=4,
    )
    assert as_list(batch["tokens"]) == [[1, 2, 3, 4, 5, 6, 0, 0]]
    assert as_list(batch["loss_mask"]) == [[1] * 8]  # kept as given
    assert as_list(batch["position_ids"]) == [[0, 1, 2, 3, 0, 1, 2, 3]]
    assert as_list(batch["cu_seqlens_q"]) == [0, 4, 6]
    assert as_list(batch["cu_seqlens_q_padded"]) == [0, 4, 8]
    assert as_list(batch["padding_mask"]) == [[False] * 6 + [True] * 2]


def test_valid_length_may_be_a_0d_tensor():
    batch = build_thd_batch([row([1, 2, 0], valid_length=torch.tensor(2))])
    assert as_list(batch["cu_seqlens_q"]) == [0, 2]
    assert as_list(batch["cu_seqlens_q_padded"]) == [0, 3]


def test_valid_length_zero_is_allowed():
    batch = build_thd_batch([row([1, 2]), row([0, 0], valid_length=0)])
    assert as_list(batch["cu_seqlens_q"]) == [0, 2, 2]
    assert as_list(batch["cu_seqlens_q_padded"]) == [0, 2, 4]


def test_static_shapes_repeat_the_last_value():
    batch = build_thd_batch(
        [row([1, 2, 3]), row([4, 5])], pad_seq_to_mult=2, max_length=10,
        pad_to_max_length=True, slack="pad_sequence", static_num_seqs=5, static_max_seqlen=12,
    )
    assert as_list(batch["cu_seqlens_q"]) == [0, 3, 5, 5, 5, 5]
    assert as_list(batch["cu_seqlens_kv"]) == [0, 3, 5, 5, 5, 5]
    assert as_list(batch["cu_seqlens_q_padded"]) == [0, 4, 6, 10, 10, 10]
    assert batch["max_seqlen_q"] == 12 and batch["max_seqlen_kv"] == 12
    validate_thd_batch(batch, pad_seq_to_mult=2)


def test_static_num_seqs_exact_capacity_is_fine():
    batch = build_thd_batch([row([1, 2]), row([3])], static_num_seqs=2)
    assert as_list(batch["cu_seqlens_q"]) == [0, 2, 3]


def test_static_num_seqs_too_small():
    with pytest.raises(PackingError, match="3 sequences .*static_num_seqs is 2"):
        build_thd_batch(
            [row([1]), row([2])], max_length=4, pad_to_max_length=True, slack="pad_sequence",
            static_num_seqs=2,
        )


def test_static_max_seqlen_too_small():
    with pytest.raises(PackingError, match="longest physical sequence is 4 but static_max_seqlen is 3"):
        build_thd_batch([row([1, 2, 3])], pad_seq_to_mult=4, static_max_seqlen=3)


def test_extra_keys_are_padded_with_their_value():
    batch = build_thd_batch(
        [row([1, 2, 3], token_type=[7, 7, 7]), row([4], token_type=[8])],
        pad_seq_to_mult=2, extra_pad_values={"token_type": -1},
    )
    assert as_list(batch["token_type"]) == [[7, 7, 7, -1, 8, -1]]


def test_inputs_as_lists_arrays_and_tensors_agree():
    base = row([3, 1, 4, 1, 5], loss=[0, 1, 1, 0, 1])
    as_np = {k: np.asarray(v) for k, v in base.items()}
    as_torch = {k: torch.tensor(v) for k, v in base.items()}
    outs = [build_thd_batch([r, row([9, 2])], pad_seq_to_mult=4) for r in (base, as_np, as_torch)]
    for other in outs[1:]:
        assert outs[0].keys() == other.keys()
        for key, value in outs[0].items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(value, other[key]), key
            else:
                assert value == other[key]


def test_attention_mask_all_true_is_accepted():
    batch = build_thd_batch([row([1, 2], attention_mask=[1, 1])])
    assert "attention_mask" not in batch
    assert as_list(batch["tokens"]) == [[1, 2]]


# ----------------------------------------------------------------------------------------------
# validation (section 2.2 error cases and ours)


@pytest.mark.parametrize(
    ("kwargs", "exc", "pattern"),
    [
        ({"pad_seq_to_mult": 0}, UsageError, "pad_seq_to_mult must be a positive integer"),
        ({"pad_seq_to_mult": -2}, UsageError, "pad_seq_to_mult"),
        ({"pad_seq_to_mult": 2.0}, UsageError, "pad_seq_to_mult"),
        ({"pad_seq_to_mult": True}, UsageError, "pad_seq_to_mult"),
        ({"max_length": 0}, UsageError, "max_length must be a positive integer"),
        ({"max_row_length": 0}, UsageError, "max_row_length"),
        ({"static_num_seqs": 0}, UsageError, "static_num_seqs"),
        ({"pad_to_max_length": True}, UsageError, "pad_to_max_length=True needs max_length"),
        ({"slack": "middle"}, UsageError, "unknown slack mode 'middle'"),
        ({"extra_pad_values": {"labels": 0}}, UsageError, r"reserved keys \['labels'\]"),
        ({"extra_pad_values": {"position_ids": 0}}, UsageError, "reserved"),
        (
            {"pad_seq_to_mult": 4, "max_length": 10, "pad_to_max_length": True},
            AlignmentError, "max_length=10 is not a multiple of pad_seq_to_mult=4",
        ),
    ],
)
def test_bad_arguments(kwargs, exc, pattern):
    with pytest.raises(exc, match=pattern):
        build_thd_batch([row([1, 2])], **kwargs)


def test_empty_rows_list():
    with pytest.raises(UsageError, match="rows is empty"):
        build_thd_batch([])


def test_rows_must_be_a_sequence():
    with pytest.raises(UsageError, match="sequence of mappings"):
        build_thd_batch(row([1]))


def test_empty_row():
    with pytest.raises(PackingError, match="row 1, field 'tokens': row is empty"):
        build_thd_batch([row([1]), row([])])


def test_row_longer_than_max_row_length():
    with pytest.raises(PackingError, match="row 1.*row length 5 exceeds max_row_length 4"):
        build_thd_batch([row([1, 2]), row(range(5))], max_row_length=4)


def test_non_1d_tokens():
    with pytest.raises(PackingError, match=r"field 'tokens': expected a 1-D sequence, got shape \(1, 2\)"):
        build_thd_batch([{"tokens": [[1, 2]], "labels": [[1, 2]], "loss_mask": [[1, 1]]}])


def test_mismatched_key_lengths():
    with pytest.raises(PackingError, match="row 0, field 'labels': length 2 differs from the row's 3 tokens"):
        build_thd_batch([row([1, 2, 3], labels=[1, 2])])


def test_key_present_in_some_rows_only():
    with pytest.raises(PackingError, match="row 1.*lacks \\['extra'\\]"):
        build_thd_batch(
            [row([1], extra=[1]), row([2])], extra_pad_values={"extra": 0}
        )
    with pytest.raises(PackingError, match="row 1.*has \\['position_ids'\\] that row 0 lacks"):
        build_thd_batch([row([1]), row([2], position_ids=[0])])


def test_missing_required_key():
    with pytest.raises(PackingError, match="missing required key 'loss_mask'"):
        build_thd_batch([{"tokens": [1], "labels": [2]}])
    with pytest.raises(PackingError, match="rename input_ids to tokens"):
        build_thd_batch([{"input_ids": [1], "labels": [2], "loss_mask": [1]}])


def test_extra_key_without_pad_value():
    with pytest.raises(UsageError, match=r"extra row keys \['seg'\] have no pad value"):
        build_thd_batch([row([1], seg=[0])])


def test_computed_keys_may_not_come_in_rows():
    with pytest.raises(UsageError, match="may not carry 'padding_mask'"):
        build_thd_batch([row([1], padding_mask=[False])])


def test_attention_mask_with_holes_is_rejected():
    with pytest.raises(PackingError, match="attention_mask must be all true"):
        build_thd_batch([row([1, 2, 3], attention_mask=[1, 1, 0])])


def test_float_tokens_are_rejected():
    with pytest.raises(PackingError, match="field 'tokens': expected integer values"):
        build_thd_batch([row([1.5, 2.0])])


@pytest.mark.parametrize("value", [-1, 4, 1.0, "2", True])
def test_bad_valid_length(value):
    with pytest.raises(PackingError, match="valid_length must be an integer in \\[0, 3\\]"):
        build_thd_batch([row([1, 2, 3], valid_length=value)])


def test_non_mapping_row():
    with pytest.raises(UsageError, match="row 1: each row must be a mapping"):
        build_thd_batch([row([1]), [1, 2]])


# ----------------------------------------------------------------------------------------------
# validate_thd_batch negative controls


def _sample_batch():
    return build_thd_batch([row([1, 2, 3]), row([4, 5])], pad_seq_to_mult=4)


def test_validate_accepts_builder_output():
    validate_thd_batch(_sample_batch(), pad_seq_to_mult=4)


def test_validate_rejects_a_wrong_padding_mask():
    batch = _sample_batch()
    batch["padding_mask"] = batch["padding_mask"].clone()
    batch["padding_mask"][0, 3] = False
    with pytest.raises(PackingError, match="padding_mask disagrees .*position 3"):
        validate_thd_batch(batch)


def test_validate_rejects_misaligned_sequences():
    batch = build_thd_batch([row([1, 2, 3]), row([4, 5])])
    with pytest.raises(AlignmentError, match=r"\[3\] are not multiples of 2"):
        validate_thd_batch(batch, pad_seq_to_mult=2)


def test_validate_rejects_redundant_padded_keys_and_wrong_dtypes():
    batch = build_thd_batch([row([1, 2])])
    batch["cu_seqlens_q_padded"] = batch["cu_seqlens_q"].clone()
    batch["cu_seqlens_kv_padded"] = batch["cu_seqlens_q"].clone()
    with pytest.raises(PackingError, match="omit the padded keys"):
        validate_thd_batch(batch)
    batch = build_thd_batch([row([1, 2])])
    batch["loss_mask"] = batch["loss_mask"].to(torch.int64)
    with pytest.raises(PackingError, match="field 'loss_mask'"):
        validate_thd_batch(batch)
    batch = build_thd_batch([row([1, 2])])
    batch["max_seqlen_q"] = 1
    with pytest.raises(PackingError, match="below the longest physical sequence 2"):
        validate_thd_batch(batch)


def test_segment_lengths_and_padding_helper():
    logical, physical = segment_lengths(_sample_batch())
    assert logical.tolist() == [3, 2] and physical.tolist() == [4, 4]
    assert padding_mask_from_lengths(np.array([0, 4]), np.array([3, 2]), 8).tolist() == [
        False, False, False, True, False, False, True, True,
    ]


# ----------------------------------------------------------------------------------------------
# the steps and the options object


def test_options_object_and_keywords_agree():
    rows = [row([1, 2, 3]), row([4, 5])]
    by_keywords = build_thd_batch(rows, pad_seq_to_mult=4, max_length=12, pad_to_max_length=True)
    opts = THDOptions(pad_seq_to_mult=4, max_length=12, pad_to_max_length=True)
    by_object = build_thd_batch(rows, opts)
    assert by_object.keys() == by_keywords.keys()
    for key, value in by_keywords.items():
        assert torch.equal(by_object[key], value) if isinstance(value, torch.Tensor) else by_object[key] == value
    # a keyword overrides the object's field; the object itself is unchanged
    wider = build_thd_batch(rows, opts, max_length=16)
    assert wider["tokens"].shape == (1, 16) and opts.max_length == 12
    with pytest.raises(TypeError, match="unexpected keyword argument 'pad_to_mult'"):
        build_thd_batch(rows, pad_to_mult=4)
    with pytest.raises(UsageError, match="pad_seq_to_mult must be a positive integer"):
        build_thd_batch(rows, THDOptions(pad_seq_to_mult=0))


def test_row_key_order_does_not_matter():
    # a row whose mapping lists labels before tokens used to fail with "differs from the row's -1 tokens"
    batch = build_thd_batch([{"labels": [5, 6], "tokens": [1, 2], "loss_mask": [1, 0]}])
    assert as_list(batch["tokens"]) == [[1, 2]] and as_list(batch["labels"]) == [[5, 6]]


def test_the_four_steps_by_hand():
    # rows of 3 and 5 tokens, m = 4, fixed width 16 with a trailing padding sequence:
    # segments [0, 4) and [4, 12), padding sequence [12, 16); row 1 has 4 real tokens
    opts = THDOptions(pad_seq_to_mult=4, max_length=16, pad_to_max_length=True, slack="pad_sequence")
    table = read_rows([row([1, 2, 3]), row([4, 5, 6, 7, 8], valid_length=4)], opts)
    assert table.lengths.tolist() == [3, 5] and table.valid.tolist() == [3, 4] and table.extra_keys == ()
    layout = plan_layout(table.lengths, table.valid, opts)
    assert layout.physical.tolist() == [4, 8] and layout.starts.tolist() == [0, 4]
    assert layout.trailing_pad == 4 and layout.width == 16 and layout.max_seqlen == 8
    assert layout.cu_padded.tolist() == [0, 4, 12, 16] and layout.cu_logical.tolist() == [0, 3, 7, 7]
    arrays = place_rows(table, layout, opts)
    assert arrays["tokens"].tolist() == [1, 2, 3, 0, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0, 0]
    assert arrays["position_ids"].tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 0, 0, 0, 0]
    assert arrays["padding_mask"].tolist() == [False] * 3 + [True] + [False] * 4 + [True] * 8
    batch = to_tensors(arrays, layout, torch.device("cpu"))
    validate_thd_batch(batch, pad_seq_to_mult=4)
    assert batch["cu_seqlens_q_padded"].tolist() == [0, 4, 12, 16] and batch["max_seqlen_q"] == 8


def test_static_shapes_in_the_layout():
    opts = THDOptions(pad_seq_to_mult=2, static_num_seqs=4, static_max_seqlen=8)
    layout = plan_layout(np.array([3, 2]), np.array([3, 2]), opts)
    assert layout.cu_padded.tolist() == [0, 4, 6, 6, 6] and layout.cu_logical.tolist() == [0, 3, 5, 5, 5]
    assert layout.max_seqlen == 8 and layout.width == 6


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 6)), min_size=1, max_size=6), st.integers(0, 10))
def test_padding_mask_matches_its_definition(segments, tail):
    """Ordered segments take the one-repeat path, overlapping or unordered ones the general path."""
    starts = np.array([s for s, _ in segments])
    logical = np.array([n for _, n in segments])
    width = int((starts + logical).max()) + tail
    expected = np.ones(width, dtype=bool)
    for s, n in segments:
        expected[s : s + n] = False
    assert padding_mask_from_lengths(starts, logical, width).tolist() == expected.tolist()


# ----------------------------------------------------------------------------------------------
# properties


@st.composite
def packing_cases(draw):
    m = draw(st.sampled_from([1, 2, 3, 4, 8]))
    n = draw(st.integers(1, 6))
    lengths = draw(st.lists(st.integers(1, 17), min_size=n, max_size=n))
    with_positions = draw(st.booleans())
    rows = []
    for i, u in enumerate(lengths):
        tokens = draw(st.lists(st.integers(1, 50_000), min_size=u, max_size=u))
        loss = draw(st.lists(st.integers(0, 1), min_size=u, max_size=u))
        r = {"tokens": tokens, "labels": [t + 7 for t in tokens], "loss_mask": loss}
        if with_positions:
            r["position_ids"] = list(range(u))
        if draw(st.booleans()):
            r["valid_length"] = draw(st.integers(0, u))
        rows.append(r)
    content = sum(-(-u // m) * m for u in lengths)
    fixed = draw(st.booleans())
    kwargs = {"pad_seq_to_mult": m}
    if fixed:
        kwargs.update(
            max_length=content + m * draw(st.integers(0, 3)),
            pad_to_max_length=True,
            slack=draw(st.sampled_from(["last_segment", "pad_sequence"])),
        )
    return rows, kwargs


@settings(max_examples=150, deadline=None)
@given(packing_cases())
def test_builder_properties(case):
    rows, kwargs = case
    m = kwargs["pad_seq_to_mult"]
    batch = build_thd_batch(rows, **kwargs)
    validate_thd_batch(batch, pad_seq_to_mult=m)
    tokens = batch["tokens"][0].numpy()
    labels = batch["labels"][0].numpy()
    loss = batch["loss_mask"][0].numpy()
    positions = batch["position_ids"][0].numpy()
    cu_q = batch["cu_seqlens_q"].numpy()
    cu_p = batch.get("cu_seqlens_q_padded", batch["cu_seqlens_q"]).numpy()
    width = tokens.shape[0]
    # monotone boundaries, physical ones aligned and ending at the width
    assert np.all(np.diff(cu_q) >= 0) and np.all(np.diff(cu_p) >= 0)
    assert np.all(cu_p % m == 0) and cu_p[-1] == width
    if kwargs.get("pad_to_max_length"):
        assert width == kwargs["max_length"]
    else:
        assert width == sum(-(-len(r["tokens"]) // m) * m for r in rows)
    # loss-mask sum preserved
    assert loss.sum() == sum(sum(r["loss_mask"]) for r in rows)
    # every input token appears exactly once, at its offset; everything else is padding
    covered = np.zeros(width, dtype=bool)
    for i, r in enumerate(rows):
        start, u = cu_p[i], len(r["tokens"])
        assert tokens[start : start + u].tolist() == r["tokens"]
        assert labels[start : start + u].tolist() == r["labels"]
        assert loss[start : start + u].tolist() == r["loss_mask"]
        covered[start : start + u] = True
        v = r.get("valid_length", u)
        assert cu_q[i + 1] - cu_q[i] == v
        # position ids restart at 0 at each physical boundary and count through the segment
        seg_end = cu_p[i + 1]
        assert positions[start : seg_end].tolist() == list(range(seg_end - start))
    assert np.all(tokens[~covered] == 0) and np.all(labels[~covered] == -100)
    assert np.all(loss[~covered] == 0)
    # a trailing padding sequence starts at 0 too (all zeros)
    if len(cu_p) - 1 > len(rows):
        assert np.all(positions[cu_p[len(rows)] :] == 0)
    real = sum(r.get("valid_length", len(r["tokens"])) for r in rows)
    assert int((~batch["padding_mask"][0]).sum()) == real
    assert batch["max_seqlen_q"] == int(np.diff(cu_p).max())
