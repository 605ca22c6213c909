"""The verbs: one library function per verb, each taking a typed options dataclass.

A verb resolves topology, alignment and limits itself and returns a result dataclass
(:class:`~seqpack.core.results.Result`). Each verb is declared once, in its module: the options
dataclass whose field metadata carries help, CLI spelling, choices, limits and path kinds
(:mod:`seqpack.verbs.declare`), the function, a text renderer, and a :class:`~seqpack.verbs.declare.Verb`
spec naming its CLI subcommand and MCP tools. :data:`VERB_SPECS` lists them; the CLI
(:mod:`seqpack.faces.cli`) and the MCP tools (:mod:`seqpack.faces.mcp`) are generated from that list,
and ``tests/test_parity.py`` runs every verb through the three faces on the same inputs.

Importing this package is cheap: a name (``plan``, ``PlanOptions``, ...) is loaded from its module on
first use. The modules are named for what they hold (``verbs.planning`` holds ``plan``), never like
the verb, so a module never shadows its function.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

#: Every verb, ``"<module of seqpack.verbs>:<its Verb>"``, in the order ``seqpack --help`` lists them.
VERB_SPECS: tuple[str, ...] = (
    "alignment:ALIGN",
    "validation:VALIDATE",
    "rules:RULES",
    "planning:PLAN",
    "simulation:SIMULATE",
    "packing:PACK",
    "inspection:INSPECT",
    "batch_views:BATCHES",
    "energon:ENERGON_PREPARE",
    "smoke_test:SMOKE",
    "support:MODEL_SUPPORT",
    "vision:IMAGE_TOKENS",
    "vision:MROPE",
)
#: Modules whose public names this package re-exports besides the verbs' (shared options, the declaration).
_SHARED_MODULES = ("common", "declare")


@functools.cache
def verbs() -> tuple[Any, ...]:
    """The :class:`~seqpack.verbs.declare.Verb` of every entry of :data:`VERB_SPECS` (imports their modules)."""
    out = []
    for spec in VERB_SPECS:
        module, _, attr = spec.partition(":")
        out.append(getattr(importlib.import_module(f"{__name__}.{module}"), attr))
    return tuple(out)


def _modules() -> list[str]:
    return list(dict.fromkeys([*_SHARED_MODULES, *(spec.partition(":")[0] for spec in VERB_SPECS)]))


def __getattr__(name: str) -> Any:
    """``VERBS``, or a public name of a verb module (its ``__all__``), loaded on first use."""
    if name == "VERBS":
        return verbs()
    if name.startswith("_"):
        raise AttributeError(name)
    for module in _modules():
        mod = importlib.import_module(f"{__name__}.{module}")
        if name in getattr(mod, "__all__", ()):
            value = getattr(mod, name)
            globals()[name] = value
            return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), "VERBS"})
