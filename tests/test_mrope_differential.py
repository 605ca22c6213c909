"""Differential test: our M-RoPE ids against ``transformers``' Qwen2-VL / Qwen2.5-VL ``get_rope_index``.

``transformers`` is a test-only reference (the ``test`` extra); it needs no weights: the method is
called on a minimal stand-in object that carries the config fields it reads. Random layouts cover
text only, one image, several images and video-like items (t > 1), for both models and merge
sizes 1 and 2; each layout is checked unpacked (each sequence alone, as one right-padded batch
with an attention mask) and packed (one THD row from the real builder, every sequence restarting
at 0).

The installed version decides where text after a vision block starts: ``transformers`` 5.3+
passes ``mm_token_type_ids`` and starts it at ``max(h, w) / merge`` ("spatial"); older versions
start it one past the block's largest id ("max"). ``seqpack.data.vlm.mrope`` implements both.
"""

from __future__ import annotations

import inspect
import types
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest

from seqpack.data.vlm.mrope import MRopeSpec, packed_rope_index, rope_index
from seqpack.packing.thd import build_thd_batch

torch = pytest.importorskip("torch")

# Qwen's real special-token ids (the defaults of the transformers configs)
IMG, VID, VS, VE = 151655, 151656, 151652, 151653
N_LAYOUTS = 240


@pytest.fixture(scope="module")
def hf():
    """transformers' two model classes and the variant the installed version computes (imported
    here, not at collection: the import takes seconds)."""
    pytest.importorskip("transformers")
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel

    new_style = "mm_token_type_ids" in inspect.signature(Qwen2VLModel.get_rope_index).parameters
    return SimpleNamespace(qwen2_vl=Qwen2VLModel, qwen2_5_vl=Qwen2_5_VLModel, new_style=new_style,
                           variant="spatial" if new_style else "max")


def _hf_rope_index(hf, model: str, merge: int, tps: float, ids, image_grids, video_grids, seconds, attention_mask):
    """transformers' get_rope_index, called on a stand-in carrying only the fields it reads."""
    cls = getattr(hf, model)
    vision = SimpleNamespace(spatial_merge_size=merge, tokens_per_second=tps)
    stub = SimpleNamespace(config=SimpleNamespace(vision_config=vision, image_token_id=IMG, video_token_id=VID,
                                                  vision_start_token_id=VS))
    if hasattr(cls, "get_vision_position_ids"):
        stub.get_vision_position_ids = types.MethodType(cls.get_vision_position_ids, stub)
    kwargs = {"attention_mask": attention_mask}
    if model == "qwen2_5_vl":
        kwargs["second_per_grid_ts"] = seconds
    if hf.new_style:
        mm = torch.zeros_like(ids, dtype=torch.int)
        mm[ids == IMG] = 1
        mm[ids == VID] = 2
        pos, _ = cls.get_rope_index(stub, ids, mm, image_grids, video_grids, **kwargs)
    else:
        pos, _ = cls.get_rope_index(stub, ids, image_grids, video_grids, **kwargs)
    return pos


