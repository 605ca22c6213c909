"""Answer fields: the facts a task asks for, each with a name, a true value and how it may be written.

A task states what must be answered as a list of :class:`AnswerField`. The prompt ends with a
request for a final ``answer`` block holding one ``name: value`` line per field
(:func:`prompt_footer`); the scorer (:mod:`seqpack_evals.answers`) reads that block
first and the free text as a fallback, and grades every field right or wrong.

Kinds:

* ``int`` - an integer; written as ``8``, ``8,192``, ``8K`` (``k_unit``), ``eight``; ``tolerance``
  is an absolute slack, ``rel_tolerance`` a relative one (``4.19M`` for 4,194,304);
* ``number`` - a real number with an absolute ``tolerance``;
* ``percent`` - a share in percent (``value`` 92.92 means 92.92 %); ``tolerance`` in points;
  ``0.93`` is read as 93 % only when followed by no unit and below 1;
* ``choice`` - one of ``options`` (option label -> regular expressions that spell it); the true
  value is a label; the other options are the wrong answers a reader may give;
* ``set`` - several labels of ``options`` at once (rule ids, affected rows); right only when the
  answer names exactly the true set.

``aliases`` are regular expressions (case-insensitive) naming the field in free text, besides its
name. A ``choice``/``set`` field with ``anywhere`` true is read from the whole answer (no alias
needed), which suits option spellings that are unambiguous on their own (rule ids, API names).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from seqpack.core.errors import UsageError

KINDS: tuple[str, ...] = ("int", "number", "percent", "choice", "set")
BLOCK_TAG = "answer"
NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,79}$")


@dataclass(frozen=True)
class AnswerField:
    """One fact a task asks for (see the module docstring for the kinds)."""

    name: str
    kind: str
    value: Any
    aliases: tuple[str, ...] = ()
    options: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    tolerance: float = 0.0
    rel_tolerance: float = 0.0
    k_unit: int = 1024
    anywhere: bool = False
    hint: str = ""
    says: str = ""

    def problems(self) -> list[str]:
        """What is wrong with the field's definition (empty when it is well formed)."""
        out: list[str] = []
        if not NAME_RE.match(self.name):
            out.append(f"field name {self.name!r} must match {NAME_RE.pattern}")
        if self.kind not in KINDS:
            out.append(f"field {self.name}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
            return out
        for pattern in (*self.aliases, *(f for forms in self.options.values() for f in forms)):
            try:
                re.compile(pattern)
            except re.error as exc:
                out.append(f"field {self.name}: bad pattern {pattern!r}: {exc}")
        if self.kind == "int" and (isinstance(self.value, bool) or not isinstance(self.value, int)):
            out.append(f"field {self.name}: an int field needs an integer value")
        if self.kind in ("number", "percent") and (isinstance(self.value, bool)
                                                   or not isinstance(self.value, (int, float))):
            out.append(f"field {self.name}: a {self.kind} field needs a numeric value")
        if self.kind == "choice":
            if len(self.options) < 2:
                out.append(f"field {self.name}: a choice needs at least two options (the right one and a wrong one)")
            if self.value not in self.options:
                out.append(f"field {self.name}: value {self.value!r} is not an option")
        if self.kind == "set":
            values = list(self.value) if isinstance(self.value, (list, tuple)) else None
            if values is None or any(v not in self.options for v in values):
                out.append(f"field {self.name}: a set value must be a list of options")
        if self.kind in ("choice", "set") and any(not forms for forms in self.options.values()):
            out.append(f"field {self.name}: every option needs at least one spelling")
        if self.tolerance < 0 or self.rel_tolerance < 0:
            out.append(f"field {self.name}: tolerances must not be negative")
        return out

    def display(self, value: Any | None = None) -> str:
        """A value as the answer block writes it (the true value by default)."""
        value = self.value if value is None else value
        if self.kind == "set":
            return ", ".join(str(v) for v in value) if value else "none"
        if self.kind == "percent":
            return f"{value:g}%"
        return str(value)

    def placeholder(self) -> str:
        """What the prompt's answer block shows for this field."""
        if self.hint:
            return self.hint
        return {"int": "<integer>", "number": "<number>", "percent": "<percent>",
                "choice": "<" + " | ".join(self.options) + ">",
                "set": "<comma-separated list, or none>"}[self.kind]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (defaults left out)."""
        out: dict[str, Any] = {"name": self.name, "kind": self.kind,
                               "value": list(self.value) if self.kind == "set" else self.value}
        if self.says:
            out["says"] = self.says
        if self.aliases:
            out["aliases"] = list(self.aliases)
        if self.options:
            out["options"] = {k: list(v) for k, v in self.options.items()}
        for key, default in (("tolerance", 0.0), ("rel_tolerance", 0.0), ("k_unit", 1024), ("anywhere", False),
                             ("hint", "")):
            if getattr(self, key) != default:
                out[key] = getattr(self, key)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "AnswerField":
        """Inverse of :meth:`to_dict`."""
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(data) - known
        if unknown:
            raise UsageError(f"answer field has unknown keys {sorted(unknown)}", field="answer_fields")
        values = dict(data)
        values["aliases"] = tuple(values.get("aliases", ()))
        values["options"] = {k: tuple(v) for k, v in (values.get("options") or {}).items()}
        if values.get("kind") == "set":
            values["value"] = tuple(values["value"])
        return cls(**values)


def prompt_footer(fields: Sequence[AnswerField]) -> str:
    """The request for a final answer block, appended to every prompt."""
    lines = [f"{f.name}: {f.placeholder()}" for f in fields]
    return ("Finish your reply with a fenced block tagged `" + BLOCK_TAG + "` that gives your final value for each "
            "item below, one `name: value` line each:\n\n```" + BLOCK_TAG + "\n" + "\n".join(lines) + "\n```")


def answer_block(fields: Sequence[AnswerField], values: Mapping[str, Any] | None = None) -> str:
    """A filled answer block (the true values unless ``values`` gives others)."""
    values = values or {}
    lines = [f"{f.name}: {f.display(values.get(f.name))}" for f in fields]
    return "```" + BLOCK_TAG + "\n" + "\n".join(lines) + "\n```"


# ------------------------------------------------------------------------------------------------
# Builders used by the templates
# ------------------------------------------------------------------------------------------------



def int_field(name: str, value: int, *aliases: str, says: str = "", tolerance: float = 0, rel_tolerance: float = 0,
              hint: str = "") -> AnswerField:
    """An integer fact."""
    return AnswerField(name, "int", int(value), tuple(aliases), tolerance=tolerance, rel_tolerance=rel_tolerance,
                       hint=hint, says=says)


def percent_field(name: str, value: float, *aliases: str, says: str = "", tolerance: float = 0.6) -> AnswerField:
    """A share in percent (``value`` in percent), right within ``tolerance`` points."""
    return AnswerField(name, "percent", round(float(value), 4), tuple(aliases), tolerance=tolerance, says=says)


def choice_field(name: str, value: str, options: Mapping[str, Iterable[str]], *aliases: str, says: str = "",
                 anywhere: bool = False, hint: str = "") -> AnswerField:
    """One of several options (``options``: label -> spellings)."""
    return AnswerField(name, "choice", value, tuple(aliases), {k: tuple(v) for k, v in options.items()},
                       anywhere=anywhere, hint=hint, says=says)


def pick_field(name: str, value: str, options: Mapping[str, Iterable[str]], *aliases: str, says: str = "") -> AnswerField:
    """A choice read from the whole answer (for spellings specific enough to stand alone), its options as the hint."""
    return choice_field(name, value, options, *aliases, anywhere=True, says=says or name,
                        hint="<" + " | ".join(options) + ">")


def yes_no_field(name: str, value: bool, yes: Iterable[str], no: Iterable[str], *aliases: str, says: str = "",
                 anywhere: bool = False) -> AnswerField:
    """A yes/no fact: labels ``yes`` and ``no`` (what the block writes) and their spellings in free text."""
    return AnswerField(name, "choice", "yes" if value else "no", tuple(aliases),
                       {"yes": tuple(yes), "no": tuple(no)}, anywhere=anywhere, hint="<yes | no>", says=says)


def set_field(name: str, value: Iterable[str], options: Mapping[str, Iterable[str]], *aliases: str, says: str = "",
              anywhere: bool = True, hint: str = "") -> AnswerField:
    """A set of options (exactly the true set is right)."""
    return AnswerField(name, "set", tuple(value), tuple(aliases), {k: tuple(v) for k, v in options.items()},
                       anywhere=anywhere, hint=hint, says=says)


def literal(text: str) -> str:
    """A literal spelling as a word-bounded pattern (``PACK-OFFLINE-MBS1`` does not match ``...-MBS10``)."""
    return r"(?<![\w-])" + re.escape(text).replace(r"\-", "-") + r"(?![\w-])"


__all__ = [
    "AnswerField",
    "BLOCK_TAG",
    "KINDS",
    "answer_block",
    "choice_field",
    "int_field",
    "literal",
    "percent_field",
    "pick_field",
    "prompt_footer",
    "set_field",
    "yes_no_field",
]
