"""In-batch packing: the collator (Bridge in-batch items of bridge_contracts 6.5 through it), loss-mask
parity with rows tokenized alone, and the lazy JSONL dataset (truncation, rejections, scan, pickling)."""

import json
import logging
import pickle

import numpy as np
import pytest
import torch

from seqpack.core.alignment import derive_alignment
from seqpack.data import (
    ChatSchema,
    JsonlFile,
    PromptCompletionSchema,
    SampleRejected,
    demo_path,
    to_training_example,
    tokenize_row,
)
from seqpack.data.tokenizers import ByteTokenizer
from seqpack.core.errors import AlignmentError, ArtifactError, InputError, PackingError, UsageError
from seqpack.packing.in_batch import InBatchPackingCollator, PackInfo, PaddingTotals
from seqpack.packing.sft_dataset import SFTJsonlDataset, scan_rows
from seqpack.packing.thd import validate_thd_batch


def row(tokens, labels=None, loss=None, index=None):
    tokens = np.asarray(tokens, dtype=np.int64)
    out = {
        "tokens": tokens,
        "labels": np.asarray(labels if labels is not None else np.arange(len(tokens)) + 100, dtype=np.int64),
        "loss_mask": np.asarray(loss if loss is not None else np.ones(len(tokens)), dtype=np.float32),
    }
    if index is not None:
        out["row_index"] = index
    return out


def collate(rows, m=1, seq_length=64, **kwargs):
    return InBatchPackingCollator(pad_seq_to_mult=m, seq_length=seq_length, **kwargs)(rows)


# ---------------------------------------------------------------- Bridge in-batch items through the collator
def test_item48_two_rows_no_alignment():
    b = collate([row([1, 2, 3]), row([4, 5, 6, 7])])
    assert b["tokens"].tolist() == [[1, 2, 3, 4, 5, 6, 7]]
    assert b["cu_seqlens_q"].tolist() == [0, 3, 7] and b["cu_seqlens_kv"].tolist() == [0, 3, 7]
    assert b["max_seqlen_q"] == 4 and b["max_seqlen_kv"] == 4
    assert "cu_seqlens_q_padded" not in b and "cu_seqlens_kv_padded" not in b
    assert b["position_ids"].tolist() == [[0, 1, 2, 0, 1, 2, 3]]
    assert not b["padding_mask"].any()


def test_item49_fixed_width_slack_goes_into_the_last_segment():
    rows = [row([1, 2, 3], [2, 3, -100], [1, 1, 0]), row([4, 5], [5, -100], [1, 0])]
    b = collate(rows, seq_length=8, pad_to_max_length=True)
    assert b["tokens"].tolist() == [[1, 2, 3, 4, 5, 0, 0, 0]]
    assert b["labels"].tolist() == [[2, 3, -100, 5, -100, -100, -100, -100]]
    assert b["loss_mask"].tolist() == [[1, 1, 0, 1, 0, 0, 0, 0]]
    assert b["cu_seqlens_q"].tolist() == [0, 3, 5]
    assert b["cu_seqlens_q_padded"].tolist() == [0, 3, 8]
    assert b["max_seqlen_q"] == 5  # the last segment, enlarged by the slack
    info = b["pack_info"]
    assert (info.width, info.real_tokens, info.alignment_padding, info.width_padding) == (8, 5, 0, 3)
    assert b["padding_mask"].tolist() == [[False] * 5 + [True] * 3]


def test_item50_rows_that_do_not_fit_the_fixed_width_name_the_rows():
    with pytest.raises(PackingError, match=r"rows \[7, 9\]: packed length 9 exceeds width 8") as info:
        collate([row(range(1, 6), index=7), row(range(1, 5), index=9)], seq_length=8, pad_to_max_length=True)
    assert info.value.field == "width" and "micro_batch_size * seq_length" in info.value.fix


def test_item51_alignment_two():
    b = collate([row([1, 2, 3]), row([4, 5, 6, 7, 8])], m=2)
    assert b["tokens"].shape == (1, 10)
    assert b["cu_seqlens_q"].tolist() == [0, 3, 8]
    assert b["cu_seqlens_q_padded"].tolist() == [0, 4, 10]
    assert b["max_seqlen_q"] == 6


