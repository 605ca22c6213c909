"""VLM-like media for the Energon path: synthetic "image patches" and placeholder expansion.

A media sample holds one image, given as a float32 array of patch embeddings ``[n_patches,
patch_dim]``, and its text holds one *marker* string (``"<image>"`` by default) where the image
belongs. Encoding tokenizes the text as usual, then replaces the marker's tokens by ``n_patches``
copies of the image placeholder token id, so the sequence length counts one token per patch
(what a Qwen-VL processor does when it expands ``<|image_pad|>`` to the grid size). Placeholder
positions are never trained (loss mask 0).

Synthetic media (:func:`synthetic_patches`) are drawn from ``numpy.random.default_rng([seed,
row])``: the same seed and row index always give the same image, whatever the order in which
rows are processed.

numpy only; no torch, no energon.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from reference_impl.data.schemas import CHAT_KEYS, SHAREGPT_ROLES
from reference_impl.arguments import is_int, positive_int
from reference_impl.errors import InputError, UsageError

DEFAULT_MARKER = "<image>"

#: Name of the row field that carries inline patches in a JSONL input (a list of equal-length
#: lists of numbers); :func:`reference_impl.packing.energon.prepare.prepare_energon_dataset`
#: moves it into a ``patches.npy`` shard member.
INLINE_PATCHES_FIELD = "image_patches"


@dataclass(frozen=True)
class MediaSpec:
    """How synthetic images are attached to rows (``--with-media``).

    Each row gets an image with probability ``probability``; an image has between
    ``min_patches`` and ``max_patches`` patches (inclusive) of ``patch_dim`` float32 values.
    ``marker`` is the text put in front of the prompt (or the first user turn) to say where the
    image goes.
    """

    seed: int = 1234
    patch_dim: int = 16
    min_patches: int = 4
    max_patches: int = 64
    probability: float = 0.5
    marker: str = DEFAULT_MARKER

    def __post_init__(self) -> None:
        for name in ("patch_dim", "min_patches", "max_patches"):
            positive_int(name, getattr(self, name))
        if self.max_patches < self.min_patches:
            raise UsageError(
                f"max_patches={self.max_patches} is below min_patches={self.min_patches}", field="max_patches"
            )
        if not 0.0 <= float(self.probability) <= 1.0:
            raise UsageError(f"probability must be in [0, 1], got {self.probability!r}", field="probability")
        if not is_int(self.seed):
            raise UsageError(f"seed must be an integer, got {self.seed!r}", field="seed")
        if not isinstance(self.marker, str) or not self.marker:
            raise UsageError("marker must be a non-empty string", field="marker")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


def synthetic_patches(spec: MediaSpec, row: int) -> np.ndarray | None:
    """The synthetic image of input row ``row`` (``None`` when the row draws no image)."""
    rng = np.random.default_rng([spec.seed, row])
    if rng.random() >= spec.probability:
        return None
    n = int(rng.integers(spec.min_patches, spec.max_patches + 1))
    return rng.standard_normal((n, spec.patch_dim), dtype=np.float32)


def as_patch_array(value: Any, *, field: str = INLINE_PATCHES_FIELD) -> np.ndarray:
    """Inline patches (nested lists or an array) as a float32 ``[n, d]`` array with n, d >= 1."""
    try:
        arr = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise InputError(f"image patches must be a list of equal-length number lists ({exc})", field=field) from None
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise InputError(f"image patches must have shape [n_patches, patch_dim], got {list(arr.shape)}", field=field)
    if not np.all(np.isfinite(arr)):
        raise InputError("image patches contain NaN or infinity", field=field)
    return arr


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


def find_subsequence(ids: np.ndarray, pattern: np.ndarray) -> list[int]:
    """Start indices of the non-overlapping occurrences of ``pattern`` in ``ids`` (left to right)."""
    n, k = int(ids.shape[0]), int(pattern.shape[0])
    if k == 0 or n < k:
        return []
    windows = np.lib.stride_tricks.sliding_window_view(ids, k)
    hits = np.flatnonzero(np.all(windows == pattern, axis=1)).tolist()
    starts: list[int] = []
    for h in hits:
        if not starts or h >= starts[-1] + k:
            starts.append(int(h))
    return starts


def expand_placeholders(
    ids: np.ndarray,
    loss_mask: np.ndarray,
    marker_ids: np.ndarray,
    n_patches: int,
    image_token_id: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Replace the one marker occurrence in ``ids`` by ``n_patches`` image tokens (loss mask 0).

    ``n_patches == 0`` (a text-only sample) requires that the marker does not occur. Raises
    :class:`InputError` (field ``image``) when the number of markers does not match.
    """
    starts = find_subsequence(np.asarray(ids), np.asarray(marker_ids))
    wanted = 1 if n_patches > 0 else 0
    if len(starts) != wanted:
        what = f"an image of {n_patches} patches" if n_patches else "no image"
        raise InputError(
            f"the sample has {what} but its text holds {len(starts)} image marker(s); exactly {wanted} expected",
            field="image",
        )
    if not n_patches:
        return ids, loss_mask
    s, k = starts[0], int(len(marker_ids))
    new_ids = np.concatenate([ids[:s], np.full(n_patches, image_token_id, dtype=ids.dtype), ids[s + k:]])
    new_mask = np.concatenate([loss_mask[:s], np.zeros(n_patches, dtype=loss_mask.dtype), loss_mask[s + k:]])
    return new_ids, new_mask
