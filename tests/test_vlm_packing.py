"""VLM rows through the in-batch collator: one THD builder, aligned image tokens, patches mapped back
to their samples, M-RoPE ids restarting per sequence and split correctly under CP."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from seqpack.data import ByteTokenizer
from seqpack.data.vlm.demo import vlm_demo_path
from seqpack.data.vlm.vision import VISION_PRESETS
from seqpack.data.vlm.sample import VLMSettings
from seqpack.core.errors import InputError, PackingError, UsageError
from seqpack.packing.in_batch import InBatchPackingCollator, build_in_batch_loader
from seqpack.packing.sft_dataset import SFTJsonlDataset, scan_rows
from seqpack.packing.thd import validate_thd_batch
from seqpack.packing.vlm import ROW_VISUAL_KEYS, visual_summary
from seqpack.training.context_parallel import slice_thd_batch_for_cp, thd_partition_indices

TINY = VISION_PRESETS["tiny"]


def _config(cp=2, tp=1, sp=False, mbs=4):
    world = cp * tp
    return {
        "model": {"seq_length": 256, "context_parallel_size": cp, "tensor_model_parallel_size": tp,
                  "sequence_parallel": sp, "calculate_per_token_loss": True},
        "dataset": {"seq_length": 256, "enable_in_batch_packing": True, "dataloader_type": "single"},
        "train": {"micro_batch_size": mbs, "global_batch_size": 8 * mbs},
        "dist": {"world_size": world},
    }


@pytest.fixture(scope="module")
def dataset():
    return SFTJsonlDataset(vlm_demo_path(), seq_length=256, vision="tiny")


def _batches(dataset, **kw):
    loader = build_in_batch_loader(_config(**kw), dataset, row_scan=scan_rows(dataset), num_workers=0,
                                   drop_last=False)
    return list(loader)


def _sequences(batch):
    cu = batch["cu_seqlens_q"].numpy()
    cu_p = batch.get("cu_seqlens_q_padded", batch["cu_seqlens_q"]).numpy()
    return [(int(cu_p[i]), int(cu[i + 1] - cu[i])) for i in range(len(cu) - 1)]


@pytest.mark.parametrize(("cp", "tp", "sp", "mult"), [(2, 1, False, 4), (2, 4, True, 8), (1, 1, False, 1)])
def test_vlm_micro_batches_hold_their_samples(dataset, cp, tp, sp, mult):
    batches = _batches(dataset, cp=cp, tp=tp, sp=sp)
    vt, mrope = dataset.vlm.tokens, dataset.vlm.mrope
    seen, mixed = 0, 0
    for b in batches:
        validate_thd_batch(b, pad_seq_to_mult=mult)  # alignment covers the image tokens too
        kinds = set()
        for (start, length), row in zip(_sequences(b), b["row_indices"]):
            ex = dataset.vlm_example(row)
            sl = slice(start, start + length)
            assert np.array_equal(b["tokens"][0, sl].numpy(), ex.tokens)
            assert np.array_equal(b["loss_mask"][0, sl].numpy(), ex.loss_mask)
            # M-RoPE: the sample's own ids, restarting at 0 on all three axes
            assert np.array_equal(b["mrope_position_ids"][:, 0, sl].numpy(), ex.mrope_position_ids(mrope))
            assert b["mrope_position_ids"][:, 0, start].tolist() == [0, 0, 0]
            kinds.add(bool(ex.visuals))
            seen += 1
        mixed += kinds == {True, False}
        # loss never on a vision token (as input or as label)
        vision = vt.is_vision(b["tokens"][0].numpy()) | vt.is_vision(b["labels"][0].numpy())
        assert not b["loss_mask"][0, torch.from_numpy(vision)].any()
        # patches in sample order, with an index back to their sequence
        owners = b["pixel_sequence_index"].numpy()
        assert np.array_equal(np.bincount(owners, minlength=len(b["row_indices"])),
                              b["num_patches"].numpy() - np.bincount(b["video_sequence_index"].numpy(),
                                                                     minlength=len(b["row_indices"])))
        assert (np.diff(owners) >= 0).all()
        expected = np.concatenate([dataset.vlm_example(r).pixels("image", TINY.patch_dim) for r in b["row_indices"]])
        assert np.array_equal(b["pixel_values"].numpy(), expected)
        summary = visual_summary(b)
        assert summary["vision_tokens"] * TINY.merge_size ** 2 == summary["patch_rows"]
    assert seen == 48 and mixed > 0


def test_cp_split_carries_each_ranks_positions_and_vision_index(dataset):
    b = _batches(dataset, cp=2)[0]
    cu_p = b["cu_seqlens_q_padded"]
    pieces = [slice_thd_batch_for_cp(b, 2, r) for r in range(2)]
    seen = torch.zeros(b["tokens"].shape[1], dtype=torch.bool)
    for rank, local in enumerate(pieces):
        index = thd_partition_indices(cu_p, 2, rank)
        seen[index] = True
        assert torch.equal(local["mrope_position_ids"], b["mrope_position_ids"][:, :, index])
        assert torch.equal(local["vision_index"], b["vision_index"][:, index])
        assert torch.equal(local["tokens"], b["tokens"][:, index])
        for key in ROW_VISUAL_KEYS:  # the whole row's images stay on every rank
            assert torch.equal(local[key], b[key])
    assert seen.all()


def test_text_dataset_refuses_image_rows():
    plain = SFTJsonlDataset(vlm_demo_path(), seq_length=256)
    with pytest.raises(InputError, match="carries images") as err:
        plain[1]
    assert err.value.field == "images" and err.value.line == 2


def test_collator_needs_settings_and_matching_items(dataset):
    items = [dataset[1], dataset[0]]
    with pytest.raises(UsageError, match="vlm settings"):
        InBatchPackingCollator(pad_seq_to_mult=1, seq_length=256)(items)
    collate = InBatchPackingCollator(pad_seq_to_mult=1, seq_length=256, vlm=dataset.vlm)
    assert collate(items)["num_patches"].tolist()[1] == 0
    swapped = [dict(items[0], visuals=items[1]["visuals"]), dict(items[1], visuals=items[0]["visuals"])]
    with pytest.raises(PackingError, match="do not match"):
        collate(swapped)
    other = VLMSettings(VISION_PRESETS["qwen2_vl"], dataset.vlm.tokens)
    with pytest.raises(PackingError, match="patch rows of 96 values"):
        InBatchPackingCollator(pad_seq_to_mult=1, seq_length=256, vlm=other)(items)


def test_qwen_preset_gives_fewer_image_tokens():
    qwen = SFTJsonlDataset(vlm_demo_path(), seq_length=256, vision="qwen2_vl", tokenizer=ByteTokenizer())
    tiny = SFTJsonlDataset(vlm_demo_path(), seq_length=256, vision="tiny")
    assert qwen.vlm_example(1).num_vision_tokens < tiny.vlm_example(1).num_vision_tokens
    assert qwen.signature() != tiny.signature()  # a row scan of one does not fit the other
