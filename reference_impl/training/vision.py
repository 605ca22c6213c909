"""The reference model's vision stem: patch rows -> merged visual tokens in the LM hidden size.

A Qwen-VL vision encoder embeds every patch row, runs a vision transformer and merges each
``merge_size x merge_size`` window into one language-model token. The stem here keeps the shape of
that pipeline and drops the transformer: a patch embedding (``patch_dim -> hidden``, GELU), then
the spatial merge (the ``merge_size**2`` adjacent rows of a window concatenated) and a projection
into the LM hidden size. It is per window, so an image's tokens depend on its own patches only.

:func:`embed_with_vision` builds the LM input: token embeddings, with every position whose
``vision_index`` is ``k >= 0`` replaced by merged visual token ``k`` (images first, then videos,
as :func:`reference_impl.packing.vlm.attach_visual_inputs` numbers them). Under context
parallelism each rank embeds every image of the row and gathers the rows its own positions name
(its slice of ``vision_index``), so the gradient of the stem is the sum over ranks, reduced with
the other gradients. :func:`vision_inputs` reads the inputs from a canonical VLM batch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from reference_impl.arguments import positive_int
from reference_impl.errors import InputError

__all__ = ["VisionInputs", "VisionStem", "VisionStemConfig", "embed_with_vision", "vision_inputs"]


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
        if pixel_values.dim() != 2 or pixel_values.shape[1] != self.cfg.patch_dim or pixel_values.shape[0] % window:
            raise InputError(
                f"pixel_values must be [P, {self.cfg.patch_dim}] with P a multiple of {window} (merge windows), got "
                f"{list(pixel_values.shape)}", field="pixel_values",
            )
        hidden = torch.nn.functional.gelu(pixel_values.to(self.patch_proj.dtype) @ self.patch_proj)
        return hidden.reshape(-1, window * self.cfg.hidden_size) @ self.merge_proj


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


def embed_with_vision(
    token_embeddings: torch.Tensor, vision: VisionInputs, stem: VisionStem, *, whole_row: bool = True
) -> torch.Tensor:
    """Token embeddings ``[..., T, H]`` with visual tokens at the positions ``vision.vision_index``
    names. ``whole_row``: the positions are a whole row, so every merged visual token must be used
    exactly as often as it is named (a CP rank sees a part and skips that check)."""
    parts = [stem(p) for p in (vision.pixel_values, vision.pixel_values_videos) if p.shape[0]]
    visual = torch.cat(parts) if parts else token_embeddings.new_zeros((0, token_embeddings.shape[-1]))
    index = vision.vision_index.to(token_embeddings.device)
    if index.shape != token_embeddings.shape[:-1]:
        raise InputError(f"vision_index has shape {list(index.shape)} for embeddings of "
                         f"{list(token_embeddings.shape[:-1])} positions", field="vision_index")
    named = index >= 0
    n = int(named.sum())
    if n and int(index.max()) >= visual.shape[0]:
        raise InputError(f"vision_index names visual token {int(index.max())} but the patches make "
                         f"{visual.shape[0]}", field="vision_index")
    if whole_row and n != visual.shape[0]:
        raise InputError(f"{n} image/video positions but the patches make {visual.shape[0]} visual tokens: image "
                         "tokens and patches do not line up", field="vision_index")
    if not n:
        return token_embeddings
    gathered = visual[index.clamp(min=0)].to(token_embeddings.dtype)
    return torch.where(named.unsqueeze(-1), gathered, token_embeddings)
