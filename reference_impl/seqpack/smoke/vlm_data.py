"""What the smoke test needs for VLM data: the vision settings of a file, the reference samples
(tokenized and patchified independently of any packing code) and one sample as its own batch.

The in-batch and Energon smoke adapters call :func:`vlm_settings_for` on their JSONL: a file with
images is read as VLM samples with the ``tiny`` vision preset (patch 4, merge 2: the reference
model stays small), a text file stays text. :func:`vlm_reference_samples` encodes every row with
the data layer's sample contract (:func:`seqpack.data.vlm.sample.tokenize_vlm_row`);
:func:`single_sample_batch` turns one of them into a one-sequence canonical batch with its own
patch rows, ``vision_index`` and M-RoPE ids from :func:`seqpack.data.vlm.mrope.rope_index`
(never the packed index), which is what "unpacked" means for the checks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from seqpack.data.vlm.sample import VLMSettings, file_has_visuals
from seqpack.packing.vlm import visual_token_index

__all__ = ["SMOKE_VISION", "single_sample_batch", "vlm_reference_samples", "vlm_settings_for"]

#: The vision preset of the smoke test's VLM data.
SMOKE_VISION = "tiny"


def vlm_settings_for(jsonl: Path, tokenizer: Any) -> VLMSettings | None:
    """VLM settings (``tiny`` preset) when the file carries images or videos, else None."""
    return VLMSettings.create(SMOKE_VISION, tokenizer) if file_has_visuals(jsonl) else None


def vlm_reference_samples(
    jsonl: Path, schema: Any, tokenizer: Any, settings: VLMSettings, max_length: int, reasons: Any = None,
) -> tuple[list[dict[str, Any]], int, int]:
    """Every row under the VLM sample contract: ``(samples, rows, rejected)``; a sample carries its
    ``visuals``, its own M-RoPE ids (``mrope``, ``[3, L]``) and the settings (``vlm``)."""
    from seqpack.data.jsonl import JsonlFile
    from seqpack.data.rejections import SampleRejected
    from seqpack.data.vlm.sample import tokenize_vlm_row

    jf = JsonlFile(jsonl)
    samples, rejected = [], 0
    try:
        for i in range(len(jf)):
            try:
                ex = tokenize_vlm_row(jf.row(i), schema, tokenizer, vision=settings.vision,
                                      vision_tokens=settings.tokens, max_length=max_length, base_dir=jf.path.parent)
            except SampleRejected as why:
                rejected += 1
                if reasons is not None:
                    reasons[why.reason] += 1
                continue
            samples.append({"id": i, "tokens": ex.tokens, "labels": ex.labels, "loss_mask": ex.loss_mask,
                            "visuals": ex.visuals, "mrope": ex.mrope_position_ids(settings.mrope), "vlm": settings})
    finally:
        jf.close()
    return samples, len(jf), rejected


def single_sample_batch(sample: dict[str, Any], settings: VLMSettings) -> dict[str, Any]:
    """The visual keys of ``sample`` run alone (to add to its one-sequence canonical batch)."""
    dim = settings.vision.patch_dim
    visuals = sample["visuals"]
    images = [v for v in visuals if v.kind == "image"]
    videos = [v for v in visuals if v.kind == "video"]

    def stack(items: list[Any]) -> torch.Tensor:
        arr = np.concatenate([v.patches for v in items]) if items else np.zeros((0, dim), np.float32)
        return torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32))

    index = visual_token_index(np.asarray(sample["tokens"]), settings.tokens.image, settings.tokens.video)
    return {
        "pixel_values": stack(images),
        "pixel_values_videos": stack(videos),
        "vision_index": torch.from_numpy(index)[None],
        "mrope_position_ids": torch.as_tensor(sample["mrope"], dtype=torch.int64)[:, None, :],
    }