def test_item52_padding_mask_marks_the_alignment_gaps():
    b = collate([row([1, 2, 3]), row([4, 5])], m=4)
    assert b["padding_mask"].dtype == torch.bool
    assert b["padding_mask"].tolist() == [[False, False, False, True, False, False, True, True]]
    assert b["cu_seqlens_q"].tolist() == [0, 3, 5] and b["cu_seqlens_q_padded"].tolist() == [0, 4, 8]


def test_item54_alignment_four():
    b = collate([row([1, 2]), row([3, 4, 5])], m=4)
    assert b["tokens"].shape == (1, 8)
    assert b["cu_seqlens_q_padded"].tolist() == [0, 4, 8] and b["max_seqlen_q"] == 4


def test_item55_single_row():
    b = collate([row([1, 2, 3, 4, 5])])
    assert b["tokens"].shape == (1, 5) and b["cu_seqlens_q"].tolist() == [0, 5] and b["max_seqlen_q"] == 5
    assert "cu_seqlens_q_padded" not in b


def test_item56_full_rows_need_no_padded_boundaries():
    b = collate([row([1, 2, 3, 4]), row([5, 6, 7, 8])], m=4)
    assert b["cu_seqlens_q"].tolist() == [0, 4, 8] and "cu_seqlens_q_padded" not in b


def test_item57_zeros_inside_a_loss_mask_are_kept():
    b = collate([row([1, 2, 3], loss=[1, 0, 1]), row([4, 5], loss=[0, 1])], m=4)
    assert b["loss_mask"].tolist() == [[1, 0, 1, 0, 0, 1, 0, 0]]


def test_item59_empty_row_is_an_error_naming_the_dataset_row():
    with pytest.raises(PackingError, match="empty") as info:
        collate([row([1, 2], index=10), row([], index=11)])
    assert info.value.row == 11


def test_item60_dtypes():
    b = collate([row([1, 2, 3]), row([4, 5])], m=4)
    assert b["tokens"].dtype == torch.int64 and b["labels"].dtype == torch.int64
    assert b["position_ids"].dtype == torch.int64 and b["loss_mask"].dtype == torch.float32
    assert b["cu_seqlens_q"].dtype == torch.int32 and b["cu_seqlens_q_padded"].dtype == torch.int32


def test_item61_position_ids_keep_counting_through_the_gap():
    b = collate([row([1, 2, 3]), row([4])], m=4)
    assert b["position_ids"].tolist() == [[0, 1, 2, 3, 0, 1, 2, 3]]


def test_item63_alignment_four_lengths_3_and_5():
    b = collate([row([1, 2, 3]), row([4, 5, 6, 7, 8])], m=4)
    assert b["tokens"].shape == (1, 12)
    assert b["cu_seqlens_q_padded"].tolist() == [0, 4, 12] and b["max_seqlen_q"] == 8


def test_gap_content_uses_the_pad_token_and_ignore_label():
    b = collate([row([1, 2, 3], labels=[2, 3, 9]), row([4, 5], labels=[5, 9])], m=4, pad_token_id=258)
    assert b["tokens"].tolist() == [[1, 2, 3, 258, 4, 5, 258, 258]]
    assert b["labels"].tolist() == [[2, 3, 9, -100, 5, 9, -100, -100]]


def test_fixed_width_with_alignment_slack_is_merged_into_the_last_segment():
    # aligned 4 + 8 = 12, width 16: the last physical segment grows from 8 to 12 (quirk Q18)
    b = collate([row([1, 2, 3]), row([4, 5, 6, 7, 8])], m=4, seq_length=16, pad_to_max_length=True)
    assert b["cu_seqlens_q"].tolist() == [0, 3, 8]
    assert b["cu_seqlens_q_padded"].tolist() == [0, 4, 16]
    assert b["max_seqlen_q"] == 12
    assert b["position_ids"].tolist() == [[0, 1, 2, 3] + list(range(12))]
    info = b["pack_info"]
    assert (info.alignment_padding, info.width_padding, info.width) == (4, 4, 16)
    validate_thd_batch(b, pad_seq_to_mult=4)


def test_fixed_width_other_than_seq_length_and_exact_fit():
    c = InBatchPackingCollator(pad_seq_to_mult=2, seq_length=4, pad_to_max_length=True, width=8)
    b = c([row([1, 2, 3, 4]), row([5, 6, 7, 8])])
    assert b["tokens"].shape == (1, 8) and "cu_seqlens_q_padded" not in b
    assert b["pack_info"].width_padding == 0


