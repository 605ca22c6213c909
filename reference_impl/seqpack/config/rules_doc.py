"""Render the rule registry for documentation (docs/rules.md is generated from this)."""

from __future__ import annotations

from typing import Iterable

from seqpack.config.rules import FAMILIES, RULES, Rule
from seqpack.core.textfmt import markdown_table

RULES_DOC_HEADER = """# Packing rules

Generated from the rule registry (`seqpack.config.rules.RULES`) by
`seqpack rules --format markdown`; do not edit by hand. `seqpack validate CONFIG` checks every
rule; `seqpack rules RULE-ID` explains one, with a config that breaks it and the nearby fix.

Provenance: **upstream** = Megatron-Bridge / Megatron-Core code rejects it; **documented** = the
packing docs state it but no upstream check enforces it; **stricter** = seqpack's early check for a
mistake upstream reports only later (a kernel crash or silently wrong data). `V<n>` in a
source refers to the upstream check catalogue in [compatibility.md](compatibility.md#upstream-check-catalogue).

Severity follows evidence: every **error** names, in the last column, the upstream check or kernel
constraint that fails for a config breaking it: the released package and the file and line inside it
(`megatron-bridge==0.6.2`, re-read in the upstream lane), or, for code no release has, the main
commit or pull request (not checkable in the lane). `seqpack rules RULE-ID` prints what fails there.
A recommendation that upstream does not enforce is a **warning**, and its source says why.

Versions: `seqpack validate --bridge-version 0.6.2|main` (default 0.6.2, the release the upstream lane
checks) checks the rules whose "Bridge versions" column names that target. The feature table below
says which packing feature each target has.

"""


def _where(rule: Rule) -> str:
    """Short upstream locations of an error rule: ``megatron-bridge==0.6.2 `config.py:1464```."""
    out = []
    for c in rule.upstream_check:
        name = c.path.rsplit("/", 1)[-1]
        if c.kind == "documented":
            out.append(f"{c.package} {c.ref} packed-sequences guide (documented; not checkable in the lane)")
        elif c.checkable:
            out.append(f"{c.package}=={c.version} `{name}:{c.line}`")
        else:
            out.append(f"{c.package} {c.ref} `{name}:{c.line}` (not checkable in the lane)")
    return "; ".join(out)


def _versions(rule: Rule) -> str:
    """The ``--bridge-version`` targets a rule is checked for."""
    return ", ".join(rule.targets)


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
                ["id", "severity", "requirement", "fix", "provenance", "source", "Bridge versions", "fails upstream at"],
                [[f"`{r.id}`", r.severity, r.title + (f" (**{r.provisional}**)" if r.provisional else ""), r.fix,
                  r.provenance, r.source, _versions(r), _where(r)]
                 for r in rows],
            )
        )
        parts.append("")
    return "\n".join(parts).rstrip() + "\n"


def features_section() -> str:
    """The version table: which packing feature each ``--bridge-version`` target has."""
    from seqpack.config.features import features_markdown

    return "## Packing features per Megatron-Bridge version\n\n" + features_markdown() + "\n"


def rules_document() -> str:
    """The whole docs/rules.md text."""
    return RULES_DOC_HEADER + features_section() + "\n" + rules_markdown()
