"""core.results: a verb that adds fields to a library result keeps what the library attached."""

from __future__ import annotations

import dataclasses

from seqpack.core.results import Result


@dataclasses.dataclass(frozen=True)
class _Report(Result):
    ok: bool
    note: str | None = None


def test_replaced_keeps_attached_values():
    report = _Report(True).attach(manifest={"splits": {"training": {}}})
    again = report.replaced(note="tokenizer: byte (default)")
    assert again.note == "tokenizer: byte (default)" and again.attached("manifest") == {"splits": {"training": {}}}
    assert "manifest" not in again.to_dict()
    # negative control: dataclasses.replace alone drops the attachment (why replaced exists)
    assert dataclasses.replace(report, note="x").attached("manifest") is None
