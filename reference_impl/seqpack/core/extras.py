"""The optional extras of the seqpack distribution, and the one-line hint when one is missing.

``pip install seqpack`` installs the light core (numpy, pyarrow, pyyaml, mcp, orjson): the light verbs and
the MCP server. The heavy parts live behind extras (``pyproject.toml`` lists the same names):
``train`` (torch, megatron-core: the smoke test, the runtime batches, context parallelism),
``energon`` (megatron-energon), ``hf`` (tokenizers, jinja2), ``vlm`` (pillow), ``gpu``
(transformer-engine) and ``ray`` (ray: ``pack --engine ray``). A command or MCP tool whose extra is missing raises
:class:`MissingExtraError`, one line naming the extra to install, never an ``ImportError``: before
any work when the command declares its extra (:func:`require_extra`), or where the import fails
(:func:`missing_extra_error` maps the ``ImportError``). Pure Python; imports nothing heavy.
"""

from __future__ import annotations

import importlib.util

from seqpack.core.errors import UsageError

#: Each extra and the modules it provides (import names), as ``pyproject.toml`` declares them.
EXTRAS: dict[str, tuple[str, ...]] = {
    "train": ("torch", "megatron.core"),
    "energon": ("torch", "megatron.energon"),
    "hf": ("tokenizers", "jinja2"),
    "vlm": ("PIL",),
    "gpu": ("transformer_engine",),
    "ray": ("ray",),
}
#: The distribution that provides each module, for the message.
DISTRIBUTIONS: dict[str, str] = {
    "torch": "torch", "megatron.core": "megatron-core", "megatron.energon": "megatron-energon",
    "tokenizers": "tokenizers", "jinja2": "jinja2", "PIL": "pillow", "transformer_engine": "transformer-engine",
    "ray": "ray",
}
#: The extra to name when an import of this module (or a submodule of it) fails.
_EXTRA_OF_MODULE: dict[str, str] = {
    "torch": "train", "megatron": "train", "megatron.core": "train", "megatron.energon": "energon",
    "tokenizers": "hf", "jinja2": "hf", "PIL": "vlm", "transformer_engine": "gpu",
    "transformer_engine_torch": "gpu", "ray": "ray",
}

__all__ = ["DISTRIBUTIONS", "EXTRAS", "MissingExtraError", "install_hint", "missing_extra_error", "missing_modules",
           "require_extra"]


def install_hint(extra: str) -> str:
    """The pip command that installs ``extra``."""
    return f"pip install 'seqpack[{extra}]'"


class MissingExtraError(UsageError):
    """A command or tool needs an optional extra that is not installed (one line, naming the extra)."""

    def __init__(self, extra: str, module: str) -> None:
        package = DISTRIBUTIONS.get(module, module.split(".")[0])
        super().__init__(f"the '{extra}' extra is not installed ({package} is missing)", fix=install_hint(extra))
        self.extra = extra
        self.module = module


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package is missing, or a broken half-install
        return False


def missing_modules(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be imported here (none: the extra is installed)."""
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}; known: {', '.join(EXTRAS)}")
    return [m for m in EXTRAS[extra] if not _installed(m)]


def require_extra(extra: str) -> None:
    """Raise :class:`MissingExtraError` unless every module of ``extra`` is importable."""
    missing = missing_modules(extra)
    if missing:
        raise MissingExtraError(extra, missing[0])


def missing_extra_error(exc: BaseException) -> MissingExtraError | None:
    """The :class:`MissingExtraError` behind an ``ImportError`` of a module an extra provides, else None.

    An ``ImportError`` of anything else (a bug, a broken installation) gives None: the caller
    reports it as it would any unexpected error.
    """
    if not isinstance(exc, ImportError) or not exc.name:
        return None
    parts = exc.name.split(".")
    for n in range(len(parts), 0, -1):
        name = ".".join(parts[:n])
        if name in _EXTRA_OF_MODULE:
            return MissingExtraError(_EXTRA_OF_MODULE[name], name)
    return None
