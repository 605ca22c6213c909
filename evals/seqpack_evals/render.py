"""Small text helpers for the dataset templates: configs as YAML, topologies as words."""

from __future__ import annotations

from typing import Any, Mapping

import yaml

from seqpack.core.errors import UsageError

SECTION_ORDER = ("model", "dataset", "train", "validation", "ddp", "dist", "rerun_state_machine")


def nest(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted overrides (``{"dataset.offline_packing_specs.pad_seq_to_mult": 4}``) as a nested dict.

    Sections come out in the config schema's order; keys inside keep their given order.
    """
    out: dict[str, Any] = {}
    for dotted, value in overrides.items():
        node = out
        parts = dotted.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise UsageError(f"override {dotted!r} descends into a non-mapping value", field=dotted)
            node = child
        node[parts[-1]] = value
    order = {name: i for i, name in enumerate(SECTION_ORDER)}
    return dict(sorted(out.items(), key=lambda kv: order.get(kv[0], len(order))))


def yaml_text(data: Mapping[str, Any]) -> str:
    """Block-style YAML with keys in the given order."""
    return yaml.safe_dump(dict(data), sort_keys=False, default_flow_style=False)


def config_yaml(overrides: Mapping[str, Any]) -> str:
    """YAML text of a config given as dotted overrides."""
    return yaml_text(nest(overrides))


def without_comments(text: str) -> str:
    """A YAML document re-emitted without its comments (same data, same key order)."""
    return yaml_text(yaml.safe_load(text))


def topology_words(tp: int, cp: int, sp: bool, eval_cp: int | None = None) -> str:
    """``TP=4, CP=2, sequence parallel on`` (plus the eval CP when given)."""
    text = f"TP={tp}, CP={cp}, sequence parallel {'on' if sp else 'off'}"
    if eval_cp is not None:
        text += f", evaluation with CP={eval_cp}"
    return text


__all__ = ["config_yaml", "nest", "topology_words", "without_comments", "yaml_text"]
