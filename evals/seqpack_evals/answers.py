"""Read an agent's answer and grade each answer field: the final block first, the free text as a fallback.

**The block.** A fenced block tagged ``answer`` (or, without one, the ``name: value`` lines after a
``Final answer:`` line) gives one value per field. A line may name the field in full
(``train.micro_batch_size``) or by its last part (``micro_batch_size``).

**The free text.** Every mention of a field (its name, with ``_``, space or ``-`` between the
words, or one of its aliases) is followed to the end of its clause, and the first value there
is its claim. On the way:

* parenthesised and bracketed asides are skipped (``pad_seq_to_mult = lcm(4, 8) = 8`` claims 8,
  which is how ``seqpack align`` prints it); so are the operands of ``*``, ``x``, ``/`` and the
  left side of ``=`` chains (``4 x 2 x 4 = 32`` claims 32);
* numbers can be written with separators (``65,536``), with ``K``/``M`` (``64K``, ``4.19M``), as
  words (``eight``, ``sixty-four``, ``a single``), as a percentage (``92.9 %``, ``92.9 percent``);
* a value after a comparison (``> 1``, ``at least 2``) is a bound, not a claim;
* a quoted value is not a claim: ``got 4``, ``from 4 to 1`` (claims 1), ``4 -> 1`` (claims 1),
  ``currently 4``, ``4, which is wrong``, ``your config has ... 4``;
* a negated value is a claim *against* it: ``do not set micro_batch_size to 1``,
  ``pad_seq_to_mult is not 8``, ``X is not needed``;
* a list (``1, 2, 4 or 8``) claims every member.

**Grading.** A field is right when some claim gives the true value (within the field's
tolerance), no claim gives another value (two different values are a contradiction, whether in
the block, the text or between them), and no negated claim denies the true value.

Forbidden claims (:func:`forbidden_hits`) are patterns of dangerous advice; a match inside a
negated clause ("never enable in-batch packing together with offline packs") does not count.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any, Iterable, Sequence

from seqpack_evals.fields import BLOCK_TAG, AnswerField
from seqpack_evals.answer_text import (  # the reader's vocabulary: numbers, clauses, quotes, units
    _numbers,
    _QUOTE_BEFORE,
    _QUOTE_CLAUSE,
    _QUOTE_AFTER,
    _QUOTE_AFTER_STRICT,
    _OPTION_QUOTE_AFTER,
    _COMPARATOR,
    _OPERAND_AFTER,
    _OPERAND_BEFORE,
    _ARROW,
    _LIST_END,
    _LIST_SEP,
    normalise,
    _blank_asides,
    _clause_start,
    _clause_end,
    _in_quote_span,
    _quoted_line,
    _negated,
    Claim,
    mask_identifiers,
    _field_words,
    _bad_unit,
    _sentence,
    _bad_unit_before,
    _hedged,
    _scaled,
)

_FENCE = re.compile(r"```[ \t]*" + BLOCK_TAG + r"[ \t]*\n(.*?)(?:```|\Z)", re.I | re.S)
_FINAL_HEAD = re.compile(r"^[ \t>#*-]*(?:final answers?|answers?)[ \t]*:?[ \t]*$", re.I | re.M)
_LINE = re.compile(r"^[ \t]*(?:[-*][ \t]+)?([A-Za-z][\w.\- ]{0,80}?)[ \t]*(?::|=)[ \t]*(.*?)[ \t]*$")

# ------------------------------------------------------------------------------------------------
# The answer block
# ------------------------------------------------------------------------------------------------


def _key(name: str) -> str:
    return re.sub(r"[\s-]+", "_", name.strip().lower())


def split_block(text: str) -> tuple[list[tuple[str, str]], str]:
    """``(name, raw value)`` lines of every answer block, and the text without the blocks."""
    lines: list[tuple[str, str]] = []
    rest = text
    blocks = list(_FENCE.finditer(text))
    if blocks:
        for m in blocks:
            lines += [(g.group(1), g.group(2)) for g in map(_LINE.match, m.group(1).splitlines()) if g]
        rest = _FENCE.sub("\n", text)
        return lines, rest
    head = None
    for head in _FINAL_HEAD.finditer(text):
        pass
    if head is not None:
        tail = text[head.end():].lstrip("\n").splitlines()
        taken = 0
        for line in tail:
            g = _LINE.match(line)
            if not g or not line.strip():
                break
            lines.append((g.group(1), g.group(2)))
            taken += 1
        if lines:
            rest = text[:head.start()] + "\n" + "\n".join(tail[taken:])
    return lines, rest


def split_blocks(text: str) -> list[list[tuple[str, str]]]:
    """The ``(name, raw value)`` lines of each answer block, in order (one list per fenced block; without a fenced
    block, the lines after the last ``Final answer:`` line as one list)."""
    blocks = list(_FENCE.finditer(text))
    if blocks:
        return [[(g.group(1), g.group(2)) for g in map(_LINE.match, m.group(1).splitlines()) if g] for m in blocks]
    lines, _rest = split_block(text)
    return [lines] if lines else []


def _block_lines_for(f: AnswerField, lines: Sequence[tuple[str, str]], fields: Sequence[AnswerField]) -> list[str]:
    full = _key(f.name)
    leaf = full.rsplit(".", 1)[-1]
    leaf_unique = sum(1 for g in fields if _key(g.name).rsplit(".", 1)[-1] == leaf) == 1
    out = []
    for name, raw in lines:
        k = _key(name)
        if k == full or (leaf_unique and k.rsplit(".", 1)[-1] == leaf and k.endswith(leaf)):
            out.append(raw)
    return out


def final_block_lines(f: AnswerField, blocks: Sequence[Sequence[tuple[str, str]]],
                      fields: Sequence[AnswerField]) -> list[str] | None:
    """The raw values the *last* answer block that names ``f`` gives it (None: no block names it).

    The final block is the answer: an earlier draft block, or the prompt's own template echoed back, is not."""
    for lines in reversed(blocks):
        raws = _block_lines_for(f, lines, fields)
        if raws:
            return raws
    return None


