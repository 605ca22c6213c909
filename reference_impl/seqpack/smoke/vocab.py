"""A compact vocabulary for the smoke test's reference model when the data comes from a real tokenizer.

The reference model embeds every token id, and its logits have one column per id: with a real
tokenizer (Qwen3: 151,669 ids) a float64 model over a few thousand tokens would need gigabytes for
logits alone. Packed-equals-unpacked does not depend on which ids the tokens carry, only on both sides
carrying the same ones, so the ids that occur are renumbered ``0..K-1`` in order (the same map for the
packed batches and the samples; the four vision ids of VLM data are kept distinct and renumbered
too), and the model gets ``K`` ids. Data whose ids fit the default vocabulary is left as it is.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from seqpack.core.packing_paths import PathBatches

__all__ = ["compact_vocabulary"]


def _ids(values: Any) -> np.ndarray:
    if hasattr(values, "detach"):
        values = values.detach().cpu().numpy()
    return np.asarray(values, dtype=np.int64).reshape(-1)


def compact_vocabulary(pb: PathBatches, batches: list[dict[str, Any]], limit: int
                       ) -> tuple[PathBatches, list[dict[str, Any]], int | None]:
    """``(pb, batches, vocab_size)`` with the ids renumbered when the largest id is ``limit`` or more
    (``vocab_size`` None: nothing changed). Negative labels (ignore indices) are kept."""
    import torch

    vlm = pb.details.get("vlm")
    parts = [_ids(b[k]) for b in batches for k in ("tokens", "labels")]
    parts += [_ids(s[k]) for s in pb.samples for k in ("tokens", "labels")]
    if vlm is not None:
        parts.append(np.asarray([vlm.tokens.image, vlm.tokens.video, vlm.tokens.start, vlm.tokens.end], np.int64))
    every = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    every = every[every >= 0]
    if not every.size or int(every.max()) < limit:
        return pb, batches, None
    used = np.unique(every)

    def renumber(values: Any) -> Any:
        arr = _ids(values)
        out = np.where(arr >= 0, np.searchsorted(used, np.clip(arr, 0, None)), arr)
        if hasattr(values, "detach"):
            return torch.as_tensor(out, dtype=values.dtype).reshape(values.shape)
        return out.astype(np.asarray(values).dtype, copy=False).reshape(np.shape(values))

    details = dict(pb.details)
    if vlm is not None:
        t = vlm.tokens
        tokens = dataclasses.replace(t, image=int(renumber([t.image])[0]), video=int(renumber([t.video])[0]),
                                     start=int(renumber([t.start])[0]), end=int(renumber([t.end])[0]),
                                     vocab_size=int(used.size))
        details["vlm"] = vlm = dataclasses.replace(vlm, tokens=tokens)
    samples = [{**s, "tokens": renumber(s["tokens"]), "labels": renumber(s["labels"]),
                **({"vlm": vlm} if "vlm" in s else {})} for s in pb.samples]
    out = [{**b, "tokens": renumber(b["tokens"]), "labels": renumber(b["labels"])} for b in batches]
    details["compact_vocabulary"] = {"ids": int(used.size), "largest_id": int(used[-1])}
    return dataclasses.replace(pb, samples=samples, details=details), out, int(used.size)
