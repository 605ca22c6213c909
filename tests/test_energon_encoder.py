"""PackingTaskEncoder hooks called directly: encoding, FFD selection, packing, THD batches."""

import numpy as np
import pytest
import torch

from reference_impl.data import ByteTokenizer, to_training_example, tokenize_row
from reference_impl.data.schemas import ChatSchema, PromptCompletionSchema
from reference_impl.errors import InputError, PackingError, UsageError
from reference_impl.packing.algorithms import pack_lengths
from reference_impl.packing.energon.encoder import PackingTaskEncoder
from reference_impl.packing.energon.samples import EncodedSample, RowSample, cook_row_sample
from reference_impl.packing.thd import validate_thd_batch

TOK = ByteTokenizer()
IMG = TOK.vocab_size  # the default image placeholder id: 264


def _encoder(**kw):
    args = dict(seq_length=12, tokenizer=TOK, schema=PromptCompletionSchema(), pad_seq_to_mult=4)
    args.update(kw)
    return PackingTaskEncoder(**args)


def _row_sample(row, r=7, patches=None):
    return RowSample(
        __key__=f"row{r:08d}", __restore_key__=("Webdataset", r), __subflavors__=None,
        row=row, source={"file": "data.jsonl", "line": r + 1, "row": r}, patches=patches,
    )


