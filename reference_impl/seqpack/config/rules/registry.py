"""The rule type, the family list and the ``@rule`` decorator that registers a check.

A check is a plain function ``Resolved -> message | None`` defined in the module of its family;
``@rule(...)`` beside it records the metadata (id, severity, title, fields, provenance, fix and the
two example configs) and returns the function unchanged. :func:`assemble` turns the registrations
into the ordered registry: families in :data:`FAMILIES` order, checks in definition order inside
their family module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping, Sequence

from seqpack.config.resolve import Resolved
from seqpack.config.rules.evidence import UpstreamCheck
from seqpack.core.versions import (BRIDGE_MAIN_COMMIT, BRIDGE_RELEASE, BRIDGE_TARGETS, MCORE_RELEASE, bridge_pr,
                                     check_target)

Severity = Literal["error", "warning"]
Provenance = Literal["upstream", "documented", "stricter"]
Check = Callable[[Resolved], "str | None"]

#: Family id -> heading, in registry (and documentation) order. One module per family.
FAMILIES: dict[str, str] = {
    "topology": "Topology and batch sizes",
    "context_parallel": "Context parallelism and alignment",
    "offline": "Offline packed SFT",
    "cuda_graphs": "CUDA graphs and fixed shapes",
    "exclusive": "One packing path at a time",
    "in_batch": "Runtime in-batch packing",
    "energon": "Energon online packing",
    "global_batch": "Global-batch online packing",
    "vlm": "Vision-language models",
    "model": "MTP and model families",
    "moe": "MoE and MTP with packing",
    "dataset": "Dataset and dataloader",
}


@dataclass(frozen=True)
class Rule:
    """One packing rule: metadata plus the check that evaluates it."""

    id: str
    family: str
    severity: Severity
    title: str
    fields: tuple[str, ...]
    provenance: Provenance
    source: str
    fix: str
    check: Check = field(repr=False, compare=False)
    trigger: dict[str, Any] = field(default_factory=dict, compare=False)
    fixed: dict[str, Any] = field(default_factory=dict, compare=False)
    note: str = ""
    upstream_check: tuple[UpstreamCheck, ...] = field(default=(), compare=False)
    targets: tuple[str, ...] = BRIDGE_TARGETS
    prs: tuple[int, ...] = ()
    provisional: str = ""

    def applies_to(self, target: str) -> bool:
        """Whether the rule is checked for ``--bridge-version target``."""
        return target in self.targets

    def holds_for(self) -> list[str]:
        """The upstream versions the rule holds for, one line per ``--bridge-version`` target."""
        out = []
        for target in self.targets:
            if target == BRIDGE_RELEASE:
                out.append(f"megatron-bridge {BRIDGE_RELEASE} / megatron-core {MCORE_RELEASE}: checked in the "
                           "upstream lane")
            else:
                prs = "".join(f", {bridge_pr(n)}" for n in self.prs)
                out.append(f"Megatron-Bridge main ({BRIDGE_MAIN_COMMIT[:7]}{prs}): read, not checkable in the lane")
        return out

    def describe(self) -> dict[str, Any]:
        """JSON-able description (everything but the check function)."""
        return {
            "id": self.id,
            "family": self.family,
            "family_title": FAMILIES[self.family],
            "severity": self.severity,
            "title": self.title,
            "fields": list(self.fields),
            "provenance": self.provenance,
            "source": self.source,
            "fix": self.fix,
            "note": self.note,
            "upstream_check": "; ".join(str(c) for c in self.upstream_check),
            "example_trigger": self.trigger,
            "example_fixed": self.fixed,
            "bridge_versions": list(self.targets),
            "holds_for": self.holds_for(),
            "provisional": self.provisional,
        }


#: Registrations in the order the decorators ran (import order of the family modules).
_REGISTERED: dict[str, Rule] = {}


def rule(
    rule_id: str,
    *,
    family: str,
    severity: Severity,
    title: str,
    fields: Sequence[str],
    provenance: Provenance,
    source: str,
    fix: str,
    trigger: Mapping[str, Any],
    fixed: Mapping[str, Any],
    note: str = "",
    upstream_check: UpstreamCheck | Sequence[UpstreamCheck] = (),
    targets: Sequence[str] = BRIDGE_TARGETS,
    prs: Sequence[int] = (),
    provisional: str = "",
) -> Callable[[Check], Check]:
    """Register the decorated check as rule ``rule_id``; the function itself is returned unchanged.

    ``trigger`` is a set of dotted overrides that breaks the rule; ``fixed`` (applied on top of
    ``trigger``) is a nearby config that satisfies it. The test-suite runs both for every rule.
    An ``error`` must cite ``upstream_check``: the upstream check or kernel constraint that fails
    for a config breaking the rule (:mod:`seqpack.config.rules.evidence`). A rule whose
    recommendation upstream does not enforce is a ``warning``, and its ``source`` says why.
    ``targets`` are the ``--bridge-version`` values the rule is checked for (default: all of them);
    ``prs`` the Megatron-Bridge pull requests behind its ``main`` behaviour. ``provisional`` (non-empty: why)
    marks a rule upstream has not settled, naming the competing designs.
    """
    if family not in FAMILIES:
        raise ValueError(f"rule {rule_id}: unknown family {family!r}")
    if severity not in ("error", "warning"):
        raise ValueError(f"rule {rule_id}: severity must be error or warning, got {severity!r}")
    checks = (upstream_check,) if isinstance(upstream_check, UpstreamCheck) else tuple(upstream_check)
    if severity == "error" and not checks:
        raise ValueError(f"rule {rule_id}: an error must cite the upstream check that fails (upstream_check=...)")
    targets = tuple(targets)
    if not targets:
        raise ValueError(f"rule {rule_id}: it must hold for at least one Megatron-Bridge version")
    for target in targets:
        check_target(target)

    def register(check: Check) -> Check:
        previous = _REGISTERED.get(rule_id)
        if previous is not None and previous.check.__qualname__ != check.__qualname__:
            raise ValueError(f"rule id {rule_id} registered twice ({previous.check.__qualname__}, {check.__qualname__})")
        _REGISTERED[rule_id] = Rule(
            id=rule_id,
            family=family,
            severity=severity,
            title=title,
            fields=tuple(fields),
            provenance=provenance,
            source=source,
            fix=fix,
            check=check,
            trigger=dict(trigger),
            fixed=dict(fixed),
            note=note,
            upstream_check=checks,
            targets=targets,
            prs=tuple(prs),
            provisional=provisional,
        )
        return check

    return register


def assemble() -> tuple[Rule, ...]:
    """The registered rules ordered by family (:data:`FAMILIES` order), then by definition order."""
    order = {name: i for i, name in enumerate(FAMILIES)}
    seq = {rid: i for i, rid in enumerate(_REGISTERED)}
    return tuple(sorted(_REGISTERED.values(), key=lambda r: (order[r.family], seq[r.id])))
