"""Hand-built canonical THD micro-batches for the training tests (no dependency on the THD builder).

Follows DESIGN.md section 3: tokens/labels int64 [1, T], loss_mask float32 [1, T], position_ids
int64 [1, T] restarting at 0 per sequence (alignment gaps keep counting), cu_seqlens_q/kv int32
real boundaries, cu_seqlens_*_padded int32 physical boundaries when they differ, max_seqlen_* int
(longest physical sequence), padding_mask bool [1, T].
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def random_sequences(
    lengths: Sequence[int], *, vocab: int = 64, seed: int, prompt: Sequence[int] | None = None
) -> list[dict[str, list]]:
    """Random sequences: tokens in [1, vocab), labels = random targets, the first prompt[i] labels unsupervised."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i, length in enumerate(lengths):
        tokens = torch.randint(1, vocab, (length,), generator=gen).tolist()
        labels = torch.randint(0, vocab, (length,), generator=gen).tolist()
        k = 0 if prompt is None else prompt[i]
        out.append({"tokens": tokens, "labels": labels, "loss_mask": [0.0] * k + [1.0] * (length - k)})
    return out


def make_thd_batch(
    seqs: Sequence[dict[str, list]],
    multiple: int = 1,
    *,
    trailing_pad: int = 0,
    pad_id: int = 0,
    label_pad: int = -100,
) -> dict:
    """Pack ``seqs`` into one canonical THD row, each sequence padded to a multiple of ``multiple``.

    ``trailing_pad`` > 0 appends a zero-length sequence of that physical length (like Bridge's
    offline width padding).
    """
    tokens, labels, mask, pos, pad = [], [], [], [], []
    real, physical = [0], [0]
    for s in seqs:
        n = len(s["tokens"])
        p = -(-n // multiple) * multiple
        gap = p - n
        tokens += list(s["tokens"]) + [pad_id] * gap
        labels += list(s["labels"]) + [label_pad] * gap
        mask += list(s["loss_mask"]) + [0.0] * gap
        pos += list(range(p))
        pad += [False] * n + [True] * gap
        real.append(real[-1] + n)
        physical.append(physical[-1] + p)
    if trailing_pad:
        tokens += [pad_id] * trailing_pad
        labels += [label_pad] * trailing_pad
        mask += [0.0] * trailing_pad
        pos += [0] * trailing_pad
        pad += [True] * trailing_pad
        real.append(real[-1])
        physical.append(physical[-1] + trailing_pad)
    cu = torch.tensor(real, dtype=torch.int32)
    batch = {
        "tokens": torch.tensor([tokens], dtype=torch.int64),
        "labels": torch.tensor([labels], dtype=torch.int64),
        "loss_mask": torch.tensor([mask], dtype=torch.float32),
        "position_ids": torch.tensor([pos], dtype=torch.int64),
        "padding_mask": torch.tensor([pad], dtype=torch.bool),
        "cu_seqlens_q": cu,
        "cu_seqlens_kv": cu,
    }
    longest = max(b - a for a, b in zip(physical, physical[1:]))
    if physical != real:
        cu_p = torch.tensor(physical, dtype=torch.int32)
        batch["cu_seqlens_q_padded"] = cu_p
        batch["cu_seqlens_kv_padded"] = cu_p
    batch["max_seqlen_q"] = longest
    batch["max_seqlen_kv"] = longest
    return batch
