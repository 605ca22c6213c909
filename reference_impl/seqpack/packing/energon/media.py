"""Media of the Energon path: image members of a shard, synthetic pictures, the marker helper.

A prepared sample keeps its images as they came: every image (a file's original bytes, or an
inline ``pixels`` image encoded as PNG) becomes a shard member ``<key>.media<k>`` (an extension
energon's decoder leaves alone, so the task encoder gets the bytes), and the row document names
it (``{"member": "media<k>"}``) in ``images`` or in a video's ``frames``. The task encoder decodes
them with the loader's vision spec (:mod:`seqpack.data.vlm.vision`) under the VLM sample
contract (:mod:`seqpack.data.vlm.sample`), as Bridge's Qwen-VL encoder runs its processor in
``encode_sample``.

Synthetic media (:class:`MediaSpec`, ``--with-media``): a row without images gets, with
probability ``probability``, one picture drawn from ``numpy.random.default_rng([seed, row])`` (a
coloured rectangle and disc on a gradient, sides between ``min_side`` and ``max_side`` pixels) and
the image marker in front of its prompt (or first user turn). The same seed and row always give
the same picture, whatever the processing order.

numpy and Pillow; no torch, no energon.
"""

from __future__ import annotations

import io
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from seqpack.core.arguments import is_int, positive_int
from seqpack.data.schemas import CHAT_KEYS, SHAREGPT_ROLES
from seqpack.data.vlm.sample import IMAGE_MARKER
from seqpack.core.errors import InputError, UsageError

DEFAULT_MARKER = IMAGE_MARKER
#: Shard member names of a sample's images: ``media0``, ``media1``, ...
MEMBER_PREFIX = "media"


@dataclass(frozen=True)
class MediaSpec:
    """How synthetic pictures are attached to rows (``--with-media``; module docstring)."""

    seed: int = 1234
    probability: float = 0.5
    min_side: int = 16
    max_side: int = 48
    marker: str = DEFAULT_MARKER

    def __post_init__(self) -> None:
        for name in ("min_side", "max_side"):
            positive_int(name, getattr(self, name), maximum=4096)
        if self.max_side < self.min_side:
            raise UsageError(f"max_side={self.max_side} is below min_side={self.min_side}", field="max_side")
        if not 0.0 <= float(self.probability) <= 1.0:
            raise UsageError(f"probability must be in [0, 1], got {self.probability!r}", field="probability")
        if not is_int(self.seed):
            raise UsageError(f"seed must be an integer, got {self.seed!r}", field="seed")
        if not isinstance(self.marker, str) or not self.marker:
            raise UsageError("marker must be a non-empty string", field="marker")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


def synthetic_image(spec: MediaSpec, row: int) -> np.ndarray | None:
    """The synthetic picture (uint8 RGB ``[h, w, 3]``) of input row ``row``, or None."""
    rng = np.random.default_rng([spec.seed, row])
    if rng.random() >= spec.probability:
        return None
    h, w = (int(x) for x in rng.integers(spec.min_side, spec.max_side + 1, size=2))
    top, bottom, box, disc = rng.integers(0, 256, size=(4, 3))
    ramp = np.linspace(0.0, 1.0, h)[:, None, None]
    img = np.repeat((1 - ramp) * top + ramp * bottom, w, axis=1)
    y0, x0 = int(rng.integers(0, h // 2 + 1)), int(rng.integers(0, w // 2 + 1))
    img[y0 : y0 + h // 3 + 1, x0 : x0 + w // 3 + 1] = box
    yy, xx = np.mgrid[0:h, 0:w]
    cy, cx, r = rng.uniform(0, h), rng.uniform(0, w), rng.uniform(2, max(3, min(h, w) / 3))
    img[(yy - cy) ** 2 + (xx - cx) ** 2 <= r * r] = disc
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def png_bytes(pixels: np.ndarray) -> bytes:
    """uint8 RGB pixels as PNG bytes (deterministic for equal pixels and Pillow version)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(pixels, dtype=np.uint8)).save(buf, format="PNG", optimize=False)
    return buf.getvalue()


def member_name(k: int) -> str:
    """The member extension of a sample's ``k``-th image."""
    return f"{MEMBER_PREFIX}{k}"


def insert_marker(row: dict[str, Any], marker: str = DEFAULT_MARKER) -> dict[str, Any]:
    """A copy of ``row`` whose prompt (or first user turn) starts with ``marker`` and a newline.

    Prompt/completion rows need a ``prompt`` string; chat rows a user turn in ``messages`` /
    ``conversation`` (``role == "user"``) or ``conversations`` (a ShareGPT speaker that maps to
    user).
    """
    out = dict(row)
    chat = [k for k in CHAT_KEYS if k in row]
    if not chat:
        prompt = row.get("prompt")
        if not isinstance(prompt, str):
            raise InputError("a media row needs a string 'prompt' (or a chat user turn) to hold the image marker",
                             field="prompt")
        out["prompt"] = f"{marker}\n{prompt}"
        return out
    key = chat[0]
    turns = row[key]
    if not isinstance(turns, list):
        raise InputError(f"must be a list of turns, got {type(turns).__name__}", field=key)
    role_key, text_key = ("from", "value") if key == "conversations" else ("role", "content")
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict):
            continue
        role = turn.get(role_key)
        is_user = SHAREGPT_ROLES.get(role) == "user" if key == "conversations" else role == "user"
        if is_user and isinstance(turn.get(text_key), str):
            new_turns = list(turns)
            new_turns[i] = {**turn, text_key: f"{marker}\n{turn[text_key]}"}
            out[key] = new_turns
            return out
    raise InputError("a media row needs a user turn to hold the image marker", field=key)


def resolve_members(row: dict[str, Any], media: dict[str, bytes]) -> dict[str, Any]:
    """``row`` with every ``{"member": name}`` image reference replaced by that member's bytes."""

    def resolve(ref: Any, field: str) -> Any:
        if isinstance(ref, dict) and "member" in ref:
            if ref["member"] not in media:
                raise InputError(f"the shard has no member {ref['member']!r} for this sample", field=field)
            return media[ref["member"]]
        return ref

    out = dict(row)
    if isinstance(row.get("images"), list):
        out["images"] = [resolve(r, f"images[{k}]") for k, r in enumerate(row["images"])]
    if isinstance(row.get("videos"), list):
        out["videos"] = [
            {**v, "frames": [resolve(f, f"videos[{k}]") for f in v.get("frames", [])]} if isinstance(v, dict) else v
            for k, v in enumerate(row["videos"])
        ]
    return out
