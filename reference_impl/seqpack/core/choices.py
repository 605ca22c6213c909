"""Every choice list of the public interface, in one place.

argparse ``choices``, the MCP tools' ``Literal`` types, the library's own argument checks and the
docs read these; nobody copies the strings. Fixed lists are tuples here. Lists that come from a
registry (packing paths, schedulers, rule families, example configs) are :class:`LazyChoices`
that read the registry when first used, so importing this module stays free of numpy and of the
layers above it.

>>> "best_fit_decreasing" in ALGORITHMS
True
>>> "offline" in PACKING_PATHS
True
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Any, Literal

from seqpack.core.limits import SMOKE_ROWS
from seqpack.core.versions import BRIDGE_TARGETS, DEFAULT_BRIDGE_TARGET

#: ``--bridge-version`` / ``bridge_version``: the Megatron-Bridge a config is validated for.
BRIDGE_VERSIONS: tuple[str, ...] = BRIDGE_TARGETS
DEFAULT_BRIDGE_VERSION = DEFAULT_BRIDGE_TARGET
#: Bin-packing algorithms (:mod:`seqpack.packing.algorithms`).
ALGORITHMS: tuple[str, ...] = (
    "best_fit_decreasing",
    "first_fit_decreasing",
    "first_fit_shuffle",
    "first_fit",
    "next_fit",
)
DEFAULT_ALGORITHM = "best_fit_decreasing"
#: Items longer than a bin: fail, leave out (report), or cut to the capacity.
OVERSIZE_MODES: tuple[str, ...] = ("error", "report", "truncate")
#: Samples longer than their cap: cut the end, cut the start, leave the sample out, or (chat rows) drop the
#: oldest turns, keeping the system prompt and the last assistant turn.
TRUNCATION_MODES: tuple[str, ...] = ("right", "left", "reject", "oldest_turns")
#: Truncation modes per row schema (left would cut a chat's template head; oldest_turns needs turns).
TRUNCATION_BY_SCHEMA: dict[str, tuple[str, ...]] = {"prompt_completion": ("right", "left", "reject"),
                                                    "chat": ("right", "reject", "oldest_turns")}

#: Where offline packing assigns bins: over the whole split (exact) or within each shard of rows.
BIN_SCOPES: tuple[str, ...] = ("global", "shard")
#: Who runs offline packing: the local worker pool (also on torchrun ranks) or Ray tasks.
ENGINES: tuple[str, ...] = ("local", "ray")
#: Row schemas of JSONL data, and the option that detects one from the first row.
SCHEMA_KINDS: tuple[str, ...] = ("prompt_completion", "chat")
SCHEMA_OPTIONS: tuple[str, ...] = ("auto", *SCHEMA_KINDS)
#: Which tokens carry loss: per prompt/completion rows, per chat rows, and all of them.
PC_LOSS_MODES: tuple[str, ...] = ("completion", "full")
CHAT_LOSS_MODES: tuple[str, ...] = ("assistant", "last_turn", "full")
LOSS_MODES: tuple[str, ...] = tuple(dict.fromkeys(PC_LOSS_MODES + CHAT_LOSS_MODES))
#: What a chat row's reasoning fields get: trained like the answer, or masked.
REASONING_POLICIES: tuple[str, ...] = ("train", "mask")
#: What a chat row the model's template refuses does: stop the run, or skip it (counted as template_error).
TEMPLATE_ERROR_POLICIES: tuple[str, ...] = ("error", "skip")
#: Dataset config kinds (Megatron-Bridge's config types).
DATASET_KINDS: tuple[str, ...] = ("gpt_sft", "direct_hf", "energon", "mock_vlm", "pretrain")
#: Dataloader types; the runtime paths build the first three (``batch`` is refused by the rules).
DATALOADER_TYPES: tuple[str, ...] = ("single", "cyclic", "batch", "external")
RUNTIME_DATALOADER_TYPES: tuple[str, ...] = DATALOADER_TYPES[:3]
#: Synthetic length mixes (:mod:`seqpack.data.length_mixes`).
LENGTH_MIXES: tuple[str, ...] = ("lognormal", "bimodal", "uniform")
#: Smoke-test data sizes (rows per size in :data:`seqpack.core.limits.SMOKE_ROWS`).
SMOKE_SIZES: tuple[str, ...] = tuple(SMOKE_ROWS)
#: Rule severities and the output formats of ``seqpack rules``.
SEVERITIES: tuple[str, ...] = ("error", "warning")
RULE_FORMATS: tuple[str, ...] = ("text", "markdown", "json")
#: Recorded model-family support per packing path.
SUPPORT_STATUSES: tuple[str, ...] = ("supported", "opt_out", "caveat", "unknown")
#: Vision presets of VLM data (:data:`seqpack.data.vlm.vision.VISION_PRESETS`), and the option
#: values that also detect them from the data (``auto``) or turn them off (``none``).
VISION_PRESETS: tuple[str, ...] = ("qwen2_vl", "qwen2_5_vl", "tiny")
VISION_OPTIONS: tuple[str, ...] = ("auto", "none", *VISION_PRESETS)
#: M-RoPE flavours (temporal spacing of videos) and where text after a vision block starts
#: (:data:`seqpack.data.vlm.mrope.TEXT_AFTER_VISION`).
MROPE_MODELS: tuple[str, ...] = ("qwen2_vl", "qwen2_5_vl")
TEXT_AFTER_VISION: tuple[str, ...] = ("max", "spatial")
#: Transports of ``seqpack mcp``.
MCP_TRANSPORTS: tuple[str, ...] = ("stdio", "http")


class LazyChoices:
    """A choice list read from a registry on first use (``"module:attribute"`` or a callable).

    Behaves like a tuple for ``in``, iteration, ``len`` and indexing, which is all argparse and
    ``Literal`` need. The registry is read again on every use, so a path or scheduler registered
    later shows up.
    """

    def __init__(self, source: str | Callable[[], Any]) -> None:
        self.source = source

    def values(self) -> tuple[str, ...]:
        """The current choices."""
        source = self.source
        if isinstance(source, str):
            module, _, attr = source.partition(":")
            source = getattr(importlib.import_module(module), attr)
        found = source() if callable(source) else source
        return tuple(found)

    def __iter__(self) -> Iterator[str]:
        return iter(self.values())

    def __contains__(self, value: object) -> bool:
        return value in self.values()

    def __len__(self) -> int:
        return len(self.values())

    def __getitem__(self, index: int) -> str:
        return self.values()[index]

    def __repr__(self) -> str:
        return f"LazyChoices({self.source!r})"


#: Registered packing paths (:mod:`seqpack.core.packing_paths`).
PACKING_PATHS = LazyChoices("seqpack.core.packing_paths:path_names")
#: ``seqpack batches --mode`` values: the paths that can show their first batches.
BATCH_MODES = LazyChoices("seqpack.core.packing_paths:batch_modes")
#: Global-batch schedulers (the registry in :mod:`seqpack.packing.global_batch.schedule`).
SCHEDULERS = LazyChoices("seqpack.packing.global_batch.schedule:scheduler_names")
#: Rule families of the rule registry (:mod:`seqpack.config.rules`).
RULE_FAMILIES = LazyChoices("seqpack.config.rules:FAMILIES")
#: Bundled example configs (:mod:`seqpack.config.examples`).
EXAMPLES = LazyChoices("seqpack.config.examples:list_examples")


def literal(values: tuple[str, ...] | LazyChoices) -> Any:
    """``Literal[...]`` of the current choices (for MCP tool signatures)."""
    return Literal[tuple(values)]  # type: ignore[valid-type]


__all__ = [
    "ALGORITHMS",
    "BRIDGE_VERSIONS",
    "DEFAULT_BRIDGE_VERSION",
    "BATCH_MODES",
    "CHAT_LOSS_MODES",
    "DATALOADER_TYPES",
    "DATASET_KINDS",
    "DEFAULT_ALGORITHM",
    "EXAMPLES",
    "LENGTH_MIXES",
    "LOSS_MODES",
    "MCP_TRANSPORTS",
    "OVERSIZE_MODES",
    "PACKING_PATHS",
    "PC_LOSS_MODES",
    "REASONING_POLICIES",
    "TEMPLATE_ERROR_POLICIES",
    "RULE_FAMILIES",
    "RULE_FORMATS",
    "RUNTIME_DATALOADER_TYPES",
    "SCHEDULERS",
    "SCHEMA_KINDS",
    "SCHEMA_OPTIONS",
    "SEVERITIES",
    "SMOKE_SIZES",
    "SUPPORT_STATUSES",
    "TRUNCATION_BY_SCHEMA",
    "TRUNCATION_MODES",
    "LazyChoices",
    "literal",
]
