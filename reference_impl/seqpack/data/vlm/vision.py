"""Images and video frames -> patch rows and (t, h, w) grids, as a Qwen2-VL image processor does.

One visual item (an image, or a list of frames: a "video") becomes

* ``patches``: float32 ``[t * h * w, patch_dim]`` with ``patch_dim = 3 * temporal_patch_size *
  patch_size**2``, one row per ``patch_size`` square (times ``temporal_patch_size`` frames);
* ``grid``: ``(t, h, w)``, the patch grid: ``h = H' / patch_size``, ``w = W' / patch_size`` for the
  resized height and width, ``t = ceil(frames / temporal_patch_size)`` (an image is one frame,
  repeated to fill the temporal patch);
* ``n_tokens = t * h * w / merge_size**2``: the language-model tokens the item occupies after the
  vision encoder merges every ``merge_size x merge_size`` window.

Steps (those of ``transformers``' ``Qwen2VLImageProcessorPil``): decode to RGB with Pillow; resize
with bicubic resampling to the nearest size whose sides divide by ``patch_size * merge_size`` and
whose area lies in ``[min_pixels, max_pixels]`` (:func:`smart_resize`); scale to [0, 1];
normalise with the CLIP mean and std; cut into patches ordered so that the ``merge_size**2`` patches
of one merge window are adjacent rows, windows in row-major order. That order is the order of the
item's tokens and of its M-RoPE ids (:mod:`seqpack.data.vlm.mrope`).
``tests/test_vlm_data.py`` compares :func:`encode_image` with ``transformers``' processor.

Presets (:data:`VISION_PRESETS`): ``qwen2_vl`` and ``qwen2_5_vl`` use the released processors'
numbers (patch 14, merge 2, temporal patch 2); ``tiny`` (patch 4) keeps the reference model and the
smoke test small. numpy, plus Pillow when an image is decoded or resized.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from seqpack.core.arguments import positive_float, positive_int
from seqpack.core.errors import InputError, UsageError
from seqpack.core.limits import MAX_ASPECT_RATIO, MAX_TOKENS_PER_SECOND, MAX_VIDEO_FRAMES
from seqpack.data.vlm.images import (
    DEFAULT_FPS,
    check_fps,
    check_image_size,
    image_size,
    load_image,
    pil,
)

__all__ = [
    "CLIP_MEAN",
    "CLIP_STD",
    "VISION_PRESETS",
    "VisionSpec",
    "VisualItem",
    "encode_frames",
    "encode_image",
    "image_size",
    "MAX_ASPECT_RATIO",
    "load_image",
    "smart_resize",
    "vision_spec",
]

#: Normalisation of the Qwen2-VL processors (OpenAI CLIP statistics).
CLIP_MEAN: tuple[float, float, float] = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD: tuple[float, float, float] = (0.26862954, 0.26130258, 0.27577711)


@dataclass(frozen=True)
class VisionSpec:
    """How visual items become patches, grids and tokens (module docstring).

    ``rope``: the M-RoPE flavour of the model: ``qwen2_vl`` (temporal interval 1) or
    ``qwen2_5_vl`` (videos spaced by ``tokens_per_second * second_per_grid``).
    """

    name: str = "qwen2_vl"
    patch_size: int = 14
    temporal_patch_size: int = 2
    merge_size: int = 2
    min_pixels: int = 56 * 56
    max_pixels: int = 28 * 28 * 1280
    rope: str = "qwen2_vl"
    tokens_per_second: float = 2.0
    image_mean: tuple[float, float, float] = CLIP_MEAN
    image_std: tuple[float, float, float] = CLIP_STD

    def __post_init__(self) -> None:
        for name in ("patch_size", "temporal_patch_size", "merge_size", "min_pixels", "max_pixels"):
            positive_int(name, getattr(self, name))
        if self.max_pixels < self.min_pixels:
            raise UsageError(f"max_pixels={self.max_pixels} is below min_pixels={self.min_pixels}", field="max_pixels")
        if self.min_pixels < self.factor ** 2:
            raise UsageError(
                f"min_pixels={self.min_pixels} is below one merge window ({self.factor}x{self.factor} pixels)",
                field="min_pixels",
            )
        if self.rope not in ("qwen2_vl", "qwen2_5_vl"):
            raise UsageError(f"rope must be qwen2_vl or qwen2_5_vl, got {self.rope!r}", field="rope")
        positive_float("tokens_per_second", self.tokens_per_second, maximum=MAX_TOKENS_PER_SECOND)
        if len(self.image_mean) != 3 or len(self.image_std) != 3 or min(self.image_std) <= 0:
            raise UsageError("image_mean and image_std need 3 values (std > 0)", field="image_std")

    @property
    def factor(self) -> int:
        """Side multiple of a resized image: ``patch_size * merge_size``."""
        return self.patch_size * self.merge_size

    @property
    def patch_dim(self) -> int:
        """Values per patch row: ``3 * temporal_patch_size * patch_size**2``."""
        return 3 * self.temporal_patch_size * self.patch_size ** 2

    def tokens_for_grid(self, grid: Sequence[int]) -> int:
        """Language-model tokens of a ``(t, h, w)`` grid: ``t * h * w / merge_size**2``."""
        t, h, w = (int(x) for x in grid)
        return t * h * w // self.merge_size ** 2

    def grid_for_size(self, height: int, width: int, frames: int = 1) -> tuple[int, int, int]:
        """The ``(t, h, w)`` grid of ``frames`` frames of ``height x width`` pixels (no decoding)."""
        rh, rw = smart_resize(height, width, self.factor, self.min_pixels, self.max_pixels)
        t = -(-int(frames) // self.temporal_patch_size)
        return t, rh // self.patch_size, rw // self.patch_size

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        out = asdict(self)
        out["image_mean"], out["image_std"] = list(self.image_mean), list(self.image_std)
        return out


#: Named specs (``--vision`` on the CLI); the names are :data:`seqpack.core.choices.VISION_PRESETS`.
VISION_PRESETS: dict[str, VisionSpec] = {
    "qwen2_vl": VisionSpec(),
    "qwen2_5_vl": VisionSpec(name="qwen2_5_vl", rope="qwen2_5_vl"),
    "tiny": VisionSpec(name="tiny", patch_size=4, min_pixels=8 * 8, max_pixels=64 * 64),
}


def vision_spec(value: str | VisionSpec | None, *, min_pixels: int | None = None,
                max_pixels: int | None = None) -> VisionSpec:
    """A :class:`VisionSpec` from a preset name, a spec, or None (``qwen2_vl``), with the user's pixel budget
    (``min_pixels`` / ``max_pixels``, what a model's ``preprocessor_config.json`` or recipe sets) in place
    of the preset's where given."""
    if value is None:
        spec = VISION_PRESETS["qwen2_vl"]
    elif isinstance(value, VisionSpec):
        spec = value
    elif isinstance(value, str) and value in VISION_PRESETS:
        spec = VISION_PRESETS[value]
    else:
        raise UsageError(f"unknown vision preset {value!r}; choose one of {', '.join(VISION_PRESETS)}", field="vision")
    if min_pixels is None and max_pixels is None:
        return spec
    return replace(spec, min_pixels=spec.min_pixels if min_pixels is None else int(min_pixels),
                   max_pixels=spec.max_pixels if max_pixels is None else int(max_pixels))


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """The resized ``(height, width)``: both multiples of ``factor``, area in ``[min_pixels, max_pixels]``,
    aspect ratio kept as closely as rounding allows (the Qwen2-VL processors' rule)."""
    if height < 1 or width < 1 or max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
        check_image_size(height, width, what="image", field="image")
    h = round(height / factor) * factor
    w = round(width / factor) * factor
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * beta / factor) * factor
        w = math.ceil(width * beta / factor) * factor
    return int(h), int(w)


