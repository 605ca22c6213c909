"""The packing-path registry: one :class:`PackingPath` spec per way of packing, read by everyone.

In the spirit of torchtitan's ``TrainSpec`` registry. A spec says what a path is (name, the
dataset kinds it reads, the config switch that turns it on, its micro-batch rule and rule
family) and where its parts live (loader builder, smoke-test adapter, the ``seqpack batches``
report). The config schema (:meth:`TrainingConfig.active_paths`), the smoke test, the CLI
(``smoke --path``, ``batches --mode``), the MCP tools and model-support lookups read this
registry; none keeps its own list of paths.

The module is pure (no torch, numpy or I/O) so the config layer can use it. The parts are
*references* (``"module:attribute"``) resolved on first use by the layer that needs them, so
registering a path never imports its heavy code.

Adding a path: write its module (loader builder and smoke adapter, see
``docs/architecture.md``) and register one spec, here among the built-ins or from your own code
with :func:`register_path`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Union

from seqpack.core.errors import UsageError

__all__ = [
    "PackingPath",
    "PathBatches",
    "active_paths",
    "batch_modes",
    "visual_paths",
    "get_path",
    "path_for_mode",
    "path_names",
    "paths",
    "register_path",
    "resolve_ref",
    "unregister_path",
]


#: A part of a path: ``"package.module:attribute"`` (imported on use) or the object itself.
Ref = Union[str, Callable[..., Any]]


def resolve_ref(ref: str) -> Any:
    """The object a ``"package.module:attribute"`` reference names (imports the module)."""
    module, sep, attr = ref.partition(":")
    if not sep or not module or not attr:
        raise UsageError(f"a reference must look like 'package.module:attribute', got {ref!r}")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class PackingPath:
    """One packing path.

    ``enabled(cfg)`` is the config switch as code (``config_switch`` says it in words);
    ``micro_batch_rule`` is the id of the registry rule that constrains the micro-batch size,
    ``default_micro_batch_size`` a value that satisfies it. ``loader``, ``smoke_adapter``,
    ``smoke_data`` and ``batches`` are ``"module:attribute"`` references (resolved on first use,
    so the spec stays light) or the objects themselves:

    * ``loader``: the function (or class) training uses to get this path's batches;
    * ``smoke_adapter(cfg, jsonl, workdir) -> PathBatches``: canonical batches built through the
      path's own code, plus independently tokenized reference samples;
    * ``smoke_data(scratch_dir, rows, seed) -> Path``: the default JSONL of the smoke test (it
      must give at least one batch holding two sequences, so the leakage check runs);
    * ``batches(options) -> report``: what ``seqpack batches --mode <batch_mode>`` shows
      (``None``: the path has no such view).

    ``smoke_config`` is the default smoke config (CP=2, so the context-parallel check runs).
    ``exposed`` puts the path into the CLI and MCP choice lists. ``visual_rows``: the path reads rows
    with images and videos (VLM data); the others take text rows only.
    """

    name: str
    title: str
    dataset_kinds: tuple[str, ...]
    config_switch: str
    enabled: Callable[[Any], bool]
    micro_batch_rule: str
    default_micro_batch_size: int
    rule_family: str
    loader: Ref
    smoke_adapter: Ref
    smoke_data: Ref
    smoke_config: Mapping[str, Any] = field(default_factory=dict)
    batches: Ref | None = None
    batch_mode: str | None = None
    exposed: bool = True
    doc: str = ""
    visual_rows: bool = False

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise UsageError(f"a packing path name must be an identifier, got {self.name!r}", field="name")
        if (self.batches is None) != (self.batch_mode is None):
            raise UsageError("give batches and batch_mode together (or neither)", field="batch_mode")

    def load(self, part: str) -> Any:
        """Resolve one of the parts (``"loader"``, ``"smoke_adapter"``, ``"smoke_data"``, ``"batches"``)."""
        ref = getattr(self, part)
        if ref is None:
            raise UsageError(f"the {self.name} path has no {part}", field=part)
        return resolve_ref(ref) if isinstance(ref, str) else ref


@dataclass
class PathBatches:
    """What a smoke adapter returns: canonical batches and the independent reference samples.

    ``samples`` are dicts with ``id``, ``tokens``, ``labels``, ``loss_mask`` (one per usable row,
    tokenized without any packing code); ``rows_in`` / ``rows_skipped`` account for every row.
    """

    batches: list[dict[str, Any]]
    samples: list[dict[str, Any]]
    rows_in: int
    rows_skipped: int
    details: dict[str, Any] = field(default_factory=dict)


_REGISTRY: dict[str, PackingPath] = {}


def register_path(spec: PackingPath, *, replace: bool = False) -> PackingPath:
    """Make ``spec`` known under its name (an existing name needs ``replace=True``)."""
    if not isinstance(spec, PackingPath):
        raise UsageError(f"register a PackingPath, got {type(spec).__name__}")
    if spec.name in _REGISTRY and not replace:
        raise UsageError(f"a packing path named {spec.name!r} is already registered", field="name")
    modes = {p.batch_mode: p.name for p in _REGISTRY.values() if p.batch_mode and p.name != spec.name}
    if spec.batch_mode is not None and spec.batch_mode in modes:
        raise UsageError(f"batch mode {spec.batch_mode!r} already belongs to {modes[spec.batch_mode]}",
                         field="batch_mode")
    _REGISTRY[spec.name] = spec
    return spec


def unregister_path(name: str) -> None:
    """Remove a registered path (for tests and plugins that registered one)."""
    _REGISTRY.pop(name, None)


def paths(*, exposed_only: bool = False) -> tuple[PackingPath, ...]:
    """Every registered spec, in registration order."""
    return tuple(p for p in _REGISTRY.values() if p.exposed or not exposed_only)


def path_names() -> tuple[str, ...]:
    """Names of the exposed paths (the CLI and MCP choices)."""
    return tuple(p.name for p in paths(exposed_only=True))


def get_path(name: str) -> PackingPath:
    """The spec registered as ``name``; a UsageError lists the choices otherwise."""
    if name not in _REGISTRY:
        raise UsageError(f"unknown packing path {name!r}; choose one of {', '.join(_REGISTRY)}", field="path")
    return _REGISTRY[name]


def visual_paths() -> tuple[str, ...]:
    """Names of the exposed paths that read rows with images and videos."""
    return tuple(p.name for p in paths(exposed_only=True) if p.visual_rows)


def batch_modes() -> tuple[str, ...]:
    """``seqpack batches --mode`` values, one per path that has a batches view."""
    return tuple(p.batch_mode for p in paths(exposed_only=True) if p.batch_mode)


def path_for_mode(mode: str) -> PackingPath:
    """The path whose ``batch_mode`` is ``mode``."""
    for p in _REGISTRY.values():
        if p.batch_mode == mode:
            return p
    raise UsageError(f"unknown batches mode {mode!r}; choose one of {', '.join(batch_modes())}", field="mode")


def active_paths(cfg: Any) -> list[str]:
    """Names of the registered paths ``cfg`` turns on (normally zero or one)."""
    return [p.name for p in _REGISTRY.values() if p.enabled(cfg)]


# ------------------------------------------------------------------------------------------------
# The built-in paths
# ------------------------------------------------------------------------------------------------

_ADAPTERS = "seqpack.smoke.adapters"
_BATCHES = "seqpack.verbs.batch_views"

register_path(PackingPath(
    name="offline",
    title="Offline packed SFT",
    dataset_kinds=("gpt_sft",),
    config_switch="dataset.enable_offline_packing=true (with dataset.offline_packing_specs)",
    enabled=lambda cfg: bool(cfg.dataset.enable_offline_packing),
    micro_batch_rule="PACK-OFFLINE-MBS1",
    default_micro_batch_size=1,
    rule_family="offline",
    loader="seqpack.packing.packed_dataset:PackedParquetDataset",
    smoke_adapter=f"{_ADAPTERS}:offline_batches",
    smoke_data=f"{_ADAPTERS}:demo_prompt_completion",
    smoke_config={
        "model": {"seq_length": 256, "context_parallel_size": 2, "calculate_per_token_loss": True},
        "dataset": {
            "seq_length": 256,
            "enable_offline_packing": True,
            "offline_packing_specs": {"packed_sequence_size": 256, "pad_seq_to_mult": 4},
        },
        "train": {"micro_batch_size": 1, "global_batch_size": 8},
        "dist": {"world_size": 2},
    },
    batches=f"{_BATCHES}:offline_report",
    batch_mode="offline",
    doc="docs/offline.md",
))

register_path(PackingPath(
    name="in_batch",
    title="Runtime in-batch packing",
    dataset_kinds=("gpt_sft", "direct_hf"),
    config_switch="dataset.enable_in_batch_packing=true",
    enabled=lambda cfg: bool(cfg.dataset.enable_in_batch_packing),
    micro_batch_rule="PACK-IN-BATCH-MBS",
    default_micro_batch_size=4,
    rule_family="in_batch",
    loader="seqpack.packing.in_batch:build_in_batch_loader",
    smoke_adapter=f"{_ADAPTERS}:in_batch_batches",
    smoke_data=f"{_ADAPTERS}:demo_vlm_chat",
    visual_rows=True,
    smoke_config={
        "model": {"seq_length": 256, "context_parallel_size": 2, "calculate_per_token_loss": True},
        "dataset": {"seq_length": 256, "enable_in_batch_packing": True, "dataloader_type": "single"},
        "train": {"micro_batch_size": 4, "global_batch_size": 8},
        "dist": {"world_size": 2},
    },
    batches=f"{_BATCHES}:in_batch_report",
    batch_mode="in-batch",
    doc="docs/in-batch.md",
))

register_path(PackingPath(
    name="energon",
    title="Energon online packing",
    dataset_kinds=("energon",),
    config_switch="dataset.kind=energon with dataset.packing_buffer_size",
    enabled=lambda cfg: bool(cfg.energon_packing),
    micro_batch_rule="PACK-ENERGON-MBS1",
    default_micro_batch_size=1,
    rule_family="energon",
    loader="seqpack.packing.energon.loader:get_savable_loader",
    smoke_adapter=f"{_ADAPTERS}:energon_batches",
    smoke_data=f"{_ADAPTERS}:demo_vlm_chat",
    visual_rows=True,
    smoke_config={
        "model": {"seq_length": 256, "context_parallel_size": 2, "calculate_per_token_loss": True},
        "dataset": {"kind": "energon", "seq_length": 256, "packing_buffer_size": 8, "micro_batch_size": 1},
        "train": {"micro_batch_size": 1, "global_batch_size": 8},
        "dist": {"world_size": 2},
    },
    doc="docs/energon.md",
))

register_path(PackingPath(
    name="global_batch",
    title="Global-batch online packing",
    dataset_kinds=("gpt_sft",),
    config_switch="dataset.enable_global_batch_packing=true (with model.max_seqlen_per_dp_cp_rank)",
    enabled=lambda cfg: bool(cfg.dataset.enable_global_batch_packing),
    micro_batch_rule="PACK-GLOBAL-MBS1",
    default_micro_batch_size=1,
    rule_family="global_batch",
    loader="seqpack.packing.global_batch.dataset:build_global_batch_loader",
    smoke_adapter=f"{_ADAPTERS}:global_batch_batches",
    smoke_data=f"{_ADAPTERS}:demo_prompt_completion",
    smoke_config={  # DP=2 x CP=2; packs of up to 256 * 2 tokens
        "model": {"seq_length": 256, "context_parallel_size": 2, "max_seqlen_per_dp_cp_rank": 256,
                  "calculate_per_token_loss": True},
        "dataset": {"seq_length": 256, "enable_global_batch_packing": True, "dataloader_type": "single"},
        "train": {"micro_batch_size": 1, "global_batch_size": 8},
        "dist": {"world_size": 4},
    },
    batches=f"{_BATCHES}:global_batch_report",
    batch_mode="global-batch",
    doc="docs/global-batch.md",
))