#: A value that only repeats the prompt's placeholder (``<integer>``, ``<true | false>``): no answer.
_PLACEHOLDER = re.compile(r"^\s*<[^<>]*>\s*$")


# ------------------------------------------------------------------------------------------------
# Field mentions in free text
# ------------------------------------------------------------------------------------------------


@lru_cache(maxsize=2048)
def _alias_re(name: str, aliases: tuple[str, ...]) -> re.Pattern[str]:
    parts = name.split(".")
    leaf = r"[_ -]?".join(re.escape(w) for w in parts[-1].split("_"))
    # a dotted name: each section may be left out, a wrong one does not match; a bare name: any sections
    prefix = "".join(rf"(?:{re.escape(p)}\.)?" for p in parts[:-1]) if len(parts) > 1 else r"(?:\w+\.)*"
    own = rf"(?<![\w.])(?:\w*(?:cfg|config)\.)?{prefix}{leaf}(?![\w])"
    return re.compile("|".join([own, *(f"(?:{a})" for a in aliases)]), re.I)


@lru_cache(maxsize=4096)
def _compile(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.I)


def compile_check(check: str) -> re.Pattern[str]:
    """The pattern of a forbidden check (``re:PATTERN`` or a literal); UsageError when it is not valid."""
    from seqpack.core.errors import UsageError

    if not isinstance(check, str) or not check or check == "re:":
        raise UsageError(f"a check must be a non-empty string, got {check!r}", field="forbidden")
    try:
        return _compile(check[3:]) if check.startswith("re:") else _compile(re.escape(check))
    except re.error as exc:
        raise UsageError(f"invalid check pattern {check!r}: {exc}", field="forbidden") from None


_LINK_WORDS = frozenset("""
is are be being been should must need needs has have had to of at set sets setting equal equals exactly just only
value values the a an it its becomes become stays stay remains remain can will would then so here as per about around
roughly approximately total in keep drop lower raise reduce increase change down up back use using gives give comes
come out yields yield make goes go lcm gcd ceil that there this which we you i one's your our
put pin pinned choose pick take leave make it's get gets fixed fix correct right answer result comes number count
per exact therefore thus hence must shall always samples rows sequences items multiple multiples not never
don't doesn't isn't mustn't shouldn't can't cannot
""".split())
_BOUND_WORDS = re.compile(r"\b(?:greater|more|larger|bigger|less|smaller|fewer|least|most|above|below|over|under|"
                          r"exceeds?|exceeding|beyond|up to|no more)\b|[<>≥≤]", re.I)
_QUOTE_WORDS = re.compile(r"\b(?:got|was|were|from|currently|now|old|previous(?:ly)?|existing|instead|rather|"
                          r"replac\w*|left|still|had|default|before|today)\b", re.I)
#: "I got", "and got": the answer reports its own result (not a quotation of the input).
_OWN_RESULT = re.compile(r"\b(?:i|we|and|it|this|that|which)\s+(?:got|gets|get)\b", re.I)
_QUALIFIER = re.compile(r"\bfor\s+[^,;:=.]{1,40}?(?=\s(?:is|are|should|must|=|:|comes)\b|\s?[:=])", re.I)
_OTHER_SUBJECT = re.compile(r"\b(?:each|every|per|fullest|largest|longest|biggest|smallest|shortest|first|last|"
                            r"single|one|any)\b", re.I)
_FORMULA = re.compile(r"[^\s,;]*[*×/÷+][^\s,;]*|\b\d+\s?x\s?(?=\d)|\bx\b")


def _between_kind(between: str) -> str:
    """``link`` (only linking words between a field and a value), ``bound``, ``quote`` or ``other``."""
    text = _QUALIFIER.sub(" ", between)
    text = _FORMULA.sub(" ", text)
    if "," in text:
        return "other"
    if _BOUND_WORDS.search(text):
        return "bound"
    if _QUOTE_WORDS.search(_OWN_RESULT.sub(" ", text)):
        return "quote"
    words = re.findall(r"[A-Za-z][A-Za-z'-]*", text)
    if len(words) <= 8 and all(w.lower() in _LINK_WORDS for w in words):
        return "link"
    return "other"