@dataclass(frozen=True, eq=False)
class VisualItem:
    """One encoded image or video: ``patches`` float32 ``[t*h*w, patch_dim]``, ``grid`` (t, h, w).

    ``kind`` is ``"image"`` or ``"video"``; ``second_per_grid`` (videos) is the time one temporal
    patch covers, ``temporal_patch_size / fps``.
    """

    kind: str
    patches: np.ndarray
    grid: tuple[int, int, int]
    second_per_grid: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in ("image", "video"):
            raise UsageError(f"kind must be image or video, got {self.kind!r}", field="kind")
        t, h, w = self.grid
        if self.patches.ndim != 2 or self.patches.shape[0] != t * h * w:
            raise UsageError(f"patches of shape {list(self.patches.shape)} do not match grid {self.grid}",
                             field="patches")

    def n_tokens(self, merge_size: int) -> int:
        """Language-model tokens of this item."""
        t, h, w = self.grid
        return t * h * w // merge_size ** 2














def _resize(rgb: np.ndarray, height: int, width: int) -> np.ndarray:
    if rgb.shape[0] == height and rgb.shape[1] == width:
        return rgb
    Image = pil()
    img = Image.fromarray(np.ascontiguousarray(rgb))
    return np.asarray(img.resize((width, height), resample=Image.Resampling.BICUBIC), dtype=np.uint8)


