"""The VLM sample contract: images -> patches and grids, placeholder expansion, masks, demo data."""

from __future__ import annotations

import json

import numpy as np
import pytest

from seqpack.data import ByteTokenizer, JsonlFile, default_schema
from seqpack.data.vlm.demo import DEMO_DIR, demo_images, image_path, vlm_demo_path, vlm_rows
from seqpack.data.vlm.mrope import MRopeSpec, rope_index
from seqpack.data.rejections import SampleRejected
from seqpack.data.vlm.vision import VISION_PRESETS, encode_frames, encode_image, smart_resize
from seqpack.data.vlm.images import load_image
from seqpack.data.vlm.sample import VisionTokens, mrope_spec, normalize_visual_row, row_has_visuals, tokenize_vlm_row
from seqpack.core.errors import InputError, UsageError

TINY = VISION_PRESETS["tiny"]
CHAT = default_schema("chat")
PC = default_schema("prompt_completion")
TOK = ByteTokenizer()


def _encode(row, spec=TINY, max_length=4096, base_dir=DEMO_DIR):
    return tokenize_vlm_row(row, CHAT if "messages" in row else PC, TOK, vision=spec, max_length=max_length,
                            base_dir=base_dir)


def test_demo_images_ship_as_drawn():
    drawn = demo_images()
    assert len(drawn) >= 12
    for name, pixels in drawn.items():
        shipped = load_image(DEMO_DIR / image_path(name))
        assert np.array_equal(shipped, pixels), name


def test_demo_jsonl_is_regenerated_byte_for_byte():
    expected = "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in vlm_rows())
    assert vlm_demo_path().read_text(encoding="utf-8") == expected
    kinds = {("images" in r, "videos" in r, len(r.get("images", []))) for r in vlm_rows()}
    assert {(False, False, 0), (True, False, 1), (True, False, 2), (False, True, 0)} <= kinds


@pytest.mark.slow
def test_image_processor_matches_transformers():
    """Our resize + normalise + patch order equals transformers' Qwen2-VL PIL image processor."""
    pytest.importorskip("transformers")
    from PIL import Image
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    rng = np.random.default_rng(0)
    for spec in (VISION_PRESETS["qwen2_vl"], TINY):
        proc = Qwen2VLImageProcessorPil(patch_size=spec.patch_size, merge_size=spec.merge_size,
                                        temporal_patch_size=spec.temporal_patch_size,
                                        min_pixels=spec.min_pixels, max_pixels=spec.max_pixels)
        for h, w in [(37, 53), (64, 64), (120, 33), (300, 200)]:
            pixels = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
            ours = encode_image(pixels, spec)
            theirs = proc(images=[Image.fromarray(pixels)], return_tensors="np")
            assert [list(ours.grid)] == theirs["image_grid_thw"].tolist()
            np.testing.assert_allclose(ours.patches, theirs["pixel_values"], atol=1e-5)


def test_smart_resize_rules():
    assert smart_resize(32, 32, 28, 56 * 56, 28 * 28 * 1280) == (56, 56)  # grown to min_pixels
    h, w = smart_resize(4000, 3000, 28, 56 * 56, 28 * 28 * 1280)
    assert h % 28 == 0 and w % 28 == 0 and h * w <= 28 * 28 * 1280
    with pytest.raises(InputError, match="aspect ratio"):
        smart_resize(1, 500, 28, 56 * 56, 28 * 28 * 1280)


def test_patch_rows_of_one_merge_window_are_adjacent():
    """A 2x2 merge window of a tiny 16x16 image is 4 consecutive patch rows (row-major windows)."""
    pixels = np.zeros((16, 16, 3), dtype=np.uint8)
    pixels[:8, 8:] = 255  # the top-right 8x8 block = merge window (0, 1) of a 4-pixel patch grid
    item = encode_image(pixels, TINY)
    assert item.grid == (1, 4, 4) and item.patches.shape == (16, TINY.patch_dim)
    bright = item.patches.mean(axis=1) > 0
    assert np.flatnonzero(bright).tolist() == [4, 5, 6, 7]


def test_video_frames_give_t_above_one():
    frames = [DEMO_DIR / image_path(f"box_frame_{k}") for k in range(4)]
    item = encode_frames(frames, TINY, fps=2.0)
    assert item.kind == "video" and item.grid == (2, 8, 8) and item.second_per_grid == 1.0
    odd = encode_frames(frames[:3], TINY)
    assert odd.grid[0] == 2  # the last frame repeats up to a temporal patch


def test_expansion_masks_and_positions():
    row = {"messages": [{"role": "user", "content": "<image>\nWhat is it?"},
                        {"role": "assistant", "content": "A red square."}],
           "images": ["images/red_square.png"]}
    ex = _encode(row)
    vt = VisionTokens.for_tokenizer(TOK)
    assert vt.vocab_size == TOK.vocab_size + 4
    n = TINY.tokens_for_grid(ex.visuals[0].grid)
    assert ex.num_vision_tokens == n == 16
    start = int(np.flatnonzero(ex.tokens == vt.start)[0])
    assert ex.tokens[start + 1 : start + 1 + n].tolist() == [vt.image] * n
    assert ex.tokens[start + 1 + n] == vt.end
    vision = vt.is_vision(ex.tokens) | vt.is_vision(ex.labels)
    assert not ex.loss_mask[vision].any()  # loss never on image tokens
    assert ex.loss_mask.sum() == len(b"A red square.") + 1  # the answer and <|end|>
    no_marker = {"messages": [{"role": "user", "content": "\nWhat is it?"}, row["messages"][1]]}
    assert len(ex.tokens) == len(_encode(no_marker).tokens) + n + 2  # the marker became <vs> + n pads + <ve>
    pos = ex.mrope_position_ids(mrope_spec(TINY, vt))
    assert pos.shape == (3, len(ex.tokens)) and pos[:, 0].tolist() == [0, 0, 0]
    block = pos[:, start + 1 : start + 1 + n]
    assert block[1].reshape(4, 4).tolist() == [[block[1, 0] + r] * 4 for r in range(4)]