def _number_claims(window: str, f: AnswerField, *, clause_prefix: str, source: str, tail: str = "") -> list[Claim]:
    """Claims of a numeric field in ``window`` (the text right after a mention, to the clause end).

    A value counts when only linking words (``is``, ``=``, ``should be set to`` ...) stand between
    the mention and it; a quoted value (``from 4``, ``4 -> 1``, ``got 4``) is skipped and the next one
    read from there.
    """
    shown = _blank_asides(window)
    nums = _numbers(shown, f.k_unit)
    if _QUOTE_CLAUSE.search(clause_prefix):
        return []
    full = shown + tail
    anchor = 0
    for i, n in enumerate(nums):
        if n.start < anchor:
            continue
        before, after = shown[:n.start], full[n.end:]
        glued = n.start == 0 and shown[:1].isdigit()
        if not glued and re.search(r"[A-Za-z_]$", before):
            continue
        if _OPERAND_AFTER.match(after) or _OPERAND_BEFORE.search(before):
            continue
        if (n.percent and f.kind != "percent") or _bad_unit(f, after) or _bad_unit_before(f, before):
            anchor = n.end  # a share or another unit (8 nodes, 576 pixels, 32 per GPU): not this field's value
            continue
        kind = _between_kind(shown[anchor:n.start])
        if kind == "bound" and _bound_is_value(f, shown[anchor:n.start]):
            kind = "link"  # "DP at most 8" answers max_data_parallel_size
        if kind == "bound":
            return []
        nxt = nums[i + 1] if i + 1 < len(nums) else None
        arrow = _ARROW.match(after)
        if kind == "quote" or (kind == "link" and (_QUOTE_AFTER.match(after) or (
                arrow and nxt is not None and nxt.start == n.end + arrow.end()))):
            anchor = n.end + (arrow.end() if arrow else 0)
            continue
        if kind != "link":
            return []
        negated = _negated(clause_prefix + _BOUND_VALUE.sub(" ", before))
        values = [n]
        j, pos = i + 1, n.end
        while j < len(nums):
            sep = _LIST_SEP.match(shown[pos:])
            if not sep or nums[j].start != pos + sep.end() or not _LIST_END.match(full[nums[j].end:]):
                break
            values.append(nums[j])
            pos = nums[j].end
            j += 1
        excerpt = window[: values[-1].end].strip()
        return [Claim(_scaled(v, f), source, negated, excerpt) for v in values]
    return []


#: The words of a bound that states a maximum itself ("cannot exceed 8"): no negation of the value.
_BOUND_VALUE = re.compile(r"\b(?:cannot|can't|can not|must not|does not|doesn't|may not|no) (?:exceed|go above|be more than|"
                          r"more than|larger than)\b", re.I)


def _bound_is_value(f: AnswerField, between: str) -> bool:
    """For a maximum (minimum) field, ``at most N`` (``at least N``) states the value itself."""
    words = _field_words(f)
    if re.search(r"\b(?:max|maximum|largest|most|limit)\b", words):
        return bool(re.search(r"\b(?:at most|no more than|up to|no larger than|maximum|max|(?:cannot|can't|can not|"
                              r"must not|does not|doesn't|may not) (?:exceed|go above|be more than))\b", between, re.I))
    if re.search(r"\b(?:min|minimum|smallest|least)\b", words):
        return bool(re.search(r"\b(?:at least|no less than|no fewer than|minimum|min)\b", between, re.I))
    return False


def _leading_number_claims(text: str, start: int, f: AnswerField) -> list[Claim]:
    """A value written just before the mention (``15 packs``, ``forty samples``)."""
    lo = max(0, start - 40)
    head = text[lo:start]
    nums = _numbers(head, f.k_unit)
    if not nums:
        return []
    n = nums[-1]
    gap = head[n.end:]
    per = r"(?:per[ \t]+)?" if "batch" in _field_words(f) else ""
    if not re.fullmatch(rf"[ \t]+(?:[A-Za-z-]+[ \t]+)?{per}", gap) or (n.percent and f.kind != "percent"):
        return []
    if _bad_unit(f, gap + text[start:start + 30]) and not re.fullmatch(r"[ \t]+", gap):
        return []
    before = head[:n.start]
    if re.search(r"\d[ \t]*(?:to|-|–|or)[ \t]*$", before):
        return []  # "2 to 4 micro-batches", "2 or 4 packs": a range or a choice is no single value
    listed = re.search(r"\s/\s$", before)  # "15 packs / 40 sequences": a list, not a division
    if re.search(r"[A-Za-z_]$", before) or (_OPERAND_BEFORE.search(before) and not listed) \
            or _OPERAND_AFTER.match(head[n.end:]):
        return []
    if _BOUND_WORDS.search(before[-16:]) or _QUOTE_WORDS.search(_OWN_RESULT.sub(" ", before[-16:])[-12:]):
        return []
    cstart = _clause_start(text, lo + n.start)
    prefix = text[cstart:lo + n.start]
    own_scope = re.search(r"\bper\b", _field_words(f))  # a per-rank field: "each rank runs 4" is its value
    if _QUOTE_CLAUSE.search(prefix) or (_OTHER_SUBJECT.search(prefix) and not (
            own_scope and not re.search(r"\b(?:fullest|largest|longest|biggest|smallest|shortest|first|last)\b",
                                        prefix, re.I))):
        return []
    return [Claim(_scaled(n, f), "text", _negated(prefix), head[n.start:].strip())]


def _option_hits(text: str, f: AnswerField) -> list[tuple[int, int, str]]:
    """``(start, end, label)`` of option spellings in ``text``, longest first where they overlap."""
    hits = []
    for label, forms in f.options.items():
        for form in forms:
            hits += [(m.start(), m.end(), label) for m in _compile(form).finditer(text) if m.end() > m.start()]
    hits.sort(key=lambda h: (h[0], -(h[1] - h[0])))
    out: list[tuple[int, int, str]] = []
    for h in hits:
        if out and h[0] < out[-1][1]:
            continue
        out.append(h)
    return out


