"""The smoke test's VLM pieces: the model for VLM batches, one sample alone, M-RoPE restart, image
leakage and the two VLM faults. :mod:`seqpack.smoke.run` calls these through small hooks; on a
text batch every function is a no-op.

* :func:`model_options`: a VLM path's batches (``PathBatches.details["vlm"]``) get the reference
  model with a vision stem (patch rows of the path's vision spec, its merge size) and M-RoPE, and a
  vocabulary that embeds the vision token ids; text keeps the plain model.
* :func:`sample_inputs`: one reference sample with the model's per-token inputs of it run alone
  (its own patches, its own M-RoPE ids from :func:`seqpack.data.vlm.mrope.rope_index`), for
  packed == unpacked.
* :func:`mrope_check`: every sequence of a VLM batch starts at (0, 0, 0) and its real tokens carry
  exactly the ids its sample has alone.
* :func:`leak_inputs`: the leakage check perturbs the tokens *and the images* of one sequence (the
  first that has images; its patch rows change before the per-token inputs are built) and requires
  every other sequence's outputs to stay put.
* Faults: ``misaligned_image_tokens`` shifts ``vision_index`` by one merged window inside the row
  (every image token shows its neighbour's patches; across a sequence boundary that is a leak);
  ``mrope_no_restart`` recomputes the M-RoPE ids over the whole row as if it were one sequence.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from seqpack.packing.visual_keys import VISUAL_KEYS

__all__ = [
    "VISUAL_KEYS",
    "apply_vlm_faults",
    "leak_inputs",
    "model_options",
    "mrope_check",
    "mrope_section_for",
    "report_details",
    "sample_inputs",
]


def mrope_section_for(head_dim: int) -> tuple[int, int, int]:
    """The reference model's M-RoPE split of ``head_dim / 2`` rotary frequencies: height and width a
    quarter each, temporal the rest (head size 8: ``(2, 1, 1)``; 16: ``(4, 2, 2)``)."""
    half = head_dim // 2
    return (half - 2 * (half // 4), half // 4, half // 4)


def model_options(pb: Any, base: Any) -> dict[str, Any]:
    """Reference model options (:class:`~seqpack.training.model.TinyGPTConfig` fields) for a
    path's batches: for VLM data a vision stem, M-RoPE (split for ``base``'s head size) and the
    vocabulary with the vision tokens; nothing for text."""
    from seqpack.training.vision import VisionStemConfig

    vlm = pb.details.get("vlm")
    if vlm is None:
        return {}
    return {"vocab_size": vlm.tokens.vocab_size,
            "vision": VisionStemConfig(patch_dim=vlm.vision.patch_dim, merge_size=vlm.vision.merge_size),
            "mrope_section": mrope_section_for(base.hidden_size // base.num_heads)}


def report_details(details: Mapping[str, Any]) -> dict[str, Any]:
    """The path's details as the report shows them (the VLM settings by their vision preset)."""
    out = dict(details)
    if out.get("vlm") is not None:
        vlm = out.pop("vlm")
        out["vision"] = vlm.vision.name
    return out


def sample_inputs(model: Any, sample: Mapping[str, Any]) -> Mapping[str, Any]:
    """``sample`` with the model's per-token inputs (``model.token_inputs``, 1-D per token) of it run
    alone: its own patch rows and ``vision_index``, its own M-RoPE ids (positions from 0 for text).
    Unchanged when the model reads none."""
    if not model.token_inputs:
        return sample
    import torch

    tokens = torch.as_tensor(sample["tokens"], dtype=torch.int64)[None]
    alone = {"tokens": tokens, "position_ids": torch.arange(tokens.shape[1])[None]}
    if "visuals" in sample:
        from seqpack.smoke.vlm_data import single_sample_batch

        alone.update(single_sample_batch(sample, sample["vlm"]))
    return {**sample, **{k: v[0] for k, v in model.batch_inputs(alone).items()}}


