"""Synthetic prompt/completion JSONL for the benchmarks, deterministic by seed, with a heavy-tailed length mix.

Usage: python bench/gen_sft_jsonl.py OUT.jsonl --rows 100000 [--seed 0] [--median-words 48] [--sigma 1.0]

Each row is ``{"input": ..., "output": ...}`` (the column names of Megatron-Bridge's recipe-shaped
prompt/completion preprocessing). A row's word count is lognormal (median ``--median-words``,
``--sigma``; heavy-tailed: with the defaults the mean is about 1.65x the median and a few rows in a
million exceed 4,096 words), clipped to ``[2, --max-words]``, and split into prompt and completion at a
uniform share between 20 % and 80 %. Words are drawn from a small English vocabulary mixed with
numerals, so a real BPE tokenizer (Qwen3: about 1.3 tokens per word) and the tiny WordLevel tokenizer
of the lane tests (one token per word, English words as ``<unk>``) both read it. Needs numpy only.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

VOCAB = tuple(
    ("the cat sat on a mat and looked at seven small birds while rain fell over quiet hills what is twelve "
     "times four answer forty eight because numbers grow when multiplied model packs sequences into fixed "
     "length bins so that attention never crosses a boundary every token of padding wastes compute").split()
) + tuple(str(i) for i in range(0, 300, 7))
#: Rows generated (and written) per chunk: keeps the generator's memory flat at any row count.
CHUNK = 50_000


def row_word_counts(rng: np.random.Generator, n: int, median: float, sigma: float, max_words: int) -> np.ndarray:
    """Heavy-tailed word counts per row: lognormal(median, sigma), clipped to ``[2, max_words]``."""
    raw = rng.lognormal(mean=np.log(median), sigma=sigma, size=n)
    return np.clip(np.rint(raw), 2, max_words).astype(np.int64)


def write_rows(path: str | Path, rows: int, *, seed: int = 0, median_words: float = 48.0, sigma: float = 1.0,
               max_words: int = 20_000) -> dict:
    """Write ``rows`` rows to ``path``; returns ``{"rows", "words", "bytes"}``. Same arguments, same file."""
    rng = np.random.default_rng(seed)
    vocab = np.array(VOCAB, dtype=object)
    words = size = 0
    with open(path, "w", encoding="utf-8") as fh:
        for start in range(0, rows, CHUNK):
            n = min(CHUNK, rows - start)
            counts = row_word_counts(rng, n, median_words, sigma, max_words)
            split = np.maximum(1, np.rint(counts * rng.uniform(0.2, 0.8, size=n)).astype(np.int64))
            split = np.minimum(split, counts - 1)
            flat = vocab[rng.integers(0, len(vocab), size=int(counts.sum()))]
            offsets = np.concatenate([[0], np.cumsum(counts)])
            lines = []
            for i in range(n):
                a, b, c = offsets[i], offsets[i] + split[i], offsets[i + 1]
                lines.append(json.dumps({"input": " ".join(flat[a:b]), "output": " ".join(flat[b:c])}) + "\n")
            chunk = "".join(lines)
            fh.write(chunk)
            words += int(counts.sum())
            size += len(chunk.encode("utf-8"))
    return {"rows": rows, "words": words, "bytes": size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--median-words", type=float, default=48.0)
    parser.add_argument("--sigma", type=float, default=1.0)
    parser.add_argument("--max-words", type=int, default=20_000)
    args = parser.parse_args()
    info = write_rows(args.out, args.rows, seed=args.seed, median_words=args.median_words, sigma=args.sigma,
                      max_words=args.max_words)
    print(json.dumps(info))


if __name__ == "__main__":
    main()
