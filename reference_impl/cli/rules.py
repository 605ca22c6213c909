"""``seqpack rules``: the rule registry as a table (text, markdown or JSON), or one rule in full."""

from __future__ import annotations

import argparse

from reference_impl.cli._output import add_json_flag, print_json, table

NAME = "rules"
HELP = "list the packing rules (all, by family, by keyword), explain one rule id, or look up a model family"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register the command's flags."""
    p.add_argument("query", nargs="?", help="a rule id (explains it) or keywords (filters)")
    p.add_argument("--family", help="only rules of this family (e.g. offline, in_batch, energon)")
    p.add_argument("--model", metavar="NAME", help="the model-support table's entry for a model family (e.g. qwen3_next)")
    p.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    add_json_flag(p)


def run(args: argparse.Namespace) -> int:
    """Print the rules."""
    from reference_impl.config.rules import FAMILIES, RULES, get_rule, search_rules
    from reference_impl.config.rules_doc import rules_markdown
    from reference_impl.errors import UsageError

    fmt = "json" if args.json else args.format
    if args.model:
        return _model(args.model, fmt)
    rule = get_rule(args.query) if args.query else None
    if rule is not None:
        if fmt == "json":
            print_json(rule.describe())
        else:
            d = rule.describe()
            for key in ("id", "severity", "family_title", "title", "fields", "provenance", "source", "fix", "note",
                        "upstream_check", "example_trigger", "example_fixed"):
                if d[key] not in ("", [], {}):
                    print(f"{key:16} {', '.join(d[key]) if isinstance(d[key], list) else d[key]}")
        return 0
    selected = list(search_rules(args.query)) if args.query else list(RULES)
    if args.family:
        if args.family not in FAMILIES:
            raise UsageError(f"unknown rule family {args.family!r}; choose one of {', '.join(FAMILIES)}")
        selected = [r for r in selected if r.family == args.family]
    if not selected:
        raise UsageError(f"no rule matches {args.query!r}")
    if fmt == "json":
        print_json([r.describe() for r in selected])
    elif fmt == "markdown":
        print(rules_markdown(selected))
    else:
        print(table(["id", "severity", "provenance", "title"], [[r.id, r.severity, r.provenance, r.title] for r in selected]))
    return 0


def _model(name: str, fmt: str) -> int:
    """Print the recorded packing support of one model family (every path) from the model-support table."""
    from reference_impl.config.model_support import check_model_support

    rows = check_model_support(name)
    if fmt == "json":
        print_json([r.to_dict() for r in rows])
        return 0
    if not rows[0].known_family:
        print(f"{name}: no record in the model-support table; verify with `seqpack smoke` before training packed")
        return 0
    print(f"{rows[0].family} ({rows[0].evidence})")
    print(table(["path", "status", "note"], [[r.path, r.status, r.note] for r in rows]))
    return 0
