"""``query_rules``: the rule registry by id (explain one rule), by keywords, or all of it (filtered)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from seqpack.core.choices import RULE_FAMILIES, RULE_FORMATS, SEVERITIES
from seqpack.core.errors import UsageError
from seqpack.core.limits import DEFAULT_RULES_RETURNED, MAX_QUERY_CHARS, MAX_RULES_RETURNED
from seqpack.core.results import Result
from seqpack.core.textfmt import text_table
from seqpack.verbs.declare import Tool, Verb, check_options, option, verb_options

__all__ = ["DETAILS", "RULES", "RuleQuery", "RulesOptions", "query_rules", "render_rules"]

#: ``full``: every field of a rule (fix, examples, source); ``summary``: id, severity, family, provenance, title.
DETAILS: tuple[str, ...] = ("full", "summary")
_SUMMARY_KEYS = ("id", "severity", "family", "provenance", "title")


@verb_options
class RulesOptions:
    """A rule id or keywords (``query``), or none for every rule; filters; how much to return.

    ``limit`` caps the rules a keyword query returns (None: all); ``family`` and ``severity``
    filter keyword and list queries; ``format`` is how the CLI prints them.
    """

    query: str | None = option(None, help="a rule id (e.g. PACK-OFFLINE-MBS1; explains it) or keywords (e.g. "
                               "'cuda graph'; filters)", positional=True, min_length=1, max_length=MAX_QUERY_CHARS)
    family: str | None = option(None, help="only rules of this family (e.g. offline, in_batch, energon)",
                                choices=RULE_FAMILIES, label="rule family", metavar="FAMILY")
    severity: str | None = option(None, help="only rules of this severity", choices=SEVERITIES)
    limit: int | None = option(None, help="most rules returned for a keyword query (default: all)", minimum=1,
                               maximum=MAX_RULES_RETURNED)
    detail: str = option("full", help="full: every field of a rule (fix, examples, source); summary: id, severity, "
                         "family, provenance and title", choices=DETAILS)
    format: str = option("text", help="how the CLI prints the rules", choices=RULE_FORMATS, mcp=False)


@dataclass(frozen=True)
class RuleQuery(Result):
    """Rules matching a query: ``matched_by`` is ``id`` (exactly one rule), ``keyword`` or ``all``.

    ``total_matches`` counts every match, ``count`` the rules returned (after ``limit``);
    ``families`` maps every family id to its title.
    """

    query: str | None
    matched_by: str
    total_matches: int
    count: int
    families: dict[str, str]
    rules: list[dict[str, Any]]


def _entry(rule: Any, detail: str) -> dict[str, Any]:
    d = rule.describe()
    return {k: d[k] for k in _SUMMARY_KEYS} if detail == "summary" else d


def query_rules(options: RulesOptions) -> RuleQuery:
    """Explain a rule by id, or list the rules matching keywords / the filters (see :class:`RulesOptions`).

    A query that matches nothing raises a UsageError suggesting the closest rule ids.
    """
    from seqpack.config.rules import FAMILIES, RULES, RULES_BY_ID, get_rule, search_rules

    check_options(options)
    limit = options.limit
    query = options.query
    if query is not None:
        if not query.strip():
            raise UsageError(f"query must be a rule id or keywords of 1 to {MAX_QUERY_CHARS} characters", field="query")
        rule = get_rule(query)
        if rule is not None:
            return RuleQuery(query=query, matched_by="id", total_matches=1, count=1, families=dict(FAMILIES),
                             rules=[_entry(rule, options.detail)])
    found = list(search_rules(query)) if query is not None else list(RULES)
    found = [r for r in found if (options.family is None or r.family == options.family)
             and (options.severity is None or r.severity == options.severity)]
    if not found and query is not None:
        close = difflib.get_close_matches(query.strip().upper(), list(RULES_BY_ID), n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise UsageError(f"No rule id or keyword match for {query!r}.{hint}",
                         fix="list every rule id with `seqpack rules` (MCP: list_rules)")
    shown = found[:limit] if limit is not None else found
    return RuleQuery(query=query, matched_by="all" if query is None else "keyword", total_matches=len(found),
                     count=len(shown), families=dict(FAMILIES), rules=[_entry(r, options.detail) for r in shown])


_RULE_KEYS = ("id", "severity", "family_title", "title", "fields", "provenance", "source", "fix", "note",
              "upstream_check", "holds_for", "example_trigger", "example_fixed")


def _rules_json(result: RuleQuery, options: RulesOptions) -> Any:
    """What ``seqpack rules --json`` prints: the one rule an id names, else the list of rules."""
    return result.rules[0] if result.matched_by == "id" else result.rules


def render_rules(result: RuleQuery, options: RulesOptions) -> Any:
    """The CLI's output in ``options.format``: one rule in full, or the rules as a table (text, markdown) or JSON."""
    if options.format == "json":
        return _rules_json(result, options)
    if result.matched_by == "id":
        d = result.rules[0]
        lines = []
        for key in _RULE_KEYS:
            value = d[key]
            if value not in ("", [], {}):
                text = ("; " if key == "holds_for" else ", ").join(value) if isinstance(value, list) else value
                lines.append(f"{key:16} {text}")
        return "\n".join(lines)
    if options.format == "markdown":
        from seqpack.config.rules import RULES_BY_ID
        from seqpack.config.rules_doc import rules_markdown

        return rules_markdown([RULES_BY_ID[r["id"]] for r in result.rules])
    return text_table(["id", "severity", "provenance", "title"],
                      [[r["id"], r["severity"], r["provenance"], r["title"]] for r in result.rules])


RULES = Verb(
    name="query_rules", options=RulesOptions, function=query_rules, render=render_rules,
    to_json=_rules_json,
    help="list the packing rules (all, by family, by keyword), explain one rule id, or look up a model family",
    tools=(
        Tool("explain_rule", title="Explain a packing rule", fields=("query", "limit"), required=("query",),
             defaults={"limit": DEFAULT_RULES_RETURNED},
             description="""Explain one rule by id, or the rules whose id, title, fields or fix mention all the keywords.

Each rule comes with its severity, provenance and source, the fix, and an example config
(dotted overrides) that breaks it plus the overrides that fix it."""),
        Tool("list_rules", title="List the packing rules", fields=("family", "severity"),
             fixed={"detail": "summary"},
             description="""Every rule of the registry (or one family / severity): id, severity, family, provenance, title.

Use explain_rule for the fix and an example of a rule."""),
    ),
)