def _layout(rng: np.random.Generator, category: str, merge: int, inexact_seconds: bool = True):
    """One sequence: tokens plus its image grids, video grids and seconds per grid."""
    n_items = {"text": 0, "one_image": 1, "several_images": int(rng.integers(2, 4)), "video": 1,
               "mixed": int(rng.integers(2, 5))}[category]
    # transformers < 5.3 casts second_per_grid to an integer before multiplying (4.57 does), so only
    # whole seconds are compared there; 5.3+ multiplies in float32 as we do
    seconds_choices = [1.0, 2.0] + ([0.5, 1.5, 0.083, 1 / 3, 0.7] if inexact_seconds else [])
    tokens = list(rng.integers(0, 50, int(rng.integers(1, 6))))
    images, videos, seconds = [], [], []
    for k in range(n_items):
        is_video = category == "video" or (category == "mixed" and rng.random() < 0.5)
        h = merge * int(rng.integers(1, 5))
        w = merge * int(rng.integers(1, 5))
        if is_video:
            t = int(rng.integers(2, 6))
            videos.append((t, h, w))
            seconds.append(float(rng.choice(seconds_choices)))
            pad = VID
        else:
            t = 1
            images.append((1, h, w))
            pad = IMG
        tokens += [VS] + [pad] * (t * h * w // merge**2) + [VE]
        tokens += list(rng.integers(0, 50, int(rng.integers(0 if k < n_items - 1 else 1, 5))))
    return np.asarray(tokens, dtype=np.int64), images, videos, seconds


def _batch(rng: np.random.Generator, category: str, inexact_seconds: bool):
    merge = int(rng.choice([1, 2]))
    model = str(rng.choice(["qwen2_vl", "qwen2_5_vl"]))
    tps = float(rng.choice([2, 4]))
    n_seq = int(rng.integers(1, 5))
    # the category fixes the first sequence; the others are drawn freely (a packed row mixes kinds)
    cats = [category] + [str(rng.choice(["text", "one_image", "several_images", "video", "mixed"]))
                         for _ in range(n_seq - 1)]
    return merge, model, tps, [_layout(rng, c, merge, inexact_seconds) for c in cats]


def _spec(merge: int, model: str, tps: float, variant: str) -> MRopeSpec:
    return MRopeSpec(IMG, VID, merge, tokens_per_second=tps if model == "qwen2_5_vl" else None,
                     text_after_vision=variant)


def _concat(seqs, index):
    rows = [np.asarray(g, dtype=np.int64).reshape(-1, 3) for s in seqs for g in [s[index]]]
    return np.concatenate(rows) if rows else np.zeros((0, 3), dtype=np.int64)


def _hf_unpacked(hf, merge, model, tps, seqs):
    """transformers' ids for each sequence alone: one right-padded batch with an attention mask."""
    width = max(len(s[0]) for s in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros(len(seqs), width, dtype=torch.long)
    for b, (tokens, *_rest) in enumerate(seqs):
        ids[b, : len(tokens)] = torch.from_numpy(tokens)
        mask[b, : len(tokens)] = 1
    images, videos = _concat(seqs, 1), _concat(seqs, 2)
    seconds = [x for s in seqs for x in s[3]]
    pos = _hf_rope_index(
        hf, model, merge, tps, ids,
        torch.from_numpy(images) if len(images) else None,
        torch.from_numpy(videos) if len(videos) else None,
        torch.tensor(seconds, dtype=torch.float32) if seconds else None,
        mask,
    )
    return [pos[:, b, : len(s[0])].numpy() for b, s in enumerate(seqs)]


CATEGORIES = ("text", "one_image", "several_images", "video", "mixed")


@pytest.mark.slow
def test_mrope_matches_transformers_on_random_layouts(hf):
    rng = np.random.default_rng(20240607)
    tally: Counter = Counter()
    for n in range(N_LAYOUTS):
        category = CATEGORIES[n % len(CATEGORIES)]
        merge, model, tps, seqs = _batch(rng, category, hf.new_style)
        spec = _spec(merge, model, tps, hf.variant)
        expected = _hf_unpacked(hf, merge, model, tps, seqs)
        # unpacked: every sequence alone
        for (tokens, images, videos, seconds), want in zip(seqs, expected):
            got = rope_index(tokens, spec, image_grid_thw=images or None, video_grid_thw=videos or None,
                             second_per_grid=seconds or None)
            assert np.array_equal(got, want), (n, category, model, merge, tokens.tolist())
        tally[f"unpacked:{category}"] += 1
        # packed: one THD row from the real builder, aligned to a random multiple
        mult = int(rng.choice([1, 2, 4, 8]))
        rows = [{"tokens": s[0], "labels": s[0], "loss_mask": np.ones(len(s[0]), dtype=np.float32)} for s in seqs]
        batch = build_thd_batch(rows, pad_seq_to_mult=mult, pad_token_id=7)
        cu = batch["cu_seqlens_q"].numpy()
        cu_p = batch.get("cu_seqlens_q_padded", batch["cu_seqlens_q"]).numpy()
        packed = packed_rope_index(
            batch["tokens"][0].numpy(), cu, spec, cu_seqlens_padded=cu_p,
            image_grid_thw=_concat(seqs, 1), video_grid_thw=_concat(seqs, 2),
            second_per_grid=[x for s in seqs for x in s[3]] or None,
        )
        for i, want in enumerate(expected):
            start, length = int(cu_p[i]), int(cu[i + 1] - cu[i])
            assert np.array_equal(packed[:, start : start + length], want), (n, i, category)
            assert packed[:, start].tolist() == [0, 0, 0]  # restart on all three axes
        tally[f"packed:{len(seqs)}_sequences" if len(seqs) > 1 else "packed:1_sequence"] += 1
        tally[f"model:{model}"] += 1
    assert sum(v for k, v in tally.items() if k.startswith("unpacked:")) >= 200
    for category in CATEGORIES:
        assert tally[f"unpacked:{category}"] >= 40, tally
    assert tally["model:qwen2_vl"] and tally["model:qwen2_5_vl"]
    assert any(k.startswith("packed:") and not k.endswith("1_sequence") for k in tally)


@pytest.mark.slow
def test_not_restarting_differs_from_transformers(hf):
    """Negative control: ids computed over the whole packed row (no restart) disagree with the
    per-sequence reference as soon as a second sequence follows."""
    rng = np.random.default_rng(5)
    merge, model, tps = 2, "qwen2_vl", 2.0
    seqs = [_layout(rng, "one_image", merge), _layout(rng, "mixed", merge)]
    spec = _spec(merge, model, tps, hf.variant)
    expected = _hf_unpacked(hf, merge, model, tps, seqs)
    row = np.concatenate([s[0] for s in seqs])
    whole = rope_index(row, spec, image_grid_thw=_concat(seqs, 1), video_grid_thw=_concat(seqs, 2),
                       second_per_grid=[x for s in seqs for x in s[3]] or None)
    first = len(seqs[0][0])
    assert np.array_equal(whole[:, :first], expected[0])
    assert not np.array_equal(whole[:, first:], expected[1])
    assert whole[:, first].min() > 0


def test_variants_differ_only_for_long_videos():
    spec_max = MRopeSpec(IMG, VID, 2, tokens_per_second=2.0, text_after_vision="max")
    spec_spatial = MRopeSpec(IMG, VID, 2, tokens_per_second=2.0, text_after_vision="spatial")
    image = np.asarray([1, VS] + [IMG] * 4 + [VE, 2])
    assert np.array_equal(rope_index(image, spec_max, image_grid_thw=[[1, 4, 4]]),
                          rope_index(image, spec_spatial, image_grid_thw=[[1, 4, 4]]))
    video = np.asarray([1, VS] + [VID] * 8 + [VE, 2])  # t=8, 2x2 merged: temporal extent 7 > 2
    a = rope_index(video, spec_max, video_grid_thw=[[8, 2, 2]], second_per_grid=[0.5])
    b = rope_index(video, spec_spatial, video_grid_thw=[[8, 2, 2]], second_per_grid=[0.5])
    assert a[:, -1].tolist() == [11, 11, 11] and b[:, -1].tolist() == [4, 4, 4]
