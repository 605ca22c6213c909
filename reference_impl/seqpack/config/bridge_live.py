"""A live Megatron-Bridge ``ConfigContainer`` (what a recipe function returns) as the mapping its YAML dump holds.

Duck-typed: no megatron import. A container is a dataclass instance whose class name ends in
``ConfigContainer``; :func:`container_to_mapping` walks its dataclass fields recursively and writes what
``ConfigContainer.to_yaml`` would (``_target_`` = the class's module and qualified name on every dataclass,
enums as their value, lists and dicts element by element), so
:func:`seqpack.config.bridge_dump.from_bridge_dump` reads it like a dump. It does not call the object's
own ``to_dict`` (which raises on some recipe config classes and leaves enums and dtypes raw). Private
fields (``_name``) are skipped; a value that is neither a dataclass, an enum, a container nor a JSON
scalar (a dtype, a function, a process group, a module) becomes its ``repr``: no packing rule reads one.
Fields are read generically, so every field of every class is carried (issue 35's field list decides
which are accepted).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

__all__ = ["container_to_mapping", "is_bridge_container"]

#: Deeper than any Bridge config nests (providers inside providers stay well under it); a cycle stops here.
MAX_DEPTH = 16


def is_bridge_container(obj: Any) -> bool:
    """True for a live Megatron-Bridge ``ConfigContainer`` (or a subclass): a dataclass instance whose class
    (or a base class) is named ``*ConfigContainer``."""
    if isinstance(obj, (Mapping, str, bytes, type)) or not dataclasses.is_dataclass(obj):
        return False
    return any(cls.__name__.endswith("ConfigContainer") for cls in type(obj).__mro__)


def _value(obj: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        return None
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out: dict[str, Any] = {"_target_": f"{type(obj).__module__}.{type(obj).__qualname__}"}
        for f in dataclasses.fields(obj):
            if f.name.startswith("_"):
                continue
            try:
                out[f.name] = _value(getattr(obj, f.name), depth + 1)
            except Exception:  # noqa: BLE001 - a property that cannot be read is no packing setting
                out[f.name] = None
        return out
    if isinstance(obj, enum.Enum):
        return obj.value if isinstance(obj.value, (str, int, float, bool)) else obj.name
    if isinstance(obj, (list, tuple)):
        return [_value(x, depth + 1) for x in obj]
    if isinstance(obj, Mapping):
        return {str(k): _value(v, depth + 1) for k, v in obj.items()}
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return repr(obj)


def container_to_mapping(obj: Any) -> dict[str, Any]:
    """The YAML-dump mapping of a live ``ConfigContainer`` (see the module docstring)."""
    if not is_bridge_container(obj):
        raise TypeError(f"expected a Megatron-Bridge ConfigContainer, got {type(obj).__name__}")
    return _value(obj, 0)
