"""The literal tables of the task templates, kept as data in ``evals/data/*.yaml`` and read here.

Questions, reference answers, upstream anchors, forbidden-claim patterns and the spellings of config
keys and values are data; the templates compute every value from the library and only look the words
up. A file is read once (``yaml.safe_load``) and checked as it is used: a missing or unknown key, a
wrong type, a pattern that does not compile or an unknown ``{placeholder}`` raises
:class:`~seqpack.core.errors.UsageError` naming the file and the entry, so a malformed table stops
the build with one clear line instead of producing a different task set.

Answer fields are written as specs (:func:`field_from_spec`): one kind key naming the field
(``int``, ``percent``, ``choice``, ``pick``, ``yes_no``, ``set``) plus the builder's arguments, for
example ``{yes_no: padding_needed, value: false, yes: [...], no: [...], anywhere: true}``, or
``{named: FIELD, value: ...}`` for a reusable field of ``vocabulary.yaml``. A pattern list may hold
``{literal: TEXT}`` for a word-bounded literal spelling.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from seqpack.core.errors import UsageError
from seqpack_evals.fields import (
    AnswerField,
    choice_field,
    int_field,
    literal,
    percent_field,
    pick_field,
    set_field,
    yes_no_field,
)

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")

#: ``(file, table)`` pairs read so far in this process (tests/test_evals_tables.py checks a build reads them all).
READ: set[tuple[str, str]] = set()


def data_dir() -> Path:
    """``evals/data/`` of the checkout this package was imported from."""
    return Path(__file__).resolve().parents[1] / "data"


@functools.lru_cache(maxsize=None)
def _read(path: Path) -> Mapping[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read the eval table ({exc.strerror or exc})", file=str(path)) from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UsageError(f"not valid YAML: {problem}", file=str(path), line=line) from None
    if not isinstance(doc, dict):
        raise UsageError("the top level must be a mapping of table names", file=str(path))
    return doc


def table(name: str, key: str, kind: type = dict, *, folder: Path | None = None) -> Any:
    """Table ``key`` of ``evals/data/<name>.yaml`` (a ``dict`` or a ``list``, as ``kind`` says; shared between
    callers, so read it, never change it)."""
    path = (folder or data_dir()) / f"{name}.yaml"
    doc = _read(path)
    READ.add((name, key))
    if key not in doc:
        raise UsageError(f"no table {key!r} (it has {', '.join(map(str, doc)) or 'none'})", file=str(path))
    value = doc[key]
    if not isinstance(value, kind):
        raise UsageError(f"{key} must be a {kind.__name__}, got {type(value).__name__}", file=str(path))
    if kind is dict:
        bad = [k for k in value if not isinstance(k, str)]
        if bad:
            raise UsageError(f"{key} has the non-text key {bad[0]!r} (quote yes/no/on/off/true/false/numbers used "
                             "as names)", file=str(path))
    return value


def entry(data: Any, where: str, required: tuple[str, ...], optional: tuple[str, ...] = (),
          types: Mapping[str, type | tuple[type, ...]] | None = None) -> dict[str, Any]:
    """``data`` as a mapping with every ``required`` key, no key outside ``required + optional``, and the values
    ``types`` names of those types (an ``int`` is never a ``bool``)."""
    if not isinstance(data, dict):
        raise UsageError(f"{where}: expected a mapping, got {type(data).__name__}")
    missing = [k for k in required if k not in data]
    unknown = [k for k in data if k not in required and k not in optional]
    if missing or unknown:
        parts = ([f"missing {', '.join(missing)}"] if missing else []) + (
            [f"unknown {', '.join(map(str, unknown))}"] if unknown else [])
        if any(isinstance(k, bool) for k in unknown):
            parts.append("quote yes/no/on/off/true/false used as names")
        raise UsageError(f"{where}: {'; '.join(parts)} (allowed: {', '.join(required + optional)})")
    for key, kind in (types or {}).items():
        value = data.get(key)
        if key in data and (not isinstance(value, kind) or (isinstance(value, bool) and bool not in _tuple(kind))):
            names = ", ".join(k.__name__ for k in _tuple(kind))
            raise UsageError(f"{where}: {key} must be {names}, got {value!r}")
    return data


def _tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def rows(name: str, key: str, required: tuple[str, ...], optional: tuple[str, ...] = (),
         types: Mapping[str, type | tuple[type, ...]] | None = None) -> list[dict[str, Any]]:
    """The entries of list table ``key`` of ``<name>.yaml``, each checked with :func:`entry`."""
    return [entry(item, f"{name}.yaml: {key}[{i}]", required, optional, types)
            for i, item in enumerate(table(name, key, list))]


def strings(data: Any, where: str) -> tuple[str, ...]:
    """A list of text items as a tuple (a single string is an error, not a list of characters)."""
    if not isinstance(data, list) or not all(isinstance(s, str) for s in data):
        raise UsageError(f"{where}: expected a list of strings, got {data!r}")
    return tuple(data)


def patterns(data: Any, where: str) -> tuple[str, ...]:
    """A list of regular expressions, each checked to compile; an item ``{literal: TEXT}`` is TEXT as a
    word-bounded literal (:func:`~seqpack_evals.fields.literal`)."""
    if isinstance(data, list):
        data = [literal(item["literal"]) if isinstance(item, dict) and list(item) == ["literal"]
                and isinstance(item["literal"], str) else item for item in data]
    out = strings(data, where)
    for p in out:
        try:
            re.compile(p)
        except re.error as exc:
            raise UsageError(f"{where}: bad pattern {p!r}: {exc}") from None
    return out


def fill(template: str, where: str, values: Mapping[str, Any]) -> str:
    """``template`` with every ``{name}`` replaced by ``values[name]`` (regex counts like ``{0,20}`` stay)."""

    def sub(m: re.Match[str]) -> str:
        if m.group(1) not in values:
            raise UsageError(f"{where}: unknown placeholder {{{m.group(1)}}} (known: {', '.join(values) or 'none'})")
        return str(values[m.group(1)])

    return _PLACEHOLDER.sub(sub, template)


def _options(data: Any, where: str) -> dict[str, tuple[str, ...]]:
    if not isinstance(data, dict) or not data:
        raise UsageError(f"{where}: options must be a mapping of label -> patterns")
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise UsageError(f"{where}: option label {bad[0]!r} is not text (quote yes/no/true/false)")
    return {label: patterns(forms, f"{where}: option {label}") for label, forms in data.items()}


_COMMON = ("value", "aliases", "says")
_KINDS: dict[str, tuple[tuple[str, ...], Callable[..., AnswerField]]] = {
    "int": (("tolerance", "rel_tolerance", "hint"), int_field),
    "percent": (("tolerance",), percent_field),
    "choice": (("options", "anywhere", "hint"), choice_field),
    "pick": (("options",), pick_field),
    "set": (("options", "anywhere", "hint"), set_field),
    "yes_no": (("yes", "no", "anywhere"), yes_no_field),
}


def field_from_spec(spec: Any, where: str, **given: Any) -> AnswerField:
    """The answer field a spec describes; ``given`` supplies what the code computes (``value``; for a reusable
    field also its ``name``, ``aliases`` or ``says``) and overrides the spec."""
    if not isinstance(spec, dict):
        raise UsageError(f"{where}: a field spec must be a mapping, got {type(spec).__name__}")
    if "named" in spec:  # a reusable field of vocabulary.yaml, with this spec's value (and name, says, ...)
        return named_field(spec["named"], **{**{k: v for k, v in spec.items() if k != "named"}, **given})
    kinds = [k for k in spec if k in _KINDS]
    if len(kinds) != 1:
        raise UsageError(f"{where}: a field spec names exactly one kind of {', '.join(_KINDS)} (got "
                         f"{', '.join(kinds) or 'none'})")
    kind = kinds[0]
    extra, build = _KINDS[kind]
    name = given.pop("name", spec[kind])
    spec = {**entry(spec, where, (kind,), _COMMON + extra), **given}
    where = f"{where}: field {name}"
    if "value" not in spec:
        raise UsageError(f"{where}: no value (the table or the code must give one)")
    args: dict[str, Any] = {k: v for k, v in spec.items() if k not in (kind, "value", "aliases", "yes", "no", "options")}
    aliases = patterns(spec.get("aliases", []), f"{where}: aliases")
    if kind == "yes_no":
        return build(name, spec["value"], patterns(spec.get("yes"), f"{where}: yes"),
                     patterns(spec.get("no"), f"{where}: no"), *aliases, **args)
    if kind in ("choice", "pick", "set"):
        return build(name, spec["value"], _options(spec.get("options"), f"{where}: options"), *aliases, **args)
    return build(name, spec["value"], *aliases, **args)


def named_field(key: str, /, **given: Any) -> AnswerField:
    """The reusable answer field ``key`` of ``vocabulary.yaml`` (``fields``), with the code's ``value``."""
    specs = table("vocabulary", "fields")
    if key not in specs:
        raise UsageError(f"vocabulary.yaml: no field {key!r} in fields")
    return field_from_spec(specs[key], f"vocabulary.yaml: fields: {key}", **given)


__all__ = ["READ", "data_dir", "entry", "field_from_spec", "fill", "named_field", "patterns", "rows", "strings", "table"]