def _option_claims(text: str, f: AnswerField, lo: int, hi: int, source: str) -> list[Claim]:
    """Claims of a choice/set field among option spellings in ``text[lo:hi]`` (a clause or a window).

    Negation is read between the previous option spelling (or the clause start) and this one, so
    "not supported (the recipes opt out)" denies nothing.
    """
    out = []
    seg = text[lo:hi]
    prev_end = 0
    for start, end, label in _option_hits(seg, f):
        abs_start = lo + start
        if _quoted_line(text, abs_start) or _in_quote_span(text, abs_start):
            prev_end = lo + end
            continue
        cstart = max(_clause_start(text, abs_start), prev_end)
        prefix = text[cstart:abs_start]
        after = text[lo + end: _clause_end(text, lo + end)]
        prev_end = lo + end
        if _QUOTE_CLAUSE.search(prefix) or _QUOTE_BEFORE.search(prefix[-30:]) or _OPTION_QUOTE_AFTER.match(after):
            continue
        out.append(Claim(label, source, _negated(prefix), text[abs_start:lo + end]))
    return out


def _window_option_claims(text: str, f: AnswerField, m: re.Match[str]) -> list[Claim]:
    """An option right after the mention (``dataloader_type: single``) or right before it (``turn off X``)."""
    end = _clause_end(text, m.end())
    cstart = _clause_start(text, m.start())
    hits = _option_hits(text[m.end():end], f)
    for k, (start, stop, label) in enumerate(hits):
        kind = _between_kind(text[m.end():m.end() + start])
        if kind != "link":
            break
        after = text[m.end() + stop:_clause_end(text, m.end() + stop)]
        if _OPTION_QUOTE_AFTER.match(after) or _QUOTE_CLAUSE.search(text[cstart:m.start()]):
            break
        prefix = text[cstart:m.end() + start]
        out = [Claim(label, "text", _negated(prefix), text[m.start():m.end() + stop])]
        for start2, stop2, label2 in hits[k + 1:]:  # "true or false", "yes/no": a list is no single answer
            if not _LIST_SEP.fullmatch(text[m.end() + stop:m.end() + start2] + " "):
                break
            out.append(Claim(label2, "text", False, text[m.start():m.end() + stop2]))
            stop = stop2
        return out
    lo = max(cstart, m.start() - 30)
    hits = [h for h in _option_hits(text[lo:m.start()], f)
            if re.fullmatch(r"[ \t]*(?:(?:the|a|an|any|all)[ \t]+)?", text[lo + h[1]:m.start()])]
    if hits:
        start, stop, label = hits[-1]
        return [Claim(label, "text", _negated(text[cstart:lo + start]), text[lo + start:m.end()])]
    return []


#: Words that take back what was said before them.
_CORRECTION = re.compile(r"\b(?:actually|on second thought|correction|scratch that|i mean|wait)\b", re.I)


def _text_claims(text: str, f: AnswerField) -> list[Claim]:
    _last_at = -1
    if f.kind in ("choice", "set") and f.anywhere:
        return _drop_hedged(text, _option_claims(text, f, 0, len(text), "text"))
    if f.kind in ("int", "number", "percent"):
        text = mask_identifiers(text)
    out: list[Claim] = []
    corrections = [c.start() for c in _CORRECTION.finditer(text)]
    for m in _alias_re(f.name, tuple(f.aliases)).finditer(text):
        if _quoted_line(text, m.start()) or _in_quote_span(text, m.start()):
            continue
        if out and any(out_at < c < m.start() for c in corrections for out_at in [_last_at]):
            out = []  # "... 4 ... actually, 8": a correction replaces what came before it
        _last_at = m.start()
        if f.kind in ("choice", "set"):
            out += _drop_hedged(text, _window_option_claims(text, f, m), m.start())
            continue
        start = _clause_start(text, m.start())
        end = _clause_end(text, m.end())
        if _hedged(text[start:end]) or _hedged(_sentence(text, m.start())):
            continue  # "pad_seq_to_mult might be 6", "1 is recommended but 2 may work": a guess is not an answer
        found = _number_claims(text[m.end():end], f, clause_prefix=text[start:m.start()], source="text",
                               tail=text[end:end + 60])
        found = found or _leading_number_claims(text, m.start(), f)
        if found and all(c.negated for c in found):
            found += _but_claims(text, m.end(), f)  # "not 16 packs but 15"
        out += found
    return out


_BUT = re.compile(r"(?:^|[\s,])(?:but|rather)[ \t]+(?:it(?:'s| is)[ \t]+|rather[ \t]+)?(?:of|to|at|a multiple of)?[ \t]*")


def _but_claims(text: str, pos: int, f: AnswerField) -> list[Claim]:
    """The value after ``but`` that replaces a denied one (``not 16 packs but 15``, ``not a multiple of 3 but of 6``)."""
    near = text[pos:pos + 40]
    m = _BUT.search(near)
    if not m:
        return []
    rest = near[m.end():]
    nums = _numbers(rest, f.k_unit)
    if not nums or nums[0].start != 0 or _bad_unit(f, rest[nums[0].end:]):
        return []
    return [Claim(_scaled(nums[0], f), "text", False, rest[:nums[0].end])]


def _drop_hedged(text: str, claims: list[Claim], at: int | None = None) -> list[Claim]:
    """Option claims whose clause is a guess (``probably a warning``) are not answers."""
    out = []
    for c in claims:
        pos = text.find(c.excerpt, at or 0) if c.excerpt else -1
        if pos >= 0 and _hedged(text[_clause_start(text, pos):_clause_end(text, pos)]):
            continue
        out.append(c)
    return out


# ------------------------------------------------------------------------------------------------
# Tables and terse answers
# ------------------------------------------------------------------------------------------------

_TABLE_SEP = re.compile(r"^[ \t|:-]+$")
_VALUE_HEAD = re.compile(r"value|required|needed|needs|fix|proposed|correct|should|new|answer|result|after|set to|"
                         r"supported|accepted|valid|ok\b|multiple|count|tokens|\bgbs\b|efficiency|slots|\bdp\b|"
                         r"truncated|packs|sequences|grid|severity|default", re.I)
