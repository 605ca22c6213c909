"""How people write the config keys and values the tasks ask about: aliases and option spellings.

The spellings are data (``evals/data/vocabulary.yaml``); this module turns them into answer fields.

:func:`config_field` turns a config key and its true value into an answer field with the usual
spellings (``micro batch size``, ``MBS``; ``true``/``on``/``enabled``; the choices of the schema's
literal types). :func:`rule_ids_field` is the set of rule ids an answer names.
"""

from __future__ import annotations

import re
import typing
from typing import Any

from seqpack.config import schema
from seqpack_evals import tables
from seqpack_evals.fields import AnswerField, choice_field, int_field, literal, set_field

_FILE = "vocabulary"

#: Free-text names of config keys (regular expressions), besides the key itself (``vocabulary.yaml``).
KEY_ALIASES: dict[str, tuple[str, ...]] = {
    key: tables.patterns(forms, f"vocabulary.yaml: key_aliases: {key}")
    for key, forms in tables.table(_FILE, "key_aliases").items()
}


def _values(name: str) -> tuple[str, ...]:
    """Free-text spellings of a config value (``true``, ``false``, ``null``, ``set``)."""
    return tables.patterns(tables.table(_FILE, "values").get(name), f"vocabulary.yaml: values: {name}")


def quantity_aliases(name: str) -> tuple[str, ...]:
    """Free-text names of a quantity several tasks ask for (``image_tokens``)."""
    return tables.patterns(tables.table(_FILE, "quantity_aliases").get(name),
                           f"vocabulary.yaml: quantity_aliases: {name}")


def _literal_choices(key: str) -> tuple[str, ...] | None:
    """The allowed values of a config key typed as a ``Literal`` in the schema, if it is one."""
    section, _, leaf = key.partition(".")
    cls = getattr(schema, f"{section.capitalize()}Config", None)
    if cls is None or "." in leaf:
        return None
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - a schema we cannot introspect just has no choices
        return None
    hint = hints.get(leaf)
    for arg in (hint, *typing.get_args(hint)):
        if typing.get_origin(arg) is typing.Literal:
            return tuple(str(a) for a in typing.get_args(arg))
    return None


def config_field(key: str, value: Any, *, says: str = "", choices: tuple[str, ...] | None = None) -> AnswerField:
    """The answer field for setting config key ``key`` to ``value`` (bool, int, None or a string choice)."""
    aliases = KEY_ALIASES.get(key, ())
    says = says or f"{key} to set"
    if isinstance(value, bool):
        return choice_field(key, str(value).lower(), {"true": _values("true"), "false": _values("false")}, *aliases,
                            says=says,
                            hint="<true | false>")
    if isinstance(value, int):
        return int_field(key, value, *aliases, says=says)
    if value is None:
        return choice_field(key, "null", {"null": _values("null"), "set": _values("set")}, *aliases, says=says,
                            hint="<null | a value>")
    options = choices or _literal_choices(key) or (str(value),)
    if str(value) not in options:
        options = (*options, str(value))
    if len(options) < 2:
        options = (*options, "other")
    forms = {o: (literal(o), literal(o.replace("_", " ")) if "_" in o else literal(o)) for o in options}
    return choice_field(key, str(value), forms, *aliases, says=says, hint="<" + " | ".join(options) + ">")


def rule_ids_field(rule_ids: list[str], *, says: str = "rule ids that fire") -> AnswerField:
    """The set of registry rule ids an answer names (exactly the true ones are right)."""
    from seqpack.config.rules import RULES

    options = {r.id: (literal(r.id),) for r in RULES}
    return set_field("rule_ids", sorted(rule_ids), options, says=says, hint="<rule ids, comma-separated, or none>")


def multiple_field(name: str, subject: str, n: int, *, says: str = "") -> AnswerField:
    """An integer stated as ``SUBJECT ... a multiple of N`` or ``SUBJECT ... divisible by N``."""
    return int_field(name, n, rf"{subject}\W+(?:\w+\W+){{0,6}}?(?:a\s+|an\s+)?(?:multiple|multiples) of",
                     rf"{subject}\W+(?:\w+\W+){{0,5}}?divisible by", says=says or f"{name}")


def supported_field(status: str) -> AnswerField:
    """Model-family support of a path: yes, no (the recipes opt out) or caveat."""
    value = {"supported": "yes", "opt_out": "no", "caveat": "caveat"}.get(status, status)
    return tables.named_field("path_support", value=value)


def words(text: str) -> str:
    """A phrase as a pattern that tolerates ``_``, ``-`` or a space between its words."""
    return r"[_ -]?".join(re.escape(w) for w in re.split(r"[_\s-]+", text))


__all__ = ["KEY_ALIASES", "config_field", "multiple_field", "quantity_aliases", "rule_ids_field", "supported_field",
           "words"]
