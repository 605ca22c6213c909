"""Alignment formulas stated in the docs and the skill are evaluated against ``derive_alignment``.

Three kinds of statement are found by pattern, so a new page or a reworded formula is checked too:

* symbolic ``lcm(...)`` formulas over ``2*CP`` and ``CP*TP`` (with the qualifiers the text gives:
  "or 1", "under SP", or a following "(the CP*TP term only under sequence parallelism ...)" /
  "(1 when CP is 1)"), evaluated on a grid of TP, CP and SP;
* worked examples ``lcm(a, b) = c`` under a ``seqpack`` command: the arithmetic, and ``c`` against
  the command's ``--tp/--cp/--sp/--eval-cp``;
* ``2*CP=a`` / ``CP*TP=b`` pairs next to a ``pad_seq_to_mult = c``.

A product where the lcm belongs ("2 times CP, times TP") is refused outright.
"""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

import pytest

from seqpack.core.alignment import derive_alignment

ROOT = Path(__file__).resolve().parents[1]
SKILL = ROOT / "skills" / "megatron-sequence-packing"
PAGES = sorted(
    [ROOT / "README.md", SKILL / "SKILL.md", *(ROOT / "docs").glob("*.md"), *(SKILL / "references").glob("*.md")]
)
GRID = list(itertools.product((1, 2, 4, 8), (1, 2, 3, 4, 8), (False, True)))

SYMBOLIC = re.compile(r"lcm\(([^()]*(?:CP|TP)[^()]*)\)")
NUMERIC = re.compile(r"lcm\((\d+(?:,\s*\d+)+)\)\s*=\s*(\d+)")
PAIR = re.compile(r"2\*CP\s*=\s*(\d+)\D{1,12}CP\*TP\s*=\s*(\d+)")
PRODUCTS = re.compile(r"2 times CP, times TP|2\s*\*\s*CP\s*\*\s*TP|2\s*x\s*CP\s*x\s*TP", re.I)


def _rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _term(text: str, after: str):
    """A function (tp, cp, sp) -> int for one lcm argument, or None when the term is not understood."""
    t = text.strip().strip("`").strip()
    t = re.sub(r"\s+per train/eval CP$|\s+over train and eval CP$", "", t)
    cp_cond = " or 1" in t or re.search(r"\(1\s+when\s+CP\s+is\s+1|when\s+CP\s+is\s+above\s+1|CP > 1", after) is not None
    sp_cond = "under SP" in t or re.search(r"CP\*TP\s+term\s+only\s+under\s+sequence\s+parallelism", after) is not None
    core = t.replace(" or 1", "").replace(" under SP", "").replace(" ", "")
    if core == "2*CP":
        return lambda tp, cp, sp: 2 * cp if (cp > 1 or not cp_cond) else 1
    if core in ("CP*TP", "TP*CP"):
        return lambda tp, cp, sp: cp * tp if (not sp_cond or (sp and tp > 1)) else 1
    return None


def _symbolic_cases():
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in SYMBOLIC.finditer(text):
            yield pytest.param(page, m.group(1), text[m.end() : m.end() + 160], id=f"{_rel(page)}:{m.group(1)}")


@pytest.mark.parametrize("page, args, after", list(_symbolic_cases()))
def test_symbolic_lcm_formula_equals_derive_alignment(page, args, after):
    terms = [_term(a, after) for a in args.split(",")]
    assert None not in terms, f"{_rel(page)}: lcm({args}) has a term this test cannot evaluate; state it as 2*CP / CP*TP"
    for tp, cp, sp in GRID:
        stated = math.lcm(*(f(tp, cp, sp) for f in terms))
        want = derive_alignment(tp, cp, sp).pad_seq_to_mult
        assert stated == want, f"{_rel(page)}: lcm({args}) gives {stated} for TP{tp}/CP{cp}/SP={sp}; the code derives {want}"


def _command_topology(lines: list[str], index: int) -> tuple[int, int, bool, int | None] | None:
    for line in reversed(lines[max(0, index - 3) : index + 1]):
        if "seqpack " in line and not line.lstrip().startswith("#"):
            def flag(name: str) -> int | None:
                m = re.search(rf"--{name}[ =](\d+)", line)
                return int(m.group(1)) if m else None

            return flag("tp") or 1, flag("cp") or 1, "--sp" in line.split(), flag("eval-cp")
    return None