_QUOTE_HEAD = re.compile(r"\b(?:current|yours?|got|before|old|was|now|config|today|existing)\b", re.I)


def _table_candidate(stripped: str) -> bool:
    if stripped.startswith("```") or "|" not in stripped:
        return False
    return stripped.startswith("|") or bool(re.search(r"\s\|\s", f" {stripped} "))


def _table_blocks(lines: Sequence[str]) -> list[list[int]]:
    """Runs of line indexes that form a table: pipe-separated cells, with a separator row or two pipes a line."""
    blocks: list[list[int]] = []
    run: list[int] = []
    for k, line in enumerate([*lines, ""]):
        if k < len(lines) and _table_candidate(line.strip()):
            run.append(k)
            continue
        if run and (any(_TABLE_SEP.fullmatch(lines[i].strip()) for i in run)
                    or all(lines[i].count("|") >= 2 for i in run)):
            blocks.append(run)
        run = []
    return blocks


def split_tables(text: str) -> tuple[list[list[list[str]]], str]:
    """The tables of an answer (rows of cells; ``| a | b |`` or ``a | b`` lines, separator rows dropped) and the text
    with their lines blanked."""
    lines = text.split("\n")
    tables = []
    for block in _table_blocks(lines):
        rows = [[c.strip() for c in lines[i].strip().strip("|").split("|")] for i in block
                if not _TABLE_SEP.fullmatch(lines[i].strip())]
        if rows:
            tables.append(rows)
        for i in block:
            lines[i] = ""
    return tables, "\n".join(lines)


def _without_table_heads(text: str) -> str:
    """``text`` with the header row of every table blanked (a column named "supported" answers nothing)."""
    lines = text.split("\n")
    for block in _table_blocks(lines):
        lines[block[0]] = ""
    return "\n".join(lines)


def _cell_claims(cell: str, f: AnswerField) -> list[Claim]:
    """The value a table cell gives for ``f``."""
    if f.kind in ("choice", "set"):
        labels = [label for label in f.options if cell.strip().lower() == label.lower()]
        labels = labels or list(dict.fromkeys(h[2] for h in _option_hits(cell, f)))
        if f.kind == "set":
            return [Claim(tuple(sorted(set(labels))), "text", False, cell)] if labels else []
        bare = cell.strip().lower() in {label.lower() for label in f.options}
        return [Claim(label, "text", False if bare else _negated(cell), cell) for label in labels]
    shown = mask_identifiers(cell)
    for n in _numbers(shown, f.k_unit):
        if (n.percent and f.kind != "percent") or _bad_unit(f, shown[n.end:]):
            continue
        if _OPERAND_AFTER.match(shown[n.end:]) or _OPERAND_BEFORE.search(shown[:n.start]):
            continue
        return [Claim(_scaled(n, f), "text", False, cell)]
    return []


def _table_claims(tables: Sequence[list[list[str]]], f: AnswerField) -> list[Claim]:
    """Claims of ``f`` in tables: a row whose key cell names the field (the value from the last column that is
    not a quotation of the input, such as "current" or "yours"), or a one-row table whose header names it."""
    pattern = _alias_re(f.name, tuple(f.aliases))
    out: list[Claim] = []
    for rows in tables:
        head, body = rows[0], rows[1:]
        quoted = {j for j, h in enumerate(head) if _QUOTE_HEAD.search(h)} if body else set()
        hits = []
        for row in body or rows:
            for j, cell in enumerate(row[:-1]):
                m = pattern.search(mask_identifiers(cell) if f.kind in ("int", "number", "percent") else cell)
                if m:
                    full = m.end() - m.start() >= len(cell.strip()) - 2
                    hits.append((full, row, j))
                    break
        if any(h[0] for h in hits):
            hits = [h for h in hits if h[0]]
        for _full, row, j in hits:
            cols = [k for k in range(j + 1, len(row)) if k not in quoted]
            if cols:
                out += _cell_claims(row[cols[-1]], f)
        if not hits and len(body) == 1:
            for j, h in enumerate(head):
                if j < len(body[0]) and pattern.search(h) and j not in quoted:
                    out += _cell_claims(body[0][j], f)
        if not hits and body:
            out += _keyed_row_claims(head, body, f)
    return out


#: How a table header names the quantity of a ``<quantity>_<N>`` field (``gbs_2048``: the GBS column of row 2048).
_KEYED_HEADS = {"gbs": r"\bgbs\b|global[ _]batch", "valid": r"\bvalid\b|\bok\b|\bworks?\b|\bfits?\b",
                "global_batch_size": r"\bgbs\b|global[ _]batch"}


def _keyed_row_claims(head: Sequence[str], body: Sequence[Sequence[str]], f: AnswerField) -> list[Claim]:
    """A field named ``<quantity>_<N>`` (``gbs_2048``, ``valid_8192``) read from a table: the row whose first cell
    is N (``2048``, ``2K``) and the column whose header names the quantity."""
    m = re.fullmatch(r"(?P<q>[a-z_]+?)_(?P<n>\d+)", f.name.rsplit(".", 1)[-1])
    if not m:
        return []
    key = float(m.group("n"))
    names = re.compile(_KEYED_HEADS.get(m.group("q"), re.escape(m.group("q").replace("_", " "))), re.I)
    cols = [j for j, h in enumerate(head) if names.search(h.replace("_", " "))]
    out: list[Claim] = []
    for row in body:
        nums = _numbers(row[0], f.k_unit) if row else []
        if len(nums) == 1 and nums[0].value == key:
            out += [c for j in cols if j < len(row) for c in _cell_claims(row[j], f)]
    return out


