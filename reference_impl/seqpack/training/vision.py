"""The reference model's vision stem: patch rows -> merged visual tokens in the LM hidden size.

A Qwen-VL vision encoder embeds every patch row, runs a vision transformer and merges each
``merge_size x merge_size`` window into one language-model token. The stem here keeps the shape of
that pipeline and drops the transformer: a patch embedding (``patch_dim -> hidden``, GELU), then
the spatial merge (the ``merge_size**2`` adjacent rows of a window concatenated) and a projection
into the LM hidden size. It is per window, so an image's tokens depend on its own patches only.

The model reads images per token (:data:`TOKEN_INPUTS`, two of
:attr:`~seqpack.training.model.TinyGPT.token_inputs`): :func:`token_windows` gives every
position whose ``vision_index`` is ``k >= 0`` the patch rows of merge window ``k`` (images first,
then videos, as :func:`seqpack.packing.vlm.attach_visual_inputs` numbers them) and a flag;
:func:`place_visual_tokens` replaces the embeddings of flagged positions by the stem's output for
their window. As the stem works per window, this equals embedding every image and gathering, and
a stack of padded rows (the smoke test's batched equivalence) or a CP rank's slice of
``vision_index`` needs nothing more: each rank's stem gradient covers its own positions and sums
with the other ranks'. :func:`vision_inputs` reads the inputs from a canonical VLM batch;
:func:`embed_with_vision` is the whole placement from them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from seqpack.core.arguments import positive_int
from seqpack.core.errors import InputError

__all__ = ["TOKEN_INPUTS", "VisionInputs", "VisionStem", "VisionStemConfig", "embed_with_vision", "place_visual_tokens",
           "token_windows", "vision_inputs"]

#: The stem's per-token model inputs: every position's merge window of patch rows, float
#: ``[..., T, merge**2, patch_dim]`` (zeros for text and padding), and whether it shows a visual token, bool ``[..., T]``.
TOKEN_INPUTS: tuple[str, str] = ("visual_patches", "visual_token")


@dataclass(frozen=True)
class VisionStemConfig:
    """Sizes of the stem: ``patch_dim`` values per patch row, ``merge_size``, the stem's own width."""

    patch_dim: int
    merge_size: int = 2
    hidden_size: int = 16

    def __post_init__(self) -> None:
        for name in ("patch_dim", "merge_size", "hidden_size"):
            positive_int(name, getattr(self, name))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


class VisionStem(nn.Module):
    """``forward(pixel_values [P, patch_dim]) -> [P / merge**2, lm_hidden]`` (module docstring)."""

    def __init__(self, cfg: VisionStemConfig, lm_hidden: int, draw: Callable[..., nn.Parameter]) -> None:
        super().__init__()
        self.cfg = cfg
        window = cfg.merge_size ** 2
        self.patch_proj = draw(cfg.patch_dim, cfg.hidden_size)
        self.merge_proj = draw(window * cfg.hidden_size, lm_hidden)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        window = self.cfg.merge_size ** 2
        _check_patches(pixel_values, self.cfg)
        return self.embed_windows(pixel_values.reshape(-1, window, self.cfg.patch_dim))

    def embed_windows(self, windows: torch.Tensor) -> torch.Tensor:
        """Merged visual tokens ``[..., lm_hidden]`` of merge windows ``[..., merge**2, patch_dim]``."""
        hidden = torch.nn.functional.gelu(windows.to(self.patch_proj.dtype) @ self.patch_proj)
        return hidden.flatten(-2) @ self.merge_proj


def _check_patches(pixel_values: torch.Tensor, cfg: VisionStemConfig) -> None:
    window = cfg.merge_size ** 2
    if pixel_values.dim() != 2 or pixel_values.shape[1] != cfg.patch_dim or pixel_values.shape[0] % window:
        raise InputError(
            f"pixel_values must be [P, {cfg.patch_dim}] with P a multiple of {window} (merge windows), got "
            f"{list(pixel_values.shape)}", field="pixel_values",
        )


