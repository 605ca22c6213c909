"""The one check of a VLM row's images and videos, made from image headers before any pixel is decoded.

Every command that reads VLM rows (``plan``, ``batches``, ``energon-prepare``, the smoke test, the
Energon encoder and the MCP tools over them) calls :func:`check_visual_row` first, and
``image-tokens`` calls :func:`check_image_size` on its arguments, so the same row is refused the
same way everywhere, with the list entry named (``images[1]``, ``videos[0].frames[3]``,
``videos[0].fps``). Checked, in this order:

* the text holds exactly one ``<image>`` marker per image and one ``<video>`` marker per video
  (counted in the texts the schema reads; the tokenized text is checked again when it is encoded);
* every image entry is a path, ``{path: ...}`` or ``{pixels: ...}``; a video is
  ``{frames: [...], fps: ...}`` with 1 to :data:`~seqpack.core.limits.MAX_VIDEO_FRAMES` frames
  and ``fps`` (optional, default 2) a finite positive number, not a string or a boolean;
* every image and frame, from its header: it decodes as an image (a decompression-bomb header is
  refused, not read), has at most :data:`~seqpack.core.limits.MAX_IMAGE_PIXELS` pixels and an
  aspect ratio of at most :data:`~seqpack.data.vlm.vision.MAX_ASPECT_RATIO`;
* the row as a whole: at most :data:`~seqpack.core.limits.MAX_ROW_PIXELS` pixels to decode and,
  under a vision spec, at most :data:`~seqpack.core.limits.MAX_ROW_PATCH_BYTES` of float32
  patches (what the row's items take in memory once encoded).

The result lists each item with its resolved sources, size, fps and (under a vision spec) grid
and tokens, so callers count tokens without decoding and decode only rows that passed.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from seqpack.core.errors import InputError
from seqpack.core.limits import (
    MAX_ROW_PATCH_BYTES,
    MAX_ROW_PIXELS,
    MAX_VIDEO_FRAMES,
)
from seqpack.data.vlm.images import DEFAULT_FPS, check_fps, check_image_size, header_size

#: The placeholders of an image and a video in a row's text.
IMAGE_MARKER = "<image>"
VIDEO_MARKER = "<video>"

__all__ = ["IMAGE_MARKER", "VIDEO_MARKER", "CheckedVisual", "check_visual_row", "image_source"]



@dataclass(frozen=True)
class CheckedVisual:
    """One checked image or video: its sources (one per frame), first-frame size, fps, and under a vision
    spec its ``(t, h, w)`` grid and language-model tokens (else ``None``)."""

    kind: str
    field: str
    sources: tuple[Any, ...]
    height: int
    width: int
    fps: float
    pixels: int
    grid: tuple[int, int, int] | None = None
    tokens: int | None = None






def image_source(ref: Any, base_dir: Path | None, field: str) -> Any:
    """What an image entry points at: a path (relative ones resolved against ``base_dir``), pixels or bytes."""
    if isinstance(ref, Mapping):
        if "pixels" in ref:
            if not isinstance(ref["pixels"], (list, np.ndarray)):
                raise InputError("pixels must be a nested list [H][W][3] of 0-255 integers", field=field)
            return ref["pixels"]
        ref = ref.get("path")
    if isinstance(ref, (np.ndarray, bytes)):
        return ref
    if isinstance(ref, os.PathLike):  # already resolved
        return Path(ref)
    if not isinstance(ref, str) or not ref:
        raise InputError("an image must be a path, {path: ...} or {pixels: [...]}", field=field)
    path = Path(ref)
    if not path.is_absolute():
        if base_dir is None:
            raise InputError(f"relative image path {ref!r} needs the JSONL file's directory", field=field)
        path = base_dir / path
    return path




def _marker_counts(texts: Sequence[str]) -> tuple[int, int]:
    return sum(t.count(IMAGE_MARKER) for t in texts), sum(t.count(VIDEO_MARKER) for t in texts)


def _schema_texts(text_row: Mapping[str, Any], schema: Any) -> list[str]:
    """The texts of the row the schema reads (where markers count)."""
    from seqpack.data.schemas import ChatSchema

    if isinstance(schema, ChatSchema):
        texts: list[str] = []
        for m in schema.extract(dict(text_row)):
            texts += [t for t in (m.content, m.reasoning) if isinstance(t, str)]
        return texts
    return [t for t in schema.extract(dict(text_row)) if isinstance(t, str)]


def check_visual_row(
    text_row: Mapping[str, Any],
    images: Sequence[Any],
    videos: Sequence[Any],
    *,
    schema: Any,
    base_dir: Path | None,
    vision: Any = None,
) -> list[CheckedVisual]:
    """Check a row's images and videos (module docstring); the items in list order, images first.

    ``text_row``/``images``/``videos`` as :func:`seqpack.data.vlm.sample.normalize_visual_row`
    returns them; ``vision`` (a :class:`~seqpack.data.vlm.vision.VisionSpec`) adds grids,
    tokens and the patch-memory bound.
    """
    n_image, n_video = _marker_counts(_schema_texts(text_row, schema))
    for kind, markers, items in (("image", n_image, images), ("video", n_video, videos)):
        if markers != len(items):
            raise InputError(f"the row has {len(items)} {kind}(s) but its text holds {markers} <{kind}> marker(s); "
                             "put exactly one marker per item, in order", field=f"{kind}s")
    checked: list[CheckedVisual] = []
    for k, ref in enumerate(images):
        field = f"images[{k}]"
        source = image_source(ref, base_dir, field)
        h, w = header_size(source, field)
        checked.append(CheckedVisual("image", field, (source,), h, w, DEFAULT_FPS, h * w))
    for k, video in enumerate(videos):
        field = f"videos[{k}]"
        if not isinstance(video, Mapping) or not isinstance(video.get("frames"), list):
            raise InputError("a video must be {frames: [...], fps: ...}", field=field)
        frames = video["frames"]
        if not frames:
            raise InputError("a video needs a non-empty list of frames", field=f"{field}.frames")
        if len(frames) > MAX_VIDEO_FRAMES:
            raise InputError(f"a video of {len(frames)} frames is over the limit of {MAX_VIDEO_FRAMES}",
                             field=f"{field}.frames")
        fps = check_fps(video.get("fps"), f"{field}.fps")
        sources, pixels, size = [], 0, (0, 0)
        for j, frame in enumerate(frames):
            where = f"{field}.frames[{j}]"
            source = image_source(frame, base_dir, where)
            fh, fw = header_size(source, where)
            size = size if j else (fh, fw)
            sources.append(source)
            pixels += fh * fw
        checked.append(CheckedVisual("video", field, tuple(sources), size[0], size[1], fps, pixels))
    total = sum(c.pixels for c in checked)
    if total > MAX_ROW_PIXELS:
        raise InputError(f"the row's images and frames hold {total:,} pixels, over the limit of {MAX_ROW_PIXELS:,}",
                         field="images" if images else "videos",
                         fix="downscale or drop frames (limits live in reference_impl/seqpack/core/limits.py)")
    if vision is None:
        return checked
    out = []
    for c in checked:
        grid = vision.grid_for_size(c.height, c.width, len(c.sources) if c.kind == "video" else 1)
        out.append(CheckedVisual(c.kind, c.field, c.sources, c.height, c.width, c.fps, c.pixels, grid,
                                 vision.tokens_for_grid(grid)))
    patch_bytes = sum(math.prod(c.grid) for c in out if c.grid) * vision.patch_dim * 4
    if patch_bytes > MAX_ROW_PATCH_BYTES:
        raise InputError(f"the row's images and videos make {patch_bytes:,} bytes of patches, over the limit of "
                         f"{MAX_ROW_PATCH_BYTES:,}", field="videos" if videos else "images",
                         fix="use fewer or smaller images or frames (limits live in reference_impl/seqpack/core/limits.py)")
    return out