def test_pad_sequence_slack_is_available_too():
    b = collate([row([1, 2, 3]), row([4, 5])], seq_length=8, pad_to_max_length=True, slack="pad_sequence")
    assert b["cu_seqlens_q"].tolist() == [0, 3, 5, 5] and b["cu_seqlens_q_padded"].tolist() == [0, 3, 5, 8]


def test_row_longer_than_seq_length_is_refused_with_the_dataset_row():
    with pytest.raises(PackingError, match="row length 5 exceeds seq_length 4") as info:
        collate([row([1, 2], index=3), row([1, 2, 3, 4, 5], index=8)], seq_length=4)
    assert info.value.row == 8


def test_missing_row_key():
    bad = row([1, 2], index=5)
    del bad["loss_mask"]
    with pytest.raises(PackingError, match="missing") as info:
        collate([bad])
    assert info.value.row == 5 and info.value.field == "loss_mask"


def test_alignment_object_from_derive_alignment():
    al = derive_alignment(tp=4, cp=2, sp=True)
    c = InBatchPackingCollator(alignment=al, seq_length=64)
    assert c.pad_seq_to_mult == 8
    b = c([row(range(1, 4)), row(range(1, 12)), row(range(1, 9))])
    assert b["cu_seqlens_q_padded"].tolist() == [0, 8, 24, 32]
    validate_thd_batch(b, pad_seq_to_mult=8)


@pytest.mark.parametrize(
    "kwargs, exc, pattern",
    [
        (dict(seq_length=8), UsageError, "give the alignment once"),
        (dict(pad_seq_to_mult=2, alignment=derive_alignment(cp=2), seq_length=8), UsageError, "once"),
        (dict(alignment=8, seq_length=8), UsageError, "derive_alignment"),
        (dict(pad_seq_to_mult=0, seq_length=8), UsageError, "pad_seq_to_mult"),
        (dict(pad_seq_to_mult=1, seq_length=0), UsageError, "seq_length"),
        (dict(pad_seq_to_mult=1, seq_length=8, width=16), UsageError, "pad_to_max_length"),
        (dict(pad_seq_to_mult=1, seq_length=8, slack="nope"), UsageError, "slack"),
        (dict(pad_seq_to_mult=4, seq_length=10, pad_to_max_length=True), AlignmentError, "12"),
    ],
)
def test_bad_collator_arguments(kwargs, exc, pattern):
    with pytest.raises(exc, match=pattern):
        InBatchPackingCollator(**kwargs)


def test_empty_micro_batch():
    with pytest.raises(UsageError, match="non-empty"):
        collate([])


def test_metadata_keys_and_pack_info_to_dict():
    b = collate([row([1, 2, 3], index=4), row([4, 5], index=2)], m=4)
    assert b["row_indices"] == [4, 2] and b["token_count"] == [3, 2]
    d = b["pack_info"].to_dict()
    json.dumps(d)
    assert d["rows"] == [4, 2] and d["aligned_lengths"] == [4, 4]
    assert (d["real_tokens"], d["alignment_padding"], d["width_padding"]) == (5, 3, 0)
    assert d["padding_share"] == pytest.approx(3 / 8)


def test_padding_totals_add_up():
    totals = PaddingTotals()
    totals.add(PackInfo((0, 1), (3, 2), (4, 4), 4, 8))
    totals.add(PackInfo((2,), (6,), (8,), 4, 12, (2,)))
    d = totals.to_dict()
    assert (d["batches"], d["rows"], d["real_tokens"], d["alignment_padding"], d["width_padding"]) == (2, 3, 11, 5, 4)
    assert d["positions"] == 20 and d["max_width"] == 12 and d["truncated_rows"] == 1
    assert d["padding_share"] == pytest.approx(9 / 20)
    assert PaddingTotals().padding_share == 0.0


