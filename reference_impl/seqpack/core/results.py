"""The result convention: a verb returns a dataclass whose public fields are exactly its JSON.

``to_dict()`` of a :class:`Result` walks the fields (names not starting with ``_``) and turns
paths into strings and tuples into lists. The CLI prints that dict with ``--json``; the MCP server
derives the tool's output schema from the same dataclass (the SDK reads its type hints) and
returns the same data. A value a caller needs but the JSON should not carry (a whole manifest,
say) is attached with :meth:`Result.attach` and read through a property: it is no field, so no
face serializes it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

__all__ = ["Result", "public_fields", "to_jsonable"]


def public_fields(obj: Any) -> list[str]:
    """Names of a dataclass's public fields, in declaration order."""
    return [f.name for f in dataclasses.fields(obj) if not f.name.startswith("_")]


def to_jsonable(value: Any) -> Any:
    """``value`` with dataclasses, paths, tuples and numpy scalars turned into JSON types."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: to_jsonable(getattr(value, name)) for name in public_fields(value)}
    if isinstance(value, Mapping):
        return {k: to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if type(value).__module__ == "numpy" and hasattr(value, "item"):
        return value.item()
    return value


class Result:
    """Mixin of the verbs' result dataclasses: ``to_dict()`` is the JSON form of the public fields."""

    def attach(self, **private: Any) -> Any:
        """Keep values beside the fields (frozen or not) as ``_<name>`` attributes; returns ``self``."""
        for name, value in private.items():
            object.__setattr__(self, f"_{name}", value)
        return self

    def replaced(self, **changes: Any) -> Any:
        """``dataclasses.replace`` that keeps what :meth:`attach` kept (``replace`` alone drops it)."""
        private = {k[1:]: v for k, v in self.__dict__.items() if k.startswith("_")}
        return dataclasses.replace(self, **changes).attach(**private)

    def attached(self, name: str, default: Any = None) -> Any:
        """A value kept with :meth:`attach` (``default`` when none was)."""
        return self.__dict__.get(f"_{name}", default)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (the CLI's ``--json`` output and the MCP tool's structured content)."""
        return to_jsonable(self)
