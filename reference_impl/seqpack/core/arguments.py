"""Argument checks shared by every layer: one place that says what a valid integer argument is.

Pure Python (no numpy import; numpy integers are accepted because numpy registers them as
:class:`numbers.Integral`). Booleans are never integers here, although Python says they are.

>>> positive_int("tp", 4)
4
>>> positive_int("max_seqs_per_pack", None, allow_none=True) is None
True
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from seqpack.core.errors import SeqpackError, UsageError

__all__ = ["is_int", "non_negative_int", "positive_float", "positive_int"]


def is_int(value: Any) -> bool:
    """True for Python and numpy integers, False for booleans and everything else."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def positive_int(
    name: str,
    value: Any,
    *,
    minimum: int = 1,
    maximum: int | None = None,
    allow_none: bool = False,
    field: str | None = None,
    error: type[SeqpackError] = UsageError,
) -> Any:
    """``value`` as an ``int`` when it is an integer in ``[minimum, maximum]``, else raise ``error``.

    ``allow_none`` lets ``None`` through unchanged (an optional argument left unset). The message
    names the argument (``field`` defaults to ``name``); an upper bound comes with where the limit
    lives (:mod:`seqpack.core.limits`).
    """
    if value is None and allow_none:
        return None
    if not is_int(value) or value < minimum:
        want = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        if allow_none:
            want = f"null or {want}"
        raise error(f"{name} must be {want}, got {value!r}", field=field or name)
    if maximum is not None and value > maximum:
        raise error(
            f"{name}={int(value)} is over the limit of {maximum}",
            field=field or name,
            fix=f"use at most {maximum} (limits live in reference_impl/seqpack/core/limits.py)",
        )
    return int(value)


def non_negative_int(name: str, value: Any, **kwargs: Any) -> Any:
    """:func:`positive_int` with ``minimum=0``."""
    return positive_int(name, value, minimum=0, **kwargs)


def positive_float(
    name: str,
    value: Any,
    *,
    maximum: float | None = None,
    field: str | None = None,
    error: type[SeqpackError] = UsageError,
) -> float:
    """``value`` as a ``float`` when it is a finite number above 0 (at most ``maximum``), else raise ``error``.

    NaN, infinities, booleans and strings are refused (``float("nan") > 0`` is False, but
    ``not nan <= 0`` is True: a check written the second way lets NaN through).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or not value > 0:
        raise error(f"{name} must be a finite number above 0, got {value!r}", field=field or name)
    if maximum is not None and value > maximum:
        raise error(f"{name}={value:g} is over the limit of {maximum:g}", field=field or name,
                    fix=f"use at most {maximum:g} (limits live in reference_impl/seqpack/core/limits.py)")
    return float(value)