# ---------------------------------------------------------------- loss-mask parity with rows tokenized alone
@pytest.mark.parametrize(
    "schema_name, schema, rows",
    [
        ("prompt_completion", PromptCompletionSchema(), [0, 5, 17, 42, 99, 123]),
        ("chat", ChatSchema(), [1, 3, 8, 42, 77, 300]),
        ("chat", ChatSchema(loss_mode="last_turn"), [1, 3, 8, 42]),
    ],
)
def test_loss_mask_of_a_row_packed_equals_the_row_alone(schema_name, schema, rows):
    path = demo_path(schema_name)
    alone_file = JsonlFile(path)
    tok = ByteTokenizer()
    ds = SFTJsonlDataset(path, seq_length=4096, schema=schema)
    al = derive_alignment(tp=4, cp=2, sp=True)
    batch = InBatchPackingCollator(alignment=al, seq_length=4096, pad_token_id=tok.pad_id)([ds[i] for i in rows])
    validate_thd_batch(batch, pad_seq_to_mult=8)
    assert batch["row_indices"] == rows
    starts = batch["cu_seqlens_q_padded"].tolist()
    flat = {k: batch[k][0].numpy() for k in ("tokens", "labels", "loss_mask")}
    covered = np.zeros(batch["tokens"].shape[1], dtype=bool)
    internal_zero_seen = False
    for k, i in enumerate(rows):
        alone = to_training_example(
            tokenize_row(alone_file.row(i), schema, tok, max_length=4096, location=alone_file.location(i))
        )
        u = alone.tokens.shape[0]
        seg = slice(starts[k], starts[k] + u)
        np.testing.assert_array_equal(flat["tokens"][seg], alone.tokens)
        np.testing.assert_array_equal(flat["labels"][seg], alone.labels)
        np.testing.assert_array_equal(flat["loss_mask"][seg], alone.loss_mask)
        covered[seg] = True
        ones = np.flatnonzero(alone.loss_mask)
        internal_zero_seen |= bool(ones.size and (alone.loss_mask[ones[0]: ones[-1]] == 0).any())
        assert 0 < alone.loss_mask.sum() < u  # a prompt part is masked
    # gaps train nothing and predict nothing
    assert not flat["loss_mask"][~covered].any()
    assert (flat["labels"][~covered] == -100).all()
    assert (flat["tokens"][~covered] == tok.pad_id).all()
    assert batch["loss_mask"].sum().item() == sum(float(ds[i]["loss_mask"].sum()) for i in rows)
    assert (~covered).sum() > 0  # alignment 8 inserted gaps, so the test exercised them
    if schema.kind == "chat" and schema.loss_mode == "assistant":
        assert internal_zero_seen  # multi-turn rows: masked user turns between trained assistant turns


# ---------------------------------------------------------------- the lazy dataset
def write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_dataset_item_is_the_shifted_example(tmp_path):
    p = write_jsonl(tmp_path / "a.jsonl", [{"prompt": "ab", "completion": "cd"}, {"prompt": "x", "completion": "yz"}])
    ds = SFTJsonlDataset(p, seq_length=32)
    assert len(ds) == 2 and ds.schema.kind == "prompt_completion"
    item = ds[0]
    # ids: a b ' ' c d </s>; mask on ' ' c d </s>
    ids = [97, 98, 32, 99, 100, 257]
    assert item["tokens"].tolist() == ids[:-1] and item["labels"].tolist() == ids[1:]
    assert item["loss_mask"].tolist() == [0, 1, 1, 1, 1]
    assert item["tokens"].dtype == np.int64 and item["loss_mask"].dtype == np.float32
    assert (item["row_index"], item["original_length"], item["truncated"]) == (0, 6, False)
    assert ds[-1]["row_index"] == 1


def test_dataset_detects_chat_and_accepts_a_schema_name(tmp_path):
    chat = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    p = write_jsonl(tmp_path / "c.jsonl", [chat])
    assert SFTJsonlDataset(p, seq_length=32).schema.kind == "chat"
    with pytest.raises(InputError, match="chat row"):
        SFTJsonlDataset(p, seq_length=32, schema="prompt_completion")[0]
    with pytest.raises(UsageError, match="left truncation"):
        SFTJsonlDataset(p, seq_length=32, truncation="left")


def test_truncation_is_flagged_logged_once_and_reported_by_the_collator(tmp_path, caplog):
    rows = [{"prompt": "p" * 40, "completion": "c" * 40}, {"prompt": "a", "completion": "b"},
            {"prompt": "q" * 30, "completion": "d" * 30}]
    p = write_jsonl(tmp_path / "long.jsonl", rows)
    ds = SFTJsonlDataset(p, seq_length=16)
    with caplog.at_level(logging.WARNING, logger="seqpack.packing.sft_dataset"):
        items = [ds[0], ds[1], ds[2]]
    assert [i["truncated"] for i in items] == [True, False, True]
    assert items[0]["original_length"] == 82 and items[0]["tokens"].shape[0] == 15
    warnings = [r for r in caplog.records if "truncation" in r.getMessage()]
    assert len(warnings) == 1 and "long.jsonl:1 (row 0)" in warnings[0].getMessage()
    batch = InBatchPackingCollator(pad_seq_to_mult=1, seq_length=16)(items)
    assert batch["pack_info"].truncated_rows == (0, 2)


