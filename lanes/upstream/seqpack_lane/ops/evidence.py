"""Lane ops that read the installed upstream sources, so seqpack's citations are re-checked against them.

A citation names a PyPI package, a path inside the installed package (``megatron/bridge/training/config.py``)
and a line. ``evidence.read`` answers, per citation, the installed version of the package and the lines
around the cited one (or why it could not be read); the test on seqpack's side decides whether the
cited identifier is there.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path


def _root(package: str) -> Path:
    """The directory the package's files are installed under (site-packages)."""
    dist = importlib.metadata.distribution(package)
    return Path(dist.locate_file(""))


def op_read(citations: list[dict], context: int = 3) -> list[dict]:
    """For each ``{"package", "path", "line"}``: ``{"version", "start", "lines"}`` or ``{"error"}``."""
    out = []
    for c in citations:
        try:
            version = importlib.metadata.version(c["package"])
            text = (_root(c["package"]) / c["path"]).read_text(encoding="utf-8").splitlines()
        except (importlib.metadata.PackageNotFoundError, OSError) as exc:
            out.append({"error": f"{type(exc).__name__}: {exc}"})
            continue
        line = int(c["line"])
        start = max(1, line - context)
        out.append({"version": version, "start": start, "total": len(text), "lines": text[start - 1:line + context]})
    return out


def op_contains(package: str, path: str, needle: str) -> bool:
    """Whether the installed file ``path`` of ``package`` contains ``needle`` anywhere."""
    return needle in (_root(package) / path).read_text(encoding="utf-8")
