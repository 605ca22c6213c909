"""Synthetic SFT sequence-length mixes, shared by benchmarks, the demo data and tests.

Three mixes (all clipped to ``[min_len, max_len]``), the same shapes the peer study measured:

* ``lognormal`` (heavy-tailed): median 300, sigma 1.0;
* ``bimodal`` (chat-like): 70 % short (median 180, sigma 0.6) and 30 % long (median 1800, sigma 0.45);
* ``uniform``: uniform integers in ``[min_len, max_len]``.

Every draw takes an explicit seed and uses its own ``numpy.random.Generator``, so the global
numpy RNG is never touched.
"""

from __future__ import annotations

import numpy as np

from seqpack.core.arguments import non_negative_int, positive_int
from seqpack.core.choices import LENGTH_MIXES
from seqpack.core.limits import MAX_MIX_LENGTH, MAX_PLAN_SAMPLES
from seqpack.core.errors import UsageError

MIXES: tuple[str, ...] = LENGTH_MIXES


def sample_lengths(
    mix: str,
    n: int,
    *,
    seed: int = 0,
    min_len: int = 8,
    max_len: int = 4096,
) -> np.ndarray:
    """Draw ``n`` sequence lengths (int64) from the named mix, clipped to ``[min_len, max_len]``."""
    if mix not in MIXES:
        raise UsageError(f"unknown length mix {mix!r}; choose one of {', '.join(MIXES)}")
    non_negative_int("n", n, maximum=MAX_PLAN_SAMPLES)
    positive_int("min_len", min_len)
    positive_int("max_len", max_len, maximum=MAX_MIX_LENGTH)
    if max_len < min_len:
        raise UsageError(f"max_len={max_len} is below min_len={min_len}", field="max_len")
    rng = np.random.default_rng(seed)
    if mix == "lognormal":
        raw = rng.lognormal(mean=np.log(300.0), sigma=1.0, size=n)
    elif mix == "bimodal":
        short = rng.lognormal(mean=np.log(180.0), sigma=0.6, size=n)
        long = rng.lognormal(mean=np.log(1800.0), sigma=0.45, size=n)
        raw = np.where(rng.random(n) < 0.7, short, long)
    else:
        raw = rng.integers(min_len, max_len + 1, size=n).astype(np.float64)
    return np.clip(np.rint(raw), min_len, max_len).astype(np.int64)
