"""What several verbs' options share: the topology fields and argument checks against the limits."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from seqpack.core.alignment import Topology
from seqpack.core.arguments import non_negative_int, positive_int
from seqpack.core.errors import UsageError
from seqpack.core.limits import MAX_PATH_CHARS, MAX_SEED

__all__ = ["AlignedOptions", "TopologyOptions", "check_choice", "check_path", "check_seed", "int_list"]


@dataclass(frozen=True, kw_only=True)
class TopologyOptions:
    """TP / CP / SP / evaluation CP of the run (unset sizes mean 1)."""

    tp: int | None = None
    cp: int | None = None
    sp: bool = False
    eval_cp: int | None = None

    @property
    def topology(self) -> Topology:
        """The topology (unset sizes are 1)."""
        return Topology(1 if self.tp is None else self.tp, 1 if self.cp is None else self.cp, self.sp, self.eval_cp)

    @property
    def topology_given(self) -> bool:
        """Whether any topology field was set."""
        return self.tp is not None or self.cp is not None or self.sp or self.eval_cp is not None



@dataclass(frozen=True, kw_only=True)
class AlignedOptions(TopologyOptions):
    """The topology plus an optional explicit ``pad_seq_to_mult``.

    :meth:`multiple` is the per-sequence alignment the verb uses: the explicit value when given (it
    must be a multiple of the derived one, rule ``PACK-OFFLINE-PAD-MULT-TOPOLOGY``), else the
    derived one (:func:`seqpack.core.alignment.alignment_multiple`).
    """

    pad_seq_to_mult: int | None = None

    def multiple(self) -> int:
        """The per-sequence alignment multiple (see the class docstring)."""
        return self.topology.multiple(self.pad_seq_to_mult)


def check_choice(name: str, value: Any, choices: Iterable[str], *, allow_none: bool = False) -> Any:
    """``value`` when it is one of ``choices`` (or None with ``allow_none``), else a UsageError listing them."""
    if value is None and allow_none:
        return None
    options = tuple(choices)
    if value not in options:
        raise UsageError(f"unknown {name} {value!r}; choose one of {', '.join(options)}", field=name)
    return value


def check_seed(value: Any, name: str = "seed") -> int:
    """A seed: an integer from 0 to MAX_SEED (NumPy and torch take a signed 64-bit integer)."""
    return non_negative_int(name, value, maximum=MAX_SEED)


def check_path(name: str, value: Any, *, allow_none: bool = False) -> Any:
    """A file path argument: a non-empty string or path of at most MAX_PATH_CHARS characters."""
    if value is None and allow_none:
        return None
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise UsageError(f"{name} must be a file path, got {value!r}", field=name)
    if len(os.fspath(value)) > MAX_PATH_CHARS:
        raise UsageError(f"{name} is longer than {MAX_PATH_CHARS} characters", field=name)
    return value


def int_list(name: str, values: Sequence[Any], *, maximum: int, most: int, minimum: int = 1) -> tuple[int, ...]:
    """A list of integers in ``[minimum, maximum]``, at most ``most`` of them."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise UsageError(f"{name} must be a list of integers, got {values!r}", field=name)
    items = list(values)
    if len(items) > most:
        raise UsageError(f"{name} holds {len(items)} values; the limit is {most}", field=name,
                         fix=f"give at most {most} (limits live in reference_impl/seqpack/core/limits.py)")
    return tuple(positive_int(name, v, minimum=minimum, maximum=maximum) for v in items)
