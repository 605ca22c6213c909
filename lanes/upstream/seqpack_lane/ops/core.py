"""Lane ops about the lane itself (run in the upstream interpreter; see ``worker.py``)."""

from __future__ import annotations

import importlib.metadata
import sys


def op_versions() -> dict:
    """Versions of the upstream packages, and whether Transformer Engine is (still) absent."""
    import megatron.bridge  # noqa: F401 - imported so the answer proves it imports
    import megatron.core  # noqa: F401

    names = ("megatron-bridge", "megatron-core", "torch", "megatron-energon", "transformers")
    out = {name: importlib.metadata.version(name) for name in names}
    out["python"] = ".".join(map(str, sys.version_info[:3]))
    out["transformer_engine_imported"] = "transformer_engine" in sys.modules
    return out


def op_echo(**kwargs) -> dict:
    """Returns its arguments (a round-trip check)."""
    return kwargs


def op_fail(message: str = "boom") -> None:
    """Raises ValueError(message): the worker must answer with the error and keep serving."""
    raise ValueError(message)


def op_setenv(name: str, value: str) -> str:
    """Writes an environment variable (the worker undoes it after the call) and returns the value seen."""
    import os

    os.environ[name] = value
    return os.environ[name]


def op_getenv(name: str) -> str | None:
    """An environment variable as the worker sees it."""
    import os

    return os.environ.get(name)
