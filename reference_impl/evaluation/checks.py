"""Machine checks on an answer: ``required`` facts that must appear, ``forbidden`` claims that must not.

A check is a string. ``re:PATTERN`` is a regular expression searched case-insensitively anywhere in
the answer; any other string is a literal, also matched case-insensitively. Before matching, the
answer's code ticks and bold markers (`` ` `` and ``**``) are removed so
``**pad_seq_to_mult** = `8``` reads as ``pad_seq_to_mult = 8`` (a single ``*`` stays: it is
usually a multiplication, as in ``2*CP``).

The builders below write the patterns the dataset uses, so every task phrases a fact the same way:

* :func:`states` - "KEY ... VALUE" on one line, for required facts (loose: an answer may say
  ``pad_seq_to_mult = 8``, ``pad_seq_to_mult: 8`` or ``set pad_seq_to_mult to 8``);
* :func:`recommends` - "set KEY to VALUE" / "KEY should be VALUE", for forbidden claims (strict, so
  quoting the broken input back to the user is not mistaken for recommending it);
* :func:`number`, :func:`percent`, :func:`tokens` - numbers in the renderings people use.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any, Iterable

from reference_impl.errors import UsageError

REGEX_PREFIX = "re:"
_NOISE = re.compile(r"`|\*\*")


def normalise(text: str) -> str:
    """The answer as checks see it: code ticks and bold markers removed."""
    return _NOISE.sub("", text)


@lru_cache(maxsize=4096)
def _compile(check: str) -> re.Pattern[str]:
    if check.startswith(REGEX_PREFIX):
        source = check[len(REGEX_PREFIX):]
    else:
        source = re.escape(check)
    try:
        return re.compile(source, re.IGNORECASE)
    except re.error as exc:
        raise UsageError(f"invalid check pattern {check!r}: {exc}", field="required/forbidden") from None


def compile_check(check: str) -> re.Pattern[str]:
    """The compiled pattern of one check (raises UsageError when the regex is invalid)."""
    if not isinstance(check, str) or not check or check == REGEX_PREFIX:
        raise UsageError(f"a check must be a non-empty string, got {check!r}")
    return _compile(check)


def matches(check: str, text: str) -> str | None:
    """The matched excerpt when ``check`` is found in ``text`` (already normalised), else None."""
    m = compile_check(check).search(text)
    return None if m is None else m.group(0)


@dataclass(frozen=True)
class CheckResult:
    """Which required checks were found (with the matched text) and which forbidden ones fired."""

    required_found: dict[str, str]
    required_missing: list[str]
    forbidden_found: dict[str, str]
    required_total: int

    @property
    def required_fraction(self) -> float:
        """Share of required checks found (1.0 when there are none)."""
        if not self.required_total:
            return 1.0
        return len(self.required_found) / self.required_total

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        out = asdict(self)
        out["required_fraction"] = self.required_fraction
        return out


def run_checks(required: Iterable[str], forbidden: Iterable[str], answer: str) -> CheckResult:
    """Evaluate every check against ``answer``."""
    text = normalise(answer)
    req = list(required)
    found: dict[str, str] = {}
    missing: list[str] = []
    for check in req:
        hit = matches(check, text)
        if hit is None:
            missing.append(check)
        else:
            found[check] = hit
    bad = {}
    for check in forbidden:
        hit = matches(check, text)
        if hit is not None:
            bad[check] = hit
    return CheckResult(found, missing, bad, len(req))


# ------------------------------------------------------------------------------------------------
# Pattern builders
# ------------------------------------------------------------------------------------------------

_TRUE = r"(?:true|yes|on|enabled?)"
_FALSE = r"(?:false|no|off|disabled?)"


def _value_re(value: Any) -> str:
    if isinstance(value, bool):
        return _TRUE if value else _FALSE
    if value is None:
        return r"(?:null|none|unset|removed?)"
    if isinstance(value, int):
        return number(value, as_regex=True)
    if isinstance(value, (list, tuple)):
        return r"\[?\s*" + r"\W+".join(re.escape(str(v)) for v in value) + r"\s*\]?"
    return r"['\"]?" + re.escape(str(value)) + r"\b"


def _key_re(key: str) -> str:
    """A dotted config key, written with or without its section prefixes.

    Give the full path (``dataset.offline_packing_specs.pad_seq_to_mult``): each section may be
    left out, but a wrong section (``train.`` for ``dataset.micro_batch_size``) does not match.
    """
    parts = key.split(".")
    leaf = re.escape(parts[-1])
    if len(parts) == 1:
        return rf"\b{leaf}\b"
    prefix = "".join(rf"(?:{re.escape(p)}\.)?" for p in parts[:-1])
    # an optional Python root such as ``cfg.`` or ``config.`` may come first
    return rf"(?<![\w.])(?:\w*(?:cfg|config)\.)?{prefix}{leaf}\b"


def states(key: str, value: Any, *, gap: int = 40) -> str:
    """Required fact: ``key`` followed on the same line, within ``gap`` characters, by ``value``.

    For numbers the gap may not contain digits, so ``pad_seq_to_mult for TP4 is 8`` does not count
    the 4 of TP4; an answer should put the value next to the key.
    """
    numeric = isinstance(value, int) and not isinstance(value, bool)
    filler = rf"[^\d\n]{{0,{gap}}}?" if numeric else rf"[^\n]{{0,{gap}}}?"
    return f"{REGEX_PREFIX}{_key_re(key)}{filler}{_value_re(value)}"


def recommends(key: str, value: Any) -> str:
    """Forbidden claim: an instruction to set ``key`` to ``value`` (``set KEY=V``, ``KEY should be V``)."""
    k, v = _key_re(key), _value_re(value)
    # ``--set KEY=V`` is a command line echoing the input, not advice, hence the look-behind
    verb = r"(?<![-\w])(?:set|use|keep|choose|pick|change\s+\S+\s+to|raise\s+\S+\s+to|lower\s+\S+\s+to)"
    return (
        f"{REGEX_PREFIX}(?:{verb}\\s+{k}\\s*(?:=|:|to)\\s*{v}"
        f"|{k}\\s+(?:should|must)\\s+be\\s+(?:set\\s+to\\s+)?{v})"
    )


def asserts(key: str, value: Any) -> str:
    """Forbidden claim: ``KEY = V`` / ``KEY: V`` / ``KEY is V`` with V the whole value (not ``2*CP``)."""
    return (
        f"{REGEX_PREFIX}{_key_re(key)}\\s*(?:=|:|is|should be|must be|to)\\s*{_value_re(value)}"
        r"(?!\s?[*x×/]\s?\w)"
    )


def number(n: int, *, as_regex: bool = False) -> str:
    """An integer in plain or thousands-separated form (``65536``, ``65,536``, ``65_536``, ``65 536``)."""
    digits = str(abs(int(n)))
    groups = []
    while digits:
        groups.insert(0, digits[-3:])
        digits = digits[:-3]
    body = r"[,_ ]?".join(groups)
    sign = "-" if n < 0 else ""
    source = rf"(?<![\d.,]){sign}{body}(?![\d]|[.,]\d)"
    return source if as_regex else REGEX_PREFIX + source


def multiple_of(n: int) -> str:
    """``multiple of N`` / ``divisible by N``, allowing a short formula between (``multiple of 2*CP = 4``)."""
    return (f"{REGEX_PREFIX}(?:multiple of|multiples of|divisible by|divide by|divides by)[^\\n]{{0,24}}?"
            f"{number(n, as_regex=True)}")


def tokens(n: int) -> str:
    """A token count, also as ``8K``/``8k`` when it is a whole number of 1024-token units."""
    alts = [number(n, as_regex=True)]
    if n % 1024 == 0:
        alts.append(rf"(?<![\d.]){n // 1024}\s?[kK]\b")
    return REGEX_PREFIX + "(?:" + "|".join(alts) + ")"


def tokens_re(n: int) -> str:
    """:func:`tokens` without the ``re:`` prefix, for composing larger patterns."""
    return tokens(n)[len(REGEX_PREFIX):]


def percent(fraction: float) -> str:
    """A share written as a percentage, rounded or truncated to any number of decimals.

    ``percent(0.92571)`` accepts ``92.57%``, ``92.6 %``, ``92%`` and ``93%``; it does not accept
    the plain fraction (``0.93``), so an answer has to say it as a percentage.
    """
    value = fraction * 100.0
    lo, hi = int(value), int(round(value))
    alts = sorted({lo, hi})
    ints = "|".join(str(a) for a in alts)
    return rf"{REGEX_PREFIX}(?<![\d.])(?:{ints})(?:\.\d+)?\s?%"


def any_of(*checks: str) -> str:
    """One check that passes when any of ``checks`` (literals or ``re:`` patterns) is found."""
    parts = []
    for c in checks:
        parts.append(c[len(REGEX_PREFIX):] if c.startswith(REGEX_PREFIX) else re.escape(c))
    return REGEX_PREFIX + "(?:" + "|".join(parts) + ")"


def word(text: str) -> str:
    """A literal bounded by word edges (``rule`` does not match ``rules_doc``)."""
    escaped = re.escape(text).replace("\\-", "-")  # a bare hyphen is literal outside [...]
    return rf"{REGEX_PREFIX}(?<![\w-]){escaped}(?![\w-])"


@dataclass
class Checks:
    """Mutable builder used by the dataset templates: required and forbidden lists."""

    required: list[str] = field(default_factory=list)
    forbidden: list[str] = field(default_factory=list)

    def need(self, *checks: str) -> "Checks":
        """Add required checks (duplicates ignored)."""
        for c in checks:
            compile_check(c)
            if c not in self.required:
                self.required.append(c)
        return self

    def ban(self, *checks: str) -> "Checks":
        """Add forbidden checks (duplicates ignored)."""
        for c in checks:
            compile_check(c)
            if c not in self.forbidden:
                self.forbidden.append(c)
        return self


__all__ = [
    "CheckResult",
    "Checks",
    "REGEX_PREFIX",
    "any_of",
    "asserts",
    "compile_check",
    "matches",
    "multiple_of",
    "normalise",
    "number",
    "percent",
    "recommends",
    "run_checks",
    "states",
    "tokens",
    "tokens_re",
    "word",
]