def _numeric_cases():
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            for m in NUMERIC.finditer(line):
                yield pytest.param(page, lines, i, m, id=f"{_rel(page)}:{i + 1}")


@pytest.mark.parametrize("page, lines, index, match", list(_numeric_cases()))
def test_worked_lcm_examples_are_right(page, lines, index, match):
    args = [int(x) for x in match.group(1).split(",")]
    result = int(match.group(2))
    assert math.lcm(*args) == result, f"{_rel(page)}:{index + 1}: lcm{tuple(args)} is {math.lcm(*args)}, not {result}"
    topology = _command_topology(lines, index)
    if topology is not None:
        tp, cp, sp, eval_cp = topology
        assert derive_alignment(tp, cp, sp, eval_cp).pad_seq_to_mult == result, (_rel(page), index + 1, topology)


def _pair_cases():
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in PAIR.finditer(text):
            yield pytest.param(page, m, text[max(0, m.start() - 120) : m.end() + 40], id=f"{_rel(page)}:{m.group(0)}")


@pytest.mark.parametrize("page, match, around", list(_pair_cases()))
def test_stated_cp_and_sp_terms_combine_by_lcm(page, match, around):
    cp2, cptp = int(match.group(1)), int(match.group(2))
    cp = cp2 // 2
    tp = cptp // cp
    assert 2 * cp == cp2 and cp * tp == cptp
    stated = re.search(r"pad_seq_to_mult\s*=\s*(\d+)", around)
    if stated:
        assert int(stated.group(1)) == derive_alignment(tp, cp, True).pad_seq_to_mult, (_rel(page), match.group(0))


#: Where a product is the rule: global-batch packing under Megatron-Bridge PR #6127 (2*CP*TP under SP).
PRODUCT_CONTEXT = re.compile(r"6127|global-batch|global_batch", re.I)


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_no_page_multiplies_where_the_lcm_belongs(page):
    text = page.read_text(encoding="utf-8")
    hits = [m.group(0) for m in PRODUCTS.finditer(text)
            if not PRODUCT_CONTEXT.search(text[max(0, m.start() - 160) : m.end() + 40])]
    assert hits == [], f"{_rel(page)} states the alignment as a product: {hits}"


def test_the_product_is_stated_only_for_global_batch_packing():
    from seqpack.core.alignment import alignment_requirement

    # the one place a product holds: PR #6127's global-batch rule, which the alignment module states
    for tp, cp, sp in GRID:
        req = alignment_requirement("global_batch", tp, cp, sp, bridge_version="main")
        assert req.required == (2 * cp if cp > 1 else 1) * (tp if sp and tp > 1 else 1)
    # negative control: a product in an offline sentence is still refused
    text = "offline packing pads every sequence to 2*CP*TP under SP"
    assert [m.group(0) for m in PRODUCTS.finditer(text)
            if not PRODUCT_CONTEXT.search(text[max(0, m.start() - 160) : m.end() + 40])]


def test_the_scanner_finds_formulas_and_rejects_wrong_ones():
    # the scan is not vacuous: the pages hold symbolic formulas and worked examples
    assert len(list(_symbolic_cases())) >= 3 and len(list(_numeric_cases())) >= 2
    # negative controls: the product form and an unqualified 2*CP both fail on the grid
    bad = [_term("2*CP", ""), _term("CP*TP", "")]
    assert any(math.lcm(*(f(tp, cp, sp) for f in bad)) != derive_alignment(tp, cp, sp).pad_seq_to_mult
               for tp, cp, sp in GRID)
    assert PRODUCTS.search("context-parallel alignment (2 times CP, times TP under SP)")
    good = [_term("2*CP or 1", ""), _term("CP*TP under SP", "")]
    assert all(math.lcm(*(f(tp, cp, sp) for f in good)) == derive_alignment(tp, cp, sp).pad_seq_to_mult
               for tp, cp, sp in GRID)
