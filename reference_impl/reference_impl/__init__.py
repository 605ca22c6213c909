"""Deprecated alias: ``reference_impl`` was seqpack's import name before 0.2; import ``seqpack`` instead.

``import reference_impl.<old module>`` still works for one release: it imports the module at its new
place (``reference_impl.alignment`` is ``seqpack.core.alignment``, ``reference_impl.cli`` is
``seqpack.faces.cli``, ...) and warns with a ``DeprecationWarning``. The eval harness and the upstream
lane left the package (``seqpack_evals``, ``seqpack_lane``, installed for development only).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from typing import Any

#: old module (relative to ``reference_impl``) -> its module now; others keep their name under ``seqpack``.
MOVED: dict[str, str] = {
    "alignment": "seqpack.core.alignment",
    "arguments": "seqpack.core.arguments",
    "choices": "seqpack.core.choices",
    "cli": "seqpack.faces.cli",
    "data.demo_vlm": "seqpack.data.vlm.demo",
    "data.mrope": "seqpack.data.vlm.mrope",
    "data.vision": "seqpack.data.vlm.vision",
    "data.visual_inputs": "seqpack.data.vlm.inputs",
    "data.vlm": "seqpack.data.vlm.sample",
    "errors": "seqpack.core.errors",
    "evaluation": "seqpack_evals",
    "examples": "seqpack.config.examples",
    "extras": "seqpack.core.extras",
    "files": "seqpack.io",
    "inspect": "seqpack.verbs.inspect_lib",
    "lazy": "seqpack.core.lazy",
    "limits": "seqpack.core.limits",
    "mcp_server": "seqpack.faces.mcp.server",
    "mcp_support": "seqpack.faces.mcp",
    "nonce": "seqpack.core.nonce",
    "packing.artifact": "seqpack.packing.offline.artifact",
    "packing.bridge_compat": "seqpack.packing.offline.bridge_compat",
    "packing.offline": "seqpack.packing.offline.prepare",
    "packing.offline_distributed": "seqpack.packing.offline.distributed",
    "packing.offline_jobs": "seqpack.packing.offline.jobs",
    "packing.pack_fill": "seqpack.packing.offline.fill",
    "packing.parquet_concat": "seqpack.packing.offline.parquet_concat",
    "packing.smoke_adapters": "seqpack.smoke.adapters",
    "packing.sources": "seqpack.packing.offline.sources",
    "packing.spill": "seqpack.packing.offline.spill",
    "packing.vlm_smoke": "seqpack.smoke.vlm_data",
    "packing_paths": "seqpack.core.packing_paths",
    "planning": "seqpack.verbs.planning_lib",
    "reports": "seqpack.core.reports",
    "results": "seqpack.core.results",
    "skill_install": "seqpack.faces.install_skill",
    "smoke": "seqpack.smoke.run",
    "smoke_vlm": "seqpack.smoke.vlm",
    "textfmt": "seqpack.core.textfmt",
    "upstream_lane": "seqpack_lane",
    "verbs.smoke_options": "seqpack.smoke.options",
    "versions": "seqpack.core.versions",
}
GONE = {"evaluation": "seqpack_evals (evals/, not shipped)", "upstream_lane": "seqpack_lane (lanes/upstream/, not shipped)",
        "docgen": "scripts/docgen.py (not shipped)"}


def new_name(old: str) -> str:
    """The ``seqpack`` module that ``reference_impl.<old>`` became."""
    parts = old.split(".")
    if parts[0] in GONE:
        raise ModuleNotFoundError(f"reference_impl.{old} is not part of seqpack any more: see {GONE[parts[0]]}")
    for i in range(len(parts), 0, -1):
        key = ".".join(parts[:i])
        if key in MOVED:
            return ".".join([MOVED[key], *parts[i:]])
    return ".".join(["seqpack", *parts])


def _warn(old: str, new: str) -> None:
    warnings.warn(f"reference_impl.{old} is deprecated; import {new} (the alias goes in the next release)",
                  DeprecationWarning, stacklevel=3)


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: Any) -> Any:
        module = importlib.import_module(self.target)
        self.saved = (module.__spec__, getattr(module, "__loader__", None))
        return module

    def exec_module(self, module: Any) -> None:
        """The target module ran already; give it back its own spec, which the import system replaced."""
        module.__spec__, module.__loader__ = self.saved


class _AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if not fullname.startswith(__name__ + "."):
            return None
        old = fullname[len(__name__) + 1:]
        new = new_name(old)
        _warn(old, new)
        return importlib.util.spec_from_loader(fullname, _AliasLoader(new))


if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _AliasFinder())

warnings.warn("the reference_impl package is deprecated; import seqpack", DeprecationWarning, stacklevel=2)


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        return getattr(importlib.import_module("seqpack"), name)
    return importlib.import_module(f"{__name__}.{name}")
