"""The case counter of the differential tests, and the generated table in ``docs/compatibility.md``.

A differential test compares seqpack with an upstream function running in the lane and reports
each case to the session's :class:`CompatRecorder` (fixture ``compat``): equal, or different in a
way ``seqpack_lane.differences`` documents (by its id). A difference that no entry
explains fails the test. At the end of a session that ran every lane test, the counts are
compared with the table between the markers in ``docs/compatibility.md``; with
``SEQPACK_WRITE_COMPAT=1`` the table is rewritten instead. The counts are deterministic: the
property-based cases use derandomized hypothesis with fixed example counts.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from seqpack_lane import pins
from seqpack_lane.differences import DIFFERENCES, FUNCTIONS

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "compatibility.md"
BEGIN = "<!-- BEGIN GENERATED: lane agreement table (tests/upstream/compat.py) -->"
END = "<!-- END GENERATED: lane agreement table -->"


class CompatRecorder:
    """Counts differential cases per upstream function: equal, or by a documented difference."""

    def __init__(self) -> None:
        self.counts: dict[str, Counter] = defaultdict(Counter)

    def equal(self, function: str, n: int = 1) -> None:
        """``n`` cases of ``function`` came out equal."""
        self._known(function)
        self.counts[function]["equal"] += n

    def by_design(self, function: str, difference: str, n: int = 1) -> None:
        """``n`` cases of ``function`` differ exactly as documented difference ``difference`` says."""
        self._known(function)
        entry = DIFFERENCES.get(difference)
        if entry is None or entry.function != function:
            pytest.fail(f"difference {difference!r} is not documented for {function} in "
                        "lanes/upstream/seqpack_lane/differences.py")
        self.counts[function][difference] += n

    def check(self, function: str, equal: bool, *, difference: str | None = None, detail: str = "") -> None:
        """Record one case: equal; or, when not equal and ``difference`` names the documented reason, by design;
        otherwise fail with ``detail``."""
        if equal:
            self.equal(function)
        elif difference is not None:
            self.by_design(function, difference)
        else:
            pytest.fail(f"undocumented difference from {FUNCTIONS.get(function, (function,))[0]}: {detail}")

    @staticmethod
    def _known(function: str) -> None:
        if function not in FUNCTIONS:
            pytest.fail(f"upstream function {function!r} is not registered in lanes/upstream/seqpack_lane/differences.py")

    def to_dict(self) -> dict:
        """JSON-able counts."""
        return {f: dict(c) for f, c in sorted(self.counts.items())}


def render_table(counts: dict[str, dict[str, int]]) -> str:
    """The generated Markdown table: one row per upstream function."""
    lines = [BEGIN, "",
             f"Checked in the upstream lane: megatron-bridge {pins.BRIDGE_VERSION}, megatron-core "
             f"{pins.MCORE_VERSION} (PyPI, Python 3.12, CPU). Regenerate with "
             "`SEQPACK_WRITE_COMPAT=1 bash scripts/test.sh tests/upstream`.", "",
             "| upstream function | package | cases | equal | differing by design |", "|---|---|---|---|---|"]
    total = Counter()
    for key in sorted(counts):
        row = counts[key]
        qualname, package = FUNCTIONS[key]
        cases = sum(row.values())
        by_design = {k: v for k, v in sorted(row.items()) if k != "equal"}
        total.update(cases=cases, equal=row.get("equal", 0), by_design=sum(by_design.values()))
        designed = ", ".join(f"{v} ({k})" for k, v in by_design.items()) or "0"
        lines.append(f"| `{qualname}` | {package} | {cases} | {row.get('equal', 0)} | {designed} |")
    lines.append(f"| **all** | | **{total['cases']}** | **{total['equal']}** | **{total['by_design']}** |")
    lines += ["", END]
    return "\n".join(lines)


def doc_table() -> str | None:
    """The generated section currently in the doc, or None."""
    text = DOC.read_text(encoding="utf-8")
    m = re.search(re.escape(BEGIN) + r".*?" + re.escape(END), text, re.S)
    return m.group(0) if m else None


def write_doc_table(table: str) -> None:
    """Replace (or append) the generated section of the doc."""
    text = DOC.read_text(encoding="utf-8")
    if doc_table() is None:
        text = text.rstrip("\n") + "\n\n## Agreement with the released upstream, per function\n\n" + table + "\n"
    else:
        text = re.sub(re.escape(BEGIN) + r".*?" + re.escape(END), lambda _m: table, text, flags=re.S)
    DOC.write_text(text, encoding="utf-8")


def dump(recorder: CompatRecorder, path: Path) -> None:
    """Write the counts as JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(recorder.to_dict(), indent=1, sort_keys=True), encoding="utf-8")
