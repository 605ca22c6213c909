"""``seqpack rules``: the rule registry as a table (text, markdown or JSON), or one rule in full."""

from __future__ import annotations

import argparse

from seqpack.core.choices import RULE_FAMILIES, RULE_FORMATS, SEVERITIES
from seqpack.faces.cli._output import add_json_flag, print_json, table

NAME = "rules"
HELP = "list the packing rules (all, by family, by keyword), explain one rule id, or look up a model family"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register the command's flags."""
    p.add_argument("query", nargs="?", help="a rule id (explains it) or keywords (filters)")
    p.add_argument("--family", choices=RULE_FAMILIES, metavar="FAMILY",
                   help="only rules of this family (e.g. offline, in_batch, energon)")
    p.add_argument("--severity", choices=SEVERITIES, help="only rules of this severity")
    p.add_argument("--format", choices=RULE_FORMATS, default="text")
    add_json_flag(p)


def run(args: argparse.Namespace) -> int:
    """Print the rules (``--json``: one rule object for an id, else the list of rules)."""
    from seqpack.config.rules_doc import rules_markdown
    from seqpack.config.rules import RULES_BY_ID
    from seqpack.verbs.rules import RulesOptions, query_rules

    fmt = "json" if args.json else args.format
    result = query_rules(RulesOptions(query=args.query, family=args.family, severity=args.severity))
    if result.matched_by == "id":
        d = result.rules[0]
        if fmt == "json":
            print_json(d)
        else:
            for key in ("id", "severity", "family_title", "title", "fields", "provenance", "source", "fix", "note",
                        "upstream_check", "holds_for", "example_trigger", "example_fixed"):
                if d[key] not in ("", [], {}):
                    sep = "; " if key == "holds_for" else ", "
                    print(f"{key:16} {sep.join(d[key]) if isinstance(d[key], list) else d[key]}")
        return 0
    if fmt == "json":
        print_json(result.rules)
    elif fmt == "markdown":
        print(rules_markdown([RULES_BY_ID[r["id"]] for r in result.rules]))
    else:
        print(table(["id", "severity", "provenance", "title"],
                    [[r["id"], r["severity"], r["provenance"], r["title"]] for r in result.rules]))
    return 0

