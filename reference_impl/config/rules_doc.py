"""Render the rule registry for documentation (docs/rules.md is generated from this)."""

from __future__ import annotations

from typing import Iterable

from reference_impl.config.rules import FAMILIES, RULES, Rule
from reference_impl.textfmt import markdown_table

RULES_DOC_HEADER = """# Packing rules

Generated from the rule registry (`reference_impl.config.rules.RULES`) by
`seqpack rules --format markdown`; do not edit by hand. `seqpack validate CONFIG` checks every
rule; `seqpack rules RULE-ID` explains one, with a config that breaks it and the nearby fix.

Provenance: **upstream** = Megatron-Bridge / Megatron-Core code rejects it; **documented** = the
packing docs state it but no upstream check enforces it; **stricter** = seqpack's early check for a
mistake upstream reports only later (a kernel crash or silently wrong data). `V<n>` in a
source refers to the upstream check catalogue in [compatibility.md](compatibility.md#upstream-check-catalogue).

Severity follows evidence: every **error** names, in the last column, the upstream check or kernel
constraint that fails for a config breaking it (repository, file and line at the snapshot commit;
`seqpack rules RULE-ID` prints the commit and what fails). A recommendation that upstream does not
enforce is a **warning**, and its source says why.

"""


def _where(rule: Rule) -> str:
    """Short upstream locations of an error rule: ``TransformerEngine context_parallel.cu:103``."""
    out = []
    for c in rule.upstream_check:
        if c.kind == "documented":
            out.append(f"{c.repo} packed-sequences guide (documented; no code in the snapshots)")
        else:
            out.append(f"{c.repo} `{c.path.rsplit('/', 1)[-1]}:{c.line}`")
    return "; ".join(out)


def rules_markdown(rules: Iterable[Rule] = RULES) -> str:
    """The rules as markdown, one table per family, in registry order."""
    rules = list(rules)
    parts = []
    for fam, title in FAMILIES.items():
        rows = [r for r in rules if r.family == fam]
        if not rows:
            continue
        parts.append(f"## {title}\n")
        parts.append(
            markdown_table(
                ["id", "severity", "requirement", "fix", "provenance", "source", "fails upstream at"],
                [[f"`{r.id}`", r.severity, r.title, r.fix, r.provenance, r.source, _where(r)] for r in rows],
            )
        )
        parts.append("")
    return "\n".join(parts).rstrip() + "\n"


def rules_document() -> str:
    """The whole docs/rules.md text."""
    return RULES_DOC_HEADER + rules_markdown()
