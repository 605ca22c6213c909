"""PackingTaskEncoder hooks called directly: encoding, FFD selection, packing, THD batches."""

import numpy as np
import pytest
import torch

from seqpack.data import ByteTokenizer, to_training_example, tokenize_row
from seqpack.data.schemas import ChatSchema, PromptCompletionSchema
from seqpack.core.errors import InputError, PackingError, UsageError
from seqpack.packing.algorithms import pack_lengths
from seqpack.data.vlm.vision import VISION_PRESETS
from seqpack.data.vlm.sample import VisionTokens
from seqpack.packing.energon.encoder import PackingTaskEncoder
from seqpack.packing.energon.media import png_bytes
from seqpack.packing.energon.samples import EncodedSample, RowSample, cook_row_sample
from seqpack.packing.thd import validate_thd_batch

TOK = ByteTokenizer()
VT = VisionTokens.for_tokenizer(TOK)  # image pad 264, video pad 265, start 266, end 267
PNG16 = png_bytes(np.full((16, 16, 3), 200, dtype=np.uint8))  # tiny preset: grid (1, 4, 4) -> 4 tokens


def _encoder(**kw):
    args = dict(seq_length=12, tokenizer=TOK, schema=PromptCompletionSchema(), pad_seq_to_mult=4)
    args.update(kw)
    return PackingTaskEncoder(**args)


def _row_sample(row, r=7, media=None):
    return RowSample(
        __key__=f"row{r:08d}", __restore_key__=("Webdataset", r), __subflavors__=None,
        row=row, source={"file": "data.jsonl", "line": r + 1, "row": r}, media=media or {},
    )


