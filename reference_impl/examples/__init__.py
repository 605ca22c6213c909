"""Bundled example training configs (package data), used by the README's main job and the docs."""

from __future__ import annotations

from pathlib import Path

from reference_impl.errors import UsageError

EXAMPLES_DIR = Path(__file__).resolve().parent


def list_examples() -> list[str]:
    """Names of the bundled example configs (file stems)."""
    return sorted(p.stem for p in EXAMPLES_DIR.glob("*.yaml"))


def example_path(name: str) -> Path:
    """Path of a bundled example config; a clear error lists the names when ``name`` is unknown."""
    path = EXAMPLES_DIR / f"{name.removesuffix('.yaml')}.yaml"
    if not path.is_file():
        raise UsageError(f"no bundled example named {name!r}; available: {', '.join(list_examples())}")
    return path
