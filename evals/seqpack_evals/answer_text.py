"""The text side of reading an answer: numbers as people write them, clauses, negation, quotation, hedges and
units (:mod:`seqpack_evals.answers` reads the fields with these).

Pure: regular expressions and small functions over strings; nothing here knows a task.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

from seqpack_evals.fields import AnswerField

_NOISE = re.compile(r"(?<!`)`(?!`)|\*\*")
# ------------------------------------------------------------------------------------------------
# Numbers
# ------------------------------------------------------------------------------------------------

_UNITS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen".split())}
_TENS = {w: 10 * (i + 2) for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split())}
_SCALES = {"hundred": 100, "thousand": 1000}
_ORDINALS = {w: i + 1 for i, w in enumerate(
    "first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth".split())}
_WORD = "|".join(sorted([*_UNITS, *_TENS], key=len, reverse=True))
_ORDINAL = "|".join(sorted(_ORDINALS, key=len, reverse=True))
_WORD_NUM = (rf"(?:(?:minus|negative)\s+)?(?:a\s+single|(?:{_WORD})(?:[\s-]+(?:{_WORD}))?(?:\s+(?:hundred|thousand)"
             rf"(?:\s+(?:and\s+)?(?:{_WORD})(?:[\s-]+(?:{_WORD}))?)?)?)")
_NUM = re.compile(
    r"(?P<digits>(?<![\w.])-?(?:\d{1,3}(?:[,_\u202f\u00a0]\d{3})+|\d+)(?:\.\d+)?)"
    r"(?P<suffix>[ \t]?(?:%|percent\b|per\s?cent\b|[kK]i(?![A-Za-z])|[kK](?![A-Za-z])|Mi?(?![A-Za-z])))?"
    rf"|(?P<word>\b{_WORD_NUM}\b)|(?P<ordinal>\b(?:{_ORDINAL})\b)",
    re.I,
)


def _word_value(text: str) -> int:
    lowered = text.lower()
    if lowered.startswith(("minus", "negative")):
        return -_word_value(lowered.split(None, 1)[1])
    words = re.split(r"[\s-]+", lowered.replace(" and ", " "))
    if words[:2] == ["a", "single"]:
        return 1
    total, current = 0, 0
    for w in words:
        if w in _UNITS:
            current += _UNITS[w]
        elif w in _TENS:
            current += _TENS[w]
        elif w in _SCALES:
            current = max(current, 1) * _SCALES[w]
            if w == "thousand":
                total, current = total + current, 0
    return total + current


@dataclass(frozen=True)
class _Num:
    value: float
    percent: bool
    start: int
    end: int


def _numbers(text: str, k_unit: int = 1024) -> list[_Num]:
    out = []
    for m in _NUM.finditer(text):
        if m.group("ordinal"):
            out.append(_Num(float(_ORDINALS[m.group("ordinal").lower()]), False, m.start(), m.end()))
            continue
        if m.group("word"):
            if m.group("word").lower() == "one" and (
                    re.match(r"\s+(?:that|which|who|of|is|was|where|more)\b", text[m.end():m.end() + 8], re.I)
                    or re.search(r"\b(?:the|this|that|next|each|every|any|which|no|only|in)\s+$", text[:m.start()],
                                 re.I)):
                continue  # "the next one that passes", "in one pack": a pronoun or another count
            out.append(_Num(float(_word_value(m.group("word"))), False, m.start(), m.end()))
            continue
        raw = re.sub(r"[,_\u202f\u00a0]", "", m.group("digits"))
        value = float(raw)
        suffix = (m.group("suffix") or "").strip().lower()
        percent = suffix in ("%", "percent", "per cent", "percent")
        if suffix == "k":
            value *= k_unit
        elif suffix == "ki":
            value *= 1024
        elif suffix == "mi":
            value *= 1 << 20
        elif suffix == "m":
            value *= 1_000_000
        out.append(_Num(value, percent or suffix.startswith("per"), m.start(), m.end()))
    return out


# ------------------------------------------------------------------------------------------------
# Clauses, negation and quotation
# ------------------------------------------------------------------------------------------------

_CLAUSE_END = re.compile(r"[.!?](?=\s|$)|[;\n]|\s(?:but|because|since|whereas|although|unless|so that|while)\s")
_CLAUSE_START = re.compile(r"[.!?](?=\s)|[;:\n]|,\s|\b(?:but|unless|except|then|so|and then|and)\b|\bif\b.*?,")
_NEGATOR = re.compile(r"\b(?:not|never|no|nor|without|avoid|cannot|neither|nothing|rather than|instead of)\b"
                      r"|n't\b", re.I)
_NOT_NEGATION = re.compile(r"\bno (?:more|larger|bigger|greater|less|fewer|smaller) than\b|\bnot only\b"
                           r"|\bno matter\b|\bnot just\b|\bif not\b", re.I)
_QUOTE_BEFORE = re.compile(
    r"(?:\bgot|\bwas|\bwere|\bfrom|\bcurrently|\bnow|\bold|\bprevious(?:ly)?|\bexisting|\binstead of|\brather than"
    r"|\bother than|\breplac\w*|\bleft at|\bstill|\bhas|\bhave|\bhad)\s*(?:is\s+|=\s*|:\s*|of\s+|at\s+|to\s+)?$",
    re.I)
_QUOTE_LINE = re.compile(r"^[ \t>*-]*(?:example_trigger|trigger|breaking example|broken|before|current(?:ly)?|got)\b",
                         re.I)
_QUOTE_CLAUSE = re.compile(r"\b(?:your|the|this) (?:config(?:uration)?|file|yaml|log|run|job) "
                           r"(?:has|sets|uses|says|shows|declares|specifies|still)\b|\byou (?:have|set|use|used)\b"
                           r"|\b(?:you|we) (?:want|wanted|would like|'d like|plan|planned|asked|intend|tried)\b"
                           r"|\b(?:rejects|refuses|does not accept|doesn't accept|complains about|fails on|stops on)\b",
                           re.I)
_QUOTE_AFTER_BASE = (
    r"^[ \t]*,?[ \t]*(?:but\b|which\b[^.\n]{0,40}?\b(?:refuse[sd]?|reject(?:s|ed)?|breaks?|fails?|is not|isn't|does not|"
    r"doesn't|cannot|can't|is wrong|is invalid)\b|(?:is|are|was|looks) (?:wrong|invalid|incorrect|"
    r"rejected|refused|not allowed|not valid|not supported|too \w+|the problem|the bug|the cause)\b|won't\b|will not\b"
    r"|fails?\b|breaks?\b|in (?:your|the) (?:config|log|file|yaml)\b|now\b|currently\b|today\b)")
#: after a value, words that mark it as the state being described, not advice (forbidden checks use the base list)
_QUOTE_AFTER = re.compile(_QUOTE_AFTER_BASE[:-1] + r"|with\b|cannot\b|can't\b|is not\b|isn't\b|must (?:match|equal)\b"
                          r"|(?:is |are )?only (?:required|needed|necessary|relevant|enforced|applies|matters|used)\b"
                          r"|which\b[^.\n]{0,40}?\b(?:forbids|disallows|does not allow|flags)\b"
                          r"|for the \w+ (?:side|part|term|half)\b"
                          r"|differs?\b|does not\b|doesn't\b|although\b|while\b|is set\b|is on\b|is enabled\b)", re.I)
_QUOTE_AFTER_STRICT = re.compile(_QUOTE_AFTER_BASE, re.I)
_OPTION_QUOTE_AFTER = re.compile(_QUOTE_AFTER.pattern.replace("|with\\b", "")[:-1] + r"|is missing\b|,? which [^.\n]{0,40}?"
                                 r"\b(?:forbids|disallows|flags|rejects|refuses))", re.I)
#: spans that quote seqpack's own findings (``[RULE-ID] message`` up to ``Fix:``) or a log (``> ...`` lines)
_QUOTE_SPAN = re.compile(r"\[[A-Z][A-Z0-9]+(?:-[A-Z0-9]+)+\][^\n]*?(?=\bFix:|$)|^[ \t]*>[^\n]*", re.M)
_COMPARATOR = re.compile(
    r"(?:>=?|<=?|≥|≤|\bgreater than|\bmore than|\blarger than|\bbigger than|\bless than|\bsmaller than|"
    r"\bfewer than|\bat least|\babove|\bbelow|\bover|\bunder|\bexceeds?|\bexceeding|\bbeyond)\s*(?:=\s*)?$", re.I)
_OPERAND_AFTER = re.compile(r"^[ \t]?(?:[*×/÷+]|x(?=[ \t]?[\dA-Za-z(]))")
_OPERAND_BEFORE = re.compile(r"(?:[*×/÷+]|\bx|\d[ \t]?x)[ \t]?$")
_ARROW = re.compile(r"^[ \t]*(?:->|→|=>|⇒)[ \t]*")
_LIST_END = re.compile(r"[ \t]*(?:,|/|\bor\b|\band\b|\||$|[.;)\]\n])", re.I)
_LIST_SEP = re.compile(r"^[ \t]*(?:,|/|\bor\b|\band\b|\||\bto\b|-|–)[ \t]*", re.I)


def normalise(text: str) -> str:
    """The answer as the scorer reads it: single code ticks and bold markers removed."""
    return _NOISE.sub("", text)


def _blank_asides(text: str) -> str:
    """Parenthesised and bracketed asides replaced by spaces (offsets kept)."""
    prev = None
    while prev != text:
        prev = text
        text = re.sub(r"\([^()\n]*\)|\[[^\[\]\n]*\]", lambda m: " " * len(m.group(0)), text)
    return text


def _clause_start(text: str, pos: int, limit: int = 120) -> int:
    lo = max(0, pos - limit)
    start = lo
    for m in _CLAUSE_START.finditer(text, lo, pos):
        start = m.end()
    return start


def _clause_end(text: str, pos: int, limit: int = 140) -> int:
    m = _CLAUSE_END.search(text, pos, min(len(text), pos + limit))
    return m.start() if m else min(len(text), pos + limit)


_RULE_ID = re.compile(r"\b[A-Z][A-Z0-9]+(?:-[A-Z0-9]+)+\b")


@lru_cache(maxsize=256)
def _quote_spans(text: str) -> tuple[tuple[int, int], ...]:
    return tuple((m.start(), m.end()) for m in _QUOTE_SPAN.finditer(text))


def _in_quote_span(text: str, pos: int) -> bool:
    """True inside a quoted seqpack finding (``[RULE-ID] ...`` before ``Fix:``) or a ``>`` quoted line."""
    return any(a <= pos < b for a, b in _quote_spans(text))


def _quoted_line(text: str, pos: int) -> bool:
    """True when the line holding ``pos`` starts like a quotation of the broken input (``example_trigger ...``)."""
    start = text.rfind("\n", 0, pos) + 1
    return bool(_QUOTE_LINE.match(text, start))


def _negated(prefix: str) -> bool:
    cleaned = _NOT_NEGATION.sub(" ", _RULE_ID.sub(" ", prefix))
    return bool(_NEGATOR.search(cleaned))


@dataclass(frozen=True)
class Claim:
    """One value an answer gives for a field: where it was read and whether it is denied."""

    value: Any
    source: str  # "block" or "text"
    negated: bool = False
    excerpt: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)



_ID_MASK = re.compile(r"\b[A-Z][A-Z0-9]+(?:-[A-Z0-9]+)+\b|(?<![\w-])--[A-Za-z][\w-]*(?:[ =]+(?![-\s])[^\s,;)]+)?")


def _masked(m: re.Match[str]) -> str:
    token = m.group(0)
    if token.startswith("--"):
        return "_" * len(token)  # a command-line flag and its value: never this field's value
    return re.sub(r"[A-Z0-9]", "Q", token)  # still shaped like a rule id, so quoted findings stay recognised


def mask_identifiers(text: str) -> str:
    """Rule ids (``PACK-OFFLINE-MBS1``) and command-line flags masked (offsets kept): their digits and letters are
    never a value or a field mention."""
    return _ID_MASK.sub(_masked, text)


_UNIT = re.compile(
    r"^[ \t]*(?P<u>per[ \t]+(?:gpu|rank|device|node|dp[ \t]+rank)s?\b|gpus?\b|ranks?\b|devices?\b|nodes?\b|"
    r"tokens?\b|pixels?\b|px\b|bytes?\b|[kmgt]i?b\b|ms\b|seconds?\b|minutes?\b|hours?\b|packs?\b|rows?\b|"
    r"samples?\b|sequences?\b|conversations?\b|examples?\b|images?\b|patch(?:es)?\b|steps?\b|chunks?\b|"
    r"experts?\b|layers?\b)", re.I)
_COUNT_NOUNS = ("pack", "row", "sample", "sequence", "conversation", "example")
_HEDGE = re.compile(r"\b(?:might|maybe|perhaps|possibly|probably|likely|something like|i think|i guess|i believe|"
                    r"not sure|not certain|"
                    r"could be|may be|somewhere around|or so|unclear|hard to say)\b", re.I)


def _field_words(f: AnswerField) -> str:
    return re.sub(r"[_.-]", " ", f"{f.name} {f.says}").lower()


def _unit_fits(f: AnswerField, unit: str) -> bool:
    """Whether a value written with ``unit`` can be a value of ``f`` (a count of GPUs is not a count of nodes,
    an image's tokens are not pixels, a global quantity is not per GPU)."""
    u = re.sub(r"\s+", " ", unit.lower())
    words = _field_words(f)
    if u.startswith("per "):
        return bool(re.search(r"\bper (?:gpu|rank|device|node|dp)", words))
    root = u.rstrip("s") if u not in ("ms", "s") else u
    if root in ("gpu", "rank", "device"):
        return bool(re.search(r"world|gpu|rank|device|data parallel|\bdp\b|parallel size|ways", words))
    if root == "node":
        return "node" in words
    if root == "token":
        return bool(re.search(r"token|seq|length|width|slot|pad|mult|capacity|limit|size|position|ids|chunk", words)) \
            and not re.search(r"batch|world|gpu|rank|\bdp\b|data parallel|experts|\bline\b|rows? per|packs$", words)
    if root in ("pixel", "px"):
        return "pixel" in words
    if re.fullmatch(r"byte|[kmgt]i?b", root):
        return bool(re.search(r"byte|memory|\bmb\b|\bgb\b", words))
    if root in ("ms", "second", "minute", "hour"):
        return bool(re.search(r"time|second|latency|duration", words))
    if root in ("patche", "patch"):
        return "patch" in words
    if root in _COUNT_NOUNS:
        own = [n for n in _COUNT_NOUNS if n in words]
        return not own or root in own
    return root in words or not re.search(r"token|pixel|gpu|byte", words)


def _bad_unit(f: AnswerField, after: str) -> bool:
    """True when the text right after a value gives it a unit this field cannot have."""
    m = _UNIT.match(after)
    return bool(m) and not _unit_fits(f, m.group("u"))


def _sentence(text: str, pos: int) -> str:
    """The sentence (or line) of ``text`` that holds ``pos``."""
    lo = max(text.rfind("\n", 0, pos), max((m.end() for m in re.finditer(r"[.!?](?=\s)", text[:pos])), default=0))
    m = re.compile(r"[.!?](?=\s|$)|\n").search(text, pos)
    return text[lo:m.start() if m else len(text)]


_UNIT_BEFORE = re.compile(r"\b(?P<u>bytes?|columns?|col|offsets?|characters?|chars?|positions?)[ \t]*$", re.I)


def _bad_unit_before(f: AnswerField, before: str) -> bool:
    """True when the word right before a value names a unit this field cannot have (``byte 2`` is no line)."""
    m = _UNIT_BEFORE.search(before)
    return bool(m) and m.group("u").lower().rstrip("s") not in _field_words(f)


def _hedged(clause: str) -> bool:
    return bool(_HEDGE.search(clause))


def _scaled(n: _Num, f: AnswerField) -> float:
    """A number as the field's value. A fraction is never read as a percentage (``0.93`` is not 93 %), nor a
    percentage as a fraction: a share written with ``%`` counts only for a percent field (:func:`_number_claims`)."""
    return n.value
