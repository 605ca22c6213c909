"""Bundled example training configs (package data), used by the README's main job and the docs."""

from __future__ import annotations

from pathlib import Path

from seqpack.core.errors import UsageError

EXAMPLES_DIR = Path(__file__).resolve().parent
#: Examples of features no Megatron-Bridge release has: the ``--bridge-version`` they are valid for.
#: Every other example is valid (or, ``broken_*``, broken) for the default, the release the lane checks.
EXAMPLE_TARGETS: dict[str, str] = {"energon_qwen_vl": "main", "global_batch_cp2": "main"}


def list_examples() -> list[str]:
    """Names of the bundled example configs (file stems)."""
    return sorted(p.stem for p in EXAMPLES_DIR.glob("*.yaml"))


def example_path(name: str) -> Path:
    """Path of a bundled example config; a clear error lists the names when ``name`` is unknown."""
    path = EXAMPLES_DIR / f"{name.removesuffix('.yaml')}.yaml"
    if not path.is_file():
        raise UsageError(f"no bundled example named {name!r}; available: {', '.join(list_examples())}")
    return path


def example_target(name: str) -> str:
    """The ``--bridge-version`` an example is written for (the default release unless it needs main)."""
    from seqpack.core.versions import DEFAULT_BRIDGE_TARGET

    return EXAMPLE_TARGETS.get(name.removesuffix(".yaml"), DEFAULT_BRIDGE_TARGET)
