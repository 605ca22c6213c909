"""Real images and a VLM chat demo shipped with the package (``reference_impl/seqpack/data/demo/``).

* ``images/*.png``: small RGB pictures drawn here (shapes on gradients, 24 to 64 pixels a side,
  plus four frames of a moving box, a "video"); :func:`demo_images` returns their pixels;
* ``vlm_chat.jsonl``: 48 chat rows (``{"id", "messages", "images"?, "videos"?}``), mixing rows
  without images, with one image, with two images and with a four-frame video; every image path
  is relative to the JSONL file. The questions ask about the picture and the answers describe it.

Everything is deterministic: :func:`demo_images` draws the same pixels every time, and
``tests/test_vlm_data.py`` checks that the shipped PNGs decode to them and that the JSONL is
byte-identical to :func:`vlm_rows`. Regenerate (overwrites the shipped files)::

    python -m seqpack.data.vlm.demo          # or: --out DIR
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from seqpack.io.atomic import atomic_output

DEMO_DIR = Path(__file__).resolve().parents[1] / "demo"
IMAGE_DIR = "images"
VLM_DEMO = "vlm_chat.jsonl"
VLM_ROWS = 48

# name: (height, width, shape, colour name, rgb, background top, background bottom)
_PICTURES: dict[str, tuple[int, int, str, str, tuple[int, int, int], tuple[int, int, int], tuple[int, int, int]]] = {
    "red_square": (32, 32, "square", "red", (220, 40, 40), (235, 235, 235), (180, 180, 180)),
    "blue_circle": (40, 40, "circle", "blue", (40, 70, 220), (250, 240, 200), (200, 170, 120)),
    "green_triangle": (32, 48, "triangle", "green", (40, 170, 60), (200, 225, 250), (120, 160, 220)),
    "yellow_stripes": (40, 24, "stripes", "yellow", (240, 210, 30), (60, 60, 80), (20, 20, 30)),
    "purple_ring": (48, 48, "ring", "purple", (140, 50, 170), (245, 245, 245), (210, 210, 225)),
    "orange_dots": (24, 40, "dots", "orange", (245, 140, 30), (30, 90, 60), (10, 50, 30)),
    "black_cross": (48, 32, "cross", "black", (15, 15, 15), (250, 250, 250), (230, 220, 200)),
    "cyan_checker": (32, 40, "checker", "cyan", (40, 200, 210), (90, 40, 40), (40, 10, 10)),
    "sunset": (48, 64, "sun", "orange", (250, 120, 40), (250, 200, 120), (120, 40, 90)),
}
_FRAMES = 4
_FRAME_SIZE = (32, 32)


def _background(h: int, w: int, top: tuple[int, ...], bottom: tuple[int, ...]) -> np.ndarray:
    ramp = np.linspace(0.0, 1.0, h, dtype=np.float64)[:, None, None]
    img = (1 - ramp) * np.asarray(top, dtype=np.float64) + ramp * np.asarray(bottom, dtype=np.float64)
    return np.repeat(img, w, axis=1)


def _shape_mask(shape: str, h: int, w: int) -> np.ndarray:
    y, x = np.mgrid[0:h, 0:w]
    cy, cx = (h - 1) / 2, (w - 1) / 2
    r = min(h, w) * 0.35
    if shape == "square":
        return (np.abs(y - cy) <= r) & (np.abs(x - cx) <= r)
    if shape in ("circle", "sun"):
        cy2 = cy * (1.3 if shape == "sun" else 1.0)
        return (y - cy2) ** 2 + (x - cx) ** 2 <= r ** 2
    if shape == "triangle":
        top, base = cy - r, cy + r
        half = (y - top) / (2 * r) * r
        return (y >= top) & (y <= base) & (np.abs(x - cx) <= half)
    if shape == "stripes":
        return (x // 4) % 2 == 0
    if shape == "ring":
        d = (y - cy) ** 2 + (x - cx) ** 2
        return (d <= r ** 2) & (d >= (0.6 * r) ** 2)
    if shape == "dots":
        return ((y % 8) - 3.5) ** 2 + ((x % 8) - 3.5) ** 2 <= 5
    if shape == "cross":
        return (np.abs(y - cy) <= 3) | (np.abs(x - cx) <= 3)
    if shape == "checker":
        return ((y // 8) + (x // 8)) % 2 == 0
    raise ValueError(shape)


def _picture(spec: tuple[Any, ...]) -> np.ndarray:
    h, w, shape, _, rgb, top, bottom = spec
    img = _background(h, w, top, bottom)
    img[_shape_mask(shape, h, w)] = rgb
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def _frame(k: int) -> np.ndarray:
    h, w = _FRAME_SIZE
    img = _background(h, w, (230, 240, 250), (160, 190, 220))
    x0 = 2 + 7 * k
    img[10:22, x0 : x0 + 10] = (200, 30, 60)
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def demo_images() -> dict[str, np.ndarray]:
    """Name (file stem) -> uint8 RGB pixels of every shipped demo image, frames included."""
    out = {name: _picture(spec) for name, spec in _PICTURES.items()}
    out.update({f"box_frame_{k}": _frame(k) for k in range(_FRAMES)})
    return out


def image_path(name: str) -> str:
    """The path of a demo image relative to the demo JSONL."""
    return f"{IMAGE_DIR}/{name}.png"


_QUESTIONS = ("What is in this picture?", "Describe the image briefly.", "Which shape and colour do you see?",
              "Tell me what the image shows.")
_TEXT_ONLY = (
    ("What does sequence packing do?", "It puts several short samples into one row so less compute goes to padding."),
    ("Why do packed sequences need boundaries?", "Attention must stay inside each sample, so the kernel needs to "
     "know where every sample starts and ends."),
    ("Name a reason to align sequence lengths.", "Context parallelism splits every sequence into 2*CP equal chunks."),
    ("What is a loss mask?", "It marks which labels are trained; prompt tokens and padding get zero."),
)


def _describe(name: str) -> str:
    _, _, shape, colour, *_ = _PICTURES[name]
    words = {"stripes": "vertical stripes", "dots": "a grid of dots", "cross": "a cross", "checker": "a checkerboard",
             "sun": "a setting sun", "ring": "a ring"}
    thing = words.get(shape, f"a {shape}")
    if shape in ("stripes", "dots", "checker", "sun"):
        return f"The picture shows {thing} in {colour}."
    return f"The picture shows {thing.replace('a ', f'a {colour} ', 1)} on a soft background."


def vlm_rows(n: int = VLM_ROWS) -> list[dict[str, Any]]:
    """The demo VLM chat rows (module docstring); the same every time."""
    names = list(_PICTURES)
    rows: list[dict[str, Any]] = []
    for i in range(n):
        kind = ("text", "image", "two_images", "image", "video", "text", "image", "two_images")[i % 8]
        rid = f"vlm-{i:03d}"
        if kind == "text":
            q, a = _TEXT_ONLY[(i // 8) % len(_TEXT_ONLY)]
            rows.append({"id": rid, "messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]})
        elif kind == "image":
            name = names[(i * 5) % len(names)]
            q = _QUESTIONS[i % len(_QUESTIONS)]
            rows.append({"id": rid, "messages": [{"role": "user", "content": f"<image>\n{q}"},
                                                 {"role": "assistant", "content": _describe(name)}],
                         "images": [image_path(name)]})
        elif kind == "two_images":
            a, b = names[i % len(names)], names[(i + 4) % len(names)]
            rows.append({"id": rid, "messages": [
                {"role": "user", "content": "<image> and <image>\nCompare the two pictures."},
                {"role": "assistant", "content": f"First: {_describe(a)} Second: {_describe(b)}"},
            ], "images": [image_path(a), image_path(b)]})
        else:
            frames = [image_path(f"box_frame_{k}") for k in range(_FRAMES)]
            rows.append({"id": rid, "messages": [
                {"role": "user", "content": "<video>\nWhich way does the box move?"},
                {"role": "assistant", "content": "The red box slides from the left edge to the right."},
            ], "videos": [{"frames": frames, "fps": 2.0}]})
    return rows


def write_demo(out_dir: Path = DEMO_DIR) -> Path:
    """Write the images and the JSONL under ``out_dir``; return the JSONL path."""
    from PIL import Image

    (out_dir / IMAGE_DIR).mkdir(parents=True, exist_ok=True)
    for name, pixels in demo_images().items():
        with atomic_output(out_dir / image_path(name)) as fh:
            Image.fromarray(pixels).save(fh, format="PNG", optimize=False)
    target = out_dir / VLM_DEMO
    with atomic_output(target) as fh:
        for row in vlm_rows():
            fh.write((json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8"))
    return target


def vlm_demo_path() -> Path:
    """The shipped VLM demo JSONL."""
    return DEMO_DIR / VLM_DEMO


def main(argv: list[str] | None = None) -> None:
    """Regenerate the shipped VLM demo files."""
    parser = argparse.ArgumentParser(description="write the VLM demo images and JSONL")
    parser.add_argument("--out", type=Path, default=DEMO_DIR)
    args = parser.parse_args(argv)
    print(write_demo(args.out))  # noqa: T201 - a command-line tool


if __name__ == "__main__":
    main()
