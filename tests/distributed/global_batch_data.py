"""Test data and the unpacked reference for the global-batch tests (shared by worker and tests).

:func:`write_rows` writes a prompt/completion JSONL whose rows tokenize (byte tokenizer, default
schema) to ``len(prompt) + 1 + len(completion) + 1`` ids: varied lengths, some past seq_length.
:func:`unpacked_reference` runs every sample alone, real tokens only, on one process: the numbers a
packed run must reproduce (loss sum, supervised tokens, gradient of the loss sum).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from seqpack.training.model import TinyGPT
from seqpack.training.equivalence import run_rows, unpacked_row

LETTERS = "abcdefghijklmnopqrstuvwxyz"


def write_rows(path: Path, n: int, *, seed: int, lo: int = 6, hi: int = 150) -> Path:
    """``n`` rows with total lengths drawn uniformly in ``[lo, hi)`` (seeded)."""
    rng = np.random.default_rng(seed)
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(n):
            total = int(rng.integers(lo, hi))
            prompt_len = max(1, int(rng.integers(1, max(2, total // 2))))
            completion_len = max(1, total - prompt_len - 2)
            prompt = "".join(LETTERS[int(x)] for x in rng.integers(0, 26, prompt_len))
            completion = "".join(LETTERS[int(x)] for x in rng.integers(0, 26, completion_len))
            fh.write(json.dumps({"id": i, "prompt": prompt, "completion": completion}) + "\n")
    return path


def sequence_key(tokens: Any, labels: Any, loss_mask: Any) -> str:
    """Content hash of one sequence's real tokens (what exactly-once checks compare)."""
    h = hashlib.sha1()
    for arr, dtype in ((tokens, np.int64), (labels, np.int64), (loss_mask, np.float32)):
        a = arr.numpy() if isinstance(arr, torch.Tensor) else np.asarray(arr)
        h.update(np.ascontiguousarray(a, dtype=dtype).tobytes())
    return h.hexdigest()[:20]


def sample_key(sample: Mapping[str, torch.Tensor]) -> str:
    """Hash of an unpacked sample's real part."""
    n = int(sample["original_seq_len"].reshape(-1)[0])
    return sequence_key(sample["tokens"][:n], sample["labels"][:n], sample["loss_mask"][:n])


def packed_keys(batch: Mapping[str, Any]) -> list[str]:
    """Hashes of the real part of every sequence of a canonical packed batch (zero-length ones skipped)."""
    real = batch["cu_seqlens_q"].tolist()
    phys = batch.get("cu_seqlens_q_padded", batch["cu_seqlens_q"]).tolist()
    out = []
    for i in range(len(real) - 1):
        n = real[i + 1] - real[i]
        if n == 0:
            continue
        sl = slice(phys[i], phys[i] + n)
        out.append(sequence_key(batch["tokens"][0, sl], batch["labels"][0, sl], batch["loss_mask"][0, sl]))
    return out


def unpacked_reference(
    model: TinyGPT, examples: Iterable[Mapping[str, Any]]
) -> tuple[float, float, dict[str, torch.Tensor]]:
    """(loss sum, supervised tokens, gradient of the loss sum) of every example run alone, unpadded.

    ``examples`` carry 1-D ``tokens``, ``labels``, ``loss_mask`` (real tokens only). They run as one
    padded stack of independent rows (:func:`seqpack.training.equivalence.run_rows`), which
    computes every row as if it ran alone.
    """
    rows = [unpacked_row({k: np.asarray(ex[k]) for k in ("tokens", "labels", "loss_mask")}, 0) for ex in examples]
    if not rows:
        return 0.0, 0.0, {}
    res = run_rows(model, rows, torch.tensor([1.0, 0.0], dtype=torch.float64))
    return float(res.sums["lm"][0]), float(res.counts["lm"][0]), res.grads
