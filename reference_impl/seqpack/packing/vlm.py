"""The visual part of a VLM THD micro-batch, added after :func:`~seqpack.packing.thd.build_thd_batch`.

Both VLM paths (the in-batch collator and the Energon task encoder) build the token row with the
THD builder, so alignment padding (CP/SP) covers image tokens like any other token, then call
:func:`attach_visual_inputs` with the samples' visual items in sequence order. It adds:

========================== ======================== ===============================================
key                        dtype, shape             meaning
========================== ======================== ===============================================
``pixel_values``           float32 ``[P, D]``       image patch rows, in sequence order (then token order)
``image_grid_thw``         int64 ``[n_img, 3]``     one (t, h, w) per image, same order
``pixel_sequence_index``   int64 ``[P]``            the sequence (0-based, in the row) each image patch row belongs to
``pixel_values_videos``    float32 ``[P_v, D]``     video patch rows, likewise
``video_grid_thw``         int64 ``[n_vid, 3]``     one grid per video
``second_per_grid_ts``     float32 ``[n_vid]``      seconds one temporal patch covers
``video_sequence_index``   int64 ``[P_v]``          the sequence each video patch row belongs to
``num_patches``            int64 ``[n]``            patch rows (images and videos) per sequence
``vision_index``           int64 ``[1, T]``         per token: -1 for text and padding; ``k`` for the
                                                    k-th merged visual token of the row (image tokens
                                                    first, then video tokens, each in row order)
``mrope_position_ids``     int64 ``[3, 1, T]``      M-RoPE ids (temporal, height, width), restarting
                                                    at 0 in every sequence
                                                    (:func:`~seqpack.data.vlm.mrope.packed_rope_index`)
========================== ======================== ===============================================

``vision_index`` is a per-token key, so a context-parallel split carries every rank's share of it;
the reference model gives each of its tokens the patch rows of the merge window it names
(:func:`seqpack.training.vision.token_windows`). The patch-row keys and
grids describe the whole row and are never split. The layout is Hugging Face's (``pixel_values``,
``image_grid_thw``, ``pixel_values_videos``, ``video_grid_thw``, ``second_per_grid_ts``,
``[3, B, T]`` position ids), so a Qwen-VL model reads the batch as it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from seqpack.data.vlm.mrope import packed_rope_index
from seqpack.data.vlm.vision import VisualItem
from seqpack.data.vlm.sample import VLMSettings
from seqpack.core.errors import PackingError
from seqpack.packing.visual_keys import ROW_VISUAL_KEYS, TOKEN_VISUAL_KEYS, VISUAL_KEYS

__all__ = ["ROW_VISUAL_KEYS", "TOKEN_VISUAL_KEYS", "VISUAL_KEYS", "attach_visual_inputs", "visual_token_index"]



def _stack(items: list[VisualItem], patch_dim: int) -> np.ndarray:
    if not items:
        return np.zeros((0, patch_dim), dtype=np.float32)
    return np.concatenate([v.patches for v in items]).astype(np.float32, copy=False)


def _grids(items: list[VisualItem]) -> np.ndarray:
    return np.asarray([v.grid for v in items], dtype=np.int64).reshape(len(items), 3)


def visual_token_index(tokens: np.ndarray, image_token_id: int, video_token_id: int) -> np.ndarray:
    """Per token: -1, or the ordinal of the merged visual token (images first, then videos)."""
    out = np.full(tokens.shape, -1, dtype=np.int64)
    image = tokens == image_token_id
    video = tokens == video_token_id
    n_image = int(image.sum())
    out[image] = np.arange(n_image, dtype=np.int64)
    out[video] = n_image + np.arange(int(video.sum()), dtype=np.int64)
    return out


def attach_visual_inputs(
    batch: dict[str, Any], visuals: Sequence[Sequence[VisualItem]], settings: VLMSettings
) -> dict[str, Any]:
    """Add the module docstring's keys to ``batch`` (built by the THD builder from the same samples,
    in the same order); ``visuals[i]`` are sequence ``i``'s items in token order.

    Raises PackingError when the row's image or video tokens do not match the items' grids.
    """
    tokens = batch["tokens"][0].detach().cpu().numpy()
    cu = batch["cu_seqlens_q"].detach().cpu().numpy()
    padded = batch.get("cu_seqlens_q_padded")
    cu_p = cu if padded is None else padded.detach().cpu().numpy()
    real = np.diff(cu)
    n_real = int(np.count_nonzero(real))
    if n_real != len(visuals) or (real[: len(visuals)] == 0).any():
        raise PackingError(f"{len(visuals)} samples' visual items for a row of {n_real} sequences")
    dim = settings.vision.patch_dim
    images = [[v for v in seq if v.kind == "image"] for seq in visuals]
    videos = [[v for v in seq if v.kind == "video"] for seq in visuals]
    flat_images = [v for seq in images for v in seq]
    flat_videos = [v for seq in videos for v in seq]
    for v in flat_images + flat_videos:
        if v.patches.shape[1] != dim:
            raise PackingError(f"a {v.kind} has patch rows of {v.patches.shape[1]} values; the vision spec "
                               f"{settings.vision.name!r} makes {dim}", field="pixel_values")
    vt = settings.tokens
    merge = settings.vision.merge_size
    for i, (start, length) in enumerate(zip(cu_p[:-1].tolist(), real.tolist())):
        if i >= len(visuals):
            break
        span = tokens[start : start + length]
        for kind, pad, items in (("image", vt.image, images[i]), ("video", vt.video, videos[i])):
            want = sum(v.n_tokens(merge) for v in items)
            got = int(np.count_nonzero(span == pad))
            if got != want:
                raise PackingError(
                    f"sequence {i} holds {got} {kind} tokens but its {len(items)} {kind}(s) make {want}: "
                    "image tokens and patches do not match", field="visuals",
                )
    mrope = settings.mrope
    try:
        positions = packed_rope_index(
            tokens, cu, mrope, cu_seqlens_padded=cu_p,
            image_grid_thw=_grids(flat_images), video_grid_thw=_grids(flat_videos),
            second_per_grid=[v.second_per_grid for v in flat_videos],
        )
    except Exception as exc:  # InputError/UsageError from the index: the row and its items disagree
        raise PackingError(f"the row's vision tokens do not match its items: {exc}", field="tokens") from None
    device = batch["tokens"].device

    def tensor(arr: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(arr)).to(device)

    def owners(per_seq: list[list[VisualItem]]) -> np.ndarray:
        counts = [sum(v.patches.shape[0] for v in seq) for seq in per_seq]
        return np.repeat(np.arange(len(per_seq), dtype=np.int64), counts)

    batch["pixel_values"] = tensor(_stack(flat_images, dim))
    batch["image_grid_thw"] = tensor(_grids(flat_images))
    batch["pixel_sequence_index"] = tensor(owners(images))
    batch["pixel_values_videos"] = tensor(_stack(flat_videos, dim))
    batch["video_grid_thw"] = tensor(_grids(flat_videos))
    batch["second_per_grid_ts"] = tensor(np.asarray([v.second_per_grid for v in flat_videos], dtype=np.float32))
    batch["video_sequence_index"] = tensor(owners(videos))
    batch["num_patches"] = tensor(np.asarray([sum(v.patches.shape[0] for v in seq) for seq in visuals],
                                             dtype=np.int64))
    batch["vision_index"] = tensor(visual_token_index(tokens, vt.image, vt.video)[None])
    batch["mrope_position_ids"] = tensor(positions[:, None, :])
    return batch


def visual_summary(batch: Mapping[str, Any]) -> dict[str, int]:
    """Counts of a VLM batch: images, videos, patch rows and vision tokens (0s for a text batch)."""
    if "vision_index" not in batch:
        return {"images": 0, "videos": 0, "patch_rows": 0, "vision_tokens": 0}
    return {
        "images": int(batch["image_grid_thw"].shape[0]),
        "videos": int(batch["video_grid_thw"].shape[0]),
        "patch_rows": int(batch["pixel_values"].shape[0] + batch["pixel_values_videos"].shape[0]),
        "vision_tokens": int((batch["vision_index"] >= 0).sum()),
    }
