"""Read upstream snapshots (bare git mirrors) when they are on this machine.

The mirrors are what the ``fetch`` tool leaves under ``/work/.mirror/<owner>+<name>/repo``; set
``SEQPACK_UPSTREAM_MIRROR`` to another directory with the same layout. Nothing is vendored: tests
that need a snapshot skip, with the reason, when it is absent.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

MIRROR_ROOT = Path(os.environ.get("SEQPACK_UPSTREAM_MIRROR", "/work/.mirror"))


@functools.lru_cache(maxsize=None)
def mirror(full_name: str) -> Path | None:
    """The bare git directory of ``owner/name``, or None when it is not here."""
    path = MIRROR_ROOT / full_name.replace("/", "+") / "repo"
    if not (path / "HEAD").is_file():
        return None
    return path


def skip_reason(full_name: str) -> str:
    """Why a snapshot test is skipped."""
    return (
        f"upstream snapshot {full_name} is not on this machine (looked in {MIRROR_ROOT}; fetch it, or set "
        "SEQPACK_UPSTREAM_MIRROR)"
    )


@functools.lru_cache(maxsize=4096)
def git_show(full_name: str, commit: str, path: str) -> str | None:
    """Text of ``path`` at ``commit`` in the snapshot, or None when the snapshot or the file is missing."""
    repo = mirror(full_name)
    if repo is None:
        return None
    proc = subprocess.run(
        ["git", "--git-dir", str(repo), "show", f"{commit}:{path}"], capture_output=True, text=True, check=False
    )
    return proc.stdout if proc.returncode == 0 else None


def git_ls(full_name: str, commit: str, prefix: str) -> list[str]:
    """Files under ``prefix`` at ``commit`` (empty when the snapshot is missing)."""
    repo = mirror(full_name)
    if repo is None:
        return []
    proc = subprocess.run(
        ["git", "--git-dir", str(repo), "ls-tree", "-r", "--name-only", commit, "--", prefix],
        capture_output=True, text=True, check=False,
    )
    return proc.stdout.split() if proc.returncode == 0 else []


def resolve_commit(full_name: str, rev: str) -> str | None:
    """Full hash of ``rev`` in the snapshot, or None."""
    repo = mirror(full_name)
    if repo is None:
        return None
    proc = subprocess.run(
        ["git", "--git-dir", str(repo), "rev-parse", "--verify", f"{rev}^{{commit}}"],
        capture_output=True, text=True, check=False,
    )
    return proc.stdout.strip() if proc.returncode == 0 else None


BRIDGE = "NVIDIA-NeMo/Megatron-Bridge"
#: The Megatron-Bridge commit the upstream tests run against (main, 2026-08-22).
BRIDGE_COMMIT = "067f987df03b8355b03192d88d70f1709fedf51a"


def _exec_with_stubs(source: str, name: str, stubs: dict):
    """Execute ``source`` as module ``name`` while the modules in ``stubs`` stand in for its imports."""
    import sys
    import types

    previous = {key: sys.modules.get(key) for key in stubs}
    sys.modules.update(stubs)
    try:
        module = types.ModuleType(name)
        exec(compile(source, f"bridge:{name}", "exec"), module.__dict__)  # noqa: S102 - tests only
    finally:
        for key, old in previous.items():
            if old is None:
                sys.modules.pop(key, None)
            else:
                sys.modules[key] = old
    return module


def _stub(name: str, **attrs):
    import types

    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    return module


def load_bridge_packing_algorithms():
    """Megatron-Bridge's ``data/packing/algorithms.py`` at :data:`BRIDGE_COMMIT`, as a module, or None.

    The source is read from the snapshot and executed here (it needs numpy and tqdm); its one Bridge
    import (a safe ``.npy`` loader the packing functions do not use) is stubbed for the load.
    """
    source = git_show(BRIDGE, BRIDGE_COMMIT, "src/megatron/bridge/data/packing/algorithms.py")
    if source is None:
        return None
    stub = _stub("megatron.bridge.utils.safe_pickle", safe_load_npy=lambda *a, **k: None)
    return _exec_with_stubs(source, "bridge_packing_algorithms", {stub.__name__: stub})
