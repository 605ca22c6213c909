"""Hypothesis strategies whose draws do not depend on which modules happen to be imported.

Hypothesis 6.1xx occasionally (about one integer, float, string or bytes draw in twenty) returns a
constant it collected from the source of the *local* modules imported so far. Which modules are
imported depends on which tests ran earlier in the session, so a derandomized test generates other
cases when run alone than in the whole suite, and the differential case counts of the lane (the
generated table in docs/compatibility.md) would change with the selection. Boolean draws never use
that pool, so these strategies build integers and choices from fixed-size lists of booleans: the same
cases whatever ran before. They shrink towards the low end, like ``st.integers``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

booleans = st.booleans


def integers(lo: int, hi: int) -> st.SearchStrategy[int]:
    """An integer in ``[lo, hi]`` from booleans only."""
    span = hi - lo + 1
    if span < 1:
        raise ValueError(f"empty range [{lo}, {hi}]")
    bits = max(1, (span - 1).bit_length()) + 2  # two extra bits keep the modulo bias small
    return st.lists(st.booleans(), min_size=bits, max_size=bits).map(
        lambda flags: lo + sum(1 << i for i, f in enumerate(flags) if f) % span)


def sampled_from(values: Sequence[Any]) -> st.SearchStrategy[Any]:
    """One of ``values`` (the first when shrinking)."""
    items = list(values)
    return integers(0, len(items) - 1).map(items.__getitem__)


def lists(elements: st.SearchStrategy[Any], min_size: int, max_size: int) -> st.SearchStrategy[list[Any]]:
    """A list of ``min_size..max_size`` elements, its length drawn like :func:`integers`."""
    return integers(min_size, max_size).flatmap(lambda n: st.lists(elements, min_size=n, max_size=n))