def mrope_check(
    batches: Sequence[Mapping[str, Any]],
    matches: Sequence[Sequence[Any]],
    samples: Sequence[Mapping[str, Any]],
) -> tuple[list[tuple[int, int]], int]:
    """(bad ``(batch, sequence)`` pairs, sequences checked) for the M-RoPE ids of VLM batches;
    ``matches`` are the batches' matched sequences (:func:`seqpack.smoke.checks.match_sequences`)."""
    import torch

    bad: list[tuple[int, int]] = []
    checked = 0
    for n, (b, matched) in enumerate(zip(batches, matches)):
        pos = b.get("mrope_position_ids")
        if pos is None:
            continue
        for k, m in enumerate(matched):
            checked += 1
            ids = pos[:, 0, m.start : m.start + m.compared]
            sample = samples[m.sample] if m.usable and "mrope" in samples[m.sample] else None
            alone = None if sample is None else torch.as_tensor(sample["mrope"], dtype=ids.dtype)
            if pos[:, 0, m.start].tolist() != [0, 0, 0] or alone is None or not torch.equal(ids, alone):
                bad.append((n, k))
    return bad, checked


def leak_inputs(
    model: Any, batch: Mapping[str, Any], starts: Sequence[int], compared: Sequence[int]
) -> tuple[int, dict[str, Any] | None]:
    """The sequence of ``batch`` the leakage check perturbs and the model's per-token inputs after its
    images changed: the first sequence with images (index into ``compared``, the starts of the row's
    compared sequences; ``starts``: the start of every sequence of the batch), its patch rows
    shifted by a constant *before* the per-token inputs are built, so that a token showing another
    sequence's patches moves too. ``(0, None)`` for a row without images."""
    owners = batch.get("pixel_sequence_index")
    if owners is None or not owners.numel() or int(owners.min()) >= len(starts):
        return 0, None
    index = int(owners.min())
    if starts[index] not in compared:
        return 0, None
    changed = {**batch, **_shifted_images(batch, index)}
    return list(compared).index(starts[index]), {k: v[0] for k, v in model.batch_inputs(changed).items()}


def _shifted_images(view: Mapping[str, Any], index: int) -> dict[str, Any]:
    """The patch rows of sequence ``index`` (images and videos) shifted by a constant; nothing for text."""
    out: dict[str, Any] = {}
    for pixels, owners in (("pixel_values", "pixel_sequence_index"), ("pixel_values_videos", "video_sequence_index")):
        if pixels in view and owners in view and view[owners].numel():
            mine = view[owners] == index
            if bool(mine.any()):
                changed = view[pixels].clone()
                changed[mine] += 0.5
                out[pixels] = changed
    return out


def apply_vlm_faults(batches: list[dict[str, Any]], faults: Sequence[str], vlm: Any = None) -> list[dict[str, Any]]:
    """Apply the VLM faults (module docstring) to batches that carry images (``vlm``: the path's
    VLM settings); others pass unchanged."""
    if vlm is None or not {"misaligned_image_tokens", "mrope_no_restart"} & set(faults):
        return batches
    import torch

    from seqpack.data.vlm.mrope import rope_index

    for b in batches:
        if "vision_index" not in b:
            continue
        if "misaligned_image_tokens" in faults:
            index = b["vision_index"].clone()
            named = index >= 0
            total = int(named.sum())
            if total:
                index[named] = (index[named] + 1) % total
            b["vision_index"] = index
        if "mrope_no_restart" in faults:
            whole = rope_index(b["tokens"][0].numpy(), vlm.mrope, image_grid_thw=b["image_grid_thw"].numpy(),
                               video_grid_thw=b["video_grid_thw"].numpy(),
                               second_per_grid=b["second_per_grid_ts"].numpy())
            b["mrope_position_ids"] = torch.from_numpy(whole)[:, None, :]
    return batches