def _lone_claims(text: str, f: AnswerField) -> list[Claim]:
    """A terse answer's value: the one number of its first line (``576.``, ``No, needs a multiple of 6.``), or its
    leading yes/no. Used only for a task with a single field of that kind and when nothing else names it."""
    first = next((line for line in text.split("\n") if line.strip()), "")
    if _hedged(first):
        return []
    if f.kind == "choice":
        if not _VERDICT_FIELD.search(f.name.rsplit(".", 1)[-1]):
            return []  # a leading yes/no answers the user's question, which may be the field's opposite
        m = re.match(r"^[ \t>*-]*(yes|no)\b", first, re.I)
        label = m and next((o for o in f.options if o.lower() == m.group(1).lower()), None)
        return [Claim(label, "text", False, m.group(0))] if label else []
    shown = _blank_asides(mask_identifiers(first))
    nums = [n for n in _numbers(shown, f.k_unit)
            if not ((n.percent and f.kind != "percent") or _bad_unit(f, shown[n.end:])
                    or _bad_unit_before(f, shown[:n.start])
                    or _OPERAND_AFTER.match(shown[n.end:]) or _OPERAND_BEFORE.search(shown[:n.start])
                    or _COMPARATOR.search(shown[:n.start]) or re.search(r"[A-Za-z_]$", shown[:n.start]))]
    if len(nums) != 1:
        return []
    n = nums[0]
    return [Claim(_scaled(n, f), "text", _negated(shown[_clause_start(shown, n.start):n.start]), first.strip())]


def _block_claims(raw_values: Iterable[str], f: AnswerField) -> list[Claim]:
    out: list[Claim] = []
    for raw in raw_values:
        text = normalise(raw)
        if f.kind in ("choice", "set"):
            exact = ([label for label in f.options if text.strip() == label]
                     or [label for label in f.options if text.strip().lower() == label.lower()])
            # the block may name options by their labels (what the prompt's placeholder shows) or spellings
            named = [label for label in f.options
                     if re.search(r"(?<![\w-])" + re.escape(label) + r"(?![\w-])", text, re.I)]
            labels = exact or list(dict.fromkeys([h[2] for h in _option_hits(text, f)] + named))
            if f.kind == "set" and not labels and re.fullmatch(r"\s*(?:none|nothing|-|\[\]|n/?a)?\s*", text, re.I):
                out.append(Claim((), "block", False, raw))
                continue
            if f.kind == "set":
                out.append(Claim(tuple(sorted(set(labels))), "block", False, raw))
            else:
                out += [Claim(label, "block", False, raw) for label in dict.fromkeys(labels)]
        else:
            claims = _number_claims(text, f, clause_prefix="", source="block")
            out += claims or []
    return out


# ------------------------------------------------------------------------------------------------
# Grading
# ------------------------------------------------------------------------------------------------


@dataclass
class FieldResult:
    """How one field was graded, with the evidence."""

    name: str
    expected: Any
    correct: bool
    reason: str
    claims: list[Claim] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        out = asdict(self)
        out["claims"] = [c.to_dict() for c in self.claims]
        return out


def _same(f: AnswerField, a: Any, b: Any) -> bool:
    if f.kind in ("int", "number", "percent"):
        slack = max(f.tolerance, f.rel_tolerance * abs(float(b)))
        return math.isclose(float(a), float(b), abs_tol=slack + 1e-9)
    if f.kind == "set":
        return set(a) == set(b)
    return a == b


def _grade_set(f: AnswerField, block: list[Claim], text: list[Claim]) -> FieldResult:
    """A set is right when the block (or, without one, the text) names exactly the true set, the text names
    nothing outside it, and nothing in it is denied."""
    truth = set(f.value)
    positive = {c.value for c in text if not c.negated}
    denied = {c.value for c in text if c.negated}
    claims = block + [Claim(v, "text", c_neg, v) for v, c_neg in
                      [*((v, False) for v in sorted(positive)), *((v, True) for v in sorted(denied))]]
    expected = sorted(truth)
    if denied & truth:
        return FieldResult(f.name, expected, False, f"denies {sorted(denied & truth)[0]}", claims)
    if positive - truth:
        return FieldResult(f.name, expected, False, f"names {sorted(positive - truth)[0]}, which is wrong", claims)
    if block:
        wrong = [c for c in block if set(c.value) != truth]
        if wrong:
            return FieldResult(f.name, expected, False, f"gave {', '.join(wrong[0].value) or 'none'}", claims)
        return FieldResult(f.name, expected, True, "right", claims)
    if not positive and not truth:
        return FieldResult(f.name, expected, False, "not answered", claims)
    if positive != truth:
        return FieldResult(f.name, expected, False, f"misses {sorted(truth - positive)[0]}", claims)
    return FieldResult(f.name, expected, True, "right", claims)


def _named_option_claims(text: str, f: AnswerField) -> tuple[list[Claim], str]:
    """``valid: no``, ``intact = yes``: a choice field written by its own name with an option label after it (the
    name itself may spell an option, as "valid" does); returns the claims and the text with those spans blanked."""
    if f.kind != "choice":
        return [], text
    leaf = re.escape(f.name.rsplit(".", 1)[-1]).replace("_", "[_ ]")
    labels = "|".join(sorted((re.escape(o) for o in f.options), key=len, reverse=True))
    pattern = re.compile(rf"(?<![\w.-]){leaf}[ \t]*[:=][ \t]*({labels})(?:[ \t]*(?:/|,|\bor\b)[ \t]*({labels}))*\b",
                         re.I)
    claims: list[Claim] = []
    for m in pattern.finditer(text):
        said = re.findall(labels, text[m.start(1):m.end()], re.I)
        claims += [Claim(next(o for o in f.options if o.lower() == v.lower()), "text", False, m.group(0)) for v in said]
    return claims, pattern.sub(lambda m: " " * len(m.group(0)), text)