def _normalise(rgb: np.ndarray, spec: VisionSpec) -> np.ndarray:
    """uint8 ``[H, W, 3]`` -> float32 ``[3, H, W]`` scaled to [0, 1] and normalised."""
    x = rgb.astype(np.float32) * np.float32(1 / 255)
    mean = np.asarray(spec.image_mean, dtype=np.float32)
    std = np.asarray(spec.image_std, dtype=np.float32)
    return np.ascontiguousarray(((x - mean) / std).transpose(2, 0, 1))


def _patchify(frames: np.ndarray, spec: VisionSpec) -> tuple[np.ndarray, tuple[int, int, int]]:
    """``[F, 3, H, W]`` (F a multiple of temporal_patch_size) -> patch rows and grid."""
    f, c, height, width = frames.shape
    p, m, tp = spec.patch_size, spec.merge_size, spec.temporal_patch_size
    t, h, w = f // tp, height // p, width // p
    x = frames.reshape(t, tp, c, h // m, m, p, w // m, m, p)
    # (t, h/m, w/m, m, m, c, tp, p, p): the patches of one merge window are adjacent rows
    x = x.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return np.ascontiguousarray(x.reshape(t * h * w, c * tp * p * p), dtype=np.float32), (t, h, w)


def encode_image(source: Any, spec: VisionSpec) -> VisualItem:
    """One image (anything :func:`load_image` reads) as a :class:`VisualItem` with ``t = 1``."""
    rgb = load_image(source)
    rh, rw = smart_resize(rgb.shape[0], rgb.shape[1], spec.factor, spec.min_pixels, spec.max_pixels)
    frame = _normalise(_resize(rgb, rh, rw), spec)
    frames = np.broadcast_to(frame[None], (spec.temporal_patch_size, *frame.shape))
    patches, grid = _patchify(np.ascontiguousarray(frames), spec)
    return VisualItem("image", patches, grid)


def encode_frames(sources: Sequence[Any], spec: VisionSpec, *, fps: float = DEFAULT_FPS) -> VisualItem:
    """A list of frames (a video) as a :class:`VisualItem`: every frame resized to the first one's
    target size; the last frame is repeated up to a multiple of ``temporal_patch_size``;
    ``second_per_grid = temporal_patch_size / fps``. Frames are decoded one at a time (each is
    resized before the next is read)."""
    if not isinstance(sources, (list, tuple)) or not sources:
        raise InputError("a video needs a non-empty list of frames", field="frames")
    if len(sources) > MAX_VIDEO_FRAMES:
        raise InputError(f"a video of {len(sources)} frames is over the limit of {MAX_VIDEO_FRAMES}", field="frames")
    fps = check_fps(fps, "fps")
    tp = spec.temporal_patch_size
    frames: np.ndarray | None = None
    for j, source in enumerate(sources):
        rgb = load_image(source)
        if frames is None:
            rh, rw = smart_resize(rgb.shape[0], rgb.shape[1], spec.factor, spec.min_pixels, spec.max_pixels)
            frames = np.empty((-(-len(sources) // tp) * tp, 3, rh, rw), dtype=np.float32)
        frames[j] = _normalise(_resize(rgb, frames.shape[2], frames.shape[3]), spec)
    assert frames is not None
    frames[len(sources):] = frames[len(sources) - 1]  # the last frame fills the temporal patch
    patches, grid = _patchify(frames, spec)
    return VisualItem("video", patches, grid, second_per_grid=tp / fps)
