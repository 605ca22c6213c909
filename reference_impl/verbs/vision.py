"""``image_tokens``: the patch grid and language-model tokens of an image or a video under a vision preset."""

from __future__ import annotations

from dataclasses import dataclass

from reference_impl.arguments import positive_int
from reference_impl.choices import VISION_PRESETS
from reference_impl.errors import UsageError
from reference_impl.limits import MAX_IMAGE_PIXELS, MAX_VIDEO_FRAMES
from reference_impl.reports import ImageTokens
from reference_impl.verbs.common import check_choice

__all__ = ["ImageTokensOptions", "image_tokens"]


@dataclass(frozen=True, kw_only=True)
class ImageTokensOptions:
    """The image size in pixels, how many frames (1: an image; more: a video) and the vision preset."""

    height: int
    width: int
    frames: int = 1
    vision: str = "qwen2_vl"


def image_tokens(options: ImageTokensOptions) -> ImageTokens:
    """The resized size, the (t, h, w) patch grid, the patch rows and the tokens the item occupies in a
    sample (:mod:`reference_impl.data.vision`); ``sequence_tokens`` adds the vision start and end tokens.

    >>> image_tokens(ImageTokensOptions(height=480, width=640)).tokens
    391
    """
    from reference_impl.data.vision import smart_resize, vision_spec

    check_choice("vision", options.vision, VISION_PRESETS)
    h = positive_int("height", options.height)
    w = positive_int("width", options.width)
    frames = positive_int("frames", options.frames, maximum=MAX_VIDEO_FRAMES)
    if h * w > MAX_IMAGE_PIXELS:
        raise UsageError(f"{h}x{w} pixels is over the limit of {MAX_IMAGE_PIXELS}", field="height",
                         fix="limits live in reference_impl/limits.py")
    spec = vision_spec(options.vision)
    rh, rw = smart_resize(h, w, spec.factor, spec.min_pixels, spec.max_pixels)
    t, gh, gw = spec.grid_for_size(h, w, frames)
    tokens = spec.tokens_for_grid((t, gh, gw))
    m = spec.merge_size
    explanation = (
        f"{h}x{w} resized to {rh}x{rw} (multiples of patch {spec.patch_size} x merge {m} = {spec.factor}, area in "
        f"[{spec.min_pixels}, {spec.max_pixels}]) -> grid t={t} (ceil({frames} / temporal patch "
        f"{spec.temporal_patch_size})), h={gh}, w={gw} -> {t * gh * gw} patch rows of {spec.patch_dim} values -> "
        f"{tokens} tokens after the {m}x{m} merge (+2 for vision start and end)"
    )
    return ImageTokens(
        vision=spec.name, height=h, width=w, frames=frames, resized_height=rh, resized_width=rw, grid_t=t,
        grid_h=gh, grid_w=gw, patch_rows=t * gh * gw, patch_dim=spec.patch_dim, merge_size=m, tokens=tokens,
        sequence_tokens=tokens + 2, explanation=explanation,
    )