def _encoded(key, length, m=4):
    tokens = np.arange(1, length + 1, dtype=np.int64)
    return EncodedSample(
        __key__=key, __restore_key__=("Webdataset", key), __subflavors__=None,
        tokens=tokens, labels=tokens + 100, loss_mask=np.ones(length, dtype=np.float32),
        length=length, aligned_length=-(-length // m) * m, visuals=(), source={},
    )


IMAGE_ROW = {"prompt": "<image>\nab", "completion": "cd", "images": [{"member": "media0"}]}


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
    enc = _encoder(seq_length=64, vision="tiny")
    out = enc.encode_sample(_row_sample(IMAGE_ROW, media={"media0": PNG16}))
    block = [VT.start] + [VT.image] * 4 + [VT.end]
    assert out.tokens.tolist() == block + [10, 97, 98, 32, 99, 100]
    assert out.labels.tolist() == block[1:] + [10, 97, 98, 32, 99, 100, TOK.EOS]
    assert out.loss_mask.tolist() == [0] * 8 + [1, 1, 1, 1]
    assert (out.length, out.aligned_length) == (12, 12)
    assert len(out.visuals) == 1 and out.visuals[0].grid == (1, 4, 4)
    chat = _encoder(seq_length=64, vision="tiny", schema=ChatSchema())
    row = {"messages": [{"role": "user", "content": "<image>\nhi"}, {"role": "assistant", "content": "ok"}],
           "images": [{"member": "media0"}]}
    got = chat.encode_sample(_row_sample(row, media={"media0": PNG16}))
    assert got.tokens.tolist().count(VT.image) == 4 and got.loss_mask[got.tokens == VT.image].sum() == 0


def test_encode_rejects_instead_of_truncating():
    enc = _encoder(seq_length=8, vision="tiny")
    sample = _row_sample(IMAGE_ROW, media={"media0": PNG16})
    with pytest.raises(PackingError) as err:
        enc.encode_sample(sample)
    assert str(err.value).startswith("data.jsonl:8, row 7, field 'seq_length': sample row00000007: aligned sequence "
                                     "length 12 (12 tokens rounded up to a multiple of 4) exceeds seq_length=8")
    with pytest.raises(PackingError, match=r"length 9 \(9 tokens rounded up to a multiple of 1\) exceeds"):
        _encoder(seq_length=8, pad_seq_to_mult=1).encode_sample(_row_sample({"prompt": "ab", "completion": "cdefgh"}))
    with pytest.raises(InputError, match="sample row00000007: .*1 image.*0 <image> marker") as err:
        enc.encode_sample(_row_sample({**IMAGE_ROW, "prompt": "ab"}, media={"media0": PNG16}))
    assert err.value.line == 8
    with pytest.raises(InputError, match="no member 'media0'"):
        enc.encode_sample(_row_sample(IMAGE_ROW))
    with pytest.raises(InputError, match="sample row00000007: sample rejected \\(empty_completion\\)") as err:
        enc.encode_sample(_row_sample({"prompt": "ab", "completion": ""}))
    assert type(err.value) is InputError  # a plain InputError survives torch's worker re-raise
    assert (err.value.file, err.value.line, err.value.field) == ("data.jsonl", 8, "completion")
    with pytest.raises(UsageError, match="without a vision spec"):
        _encoder(seq_length=64).encode_sample(_row_sample(IMAGE_ROW, media={"media0": PNG16}))


def test_vlm_batch_carries_patches_grids_and_restarting_positions():
    enc = _encoder(seq_length=64, vision="tiny")
    image = enc.encode_sample(_row_sample(IMAGE_ROW, media={"media0": PNG16}))
    text = enc.encode_sample(_row_sample({"prompt": "ab", "completion": "cd"}, r=8))
    b = enc.batch([enc.pack_selected_samples([text, image])])
    validate_thd_batch(b, pad_seq_to_mult=4)
    assert b["cu_seqlens_q_padded"].tolist() == [0, 8, 20]
    assert b["pixel_values"].shape == (16, VISION_PRESETS["tiny"].patch_dim)
    assert b["pixel_sequence_index"].tolist() == [1] * 16 and b["num_patches"].tolist() == [0, 16]
    assert b["image_grid_thw"].tolist() == [[1, 4, 4]]
    assert b["vision_index"][0, 9:13].tolist() == [0, 1, 2, 3] and (b["vision_index"][0, :9] == -1).all()
    assert b["mrope_position_ids"][:, 0, 8].tolist() == [0, 0, 0]  # the second sequence restarts
    assert b["mrope_position_ids"][1, 0, 9:13].tolist() == [1, 1, 2, 2]  # merged 2x2 grid: rows
    assert b["mrope_position_ids"][2, 0, 9:13].tolist() == [1, 2, 1, 2]  # and columns


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
    enc = _encoder()
    five = _encoded("five", 5)
    four = _encoded("four", 4)
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
    assert "pixel_values" not in b and "mrope_position_ids" not in b
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
    media = _encoder(vision="tiny").thd_batch([_encoded("a", 3), _encoded("b", 2)])
    assert media["pixel_values"].shape == (0, 96) and media["num_patches"].tolist() == [0, 0]
    assert media["mrope_position_ids"].shape == (3, 1, 8)
    with pytest.raises(PackingError, match="exceeds max_length 12"):
        enc.thd_batch([_encoded("a", 9), _encoded("b", 4)])
    with pytest.raises(UsageError):
        _encoder(seq_length=10, pad_to_max_length=True)


def test_cooker_reads_row_documents():
    crude = {"__key__": "row00000003", "__restore_key__": ("Webdataset", 3), "json": {"row": {"prompt": "p"},
             "source": {"row": 3}}, "media0": PNG16}
    sample = cook_row_sample(crude)
    assert sample.row == {"prompt": "p"} and sample.media == {"media0": PNG16}
    assert sample.__restore_key__ == ("Webdataset", 3)
    from seqpack.core.errors import ArtifactError

    with pytest.raises(ArtifactError, match="row00000004"):
        cook_row_sample({"__key__": "row00000004", "__restore_key__": (), "json": {"text": "x"}})
    assert torch.is_tensor(_encoder().thd_batch([_encoded("a", 3)])["tokens"])