def _grade_block(f: AnswerField, raws: Sequence[str]) -> FieldResult:
    """The field as the final answer block gives it: right when it gives the true value and no other one; prose
    elsewhere in the answer (the old value, rejected alternatives, a before/after) does not count against it."""
    values = [r for r in raws if not _PLACEHOLDER.match(normalise(r))]
    claims = _block_claims(values, f)
    expected = sorted(f.value) if f.kind == "set" else f.value
    asserted = [c for c in claims if not c.negated]
    if not asserted:
        return FieldResult(f.name, expected, False, "not answered (the answer block gives no value)", claims)
    wrong = [c for c in asserted if not _same(f, c.value, f.value)]
    if not wrong:
        return FieldResult(f.name, expected, True, "right", claims)
    shown = ", ".join(wrong[0].value) if f.kind == "set" else repr(wrong[0].value)
    reason = ("contradicts itself in the answer block" if len(wrong) < len(asserted) else "wrong value") + \
             f": {shown or 'none'} (block: {wrong[0].excerpt!r})"
    return FieldResult(f.name, expected, False, reason, claims)


def grade_field(f: AnswerField, block_lines: Sequence[tuple[str, str]], text: str,
                fields: Sequence[AnswerField] = (), *,
                blocks: Sequence[Sequence[tuple[str, str]]] | None = None) -> FieldResult:
    """Grade one field: from the final answer block when one names it (``blocks``: every block's lines, as
    :func:`split_blocks` returns them; default: ``block_lines`` as one block), else from the free text and its
    tables (``text``: the answer without its blocks, :func:`split_block`)."""
    fields = fields or [f]
    raws = final_block_lines(f, blocks if blocks is not None else [block_lines], fields)
    if raws is not None:
        return _grade_block(f, raws)
    claims: list[Claim] = []
    tables, prose = split_tables(text)
    if f.kind in ("choice", "set") and f.anywhere:
        named, text = _named_option_claims(text, f)
        text_claims = named + _text_claims(_without_table_heads(text), f)
        if f.kind == "choice":
            text_claims += _table_claims(tables, f)
    else:
        text_claims = _text_claims(prose, f) + _table_claims(tables, f)
    alone = sum(1 for g in fields if _numeric(g) == _numeric(f) and g.kind != "set") == 1 and f.kind != "set"
    if not claims and not text_claims and alone and not block_lines:
        text_claims = _lone_claims(prose, f)
    if f.kind == "choice" and len(f.options) == 2:  # denying one of two options asserts the other
        other = {a: b for a, b in (tuple(f.options), tuple(f.options)[::-1])}
        text_claims = [Claim(other[c.value], c.source, False, c.excerpt) if c.negated and c.value in other else c
                       for c in text_claims]
    if f.kind == "set":
        return _grade_set(f, claims, text_claims)
    claims += text_claims
    asserted = [c for c in claims if not c.negated]
    if not asserted:
        denial = [c for c in claims if c.negated and _same(f, c.value, f.value)]
        reason = f"denies the true value ({denial[0].excerpt!r})" if denial else "not answered"
        return FieldResult(f.name, f.value, False, reason, claims)
    others = [c for c in asserted if not _same(f, c.value, f.value)]
    if others:
        reason = ("contradicts itself" if len(others) < len(asserted) else "wrong value") + \
                 f": {others[0].value!r} ({others[0].source}: {others[0].excerpt!r})"
        return FieldResult(f.name, f.value, False, reason, claims)
    denial = [c for c in claims if c.negated and _same(f, c.value, f.value)]
    if denial:
        return FieldResult(f.name, f.value, False, f"also denies the true value ({denial[0].excerpt!r})", claims)
    return FieldResult(f.name, f.value, True, "right", claims)


#: Verdict words: how answers say an error or a warning, a rejection or an acceptance.
_ERROR_WORDS = (r"\berror\b", r"\b(?:is |are |gets |will be |would be |be )?(?:rejected|refused)\b", r"\brefuses\b",
                r"\bfatal\b", r"\berrors? out\b", r"\bwon't (?:start|run|launch)\b", r"\bwill not (?:start|run|launch)\b",
                r"\bblocks? (?:the )?(?:run|launch|job|start)", r"\braises\b")
_WARNING_WORDS = (r"\bwarning\b", r"\bwarns?\b", r"\badvisory\b", r"\bstill (?:runs|starts|trains|launches)\b",
                  r"\bnon-?fatal\b")
_REJECT_WORDS = (r"\b(?:is |are |gets |will be |would be |be )?(?:rejected|refused)\b", r"\brefuses\b", r"\brejects\b",
                 r"\braises\b", r"\bfails(?: the check)?\b", r"\bnot (?:accepted|valid|allowed)\b", r"\binvalid\b",
                 r"\bwon't (?:start|run|accept)\b", r"\bcannot run\b", r"\bunsupported\b")
_ACCEPT_WORDS: tuple[str, ...] = ()
#: How an answer denies one subject of several ("MTP isn't supported", "no MTP", "MTP: no").
_SUBJECT_NO = (r"\bno\b", r"\b(?:isn't|aren't|is not|are not|not) (?:supported|accepted|allowed|valid|possible)\b",
               r"\b(?:is |are )?(?:rejected|refused)\b")  # acceptance words are too common in passing ("the next valid length")
