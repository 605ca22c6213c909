"""Import shim for the upstream lane: lets ``megatron.bridge`` import on a machine without Transformer Engine.

This file runs inside the upstream lane's interpreter (Python 3.12, megatron-bridge 0.6.2,
megatron-core 0.19.2), never in seqpack's. ``scripts/setup_upstream.sh`` copies it into the lane's
site-packages with a ``.pth`` line that calls :func:`install`.

Why: megatron-bridge 0.6.2's ``megatron/bridge/peft/lora_layers.py`` imports
``transformer_engine.pytorch`` unconditionally, and both ``megatron.bridge`` and
``megatron.bridge.data`` import down to it. Transformer Engine has no CPU wheel, and a stub package
installed for the whole interpreter breaks megatron-core (which then follows TE-only paths). So the
finder below matches that one module only: before running it, the loader imports the modules the
file needs (so they load while TE is absent), puts two placeholder modules for the TE import in
``sys.modules``, runs the module, and removes the placeholders again. Everywhere else TE stays
absent (megatron-core's ``HAVE_TE`` is False).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types

TARGET = "megatron.bridge.peft.lora_layers"
#: Imported before the target runs, so that none of them sees the placeholder TE modules.
PRELOAD = (
    "megatron.core",
    "megatron.core.transformer.moe.moe_utils",
    "megatron.bridge.peft.adapter_wrapper",
    "megatron.bridge.peft.lora_merge",
)


class _PlaceholderTE(importlib.abc.Loader):
    """Runs the real ``lora_layers`` source with placeholder ``transformer_engine`` modules present."""

    def __init__(self, original: importlib.abc.Loader) -> None:
        self._original = original

    def create_module(self, spec):  # noqa: D102 - Loader protocol
        return None

    def exec_module(self, module: types.ModuleType) -> None:  # noqa: D102 - Loader protocol
        for name in PRELOAD:
            importlib.import_module(name)
        te = types.ModuleType("transformer_engine")
        te.__path__ = []  # a package, so ``import transformer_engine.pytorch`` resolves
        te_pytorch = types.ModuleType("transformer_engine.pytorch")
        te_pytorch.ops = types.SimpleNamespace(Sequential=type("Sequential", (), {}))
        te.pytorch = te_pytorch
        saved = {k: sys.modules.get(k) for k in ("transformer_engine", "transformer_engine.pytorch")}
        sys.modules["transformer_engine"] = te
        sys.modules["transformer_engine.pytorch"] = te_pytorch
        try:
            self._original.exec_module(module)
        finally:
            for key, old in saved.items():
                if old is None:
                    sys.modules.pop(key, None)
                else:
                    sys.modules[key] = old


class _Finder(importlib.abc.MetaPathFinder):
    """Matches :data:`TARGET` only and wraps its ordinary loader."""

    def find_spec(self, fullname, path, target=None):  # noqa: D102 - MetaPathFinder protocol
        if fullname != TARGET:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                spec.loader = _PlaceholderTE(spec.loader)
                return spec
        return None


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (idempotent)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