def _encoded(key, length, patches=None, m=4):
    tokens = np.arange(1, length + 1, dtype=np.int64)
    return EncodedSample(
        __key__=key, __restore_key__=("Webdataset", key), __subflavors__=None,
        tokens=tokens, labels=tokens + 100, loss_mask=np.ones(length, dtype=np.float32),
        length=length, aligned_length=-(-length // m) * m, patches=patches, source={},
    )


def test_encode_text_sample_matches_the_data_layer():
    enc = _encoder(seq_length=64)
    sample = _row_sample({"prompt": "ab", "completion": "cd"})
    out = enc.encode_sample(sample)
    # ids: a b ' ' c d EOS -> runtime length 5; mask trains the completion (separator included) and EOS
    assert out.tokens.tolist() == [97, 98, 32, 99, 100]
    assert out.labels.tolist() == [98, 32, 99, 100, TOK.EOS]
    assert out.loss_mask.tolist() == [0, 1, 1, 1, 1]
    assert (out.length, out.aligned_length) == (5, 8)
    assert out.__key__ == "row00000007" and out.__restore_key__ == ("Webdataset", 7)
    ref = to_training_example(tokenize_row(sample.row, PromptCompletionSchema(), TOK, max_length=64))
    assert np.array_equal(out.tokens, ref.tokens) and np.array_equal(out.loss_mask, ref.loss_mask)


def test_encode_media_sample_expands_the_marker():
    enc = _encoder(seq_length=64, patch_dim=2)
    patches = np.arange(6, dtype=np.float32).reshape(3, 2)
    out = enc.encode_sample(_row_sample({"prompt": "<image>\nab", "completion": "cd"}, patches=patches))
    assert out.tokens.tolist() == [IMG, IMG, IMG, 10, 97, 98, 32, 99, 100]
    assert out.labels.tolist() == [IMG, IMG, 10, 97, 98, 32, 99, 100, TOK.EOS]
    assert out.loss_mask.tolist() == [0, 0, 0, 0, 0, 1, 1, 1, 1]
    assert (out.length, out.aligned_length) == (9, 12)
    assert out.patches is patches
    chat = _encoder(seq_length=64, patch_dim=2, schema=ChatSchema(), image_token_id=1000)
    row = {"messages": [{"role": "user", "content": "<image>\nhi"}, {"role": "assistant", "content": "ok"}]}
    got = chat.encode_sample(_row_sample(row, patches=patches))
    assert got.tokens.tolist().count(1000) == 3 and got.loss_mask[got.tokens == 1000].sum() == 0


def test_encode_rejects_instead_of_truncating():
    enc = _encoder(seq_length=8, patch_dim=2)
    sample = _row_sample({"prompt": "<image>\nab", "completion": "cd"}, patches=np.zeros((3, 2), np.float32))
    with pytest.raises(PackingError) as err:
        enc.encode_sample(sample)
    assert str(err.value).startswith("data.jsonl:8, row 7, field 'seq_length': sample row00000007: aligned sequence "
                                     "length 12 (9 tokens rounded up to a multiple of 4) exceeds seq_length=8")
    # the same sample with alignment 1 is 9 long: still too long, and named with its own numbers
    with pytest.raises(PackingError, match=r"length 9 \(9 tokens rounded up to a multiple of 1\) exceeds seq_length=8"):
        _encoder(seq_length=8, pad_seq_to_mult=1, patch_dim=2).encode_sample(sample)
    with pytest.raises(InputError, match="sample row00000007: .*1 image marker") as err:
        enc.encode_sample(_row_sample({"prompt": "<image>\nab", "completion": "cd"}))
    assert err.value.line == 8
    with pytest.raises(InputError, match="sample row00000007: sample rejected \\(empty_completion\\)") as err:
        enc.encode_sample(_row_sample({"prompt": "ab", "completion": ""}))
    assert type(err.value) is InputError  # a plain InputError survives torch's worker re-raise
    assert (err.value.file, err.value.line, err.value.field) == ("data.jsonl", 8, "completion")
    with pytest.raises(UsageError, match="without media"):
        _encoder(seq_length=64).encode_sample(_row_sample({"prompt": "x", "completion": "y"},
                                                          patches=np.zeros((1, 2), np.float32)))
    with pytest.raises(InputError, match=r"shape \[1, 3\]"):
        enc.encode_sample(_row_sample({"prompt": "<image>x", "completion": "y"}, patches=np.zeros((1, 3), np.float32)))


def test_select_is_ffd_on_aligned_lengths_and_keeps_everything():
    enc = _encoder()
    five, four_a, four_b = _encoded("five", 5), _encoded("four-a", 4), _encoded("four-b", 4)
    groups = enc.select_samples_to_pack([five, four_a, four_b])
    assert [[s.__key__ for s in g] for g in groups] == [["five", "four-a"], ["four-b"]]
    assert groups[0][0] is five  # the sample objects themselves, not copies
    rng = np.random.default_rng(0)
    for _ in range(50):
        lengths = rng.integers(1, 13, size=int(rng.integers(1, 20))).tolist()
        samples = [_encoded(f"s{i}", n) for i, n in enumerate(lengths)]
        groups = enc.select_samples_to_pack(list(samples))
        flat = [s.__key__ for g in groups for s in g]
        assert sorted(flat) == sorted(s.__key__ for s in samples) and len(flat) == len(samples)
        assert all(sum(s.aligned_length for s in g) <= 12 for g in groups)
        expected = pack_lengths([s.aligned_length for s in samples], 12, "first_fit_decreasing").bins()
        assert [[s.__key__ for s in g] for g in groups] == [[f"s{i}" for i in b] for b in expected]
    assert enc.select_samples_to_pack([]) == []


def test_pack_and_batch_reproduce_the_worked_example():
    enc = _encoder(patch_dim=2)
    five = _encoded("five", 5, patches=np.full((5, 2), 5.0, np.float32))
    four = _encoded("four", 4, patches=np.full((4, 2), 4.0, np.float32))
    packed = enc.pack_selected_samples([five, four])
    assert packed.__restore_key__ == () and packed.__key__ == "five,four"
    assert [s.__restore_key__ for s in packed.samples] == [("Webdataset", "five"), ("Webdataset", "four")]
    b = enc.batch([packed])
    validate_thd_batch(b, pad_seq_to_mult=4)
    assert b["tokens"].shape == (1, 12)
    assert b["cu_seqlens_q"].tolist() == [0, 5, 9] and b["cu_seqlens_q_padded"].tolist() == [0, 8, 12]
    assert b["max_seqlen_q"] == 8
    assert b["labels"][0, 5:8].tolist() == [-100] * 3 and b["loss_mask"][0, 5:8].tolist() == [0] * 3
    assert b["position_ids"][0, 8].item() == 0 and b["tokens"][0, 5:8].tolist() == [TOK.PAD] * 3
    assert b["pixel_values"][:, 0].tolist() == [5.0] * 5 + [4.0] * 4 and b["num_patches"].tolist() == [5, 4]
    assert b["sample_keys"] == ["five", "four"] and b["__restore_key__"] == ()
    with pytest.raises(PackingError, match="micro_batch_size=1") as err:
        enc.batch([packed, packed])
    assert err.value.rule_id == "PACK-ENERGON-MBS1"
    with pytest.raises(PackingError, match="empty group"):
        enc.pack_selected_samples([])


def test_fixed_width_and_text_only_batches():
    enc = _encoder(pad_to_max_length=True)
    b = enc.batch([enc.pack_selected_samples([_encoded("four", 4)])])
    validate_thd_batch(b, pad_seq_to_mult=4)
    assert b["tokens"].shape == (1, 12) and b["cu_seqlens_q"].tolist() == [0, 4]
    assert b["cu_seqlens_q_padded"].tolist() == [0, 12] and b["max_seqlen_q"] == 12
    assert "pixel_values" not in b and "num_patches" not in b
    media = _encoder(patch_dim=3).thd_batch([_encoded("a", 3), _encoded("b", 2)])
    assert media["pixel_values"].shape == (0, 3) and media["num_patches"].tolist() == [0, 0]
    with pytest.raises(PackingError, match="exceeds max_length 12"):
        enc.thd_batch([_encoded("a", 9), _encoded("b", 4)])
    with pytest.raises(UsageError):
        _encoder(seq_length=10, pad_to_max_length=True)


def test_cooker_reads_row_documents():
    crude = {"__key__": "row00000003", "__restore_key__": ("Webdataset", 3), "json": {"row": {"prompt": "p"},
             "source": {"row": 3}}, "patches.npy": np.ones((2, 2), dtype=np.float64)}
    sample = cook_row_sample(crude)
    assert sample.row == {"prompt": "p"} and sample.patches.dtype == np.float32
    assert sample.__restore_key__ == ("Webdataset", 3)
    from reference_impl.errors import ArtifactError

    with pytest.raises(ArtifactError, match="row00000004"):
        cook_row_sample({"__key__": "row00000004", "__restore_key__": (), "json": {"text": "x"}})
    assert torch.is_tensor(_encoder().thd_batch([_encoded("a", 3)])["tokens"])