def test_content_parts_equal_marker_rows():
    parts = {"messages": [{"role": "user", "content": [{"type": "image", "image": "images/red_square.png"},
                                                       {"type": "text", "text": "\nWhat is it?"}]},
                          {"role": "assistant", "content": "A red square."}]}
    markers = {"messages": [{"role": "user", "content": "<image>\nWhat is it?"},
                            {"role": "assistant", "content": "A red square."}],
               "images": ["images/red_square.png"]}
    assert row_has_visuals(parts) and row_has_visuals(markers)
    a, b = _encode(parts), _encode(markers)
    assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.visuals[0].patches, b.visuals[0].patches)
    with pytest.raises(InputError, match="not both"):
        normalize_visual_row({**parts, "images": ["x.png"]})


def test_inline_pixels_and_several_images_in_token_order():
    red = np.zeros((16, 24, 3), dtype=np.uint8).tolist()
    row = {"prompt": "<video> then <image>", "completion": "ok",
           "images": [{"pixels": red}],
           "videos": [{"frames": ["images/box_frame_0.png", "images/box_frame_1.png"], "fps": 1.0}]}
    ex = _encode(row)
    assert [v.kind for v in ex.visuals] == ["video", "image"]
    assert ex.second_per_grid().tolist() == [2.0]
    assert ex.grids("image").tolist() == [[1, 4, 6]]


@pytest.mark.parametrize(
    ("row", "match"),
    [
        ({"prompt": "no marker", "completion": "x", "images": ["images/red_square.png"]}, "0 <image> marker"),
        ({"prompt": "<image> <image>", "completion": "x", "images": ["images/red_square.png"]}, "2 <image> marker"),
        ({"prompt": "<image>", "completion": "x", "images": ["missing.png"]}, "not found"),
        ({"prompt": "<image>", "completion": "x", "images": "a.png"}, "must be a list"),
        ({"prompt": "<image>", "completion": "x", "images": [{"pixels": [[[1, 2]]]}]}, "shape"),
        ({"prompt": "<video>", "completion": "x", "videos": [{"frames": []}]}, "non-empty list"),
    ],
)
def test_bad_rows_name_the_problem(row, match):
    with pytest.raises(InputError, match=match) as info:
        _encode(row)
    assert info.value.field is not None


def test_undecodable_image(tmp_path):
    (tmp_path / "bad.png").write_bytes(b"not a png")
    with pytest.raises(InputError, match="cannot decode .*bad.png") as info:
        _encode({"prompt": "<image>", "completion": "x", "images": ["bad.png"]}, base_dir=tmp_path)
    assert info.value.field == "images[0]"


def test_too_long_is_rejected_never_cut():
    row = {"prompt": "<image>", "completion": "x", "images": ["images/sunset.png"]}
    full = _encode(row)
    with pytest.raises(SampleRejected) as info:
        _encode(row, max_length=len(full.tokens))
    assert info.value.reason == "too_long" and "never truncated" in info.value.message
    assert len(_encode(row, max_length=len(full.tokens) + 1).tokens) == len(full.tokens)


def test_text_rows_in_a_vlm_dataset_have_plain_positions():
    ex = _encode({"prompt": "hello", "completion": "world"})
    assert ex.visuals == () and ex.num_vision_tokens == 0
    pos = ex.mrope_position_ids(mrope_spec(TINY, ex.vision_tokens))
    assert (pos == np.arange(len(ex.tokens))).all()


def test_rope_index_refuses_mismatched_grids():
    spec = MRopeSpec(100, 101, 2)
    toks = np.asarray([1, 102, 100, 100, 100, 100, 103, 2])
    assert rope_index(toks, spec, image_grid_thw=[[1, 4, 4]]).shape == (3, 8)
    with pytest.raises(InputError, match="does not match its grid"):
        rope_index(toks, spec, image_grid_thw=[[1, 4, 2]])
    with pytest.raises(InputError, match="more image blocks"):
        rope_index(toks, spec)
    with pytest.raises(InputError, match="2 image grid"):
        rope_index(toks, spec, image_grid_thw=[[1, 4, 4], [1, 2, 2]])
    with pytest.raises(UsageError):
        MRopeSpec(100, 100, 2)


def test_every_demo_row_encodes_with_both_presets():
    jf = JsonlFile(vlm_demo_path())
    for spec in (TINY, VISION_PRESETS["qwen2_vl"]):
        for i in range(len(jf)):
            ex = _encode(jf.row(i), spec)
            assert len(ex.tokens) <= 256
            ex.mrope_position_ids(mrope_spec(spec, ex.vision_tokens))


def test_header_only_length_equals_the_encoded_length():
    from seqpack.data.vlm.sample import vlm_sample_length

    jf = JsonlFile(vlm_demo_path())
    for spec in (TINY, VISION_PRESETS["qwen2_vl"]):
        for i in range(len(jf)):
            row = jf.row(i)
            ex = _encode(row, spec)
            got = vlm_sample_length(row, CHAT, TOK, vision=spec, base_dir=DEMO_DIR)
            assert (got.tokens, got.vision_tokens) == (len(ex.tokens), ex.num_vision_tokens)
            assert got.images + got.videos == len(ex.visuals)
    with pytest.raises(SampleRejected):
        vlm_sample_length(jf.row(2), CHAT, TOK, vision=TINY, base_dir=DEMO_DIR, max_length=50)
