"""The reference model's VLM parts on their own: M-RoPE rotation and the vision stem."""

from __future__ import annotations

import pytest
import torch

from seqpack.core.errors import InputError, UsageError
from seqpack.training.rope import apply_rope
from seqpack.training.mrope import apply_mrope, check_section, section_axes
from seqpack.training.vision import VisionInputs, VisionStem, VisionStemConfig, embed_with_vision


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
    # per-token windows through the stem equal embedding the image and gathering (up to matmul rounding)
    assert torch.allclose(out[1], visual[0], atol=1e-12) and torch.allclose(out[2], visual[1], atol=1e-12)
    assert not out[[0, 3, 4]].any()
    short = torch.tensor([-1, 0, -1, -1, -1])
    with pytest.raises(InputError, match="do not line up"):
        embed_with_vision(emb, VisionInputs(pixels, pixels[:0], short), stem)
    part = embed_with_vision(emb, VisionInputs(pixels, pixels[:0], short), stem, whole_row=False)  # a CP slice
    assert torch.allclose(part[1], visual[0], atol=1e-12)
    with pytest.raises(InputError, match="names visual token 2"):
        embed_with_vision(emb, VisionInputs(pixels, pixels[:0], torch.tensor([-1, 2, -1, -1, -1])), stem,
                          whole_row=False)


def test_token_inputs_stack_like_single_rows_and_are_checked():
    """The VLM inputs travel per token (``token_inputs``): a stack of rows gives each row's logits alone."""
    from seqpack.training.model import TinyGPT, TinyGPTConfig
    from seqpack.training.mrope import TOKEN_INPUT
    from seqpack.training.vision import TOKEN_INPUTS, token_windows

    cfg = TinyGPTConfig(vision=VisionStemConfig(patch_dim=6), mrope_section=(2, 1, 1))
    model = TinyGPT(cfg, seed=5)
    assert model.token_inputs == (*TOKEN_INPUTS, TOKEN_INPUT)
    assert TinyGPT(TinyGPTConfig(), seed=5).token_inputs == ()
    gen = torch.Generator().manual_seed(1)
    rows = []
    for index in (torch.tensor([-1, 0, 1, -1, -1]), torch.tensor([-1, -1, 1, 0, -1])):
        pixels = torch.randn(8, 6, generator=gen)
        windows, named = token_windows(VisionInputs(pixels, pixels[:0], index), cfg.vision)
        axes = torch.stack([torch.arange(5), torch.arange(5) % 2, torch.arange(5) % 3], dim=-1)
        rows.append({TOKEN_INPUTS[0]: windows, TOKEN_INPUTS[1]: named, TOKEN_INPUT: axes})
    tokens = torch.randint(0, cfg.vocab_size, (2, 5), generator=gen)
    pos, mask = torch.arange(5).expand(2, 5), torch.ones(2, 5, 5, dtype=torch.bool).tril()
    stacked = model(tokens, pos, mask, inputs={k: torch.stack([r[k] for r in rows]) for k in rows[0]})
    for i, r in enumerate(rows):
        alone = model(tokens[i], pos[i], mask[i], inputs=r)
        assert torch.allclose(stacked[i], alone, atol=1e-12)
        assert not torch.allclose(alone, model(tokens[i], pos[i], mask[i]), atol=1e-6)  # the inputs matter
    with pytest.raises(UsageError, match="reads no token input"):
        TinyGPT(TinyGPTConfig(), seed=5)(tokens[0], pos[0], mask[0], inputs={TOKEN_INPUT: rows[0][TOKEN_INPUT]})
    with pytest.raises(UsageError, match="go together"):
        model(tokens[0], pos[0], mask[0], inputs={TOKEN_INPUTS[0]: rows[0][TOKEN_INPUTS[0]]})
