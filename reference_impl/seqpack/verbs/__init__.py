"""The verbs: one library function per verb, each taking a typed options dataclass.

A verb resolves topology, alignment and limits itself and returns a result dataclass
(:class:`~seqpack.core.results.Result`). Each verb is declared once, in its module: the options
dataclass whose field metadata carries help, CLI spelling, choices, limits and path kinds
(:mod:`seqpack.verbs.declare`), the function, a text renderer, and a :class:`~seqpack.verbs.declare.Verb`
spec naming its MCP tools. :data:`VERB_SPECS` lists them under their CLI subcommands; the CLI
(:mod:`seqpack.faces.cli`) and the MCP tools (:mod:`seqpack.faces.mcp`) are generated from that list,
and ``tests/test_parity.py`` runs every verb through the three faces on the same inputs.

Importing this package is cheap: a name (``plan``, ``PlanOptions``, ...) is loaded from its module on
first use, and :func:`command` loads one verb's module only (what ``seqpack <command>`` needs). The
modules are named for what they hold (``verbs.planning`` holds ``plan``), never like the verb, so a
module never shadows its function.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

#: Every verb: its CLI subcommand -> ``"<module of seqpack.verbs>:<its Verb>"``, in the order
#: ``seqpack --help`` lists them. Adding a verb is its module plus one line here.
VERB_SPECS: dict[str, str] = {
    "align": "alignment:ALIGN",
    "validate": "validation:VALIDATE",
    "rules": "rules:RULES",
    "plan": "planning:PLAN",
    "simulate": "simulation:SIMULATE",
    "pack": "packing:PACK",
    "inspect": "inspection:INSPECT",
    "batches": "batch_views:BATCHES",
    "energon-prepare": "energon:ENERGON_PREPARE",
    "smoke": "smoke_test:SMOKE",
    "model-support": "support:MODEL_SUPPORT",
    "image-tokens": "vision:IMAGE_TOKENS",
    "mrope": "vision:MROPE",
}
#: Modules whose public names this package re-exports besides the verbs' (shared options, the declaration).
_SHARED_MODULES = ("common", "declare")


@functools.cache
def command(name: str) -> Any:
    """The :class:`~seqpack.verbs.declare.Verb` of the CLI subcommand ``name`` (imports its module only)."""
    module, _, attr = VERB_SPECS[name].partition(":")
    return getattr(importlib.import_module(f"{__name__}.{module}"), attr)


def commands() -> dict[str, Any]:
    """Every verb by its CLI subcommand, in :data:`VERB_SPECS` order (imports every verb module)."""
    return {name: command(name) for name in VERB_SPECS}


def verbs() -> tuple[Any, ...]:
    """The :class:`~seqpack.verbs.declare.Verb` of every entry of :data:`VERB_SPECS`."""
    return tuple(commands().values())


def _modules() -> list[str]:
    return list(dict.fromkeys([*_SHARED_MODULES, *(spec.partition(":")[0] for spec in VERB_SPECS.values())]))


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
