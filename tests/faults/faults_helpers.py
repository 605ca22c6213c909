"""Helpers of the fault-injection suite: check a refusal, and prove that nothing was lost.

Every test here injects one fault class (docs/reliability.md lists them) and asserts two things:
the outcome (a clean refusal: exit 2, one line naming file/line/field or path, or an MCP tool error
carrying the reason; or a correct result) and that nothing was lost: inputs byte-identical, no
seqpack temporary left behind, no half-written or broken artifact trusted, and for packs
``rows_in == packed + skipped``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Run:
    """One CLI run: exit code, stdout, stderr."""

    code: int
    out: str
    err: str

    def refused(self, *needles: str) -> None:
        """Exit 2 with one error line (no traceback, no internal error) that contains every needle."""
        assert self.code == 2, (self.code, self.out, self.err)
        lines = [line for line in self.err.splitlines() if line.strip() and " WARNING " not in line]
        errors = [line for line in lines if ": error: " in line]
        assert len(errors) == 1, self.err
        assert "Traceback" not in self.err and "internal error" not in self.err, self.err
        for needle in needles:
            assert needle in errors[0], (needle, errors[0])


def digest(paths: Iterable[Path]) -> dict[str, str]:
    """SHA-256 of every file under ``paths`` (files or directories), by path."""
    out = {}
    for path in paths:
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for f in files:
            out[str(f)] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


def temporaries(root: Path) -> list[Path]:
    """seqpack temporaries (``.<name>.seqpack-tmp-...`` / ``seqpack-old``) anywhere under ``root``."""
    return [p for p in root.rglob(".*") if ".seqpack-tmp-" in p.name or ".seqpack-old-" in p.name]


def assert_accounted(manifest: dict[str, Any]) -> None:
    """Every split of a pack manifest: rows_in == packed + skipped."""
    for split, info in manifest["splits"].items():
        acc = info["accounting"]
        assert acc["rows_in"] == acc["packed"] + acc["skipped_total"], (split, acc)


ROWS = [{"prompt": f"question {i} " + "x" * (i % 17), "completion": f"answer {i} " + "y" * (i % 23)}
        for i in range(60)]
