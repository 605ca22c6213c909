"""Image and video sources: opening, decoding and sizing images, and the frame rate of videos.

The bottom of the VLM data layer: :mod:`.inputs` checks rows with these, :mod:`.vision` encodes them.
Images are opened through the file-access layer (regular files only, inside the allowed roots), sized
from their header before any pixel is decoded, and refused beyond
:data:`~seqpack.core.limits.MAX_IMAGE_PIXELS` pixels or :data:`~seqpack.core.limits.MAX_ASPECT_RATIO`.
"""

from __future__ import annotations

import io
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from seqpack.core.errors import InputError, SeqpackError
from seqpack.core.limits import MAX_ASPECT_RATIO, MAX_IMAGE_PIXELS

__all__ = [
    "DEFAULT_FPS", "check_fps", "check_image_size", "header_size", "image_size", "load_image", "open_image_file", "pil",
]


#: Frames per second of a video that does not say.
DEFAULT_FPS = 2.0


def check_image_size(height: int, width: int, *, what: str, field: str,
                     error: type[SeqpackError] = InputError) -> None:
    """Refuse an image (or frame) of ``height x width`` with no area, too many pixels or too extreme a shape."""
    if height < 1 or width < 1:
        raise error(f"{what} of {height}x{width} pixels has no area", field=field)
    if height * width > MAX_IMAGE_PIXELS:
        raise error(f"{what} has {width}x{height} pixels, over the limit of {MAX_IMAGE_PIXELS}", field=field,
                    fix="downscale the image (limits live in reference_impl/seqpack/core/limits.py)")
    ratio = max(height, width) / min(height, width)
    if ratio > MAX_ASPECT_RATIO:
        raise error(f"aspect ratio {ratio:.1f} of a {height}x{width} {what} is over {MAX_ASPECT_RATIO}", field=field)


def check_fps(value: Any, field: str) -> float:
    """``fps`` of a video as a float: absent (None) is :data:`DEFAULT_FPS`; anything but a finite positive number is refused."""
    if value is None:
        return DEFAULT_FPS
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InputError(f"fps must be a positive number, got {value!r}", field=field)
    return float(value)


def header_size(source: Any, field: str) -> tuple[int, int]:
    """``(height, width)`` of an image from its header (files and bytes are not decoded) or its array's
    shape, checked with :func:`check_image_size`."""
    if isinstance(source, (str, os.PathLike, bytes, bytearray, memoryview)):
        from PIL import Image

        encoded = isinstance(source, (bytes, bytearray, memoryview))
        what = "image bytes" if encoded else str(Path(source))
        try:
            with (io.BytesIO(bytes(source)) if encoded else open_image_file(source, field)) as fh, Image.open(fh) as img:
                height, width = int(img.height), int(img.width)
        except FileNotFoundError:
            raise InputError(f"image file not found: {what}", field=field) from None
        except Image.DecompressionBombError as exc:
            raise InputError(f"{what} is refused unread: {exc}", field=field) from None
        except (OSError, ValueError, SyntaxError) as exc:
            raise InputError(f"cannot decode {what}: {exc}", field=field) from None
        check_image_size(height, width, what=what, field=field)
        return height, width
    # an inline array is small: checked in full
    try:
        rgb = load_image(source)
    except InputError as err:
        raise InputError(err.message, field=field, fix=err.fix) from None
    return int(rgb.shape[0]), int(rgb.shape[1])


def pil() -> Any:
    try:
        from PIL import Image
    except ImportError as exc:  # the 'vlm' extra is not installed
        from seqpack.core.extras import MissingExtraError

        raise MissingExtraError("vlm", "PIL") from exc
    return Image


def open_image_file(path: str | os.PathLike[str], field: str = "image") -> Any:
    """An image file opened through the file-access layer (regular files only, inside the allowed roots);
    a refusal names ``field`` (the row's field that named the file)."""
    from seqpack.core.errors import SeqpackError
    from seqpack.io import reading

    try:
        return reading.open_regular(path, what=f"image file {path}", field=field)
    except SeqpackError as err:  # the row's file and line name where it came from, the message the image
        err.file = None
        raise


def load_image(source: str | os.PathLike[str] | bytes | np.ndarray | Any) -> np.ndarray:
    """An image as uint8 RGB ``[H, W, 3]``: from a file or its bytes (any format Pillow reads), a
    Pillow image, or an array (``[H, W]`` grey, ``[H, W, 3]`` RGB, ``[H, W, 4]`` RGBA; uint8, or
    floats in [0, 1]).

    Refuses images over :data:`~seqpack.core.limits.MAX_IMAGE_PIXELS` pixels before decoding them.
    """
    Image = pil()
    if isinstance(source, (str, os.PathLike, bytes, bytearray, memoryview)):
        encoded = isinstance(source, (bytes, bytearray, memoryview))
        what = "image bytes" if encoded else str(Path(source))
        try:
            with (io.BytesIO(bytes(source)) if encoded else open_image_file(source)) as fh, Image.open(fh) as img:
                _check_pixels(img.width, img.height, what)
                img.load()
                return np.asarray(img.convert("RGB"), dtype=np.uint8)
        except FileNotFoundError:
            raise InputError(f"image file not found: {what}", field="image") from None
        except (OSError, Image.DecompressionBombError, ValueError, SyntaxError) as exc:
            raise InputError(f"cannot decode {what}: {exc}", field="image") from None
    if isinstance(source, Image.Image):
        _check_pixels(source.width, source.height, "image")
        return np.asarray(source.convert("RGB"), dtype=np.uint8)
    return _array_image(source)


def image_size(source: Any) -> tuple[int, int]:
    """``(height, width)`` of an image from its header (files and bytes are not decoded) or its array
    (:func:`seqpack.data.vlm.inputs.header_size`)."""
    return header_size(source, "image")


def _check_pixels(width: int, height: int, what: str) -> None:
    check_image_size(height, width, what=what, field="image")


def _array_image(value: Any) -> np.ndarray:
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise InputError(f"an inline image must be an array of numbers ({exc})", field="image") from None
    if arr.ndim == 2:
        arr = np.repeat(arr[:, :, None], 3, axis=2)
    if arr.ndim != 3 or arr.shape[2] not in (3, 4) or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise InputError(f"an inline image must have shape [H, W], [H, W, 3] or [H, W, 4], got {list(arr.shape)}",
                         field="image")
    _check_pixels(int(arr.shape[1]), int(arr.shape[0]), "inline image")
    arr = arr[:, :, :3]
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or arr.min() < 0 or arr.max() > 1:
            raise InputError("a float inline image must hold finite values in [0, 1]", field="image")
        arr = np.rint(arr * 255.0)
    elif arr.dtype.kind not in "iu" or arr.min() < 0 or arr.max() > 255:
        raise InputError("an integer inline image must hold values in [0, 255]", field="image")
    return arr.astype(np.uint8)