_VERDICT_FIELD = re.compile(r"^(?:accepted|valid|bridge_accepts|fits|supported)$|_(?:accepted|valid|supported)$")


def augment(f: AnswerField, fields: Sequence[AnswerField]) -> AnswerField:
    """``f`` with the reader's own vocabulary added: verdict words for severity and accepted/valid fields, the
    common names of multiples, alignments, token slots and pack lengths. The true value is unchanged."""
    from dataclasses import replace

    name = f.name.rsplit(".", 1)[-1]
    if f.kind == "choice" and "malformed JSON" in f.options:
        return replace(f, options={**f.options, "malformed JSON": (*f.options["malformed JSON"],
                                                                   r"\b(?:broken|invalid|bad|not valid) JSON\b")})
    if f.kind == "choice" and set(f.options) == {"error", "warning"}:
        return replace(f, options={"error": (*f.options["error"], *_ERROR_WORDS),
                                   "warning": (*f.options["warning"], *_WARNING_WORDS)}, anywhere=True)
    if f.kind == "choice" and set(f.options) == {"yes", "no"} and _VERDICT_FIELD.search(name):
        verdicts = [g for g in fields if g.kind == "choice" and _VERDICT_FIELD.search(g.name.rsplit(".", 1)[-1])]
        if len(verdicts) == 1:
            return replace(f, options={"yes": (*f.options["yes"], *_ACCEPT_WORDS),
                                       "no": (*f.options["no"], *_REJECT_WORDS)}, anywhere=True)
        if f.aliases:  # one of several subjects ("MTP", "CUDA graphs"): read next to its own name
            return replace(f, options={"yes": (*f.options["yes"], r"\byes\b"),
                                       "no": (*f.options["no"], *_SUBJECT_NO)})
        return f
    extra: tuple[str, ...] = ()
    if name.endswith(("_multiple", "_divisor")) and sum(g.name.endswith(("_multiple", "_divisor")) for g in fields) == 1:
        extra = (r"\bmultiples? of\b", r"\bdivisible by\b", r"\bmultiple\b")
    elif name == "pad_seq_to_mult":
        extra = (r"\b(?:per-?sequence |per-?sample )?alignment\b", r"\bpad(?=\s+\d)")
    elif name == "token_slots_per_step":
        extra = (r"\btoken (?:slots|positions)\b", r"\bslots\b")
    elif name == "micro_batches_per_step_per_rank":
        extra = (r"\bmicro-?batch(?:es)? (?:per (?:DP |data-parallel )?rank|each (?:DP |data-parallel )?rank)\b",
                 r"\bmicro-?batch(?:es)?\b")
    elif name == "packing_efficiency":
        extra = (r"\befficien(?:t|cy)\b",)
    elif name.startswith("max_") and sum(g.name.rsplit(".", 1)[-1].startswith("max_") for g in fields) == 1:
        extra = (r"\b(?:at most|max(?:imum)?|largest|biggest|fullest)\b",
                 r"\b(?:biggest|largest|fullest|busiest|longest) \w+ (?:has|holds|carries|contains|takes)\b")
    elif name in ("grid_h", "grid_w"):
        extra = (r"\b(?:grid )?height\b",) if name == "grid_h" else (r"\b(?:grid )?width\b",)
    elif name == "packed_sequence_size":
        extra = (r"\bpacked (?:sequence )?length\b", r"\bpack length\b", r"\bpacks? of\b", r"\bpack(?=\s+\d)")
    return replace(f, aliases=(*f.aliases, *extra)) if extra else f


def without_prompt(answer: str, prompt: str | None) -> str:
    """``answer`` with every line of ``prompt`` it repeats word for word blanked: an echo of the question answers
    nothing (its numbers are the question's, its answer block the empty template)."""
    if not prompt:
        return answer
    out = answer
    for line in sorted({ln.strip() for ln in prompt.splitlines() if len(ln.strip()) >= 12}, key=len, reverse=True):
        out = out.replace(line, " " * len(line))
    return out


def grade_answer(fields: Sequence[AnswerField], answer: str, prompt: str | None = None) -> list[FieldResult]:
    """Grade every field of a task against an answer (``prompt``: the task's prompt; what the answer copies of it
    is not read)."""
    text = normalise(without_prompt(answer, prompt))
    blocks = split_blocks(text)
    lines, rest = split_block(text)
    return [grade_field(augment(f, fields), lines, rest, fields, blocks=blocks) for f in fields]


def _numeric(f: AnswerField) -> bool:
    return f.kind in ("int", "number", "percent")


def forbidden_hits(checks: Iterable[str], answer: str) -> dict[str, str]:
    """Forbidden claims (``re:`` patterns or literals) found in ``answer``, outside negated clauses."""
    text = normalise(answer)
    out: dict[str, str] = {}
    for check in checks:
        for m in compile_check(check).finditer(text):
            start = _clause_start(text, m.start())
            prefix = text[start:m.start()]
            if (_negated(prefix) or _QUOTE_CLAUSE.search(text[start:m.end()]) or _QUOTE_AFTER_STRICT.match(text[m.end():])
                    or _quoted_line(text, m.start()) or _in_quote_span(text, m.start())):
                continue
            out[check] = m.group(0)
            break
    return out


__all__ = ["Claim", "FieldResult", "compile_check", "final_block_lines", "forbidden_hits", "grade_answer", "grade_field",
           "mask_identifiers", "normalise", "split_block", "split_blocks", "split_tables", "without_prompt"]