@dataclass
class VisionInputs:
    """What the model needs to place visual tokens: patch rows of the images and of the videos, and
    per position the merged visual token it shows (``vision_index``, -1 for text)."""

    pixel_values: torch.Tensor
    pixel_values_videos: torch.Tensor
    vision_index: torch.Tensor


def vision_inputs(batch: Mapping[str, Any]) -> VisionInputs | None:
    """The :class:`VisionInputs` of a canonical VLM batch (None for a text batch); ``vision_index``
    is the row's (``[T]``; a CP rank's local slice when the batch is one)."""
    if "vision_index" not in batch:
        return None
    index = batch["vision_index"]
    if not isinstance(index, torch.Tensor) or index.dim() != 2 or index.shape[0] != 1:
        raise InputError(f"vision_index must be [1, T], got {getattr(index, 'shape', type(index))}",
                         field="vision_index")
    return VisionInputs(batch["pixel_values"], batch["pixel_values_videos"], index[0])


def token_windows(
    vision: VisionInputs, cfg: VisionStemConfig, *, whole_row: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per position of ``vision.vision_index`` ``[T]``: the patch rows of the merge window it shows
    ``[T, merge**2, patch_dim]`` (zeros for text) and whether it shows one (bool ``[T]``).
    ``whole_row``: the positions are a whole row, so every merged window must be shown exactly as
    often as it is named (a CP rank sees a part and skips that check)."""
    window = cfg.merge_size ** 2
    parts = [p for p in (vision.pixel_values, vision.pixel_values_videos) if p.shape[0]]
    for p in parts:
        _check_patches(p, cfg)
    index = vision.vision_index
    rows = torch.cat(parts) if parts else torch.zeros((0, cfg.patch_dim))
    visual = rows.reshape(-1, window, cfg.patch_dim)
    named = index >= 0
    n = int(named.sum())
    if n and int(index.max()) >= visual.shape[0]:
        raise InputError(f"vision_index names visual token {int(index.max())} but the patches make "
                         f"{visual.shape[0]}", field="vision_index")
    if whole_row and n != visual.shape[0]:
        raise InputError(f"{n} image/video positions but the patches make {visual.shape[0]} visual tokens: image "
                         "tokens and patches do not line up", field="vision_index")
    windows = rows.new_zeros((*index.shape, window, cfg.patch_dim))
    if n:
        windows[named] = visual[index[named].to(visual.device)]
    return windows, named


def place_visual_tokens(
    token_embeddings: torch.Tensor, windows: torch.Tensor, named: torch.Tensor, stem: VisionStem
) -> torch.Tensor:
    """Token embeddings ``[..., T, H]`` with the stem's merged token of ``windows`` ``[..., T, merge**2,
    patch_dim]`` at every position ``named`` (bool ``[..., T]``) flags (:func:`token_windows`)."""
    if windows.shape[:-2] != token_embeddings.shape[:-1] or named.shape != token_embeddings.shape[:-1]:
        raise InputError(f"visual inputs of {list(named.shape)} positions for embeddings of "
                         f"{list(token_embeddings.shape[:-1])} positions", field="visual_patches")
    if not bool(named.any()):
        return token_embeddings
    visual = stem.embed_windows(windows).to(token_embeddings.dtype)
    return torch.where(named.unsqueeze(-1), visual, token_embeddings)


def embed_with_vision(
    token_embeddings: torch.Tensor, vision: VisionInputs, stem: VisionStem, *, whole_row: bool = True
) -> torch.Tensor:
    """Token embeddings ``[T, H]`` with visual tokens at the positions ``vision.vision_index`` names
    (:func:`token_windows`, then :func:`place_visual_tokens`)."""
    index = vision.vision_index
    if index.shape != token_embeddings.shape[:-1]:
        raise InputError(f"vision_index has shape {list(index.shape)} for embeddings of "
                         f"{list(token_embeddings.shape[:-1])} positions", field="vision_index")
    windows, named = token_windows(vision, stem.cfg, whole_row=whole_row)
    return place_visual_tokens(token_embeddings, windows.to(token_embeddings.device), named, stem)
