"""The packing rule registry: one ordered tuple, the single source of truth.

Validation (:mod:`seqpack.config.validate`), the docs tables, the SKILL reference and the
eval ground truth are all generated from or tested against :data:`RULES`.

Each check lives in the module of its family (``topology``, ``context_parallel``, ``offline``, ...)
under an ``@rule(...)`` decorator (:func:`seqpack.config.rules.registry.rule`) that records
its stable id, severity, the config fields it reads, a provenance, a fix and two example override
sets: ``trigger`` (a config that breaks the rule) and ``fixed`` (applied on top of ``trigger``, a
nearby config that satisfies it). The test-suite runs both for every rule.

Provenance:

* ``upstream``: Megatron-Bridge / Megatron-Core code rejects this (the ``source`` field says where;
  ``V<n>`` refers to the project's catalogue of Bridge validation rules).
* ``documented``: the packing documentation states it, but upstream code does not enforce it.
* ``stricter``: our own early check for a mistake upstream only reports later, as a crash inside
  a kernel or as silently wrong data.

Order: families in :data:`FAMILIES` order, rules in definition order inside their module.
"""

from __future__ import annotations

from typing import Any

# Importing a family module registers its rules; the order here does not matter (assemble() sorts).
from seqpack.config.rules import (  # noqa: F401
    context_parallel,
    cuda_graphs,
    dataset,
    energon,
    exclusive,
    global_batch,
    in_batch,
    model,
    moe,
    offline,
    topology,
    vlm,
)
from seqpack.config.rules.registry import FAMILIES, Provenance, Rule, Severity, assemble, rule

#: The family modules, one per entry of :data:`FAMILIES`.
FAMILY_MODULES = {
    m.FAMILY: m
    for m in (
        topology, context_parallel, offline, cuda_graphs, exclusive, in_batch, energon, global_batch, vlm, model, moe,
        dataset,
    )
}

RULES: tuple[Rule, ...] = assemble()

RULES_BY_ID: dict[str, Rule] = {r.id: r for r in RULES}


def get_rule(rule_id: str) -> Rule | None:
    """The rule with this id (case-insensitive), or None."""
    return RULES_BY_ID.get(rule_id.strip().upper())


def search_rules(keyword: str) -> list[Rule]:
    """Rules whose id, title, fields, family or fix mention ``keyword`` (case-insensitive)."""
    words = keyword.lower().split()
    out = []
    for r in RULES:
        text = " ".join([r.id, r.title, r.family, FAMILIES[r.family], r.fix, r.note, *r.fields]).lower()
        if all(w in text for w in words):
            out.append(r)
    return out


def rules_table(rules: tuple[Rule, ...] | list[Rule] = RULES) -> list[dict[str, Any]]:
    """JSON-able description of the rules, in registry order."""
    return [r.describe() for r in rules]


__all__ = [
    "FAMILIES",
    "FAMILY_MODULES",
    "Provenance",
    "RULES",
    "RULES_BY_ID",
    "Rule",
    "Severity",
    "get_rule",
    "rule",
    "rules_table",
    "search_rules",
]
