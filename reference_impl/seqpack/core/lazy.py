"""Lazy package exports: a package lists its public names and loads each module on first use.

Keeps ``import seqpack.<package>`` cheap (numpy, torch or energon load only with the module
that needs them) while ``from seqpack.<package> import Name`` keeps working.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``exports`` maps each name to its submodule."""

    def __getattr__(name: str) -> Any:
        if name in exports:
            return getattr(importlib.import_module(f"{package}.{exports[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
