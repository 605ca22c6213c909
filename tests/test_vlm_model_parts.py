"""The reference model's VLM parts on their own: M-RoPE rotation and the vision stem."""

from __future__ import annotations

import pytest
import torch

from reference_impl.errors import InputError, UsageError
from reference_impl.training.model import apply_rope
from reference_impl.training.mrope import apply_mrope, check_section, section_axes
from reference_impl.training.vision import VisionInputs, VisionStem, VisionStemConfig, embed_with_vision


def _draw(seed=0):
    gen = torch.Generator().manual_seed(seed)

    def draw(*shape):
        return torch.nn.Parameter(0.2 * torch.randn(*shape, generator=gen, dtype=torch.float64))

    return draw


def test_mrope_equals_rope_on_text_positions():
    x = torch.randn(7, 2, 8, dtype=torch.float64)
    pos = torch.arange(7)
    same = apply_mrope(x, pos.expand(3, 7), 10000.0, (2, 1, 1))
    assert torch.allclose(same, apply_rope(x, pos, 10000.0), atol=1e-12)


def test_mrope_sections_pick_their_axis():
    x = torch.randn(5, 1, 8, dtype=torch.float64)
    pos = torch.stack([torch.arange(5), torch.zeros(5, dtype=torch.long), torch.zeros(5, dtype=torch.long)])
    out = apply_mrope(x, pos, 10000.0, (2, 1, 1))
    # frequencies 2 and 3 (height, width) see position 0: those rotation pairs are unchanged
    for j in (2, 3):
        assert torch.allclose(out[..., j], x[..., j]) and torch.allclose(out[..., 4 + j], x[..., 4 + j])
    assert not torch.allclose(out[1:, ..., 0], x[1:, ..., 0])
    assert section_axes((2, 1, 1)).tolist() == [0, 0, 1, 2]
    with pytest.raises(UsageError, match="sum to head_dim/2"):
        check_section((2, 2, 1), 8)
    with pytest.raises(UsageError, match="shape"):
        apply_mrope(x, pos[:, :4], 10000.0, (2, 1, 1))


def test_vision_stem_merges_windows():
    stem = VisionStem(VisionStemConfig(patch_dim=6, merge_size=2, hidden_size=3), 4, _draw())
    pixels = torch.randn(8, 6, dtype=torch.float64)
    out = stem(pixels)
    assert out.shape == (2, 4)
    changed = pixels.clone()
    changed[5] += 1.0  # a patch of the second window
    again = stem(changed)
    assert torch.equal(again[0], out[0]) and not torch.equal(again[1], out[1])
    with pytest.raises(InputError, match="multiple of 4"):
        stem(torch.randn(6, 6, dtype=torch.float64))


def test_embed_with_vision_places_visual_tokens_by_index():
    stem = VisionStem(VisionStemConfig(patch_dim=6, merge_size=2, hidden_size=3), 4, _draw())
    emb = torch.zeros(5, 4, dtype=torch.float64)
    pixels = torch.randn(8, 6, dtype=torch.float64)
    index = torch.tensor([-1, 0, 1, -1, -1])
    out = embed_with_vision(emb, VisionInputs(pixels, torch.zeros(0, 6, dtype=torch.float64), index), stem)
    visual = stem(pixels)
    assert torch.equal(out[1], visual[0]) and torch.equal(out[2], visual[1]) and not out[[0, 3, 4]].any()
    short = torch.tensor([-1, 0, -1, -1, -1])
    with pytest.raises(InputError, match="do not line up"):
        embed_with_vision(emb, VisionInputs(pixels, pixels[:0], short), stem)
    part = embed_with_vision(emb, VisionInputs(pixels, pixels[:0], short), stem, whole_row=False)  # a CP slice
    assert torch.equal(part[1], visual[0])
    with pytest.raises(InputError, match="names visual token 2"):
        embed_with_vision(emb, VisionInputs(pixels, pixels[:0], torch.tensor([-1, 2, -1, -1, -1])), stem,
                          whole_row=False)
