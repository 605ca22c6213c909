"""``query_rules``: the rule registry by id (explain one rule), by keywords, or all of it (filtered)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from seqpack.core.arguments import positive_int
from seqpack.core.choices import RULE_FAMILIES, SEVERITIES
from seqpack.core.errors import UsageError
from seqpack.core.limits import MAX_QUERY_CHARS, MAX_RULES_RETURNED
from seqpack.core.results import Result
from seqpack.verbs.common import check_choice

__all__ = ["DETAILS", "RuleQuery", "RulesOptions", "query_rules"]

#: ``full``: every field of a rule (fix, examples, source); ``summary``: id, severity, family, provenance, title.
DETAILS: tuple[str, ...] = ("full", "summary")
_SUMMARY_KEYS = ("id", "severity", "family", "provenance", "title")


@dataclass(frozen=True, kw_only=True)
class RulesOptions:
    """A rule id or keywords (``query``), or none for every rule; filters; how much to return.

    ``limit`` caps the rules a keyword query returns (None: all); ``family`` and ``severity``
    filter keyword and list queries.
    """

    query: str | None = None
    family: str | None = None
    severity: str | None = None
    limit: int | None = None
    detail: str = "full"


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

    check_choice("rule family", options.family, RULE_FAMILIES, allow_none=True)
    check_choice("severity", options.severity, SEVERITIES, allow_none=True)
    check_choice("detail", options.detail, DETAILS)
    limit = positive_int("limit", options.limit, allow_none=True, maximum=MAX_RULES_RETURNED)
    query = options.query
    if query is not None:
        if not isinstance(query, str) or not query.strip() or len(query) > MAX_QUERY_CHARS:
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
