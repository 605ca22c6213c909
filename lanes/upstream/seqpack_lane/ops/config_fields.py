"""Lane op: every field name of Megatron-Bridge's config dataclasses, by section of ``ConfigContainer``.

``config_fields.bridge`` walks ``megatron.bridge.training.config.ConfigContainer``: for each of its fields,
the dataclasses its annotation names (``Optional``/``Union``/containers expanded) and every dataclass
subclass of those that Bridge's own packages define (the packages are imported, so recipe and model
providers count), their field names merged per section; fields typed as dataclasses are followed into
sub-sections (``dataset.offline_packing_specs``, ``comm_overlap.tp_comm_overlap_cfg``, ...) up to three
levels deep, and one level under ``model`` (whose nested values are providers again). seqpack commits the
answer as ``reference_impl/seqpack/config/bridge_fields_062.json`` (``scripts/regen_bridge_fields.py``).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import logging
import pkgutil
import sys
import types
import typing
import warnings

#: Bridge packages imported so that every dataclass subclass a config can hold is known.
PACKAGES = ("megatron.bridge.models", "megatron.bridge.data", "megatron.bridge.peft", "megatron.bridge.training",
            "megatron.bridge.recipes", "megatron.bridge.diffusion")
#: Dataclasses that are runtime objects, not configuration, and are never followed.
NOT_CONFIG = ("ModuleSpec", "ProcessGroupCollection", "DistTrainProcessGroupCollection")


def _import_all() -> list[str]:
    failed = []
    for name in PACKAGES:
        try:
            package = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - optional dependencies of the lane may be missing
            failed.append(name)
            continue
        for info in pkgutil.walk_packages(package.__path__, name + "."):
            if ".tests" in info.name or "conftest" in info.name:
                continue
            try:
                importlib.import_module(info.name)
            except BaseException:  # noqa: BLE001 - a module needing Transformer Engine or CUDA
                failed.append(info.name)
    return sorted(failed)


def _hints(cls: type) -> dict[str, typing.Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - an annotation naming a missing optional type
        module = vars(sys.modules.get(cls.__module__, types.ModuleType("x")))
        out = {}
        for f in dataclasses.fields(cls):
            try:
                out[f.name] = eval(f.type, module) if isinstance(f.type, str) else f.type  # noqa: S307
            except Exception:  # noqa: BLE001
                out[f.name] = None
        return out


def _dataclasses_in(annotation: typing.Any, depth: int = 0) -> list[type]:
    if annotation is None or depth > 4:
        return []
    if inspect.isclass(annotation) and dataclasses.is_dataclass(annotation):
        return [annotation] if annotation.__name__ not in NOT_CONFIG else []
    return [c for a in typing.get_args(annotation) for c in _dataclasses_in(a, depth + 1)]


def _subclasses(cls: type) -> list[type]:
    out, todo = [cls], [cls]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in out:
                out.append(sub)
                todo.append(sub)
    return out


def op_bridge() -> dict:
    """``{"versions", "sections": {dotted section: sorted field names}, "unimported": [modules]}``."""
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from importlib.metadata import version

    from megatron.bridge.training.config import ConfigContainer

    unimported = _import_all()
    sections: dict[str, set[str]] = {"": {f.name for f in dataclasses.fields(ConfigContainer)}}

    def walk(path: str, annotation: typing.Any) -> None:
        found: list[type] = []
        for base in _dataclasses_in(annotation):
            if base.__module__.startswith("megatron."):
                found += [c for c in _subclasses(base) if c not in found]
        if not found:
            return
        names = sections.setdefault(path, set())
        nested: dict[str, list[type]] = {}
        for cls in found:
            hints = _hints(cls)
            for f in dataclasses.fields(cls):
                names.add(f.name)
                if not f.name.startswith("_"):
                    nested.setdefault(f.name, []).extend(_dataclasses_in(hints.get(f.name)))
        if path.count(".") >= 2 or path.startswith("model."):
            return
        for name, classes in nested.items():
            if classes and f"{path}.{name}" not in sections:
                walk(f"{path}.{name}", typing.Union[tuple(dict.fromkeys(classes))])

    hints = _hints(ConfigContainer)
    for f in dataclasses.fields(ConfigContainer):
        if not f.name.startswith("_"):
            walk(f.name, hints.get(f.name))
    return {
        "versions": {name: version(name) for name in ("megatron-bridge", "megatron-core")},
        "sections": {path: sorted(names) for path, names in sorted(sections.items())},
        "unimported": unimported,
    }
