"""Statistics a benchmark can quote: bootstrap confidence intervals over tasks and repeats, a paired difference with
its interval, and pass@k.

The unit of sampling is the task (a benchmark generalises to tasks like these), and within a task its repeats (an
agent is not deterministic): each bootstrap replicate draws the tasks with replacement, then for every drawn task
its repeats with replacement, and takes the mean. The paired difference draws the same tasks for both modes (each
task is its own control), then each mode's repeats of that task, and takes the mean of the per-task differences.
The interval is the percentile interval of :data:`REPLICATES` replicates with a fixed seed, so a page regenerated
from the same runs shows the same numbers.

pass@k is the unbiased estimator of the chance that at least one of k attempts passes, from n attempts of which c
passed: ``1 - C(n - c, k) / C(n, k)``, averaged over tasks (k at most the number of repeats).
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

REPLICATES = 2000
LEVEL = 0.95
SEED = 20261206


def _matrix(by_task: Mapping[str, Sequence[float]], keys: Sequence[str]):
    """Tasks x repeats as an array (a task with fewer repeats is padded by cycling its own values)."""
    import numpy as np

    width = max(len(by_task[k]) for k in keys)
    return np.array([[list(by_task[k])[i % len(by_task[k])] for i in range(width)] for k in keys], dtype=float)


def _replicates(matrix, rng, draws) -> "object":
    """Per replicate, the mean of each drawn task's resampled repeats: shape (replicates, tasks)."""
    rows = matrix[draws]  # (B, T, R)
    picks = rng.integers(0, matrix.shape[1], size=rows.shape)
    return np.take_along_axis(rows, picks, axis=2).mean(axis=2)


def bootstrap_mean(by_task: Mapping[str, Sequence[float]], *, replicates: int = REPLICATES, level: float = LEVEL,
                   seed: int = SEED) -> dict[str, float]:
    """Mean over tasks of each task's mean over repeats, with its percentile interval (``mean``, ``lo``, ``hi``,
    ``tasks``, ``level``)."""
    keys = [k for k, v in by_task.items() if len(v)]
    if not keys:
        return {"mean": 0.0, "lo": 0.0, "hi": 0.0, "tasks": 0, "level": level}
    m = _matrix(by_task, keys)
    mean = float(np.mean([np.mean(by_task[k]) for k in keys]))
    rng = np.random.default_rng(seed)
    reps = _replicates(m, rng, rng.integers(0, len(keys), size=(replicates, len(keys)))).mean(axis=1)
    lo, hi = np.quantile(reps, [(1 - level) / 2, (1 + level) / 2])
    return {"mean": round(mean, 4), "lo": round(float(lo), 4), "hi": round(float(hi), 4), "tasks": len(keys),
            "level": level}


def paired_difference(a: Mapping[str, Sequence[float]], b: Mapping[str, Sequence[float]], *,
                      replicates: int = REPLICATES, level: float = LEVEL, seed: int = SEED) -> dict[str, float]:
    """Mean of ``a - b`` over the tasks both have (per task: mean of a's repeats minus mean of b's), with its
    percentile interval; ``excludes_zero``: the interval lies wholly above or below 0."""
    common = [t for t in a if t in b and len(a[t]) and len(b[t])]
    if not common:
        return {"mean": 0.0, "lo": 0.0, "hi": 0.0, "tasks": 0, "level": level, "excludes_zero": False}
    diff = float(np.mean([np.mean(a[t]) - np.mean(b[t]) for t in common]))
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(common), size=(replicates, len(common)))  # the same tasks for both modes
    reps = (_replicates(_matrix(a, common), rng, draws) - _replicates(_matrix(b, common), rng, draws)).mean(axis=1)
    lo, hi = (float(x) for x in np.quantile(reps, [(1 - level) / 2, (1 + level) / 2]))
    return {"mean": round(diff, 4), "lo": round(lo, 4), "hi": round(hi, 4), "tasks": len(common), "level": level,
            "excludes_zero": lo > 0 or hi < 0}


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimate from ``n`` attempts with ``c`` passes (``k <= n``)."""
    if not 0 < k <= n or not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 < k <= n and 0 <= c <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_at_ks(passed_by_task: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """``{"pass@1": .., ..., "pass@n"}`` averaged over tasks, n the smallest number of repeats of a task."""
    tasks = [list(v) for v in passed_by_task.values() if len(v)]
    if not tasks:
        return {}
    n = min(len(v) for v in tasks)
    return {f"pass@{k}": round(sum(pass_at_k(n, int(sum(v[:n])), k) for v in tasks) / len(tasks), 4)
            for k in range(1, n + 1)}


def interval_text(block: Mapping[str, float], scale: float = 100.0, unit: str = "%") -> str:
    """``mean [lo, hi]`` for a page, in percent by default."""
    return f"{scale * block['mean']:.1f}{unit} [{scale * block['lo']:.1f}, {scale * block['hi']:.1f}]"


__all__ = ["LEVEL", "REPLICATES", "SEED", "bootstrap_mean", "interval_text", "paired_difference", "pass_at_k",
           "pass_at_ks"]