def test_reject_policy_names_file_line_row_and_reason(tmp_path):
    p = write_jsonl(tmp_path / "r.jsonl", ["", json.dumps({"prompt": "a", "completion": "b"}),
                                           json.dumps({"prompt": "p" * 40, "completion": "c"})])
    ds = SFTJsonlDataset(p, seq_length=16, truncation="reject")
    assert ds[0]["truncated"] is False
    with pytest.raises(SampleRejected) as info:
        ds[1]
    err = info.value
    assert err.reason == "too_long" and err.line == 3 and err.row == 1 and err.file.endswith("r.jsonl")


def test_rejected_row_raises_by_default_with_the_field(tmp_path):
    p = write_jsonl(tmp_path / "e.jsonl", [{"prompt": "a", "completion": "b"}, {"prompt": "a", "completion": "  "}])
    ds = SFTJsonlDataset(p, seq_length=16)
    with pytest.raises(SampleRejected) as info:
        ds[1]
    assert info.value.reason == "empty_completion" and info.value.field == "completion"
    assert info.value.line == 2 and "e.jsonl:2" in str(info.value)


def test_malformed_row_is_an_input_error_with_its_line(tmp_path):
    p = write_jsonl(tmp_path / "m.jsonl", [{"prompt": "a", "completion": "b"}, '{"prompt": "a",'])
    ds = SFTJsonlDataset(p, seq_length=16)
    with pytest.raises(InputError, match="malformed JSON") as info:
        ds[1]
    assert info.value.line == 2 and not isinstance(info.value, SampleRejected)
    with pytest.raises(InputError, match="malformed JSON"):
        scan_rows(ds)


def test_scan_accounts_for_every_row(tmp_path):
    rows = [
        {"prompt": "a", "completion": "b"},
        {"prompt": "a", "completion": ""},  # rejected: empty completion
        {"prompt": "q" * 30, "completion": "d" * 30},  # usable, truncated from 62 ids to 16
        {"prompt": "c", "completion": "d"},
        {"prompt": "x", "completion": " "},  # rejected: empty after stripping
    ]
    p = write_jsonl(tmp_path / "s.jsonl", rows)
    ds = SFTJsonlDataset(p, seq_length=16)
    scan = scan_rows(ds)
    assert scan.usable.tolist() == [0, 2, 3]
    assert [(r.row, r.line, r.reason) for r in scan.rejected] == [
        (1, 2, "empty_completion"), (4, 5, "empty_completion")
    ]
    assert scan.usable.size + len(scan.rejected) == scan.rows == 5
    assert (scan.truncated_rows, scan.truncated_tokens) == (1, 62 - 16)
    d = scan.to_dict()
    json.dumps(d)
    assert d["rejected_by_reason"] == {"empty_completion": 2} and d["usable"] == 3
    scan.check_matches(ds)
    with pytest.raises(ArtifactError, match="seq_length"):
        scan.check_matches(SFTJsonlDataset(p, seq_length=32))


def test_dataset_pickles_without_its_open_file_and_reopens(tmp_path):
    ds = SFTJsonlDataset(demo_path("chat"), seq_length=4096)
    before = ds[5]
    assert ds.file._fh is not None
    clone = pickle.loads(pickle.dumps(ds))
    assert clone.file._fh is None
    after = clone[5]
    for key in ("tokens", "labels", "loss_mask"):
        np.testing.assert_array_equal(before[key], after[key])


def test_collator_pickles():
    c = InBatchPackingCollator(alignment=derive_alignment(cp=2), seq_length=64, pad_to_max_length=True)
    clone = pickle.loads(pickle.dumps(c))
    assert (clone.pad_seq_to_mult, clone.width) == (4, 64)


@pytest.mark.parametrize(
    "kwargs, pattern", [(dict(seq_length=1), "seq_length"), (dict(seq_length=8, truncation="x"), "truncation")]
)
def test_bad_dataset_arguments(kwargs, pattern):
    with pytest.raises(UsageError, match=pattern):
        SFTJsonlDataset(demo_path("chat"), **kwargs)
