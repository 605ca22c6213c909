"""VLM rows read with every real tokenizer bundle the tests fetch: the ``<image>`` / ``<video>`` markers are
found in the text before tokenizing, so a BPE merge (``>`` with the newline after it, a space with ``<``)
cannot hide them."""

import numpy as np
import pytest

from tests.tokenizer_bundles import require_tokenizer_dir
from seqpack.data.jsonl import JsonlFile
from seqpack.data.schemas import default_schema, detect_schema
from seqpack.data.tokenizers import load_tokenizer
from seqpack.data.vlm.demo import vlm_demo_path
from seqpack.data.vlm.sample import (
    IMAGE_MARKER,
    VisionTokens,
    find_subsequence,
    marker_tokenizer,
    normalize_visual_row,
    tokenize_vlm_row,
)
from seqpack.data.vlm.vision import vision_spec

FAMILIES = ("qwen3", "qwen2_5", "llama3_2", "mistral_nemo", "gemma3", "deepseek_v3", "gptoss")

pytestmark = pytest.mark.slow


def _rows():
    jf = JsonlFile(vlm_demo_path())
    return jf, [jf.row(i) for i in range(len(jf))]


@pytest.mark.parametrize("family", FAMILIES)
def test_every_demo_row_tokenizes_with_its_vision_blocks(family):
    tok = load_tokenizer(require_tokenizer_dir(family))
    jf, rows = _rows()
    schema = default_schema(detect_schema(normalize_visual_row(rows[0])[0]))
    vt = VisionTokens.for_tokenizer(tok)
    spec = vision_spec("qwen2_5_vl")
    for i, row in enumerate(rows):
        ex = tokenize_vlm_row(row, schema, tok, vision=spec, vision_tokens=vt, max_length=1 << 20,
                              base_dir=jf.path.parent)
        ids = np.append(ex.tokens, ex.labels[-1])
        images, videos = len(row.get("images", [])), len(row.get("videos", []))
        assert int((ids == vt.start).sum()) == int((ids == vt.end).sum()) == images + videos, (family, i)
        assert int((ids == vt.image).sum()) == sum(v.n_tokens(spec.merge_size) for v in ex.visuals if v.kind == "image")
        assert not ex.loss_mask[np.isin(ex.labels, [vt.image, vt.video, vt.start, vt.end])].any()
        assert IMAGE_MARKER not in tok.decode(ids[~vt.is_vision(ids)].tolist())  # every marker was replaced


@pytest.mark.parametrize("family", ("qwen2_5", "qwen3", "llama3_2"))
def test_without_the_marker_twin_a_bpe_merge_hides_the_marker(family):
    # the negative control: tokenized as plain text, "<image>\n" does not contain the ids of "<image>"
    tok = load_tokenizer(require_tokenizer_dir(family))
    text = "<image>\nDescribe the image briefly."
    plain = np.asarray(tok.encode(text))
    assert find_subsequence(plain, np.asarray(tok.encode(IMAGE_MARKER))) == []
    twin = marker_tokenizer(tok)
    assert len(twin.encode(IMAGE_MARKER)) == 1
    assert find_subsequence(np.asarray(twin.encode(text)), np.asarray(twin.encode(IMAGE_MARKER))) == [0]
    # the twin is built once and the original tokenizer keeps reading "<image>" as text
    assert marker_tokenizer(tok) is twin and tok.encode(text) == plain.tolist()
    assert twin.fingerprint() == tok.fingerprint() and twin.vocab_size == tok.vocab_size + 2


def test_a_pixel_budget_replaces_the_presets():
    from seqpack.data.vlm.sample import resolve_vision
    from seqpack.data.vlm.vision import smart_resize

    base = vision_spec("qwen2_5_vl")
    big = vision_spec("qwen2_5_vl", max_pixels=12845056)
    assert (big.min_pixels, big.max_pixels) == (base.min_pixels, 12845056) and big.name == base.name
    h, w = smart_resize(1080, 1920, big.factor, big.min_pixels, big.max_pixels)
    h0, w0 = smart_resize(1080, 1920, base.factor, base.min_pixels, base.max_pixels)
    assert h * w > h0 * w0  # the user's budget keeps more pixels than the preset's
    assert resolve_vision("qwen2_vl", min_pixels=3136 * 4).min_pixels == 3136 * 4
    with pytest.raises(Exception, match="below min_pixels"):
        vision_spec("qwen2_vl", min_pixels=10_000, max_pixels=5_000)
