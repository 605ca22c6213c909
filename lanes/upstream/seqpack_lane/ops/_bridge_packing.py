"""Megatron-Bridge 0.6.2's packing stage on given lengths: histogram, strategy and fill, as its preparation runs them.

Runs in the upstream interpreter; not an op module (files starting with ``_`` are not scanned). Used
by the ``offline.algorithms`` op (``pack_and_fill``) and by the benchmark's Bridge side, which times
the three stages.
"""

from __future__ import annotations

import time

import numpy as np


def stand_in_samples(lengths: list[int]) -> list[dict]:
    """Tokenized samples of the given runtime lengths (``len(input_ids) - 1``) whose token ids name
    their dataset index, so the packed rows say which sample went where."""
    return [{"input_ids": [i] * (n + 1), "loss_mask": [1] * (n + 1)} for i, n in enumerate(lengths)]


def pack_and_fill(dataset: list[dict], pack_size: int, algorithm: str, seed: int | None,
                  max_seq_length: int | None = None) -> dict:
    """``create_hist`` + ``create_packing_strategy`` + ``fill_packing_strategy`` on ``dataset``.

    As in ``prepare_gpt_sft_packed_data``: the histogram is cut at ``max_seq_length`` (default
    ``pack_size``), the global numpy RNG is seeded with ``seed`` before the strategy (when a seed is
    given) and the caller's state is restored after the fill. Returns ``{"packed": Bridge's rows,
    "metadata", "seconds": {"histogram", "strategy", "fill"}}``.
    """
    from megatron.bridge.data.packing import algorithms as alg

    t0 = time.perf_counter()
    sequences, histogram = alg.create_hist(dataset, pack_size if max_seq_length is None else max_seq_length)
    t1 = time.perf_counter()
    state = np.random.get_state()
    if seed is not None:
        np.random.seed(seed)
    try:
        bins, metadata = alg.create_packing_strategy(histogram, pack_size, algorithm)
        t2 = time.perf_counter()
        packed = alg.fill_packing_strategy(bins, sequences, pack_size, 0)
        t3 = time.perf_counter()
    finally:
        np.random.set_state(state)
    return {"packed": packed, "metadata": metadata,
            "seconds": {"histogram": t1 - t0, "strategy": t2 - t1, "fill": t3 - t2}}


def sample_rows(packed: list[dict]) -> list[list[int]]:
    """The dataset index of every segment of every packed row of :func:`stand_in_samples`' samples."""
    return [[row["input_ids"][s] for s in row["seq_start_id"]] for row in packed]
